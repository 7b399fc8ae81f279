"""The floor of a durable round trip, measured in the same run as the figures it is set against.

A broker that answers only once a write is on the disk cannot answer faster than one request
round trip plus one fdatasync.  Both are measured here: the median round trip of a Heartbeat
(v0, to a group that does not exist: the broker decodes it, looks the group up and answers
with an error, so it is a full request without any storage work) on one connection, and the
median fdatasync of a 100-byte append to a file in the broker's data directory (same disk,
same file system).  A durable latency is then shown as a multiple of their sum.  The disk of a
shared machine is slower when others write: the benchmarks measure the floor before and after
their steps and take the medians of both samples together.
"""

from __future__ import annotations

import os
import statistics
import struct
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from loadtest.brokers import BrokerProcess, connect, recv_exactly

HEARTBEAT_SAMPLES = 300
SYNC_SAMPLES = 300
APPEND_BYTES = 100
_HEARTBEAT_KEY = 12
_SIZE = struct.Struct(">i")


@dataclass(frozen=True)
class Floor:
    heartbeat_samples: tuple[float, ...]  # request round trips, ms
    sync_samples: tuple[float, ...]  # fdatasyncs of a small append, ms
    directory: Path

    @property
    def heartbeat_ms(self) -> float:
        return statistics.median(self.heartbeat_samples)

    @property
    def fdatasync_ms(self) -> float:
        return statistics.median(self.sync_samples)

    @property
    def ms(self) -> float:
        return self.heartbeat_ms + self.fdatasync_ms

    def merged(self, other: Floor) -> Floor:
        """Both measurements' samples together (the floor before and after a run)."""
        return Floor(
            self.heartbeat_samples + other.heartbeat_samples, self.sync_samples + other.sync_samples, self.directory
        )

    def times(self, latency_ms: float) -> str:
        """`latency_ms` as a multiple of the floor, e.g. "3.2x floor"."""
        return f"{latency_ms / self.ms:.1f}x floor"

    def describe(self) -> str:
        return (
            f"floor of a durable round trip: {self.ms:.3f} ms = Heartbeat round trip {self.heartbeat_ms:.3f} ms "
            f"(median of {len(self.heartbeat_samples)}) + fdatasync of a {APPEND_BYTES}-byte append "
            f"{self.fdatasync_ms:.3f} ms (median of {len(self.sync_samples)}, in {self.directory})"
        )

    def as_json(self) -> dict[str, float | str]:
        return {
            "floor_ms": self.ms,
            "heartbeat_ms": self.heartbeat_ms,
            "fdatasync_ms": self.fdatasync_ms,
            "directory": str(self.directory),
        }


def _heartbeat_request(correlation_id: int) -> bytes:
    """Heartbeat v0 (request header v1): group "floor-probe", generation -1, member "" ."""

    def string(s: str) -> bytes:
        return struct.pack(">h", len(s)) + s.encode()

    body = (
        struct.pack(">hhi", _HEARTBEAT_KEY, 0, correlation_id)
        + string("floor")
        + string("floor-probe")
        + struct.pack(">i", -1)
        + string("")
    )
    return _SIZE.pack(len(body)) + body


def heartbeat_round_trips_ms(bootstrap: str, samples: int = HEARTBEAT_SAMPLES) -> list[float]:
    """Times from sending a Heartbeat to reading its whole answer, one request in flight."""
    times = []
    with connect(bootstrap) as sock:
        for i in range(samples + 10):
            request = _heartbeat_request(i)
            started = time.perf_counter()
            sock.sendall(request)
            (size,) = _SIZE.unpack(recv_exactly(sock, 4))
            answer = recv_exactly(sock, size)
            elapsed = time.perf_counter() - started
            if struct.unpack_from(">i", answer)[0] != i:
                raise RuntimeError(f"Heartbeat answer to correlation id {i} carries another")
            if i >= 10:  # the first few warm the connection and the broker's code paths
                times.append(elapsed * 1000)
    return times


def fdatasyncs_ms(directory: Path, samples: int = SYNC_SAMPLES) -> list[float]:
    """fdatasyncs, each after appending `APPEND_BYTES` to a fresh file in `directory`."""
    record = os.urandom(APPEND_BYTES)
    times = []
    with tempfile.NamedTemporaryFile(dir=directory, prefix="floor-", suffix=".probe") as f:
        fd = f.fileno()
        for i in range(samples + 5):
            os.write(fd, record)
            started = time.perf_counter()
            os.fdatasync(fd)
            elapsed = time.perf_counter() - started
            if i >= 5:  # the first syncs also allocate the file's first block
                times.append(elapsed * 1000)
    return times


def measure(bootstrap: str, directory: Path) -> Floor:
    return Floor(tuple(heartbeat_round_trips_ms(bootstrap)), tuple(fdatasyncs_ms(directory)), directory)


def measure_beside(brokers: list[BrokerProcess], before: Floor | None = None) -> Floor:
    """The floor on streamshop's broker and data directory (else the first broker's) of a run;
    with `before` (the start's), that and this one's samples together."""
    broker = next((b for b in brokers if b.name == "streamshop"), brokers[0])
    directory = (
        broker.data_dir if broker.data_dir is not None and broker.data_dir.is_dir() else Path(tempfile.gettempdir())
    )
    floor = measure(broker.bootstrap, directory)
    print(("at the start, " if before is None else "at the end, ") + floor.describe(), flush=True)
    return floor if before is None else before.merged(floor)
