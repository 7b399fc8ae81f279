"""Sparse offset and time indexes of one segment.

As in Kafka, indexes are an optimisation, not a source of truth: they are never fsynced
on the produce path, are sanity-checked on load, and rebuilt from the log when missing or
damaged.  Entries live in memory (arrays) and are appended to the file as they are added.

- offset index entry: relative offset (u32) -> file position (u32), 8 bytes
- time index entry:   max timestamp (i64)   -> relative offset (u32), 12 bytes
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_right
from pathlib import Path

OFFSET_ENTRY = struct.Struct(">II")
TIME_ENTRY = struct.Struct(">qI")


class IndexCorrupt(Exception):
    pass


class OffsetIndex:
    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.rel_offsets = array("q")
        self.positions = array("q")
        self._pending = bytearray()

    def load(self, log_size: int) -> None:
        """Load and sanity-check; raises IndexCorrupt so the caller rebuilds."""
        data = self.path.read_bytes()
        if len(data) % OFFSET_ENTRY.size:
            raise IndexCorrupt(f"{self.path.name}: size {len(data)} is not a multiple of 8")
        last_off = last_pos = -1
        for rel, pos in OFFSET_ENTRY.iter_unpack(data):
            if rel <= last_off or pos <= last_pos or pos >= log_size:
                raise IndexCorrupt(f"{self.path.name}: entries out of order or past the log")
            self.rel_offsets.append(rel)
            self.positions.append(pos)
            last_off, last_pos = rel, pos

    def reset(self) -> None:
        self.rel_offsets = array("q")
        self.positions = array("q")
        self._pending = bytearray()
        self.path.write_bytes(b"")

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        if self.rel_offsets and rel <= self.rel_offsets[-1]:
            return
        self.rel_offsets.append(rel)
        self.positions.append(position)
        self._pending += OFFSET_ENTRY.pack(rel, position)

    def truncate_at(self, offset: int) -> None:
        """Forget the entry for `offset` and every later one (found wrong when used), in memory
        and on disk, so lookups scan from the last entry before it."""
        self.flush()
        i = bisect_right(self.rel_offsets, offset - self.base_offset - 1)
        del self.rel_offsets[i:]
        del self.positions[i:]
        with open(self.path, "r+b") as f:
            f.truncate(i * OFFSET_ENTRY.size)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or before `offset`, or the segment start."""
        i = bisect_right(self.rel_offsets, offset - self.base_offset)
        if i == 0:
            return self.base_offset, 0
        return self.base_offset + self.rel_offsets[i - 1], self.positions[i - 1]

    def flush(self) -> None:
        if self._pending:
            with open(self.path, "ab") as f:
                f.write(self._pending)
            self._pending = bytearray()


class TimeIndex:
    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.timestamps = array("q")
        self.rel_offsets = array("q")
        self._pending = bytearray()

    def load(self, next_offset: int) -> None:
        data = self.path.read_bytes()
        if len(data) % TIME_ENTRY.size:
            raise IndexCorrupt(f"{self.path.name}: size {len(data)} is not a multiple of 12")
        last_ts = last_off = -1
        for ts, rel in TIME_ENTRY.iter_unpack(data):
            if ts <= last_ts or rel < last_off or self.base_offset + rel >= next_offset:
                raise IndexCorrupt(f"{self.path.name}: entries out of order or past the log")
            self.timestamps.append(ts)
            self.rel_offsets.append(rel)
            last_ts, last_off = ts, rel

    def reset(self) -> None:
        self.timestamps = array("q")
        self.rel_offsets = array("q")
        self._pending = bytearray()
        self.path.write_bytes(b"")

    @property
    def max_timestamp(self) -> int:
        return self.timestamps[-1] if self.timestamps else -1

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Record `timestamp` if it is a new maximum for this segment."""
        if self.timestamps and timestamp <= self.timestamps[-1]:
            return
        self.timestamps.append(timestamp)
        self.rel_offsets.append(offset - self.base_offset)
        self._pending += TIME_ENTRY.pack(timestamp, offset - self.base_offset)

    def lookup(self, timestamp: int) -> int:
        """An offset from which to scan for the first batch with max timestamp >= `timestamp`."""
        i = bisect_right(self.timestamps, timestamp - 1)
        if i == 0:
            return self.base_offset
        return self.base_offset + self.rel_offsets[i - 1]

    def flush(self) -> None:
        if self._pending:
            with open(self.path, "ab") as f:
                f.write(self._pending)
            self._pending = bytearray()
