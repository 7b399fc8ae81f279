"""One process per data directory: a broker (and an offline tool) holds an exclusive lock
on `<data-dir>/.lock` while it works, as Kafka does; the lock goes with the process, so a
killed broker never leaves it behind."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class DataDirInUse(RuntimeError):
    pass


def lock_data_dir(data_dir: Path) -> int:
    """Take the lock (the returned descriptor holds it until closed or the process ends)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(data_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DataDirInUse(f"{data_dir} is in use by another broker process") from None
    return fd
