"""Idempotent-producer state of one partition, following Kafka's rules.

Per producer id: the current epoch and the metadata of the last five batches.  A retried
batch that matches a cached one is a duplicate: it is not written again and the original
offsets are returned with no error.  A sequence that does not follow the last one is
OUT_OF_ORDER_SEQUENCE_NUMBER; an epoch older than the current one is INVALID_PRODUCER_EPOCH.
A producer with no state (new, or its records expired) may start at any sequence.

State is rebuilt on start from the newest snapshot (written on segment roll and clean
shutdown) plus a scan of batch headers after it.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import msgpack

from broker.protocol.batch import NO_PRODUCER_ID, BatchHeader

CACHED_BATCHES = 5
_INT32_MAX = 0x7FFFFFFF


class ProducerStateError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind  # "out_of_order_sequence" | "invalid_producer_epoch"


@dataclass(frozen=True, slots=True)
class BatchMeta:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: deque[BatchMeta] = field(default_factory=lambda: deque(maxlen=CACHED_BATCHES))
    last_timestamp: int = -1
    txn_first_offset: int | None = None  # the open transaction's first record in this partition

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _INT32_MAX)


class ProducerStateManager:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.producers: dict[int, ProducerEntry] = {}
        self.open_txns: dict[int, int] = {}  # producer id -> its open transaction's first offset

    def check(self, header: BatchHeader) -> BatchMeta | None:
        """Validate a batch before it is appended.  Returns the cached metadata when the
        batch is a duplicate of one already written; raises ProducerStateError."""
        pid = header.producer_id
        if pid == NO_PRODUCER_ID or header.base_sequence < 0:
            return None
        entry = self.producers.get(pid)
        if entry is None:
            return None
        if header.producer_epoch < entry.epoch:
            raise ProducerStateError(
                "invalid_producer_epoch",
                f"producer {pid} epoch {header.producer_epoch} is older than {entry.epoch}",
            )
        if header.producer_epoch == entry.epoch:
            for meta in entry.batches:
                if meta.first_seq == header.base_sequence and meta.last_seq == header.last_sequence:
                    return meta
            if entry.batches and not _in_sequence(entry.last_seq, header.base_sequence):
                raise ProducerStateError(
                    "out_of_order_sequence",
                    f"producer {pid}: sequence {header.base_sequence} does not follow {entry.last_seq}",
                )
        elif header.base_sequence != 0:
            raise ProducerStateError(
                "out_of_order_sequence",
                f"producer {pid}: new epoch {header.producer_epoch} must start at sequence 0",
            )
        return None

    def update(self, header: BatchHeader) -> None:
        """Record a batch that was appended (or found while scanning the log)."""
        pid = header.producer_id
        if pid == NO_PRODUCER_ID:
            return
        entry = self.producers.get(pid)
        if entry is None or header.producer_epoch > entry.epoch:
            # A bumped epoch (a fenced or restarted producer) keeps the open transaction: the
            # coordinator's abort marker, written with the new epoch, is what ends it.
            entry = ProducerEntry(header.producer_epoch, txn_first_offset=entry.txn_first_offset if entry else None)
            self.producers[pid] = entry
        elif header.producer_epoch < entry.epoch:
            return
        if header.is_transactional and not header.is_control and entry.txn_first_offset is None:
            entry.txn_first_offset = header.base_offset
            self.open_txns[pid] = header.base_offset
        if header.base_sequence >= 0:
            entry.batches.append(
                BatchMeta(
                    header.base_sequence,
                    header.last_sequence,
                    header.base_offset,
                    header.last_offset,
                    header.max_timestamp,
                )
            )
        entry.last_timestamp = max(entry.last_timestamp, header.max_timestamp)

    def end_transaction(self, producer_id: int) -> int | None:
        """A marker ended `producer_id`'s transaction here: the offset it began at, or None when
        none was open (a marker for a transaction that wrote nothing to this partition)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return None
        first, entry.txn_first_offset = entry.txn_first_offset, None
        self.open_txns.pop(producer_id, None)
        return first

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction: the last stable offset, when any."""
        return min(self.open_txns.values()) if self.open_txns else None

    def expire(self, now_ms: int, expiration_ms: int) -> None:
        # A producer with an open transaction stays: its transaction still bounds the LSO.
        dead = [
            pid
            for pid, e in self.producers.items()
            if e.last_timestamp < now_ms - expiration_ms and e.txn_first_offset is None
        ]
        for pid in dead:
            del self.producers[pid]

    # --- snapshots -------------------------------------------------------------------

    def _snapshot_path(self, offset: int) -> Path:
        return self.directory / f"{offset:020d}.snapshot"

    def snapshots(self) -> list[int]:
        return sorted(int(p.name.split(".")[0]) for p in self.directory.glob("*.snapshot"))

    def write_snapshot(self, offset: int) -> None:
        payload = [
            [
                pid,
                e.epoch,
                e.last_timestamp,
                [[m.first_seq, m.last_seq, m.first_offset, m.last_offset, m.timestamp] for m in e.batches],
                e.txn_first_offset,
            ]
            for pid, e in self.producers.items()
        ]
        path = self._snapshot_path(offset)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(msgpack.packb(payload))
        os.replace(tmp, path)
        # Keep the two newest snapshots, as a fallback if the newest is ahead of the log.
        for old in self.snapshots()[:-2]:
            self._snapshot_path(old).unlink(missing_ok=True)

    def load_snapshot(self, max_offset: int) -> int:
        """Load the newest snapshot at or below `max_offset`; returns the offset to scan
        from (0 when there is none).  Snapshots past the log end (after a truncating
        recovery) are deleted."""
        self._clear()
        for offset in reversed(self.snapshots()):
            path = self._snapshot_path(offset)
            if offset > max_offset:
                path.unlink(missing_ok=True)
                continue
            try:
                payload = msgpack.unpackb(path.read_bytes())
                for pid, epoch, last_ts, metas, *rest in payload:
                    # A snapshot written before transactions has four fields.
                    txn_first = rest[0] if rest else None
                    if txn_first is not None and not isinstance(txn_first, int):
                        raise TypeError("transaction start is not an offset")
                    entry = ProducerEntry(epoch, last_timestamp=last_ts, txn_first_offset=txn_first)
                    for m in metas:
                        entry.batches.append(BatchMeta(*m))
                    self.producers[pid] = entry
                    if txn_first is not None:
                        self.open_txns[pid] = txn_first
                return offset
            except (ValueError, TypeError, msgpack.UnpackException):
                self._clear()
                path.unlink(missing_ok=True)
        return 0

    def _clear(self) -> None:
        self.producers.clear()
        self.open_txns.clear()
