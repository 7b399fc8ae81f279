"""One transactional id's state, as Kafka's TransactionMetadata, and its record in
`__transaction_state` (msgpack key ``["t", transactional_id]``, value a map, tombstone when the
id expires).  A record read back may be corrupt like any other input: `from_record` checks
every field's shape and raises `Malformed` before it builds anything.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Any

import msgpack

from broker.replay import is_int, need

__all__ = ["PendingOffsets", "TxnMetadata", "TxnState", "key_of", "record_of"]

# Kafka's producer epochs are int16; the last one is kept for fencing, as in Kafka.
MAX_EPOCH = 0x7FFF - 1

PendingOffsets = dict[tuple[str, int], tuple[int, int, str]]  # (topic, partition) -> (offset, epoch, metadata)


class TxnState(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"

    @property
    def preparing(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def settled(self) -> bool:
        """No transaction in progress: a new one may begin."""
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


@dataclass(frozen=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    update_ms: int
    start_ms: int = -1  # when the ongoing transaction began
    last_producer_id: int = -1  # before the last epoch bump: a retried InitProducerId is recognised
    last_producer_epoch: int = -1
    # Transactions v2: the id an ending transaction's producer moves to, its epoch exhausted.
    next_producer_id: int = -1
    partitions: frozenset[tuple[str, int]] = frozenset()
    offsets: dict[str, PendingOffsets] = field(default_factory=dict)  # per group: committed with the txn

    def evolve(self, **changes: Any) -> TxnMetadata:
        return replace(self, **changes)

    def value(self) -> dict[str, Any]:
        return {
            "pid": self.producer_id,
            "epoch": self.producer_epoch,
            "lpid": self.last_producer_id,
            "lepoch": self.last_producer_epoch,
            "npid": self.next_producer_id,
            "timeout": self.timeout_ms,
            "state": self.state.value,
            "start": self.start_ms,
            "update": self.update_ms,
            "parts": sorted([t, p] for t, p in self.partitions),
            "offsets": {
                group: sorted([t, p, o, e, m] for (t, p), (o, e, m) in offsets.items())
                for group, offsets in self.offsets.items()
            },
        }

    @classmethod
    def from_value(cls, transactional_id: str, value: Any) -> TxnMetadata:
        need(isinstance(value, dict), "transaction value is not a map")
        ints = ("pid", "epoch", "lpid", "lepoch", "timeout", "start", "update")
        need(all(is_int(value.get(k)) for k in ints), "transaction numbers are malformed")
        need(is_int(value.get("npid", -1)), "transaction numbers are malformed")  # absent before transactions v2
        states = {s.value: s for s in TxnState}
        state = value.get("state")
        need(isinstance(state, str) and state in states, "unknown transaction state")
        parts = value.get("parts")
        need(isinstance(parts, list) and all(_topic_partition(x) for x in parts), "transaction partitions malformed")
        groups = value.get("offsets")
        need(isinstance(groups, dict), "transaction offsets are not a map")
        offsets: dict[str, PendingOffsets] = {}
        for group, rows in groups.items():
            need(isinstance(group, str) and isinstance(rows, list), "transaction offsets malformed")
            need(all(_offset_row(r) for r in rows), "a transaction offset is malformed")
            offsets[group] = {(r[0], r[1]): (r[2], r[3], r[4]) for r in rows}
        return cls(
            transactional_id=transactional_id,
            producer_id=value["pid"],
            producer_epoch=value["epoch"],
            last_producer_id=value["lpid"],
            last_producer_epoch=value["lepoch"],
            next_producer_id=value.get("npid", -1),
            timeout_ms=value["timeout"],
            state=states[state],
            start_ms=value["start"],
            update_ms=value["update"],
            partitions=frozenset((t, p) for t, p in parts),
            offsets=offsets,
        )


def key_of(transactional_id: str) -> bytes:
    return bytes(msgpack.packb(["t", transactional_id]))


def record_of(meta: TxnMetadata | None, transactional_id: str) -> tuple[bytes, bytes | None]:
    """The record that stores `meta` (None: the tombstone that forgets the id)."""
    return key_of(transactional_id), None if meta is None else bytes(msgpack.packb(meta.value()))


def parse_key(raw: bytes | None) -> str:
    key = msgpack.unpackb(raw or b"\x90")
    need(isinstance(key, list) and len(key) == 2 and key[0] == "t" and isinstance(key[1], str), "key is not [t, id]")
    return str(key[1])


def _topic_partition(x: object) -> bool:
    return isinstance(x, list) and len(x) == 2 and isinstance(x[0], str) and is_int(x[1])


def _offset_row(r: object) -> bool:
    return (
        isinstance(r, list)
        and len(r) == 5
        and isinstance(r[0], str)
        and all(is_int(x) for x in r[1:4])
        and isinstance(r[4], str)
    )
