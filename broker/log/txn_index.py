"""The aborted transactions of one partition, as Kafka's ``.txnindex``: one 34-byte entry per
aborted transaction (``version:int16 producer_id:int64 first_offset:int64 last_offset:int64
last_stable_offset:int64``), appended when its abort marker is written.  A read_committed Fetch
returns the entries its range overlaps, and the consumer drops those producers' records
between `first_offset` and the marker.

The file is derived state: the log's markers are the truth, and recovery truncates the index to
what the log holds and appends what the log has beyond it.  A torn or corrupt tail entry
(SIGKILL mid-write, a bad disk) is cut off on open, never trusted.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ENTRY_SIZE", "AbortedTxn", "TxnIndex"]

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the abort marker's offset
    last_stable_offset: int  # the partition's LSO once the marker was written

    def pack(self) -> bytes:
        return _ENTRY.pack(VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset)


class TxnIndex:
    """Aborted transactions, oldest marker first, in memory and in `path`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[AbortedTxn] = []
        self._load()

    def _load(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        good = 0
        for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
            version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
            previous = self.entries[-1].last_offset if self.entries else -1
            if version != VERSION or pid < 0 or not (0 <= first <= last) or last <= previous:
                break  # everything from here on is untrusted
            self.entries.append(AbortedTxn(pid, first, last, lso))
            good = pos + ENTRY_SIZE
        if good != len(data):
            self._rewrite()

    def _rewrite(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(b"".join(e.pack() for e in self.entries))
        os.replace(tmp, self.path)

    def append(self, entry: AbortedTxn) -> None:
        if self.entries and entry.last_offset <= self.entries[-1].last_offset:
            raise ValueError(f"abort marker at {entry.last_offset} is not after {self.entries[-1].last_offset}")
        with self.path.open("ab") as f:
            f.write(entry.pack())
        self.entries.append(entry)

    @property
    def last_offset(self) -> int:
        """The newest abort marker indexed, or -1."""
        return self.entries[-1].last_offset if self.entries else -1

    def truncate_to(self, end_offset: int) -> None:
        """Forget the aborts whose marker is at or past `end_offset` (the log was cut there)."""
        self._keep([e for e in self.entries if e.last_offset < end_offset])

    def drop_before(self, log_start_offset: int) -> None:
        """Forget the aborts wholly before the log start (retention or DeleteRecords removed them)."""
        self._keep([e for e in self.entries if e.last_offset >= log_start_offset])

    def _keep(self, entries: list[AbortedTxn]) -> None:
        if len(entries) != len(self.entries):
            self.entries = entries
            self._rewrite()

    def overlapping(self, fetch_offset: int, upper_offset: int) -> Iterator[AbortedTxn]:
        """The aborts a read_committed fetch of [fetch_offset, upper_offset) must return: those
        whose records may lie in the range (they began before its end and ended at or after its
        start), as Kafka collects them."""
        for entry in self.entries:
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_offset:
                yield entry
