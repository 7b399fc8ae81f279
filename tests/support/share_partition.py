"""Helpers of the SharePartition unit tests (KIP-932's per-partition state, without a network): a
partition with a small delivery limit and lock window, batch spans, acquiring and acknowledging
in one call, and views of the records' states.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

from broker.share.partition import AckType, Acquired, BatchSpan, InFlight, RecordState, SharePartition

A, R, X, G = AckType.ACCEPT, AckType.RELEASE, AckType.REJECT, AckType.GAP
LOCK_MS = 1_000


def part(start: int = 0, *, limit: int = 3, locks: int = 100) -> SharePartition:
    return SharePartition(start, delivery_limit=limit, max_locks=locks)


def b(base: int, last: int, control: bool = False) -> BatchSpan:
    return BatchSpan(base, last, control)


def acquire(
    p: SharePartition, member: str, batches: Sequence[BatchSpan], max_records: int = 500, now: int = 0
) -> tuple[list[Acquired], list[BatchSpan]]:
    return p.acquire(member, batches, max_records, now, LOCK_MS)


def view(p: SharePartition) -> dict[int, tuple[RecordState, int, str | None]]:
    return {o: (r.state, r.count, r.member) for o, r in sorted(p.records.items())}


def whole(p: SharePartition) -> tuple[int, int, int, dict[int, InFlight]]:
    return p.start, p.end, p.state_epoch, copy.deepcopy(p.records)


def ack(p: SharePartition, member: str, *batches: tuple[int, int, Sequence[int]]) -> None:
    p.acknowledge(member, list(batches))
