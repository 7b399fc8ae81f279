"""A log directory's health: one I/O error takes it offline until the broker restarts.

After a failed `fdatasync` the kernel may already have dropped the dirty pages it could not
write and marked them clean, so a second fsync of the same file succeeds and proves nothing;
an append the OS refused with EIO says the same of the device.  Retrying would acknowledge
bytes that may not exist (PostgreSQL's "fsyncgate", 2018).  So, as Kafka's
`LogDirFailureChannel`, the first such error is a verdict: the directory goes offline, every
partition in it answers KAFKA_STORAGE_ERROR, nothing more is written or acknowledged from
it, DescribeLogDirs reports it, and only a restart brings it back, recovering from what
verifies on disk.

One exception, where this broker does better than Kafka (which takes the directory offline
for a full disk too): a write the OS refused for room (ENOSPC, EDQUOT, EFBIG) wrote nothing
the log keeps (the segment cuts it off), so that partition answers KAFKA_STORAGE_ERROR and
takes the producer's retry once there is room.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Callable
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

# Refusals for room: nothing was kept, so the next write may succeed.
NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


class LogDirOffline(OSError):
    """Raised for any write to, fsync of or read from a directory taken offline."""

    def __init__(self, directory: str, cause: str) -> None:
        super().__init__(errno.EIO, f"log directory {directory} is offline after an I/O error ({cause})")


class LogDir:
    """The broker's data directory (its one log directory) and whether it is still usable."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = str(path.absolute()) if path is not None else "(unnamed)"
        self.error: str | None = None  # what took it offline
        self.failed_at: float | None = None  # time.time() of the failure
        self.listeners: list[Callable[[LogDir], None]] = []  # told once, when it goes offline

    @property
    def offline(self) -> bool:
        return self.error is not None

    def fail(self, error: OSError, during: str) -> None:
        """Take the directory offline for good (until restart).  Idempotent."""
        if self.error is not None:
            return
        self.error = f"{during}: {error.strerror or error}"
        self.failed_at = time.time()
        log.critical(
            "log directory offline: nothing more is written or acknowledged from it until the broker restarts",
            directory=self.path,
            during=during,
            error=str(error),
        )
        for listener in self.listeners:
            listener(self)

    def offline_error(self) -> LogDirOffline:
        return LogDirOffline(self.path, self.error or "unknown")

    def check(self) -> None:
        """Raise LogDirOffline when offline."""
        if self.error is not None:
            raise self.offline_error()

    def failed_write(self, error: OSError, during: str) -> bool:
        """An append or truncation failed with `error`: take the directory offline unless the
        OS only refused for room.  True when the directory is (now) offline."""
        if isinstance(error, LogDirOffline):
            return True
        if error.errno in NO_ROOM:
            return self.offline
        self.fail(error, during)
        return True
