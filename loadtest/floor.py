"""The floor of a durable round trip, measured in the same run as the figures it is set against.

A broker that answers only once a write is on the disk cannot answer faster than one request
round trip plus one fdatasync.  Both are measured here: the median round trip of a Heartbeat
(v0, to a group that does not exist: the broker decodes it, looks the group up and answers
with an error, so it is a full request without any storage work) on one connection, and the
median fdatasync of a 100-byte append to a file in the broker's data directory (same disk,
same file system).  A durable latency is then shown as a multiple of their sum.
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
    heartbeat_ms: float  # median request round trip
    fdatasync_ms: float  # median fdatasync of a small append
    directory: Path

    @property
    def ms(self) -> float:
        return self.heartbeat_ms + self.fdatasync_ms

    def times(self, latency_ms: float) -> str:
        """`latency_ms` as a multiple of the floor, e.g. "3.2x floor"."""
        return f"{latency_ms / self.ms:.1f}x floor"

    def describe(self) -> str:
        return (
            f"floor of a durable round trip: {self.ms:.3f} ms = Heartbeat round trip {self.heartbeat_ms:.3f} ms "
            f"(median of {HEARTBEAT_SAMPLES}) + fdatasync of a {APPEND_BYTES}-byte append {self.fdatasync_ms:.3f} ms "
            f"(median of {SYNC_SAMPLES}, in {self.directory})"
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


def heartbeat_round_trip_ms(bootstrap: str, samples: int = HEARTBEAT_SAMPLES) -> float:
    """Median time from sending a Heartbeat to reading its whole answer, one request in flight."""
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
    return statistics.median(times)


def fdatasync_ms(directory: Path, samples: int = SYNC_SAMPLES) -> float:
    """Median fdatasync after appending `APPEND_BYTES` to a fresh file in `directory`."""
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
    return statistics.median(times)


def measure(bootstrap: str, directory: Path) -> Floor:
    return Floor(heartbeat_round_trip_ms(bootstrap), fdatasync_ms(directory), directory)


def measure_beside(brokers: list[BrokerProcess]) -> Floor:
    """The floor on streamshop's broker and data directory (else the first broker's) of a run."""
    broker = next((b for b in brokers if b.name == "streamshop"), brokers[0])
    directory = (
        broker.data_dir if broker.data_dir is not None and broker.data_dir.is_dir() else Path(tempfile.gettempdir())
    )
    floor = measure(broker.bootstrap, directory)
    print(floor.describe(), flush=True)
    return floor
