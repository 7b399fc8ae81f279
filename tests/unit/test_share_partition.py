"""One share partition (KIP-932) without a network: acquisition (fresh records, redeliveries,
control batches, compaction gaps, `max_records` rounded up to a batch's end, the `max_locks`
window), acknowledgements (each type, every validation error, all or none), delivery counts
and the delivery limit, lock expiry, the start offset, truncation, reset, and the persisted
snapshot; then a stateful machine of several members checking Kafka's guarantees after every
step.

Time is the `now` argument throughout: nothing sleeps.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.protocol.errors import ErrorCode, KafkaError
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


# --- acquiring ---------------------------------------------------------------------------


def test_acquire_fresh_records() -> None:
    p = part(10)
    assert p.next_fetch_offset() == 10
    ranges, used = acquire(p, "a", [b(10, 14), b(15, 19)], now=5)
    assert ranges == [Acquired(10, 19, 1)]
    assert used == [b(10, 14), b(15, 19)]
    assert (p.start, p.end) == (10, 20)
    assert all(r.state == RecordState.ACQUIRED and r.member == "a" and r.count == 1 for r in p.records.values())
    assert {r.deadline_ms for r in p.records.values()} == {5 + LOCK_MS}
    assert p.next_deadline() == 5 + LOCK_MS
    assert p.in_flight() == 10
    assert p.next_fetch_offset() == 20


def test_batches_below_the_start_are_skipped() -> None:
    p = part(12)
    ranges, used = acquire(p, "a", [b(5, 9), b(10, 14), b(15, 16)])
    assert ranges == [Acquired(12, 16, 1)]
    assert used == [b(10, 14), b(15, 16)]


def test_acquire_a_mix_of_redeliveries_and_new_records() -> None:
    p = part()
    acquire(p, "a", [b(0, 4)])
    ack(p, "a", (0, 0, [A]), (1, 2, [R]), (3, 4, [A]))
    assert p.start == 1
    assert p.next_fetch_offset() == 1  # the first available record in flight
    ranges, used = acquire(p, "b", [b(0, 4), b(5, 9)])
    # Counts differ: the redelivered records and the new ones come in separate ranges.
    assert ranges == [Acquired(1, 2, 2), Acquired(5, 9, 1)]
    assert used == [b(0, 4), b(5, 9)]
    assert view(p)[3] == (RecordState.ACKNOWLEDGED, 1, None)


def test_a_batch_with_nothing_available_is_not_sent() -> None:
    p = part()
    acquire(p, "a", [b(0, 4)])
    ack(p, "a", (2, 2, [R]))
    ranges, used = acquire(p, "b", [b(0, 4), b(5, 6)])
    assert ranges == [Acquired(2, 2, 2), Acquired(5, 6, 1)]
    ranges, used = acquire(p, "b", [b(0, 4), b(5, 6)])
    assert (ranges, used) == ([], [])


def test_control_batches_are_never_delivered() -> None:
    p = part()
    ranges, used = acquire(p, "a", [b(0, 2), b(3, 3, control=True), b(4, 6)])
    assert ranges == [Acquired(0, 2, 1), Acquired(4, 6, 1)]
    assert used == [b(0, 2), b(4, 6)]
    assert view(p)[3] == (RecordState.ARCHIVED, 0, None)
    assert p.end == 7
    ranges, used = acquire(p, "b", [b(3, 3, control=True)])
    assert (ranges, used) == ([], [])


def test_a_control_batch_at_the_head_moves_the_start() -> None:
    p = part()
    ranges, used = acquire(p, "a", [b(0, 1, control=True)])
    assert (ranges, used) == ([], [])
    assert (p.start, p.end, p.records) == (2, 2, {})
    ranges, _ = acquire(p, "a", [b(2, 2, control=True), b(3, 4)])
    assert ranges == [Acquired(3, 4, 1)]
    assert p.start == 3


def test_gaps_between_batches_are_archived() -> None:
    """Compaction removed offsets 3 and 4: nothing there to deliver, and nothing to wait for."""
    p = part()
    ranges, used = acquire(p, "a", [b(0, 2), b(5, 7)])
    assert ranges == [Acquired(0, 2, 1), Acquired(5, 7, 1)]
    assert used == [b(0, 2), b(5, 7)]
    assert view(p)[3] == view(p)[4] == (RecordState.ARCHIVED, 0, None)
    ack(p, "a", (0, 2, [A]))
    assert p.start == 5  # over the acknowledged records and the gap


@pytest.mark.parametrize(
    ("max_records", "acquired", "batches"),
    [
        (1, Acquired(0, 4, 1), 1),
        (3, Acquired(0, 4, 1), 1),
        (5, Acquired(0, 4, 1), 1),
        (6, Acquired(0, 9, 1), 2),
        (10, Acquired(0, 9, 1), 2),
        (11, Acquired(0, 14, 1), 3),
    ],
)
def test_max_records_rounds_up_to_the_end_of_a_batch(max_records: int, acquired: Acquired, batches: int) -> None:
    p = part()
    log = [b(0, 4), b(5, 9), b(10, 14)]
    ranges, used = acquire(p, "a", log, max_records)
    assert ranges == [acquired]
    assert used == log[:batches]
    assert p.end == acquired.last_offset + 1  # the window holds only what was acquired


def test_max_records_counts_only_what_is_acquired() -> None:
    p = part()
    acquire(p, "a", [b(0, 4)])
    ranges, _ = acquire(p, "b", [b(0, 4), b(5, 9), b(10, 14)], max_records=5)
    assert ranges == [Acquired(5, 9, 1)]


def test_the_max_locks_window() -> None:
    p = part(locks=10)
    log = [b(0, 4), b(5, 9), b(10, 14)]
    ranges, used = acquire(p, "a", log)
    assert ranges == [Acquired(0, 9, 1)]
    assert used == log[:2]
    assert (p.start, p.end) == (0, 10)
    assert p.next_fetch_offset() is None  # full, and nothing in it available
    assert acquire(p, "b", log[2:]) == ([], [])
    assert p.end == 10
    ack(p, "a", (5, 9, [A]))  # done, but not at the head: the window stays full
    assert p.next_fetch_offset() is None
    assert acquire(p, "b", log[2:]) == ([], [])
    ack(p, "a", (0, 4, [A]))
    assert p.start == 10
    assert p.next_fetch_offset() == 10
    ranges, _ = acquire(p, "b", log[2:])
    assert ranges == [Acquired(10, 14, 1)]


def test_a_batch_past_the_window_is_cut_at_its_edge() -> None:
    p = part(locks=7)
    ranges, used = acquire(p, "a", [b(0, 9)])
    assert ranges == [Acquired(0, 6, 1)]
    assert used == [b(0, 9)]
    assert p.end == 7
    ack(p, "a", (0, 6, [A]))
    ranges, _ = acquire(p, "a", [b(0, 9)])
    assert ranges == [Acquired(7, 9, 1)]


def test_a_gap_past_the_window_is_not_taken_into_it() -> None:
    p = part(locks=5)
    ranges, _ = acquire(p, "a", [b(0, 1), b(8, 9)])
    assert ranges == [Acquired(0, 1, 1)]
    assert p.end == 2


def test_a_gap_wider_than_the_window_is_crossed_when_nothing_is_in_flight() -> None:
    """Compaction or DeleteRecords left no record in 2-99: the start moves to the next one
    instead of waiting forever for a window wide enough to hold the gap."""
    p = part(locks=5)
    acquire(p, "a", [b(0, 1)])
    ack(p, "a", (0, 1, [A]))
    ranges, used = acquire(p, "a", [b(100, 102)])
    assert ranges == [Acquired(100, 102, 1)]
    assert used == [b(100, 102)]
    assert (p.start, p.end) == (100, 103)
    assert len(p.records) == 3  # the gap takes no place in the window


def test_a_gap_wider_than_the_window_behind_a_held_record_is_crossed_once_it_is_done() -> None:
    p = part(locks=5)
    acquire(p, "a", [b(0, 0)])
    assert acquire(p, "b", [b(50, 51)]) == ([], [])  # the window holds 0, which is in flight
    ack(p, "a", (0, 0, [A]))
    ranges, _ = acquire(p, "b", [b(50, 51)])
    assert ranges == [Acquired(50, 51, 1)]
    assert p.start == 50


def test_control_records_wider_than_the_window_are_crossed_in_one_acquisition() -> None:
    """An aborted transaction read committed, or a long run of markers: archived on the way,
    they free the window's head as they go."""
    p = part(locks=5)
    ranges, used = acquire(p, "a", [b(0, 19, control=True), b(20, 20, control=True), b(21, 23)])
    assert ranges == [Acquired(21, 23, 1)]
    assert used == [b(21, 23)]
    assert p.start == 21


def test_an_available_record_compacted_away_in_the_window_is_archived() -> None:
    """Offset 2 was released, then the cleaner removed it: a read from 2 starts at 3, and 2 is
    archived instead of being asked for at every fetch."""
    p = part()
    acquire(p, "a", [b(0, 4)])
    ack(p, "a", (0, 1, [A]), (2, 2, [R]), (3, 4, [A]))
    assert p.next_fetch_offset() == 2
    ranges, used = acquire(p, "b", [b(3, 4), b(5, 6)])
    assert ranges == [Acquired(5, 6, 1)]
    assert used == [b(5, 6)]
    assert p.start == 5
    assert p.next_fetch_offset() == 7


def test_a_full_window_still_redelivers_what_is_released() -> None:
    p = part(locks=5)
    acquire(p, "a", [b(0, 4)])
    ack(p, "a", (3, 3, [R]))
    assert p.next_fetch_offset() == 3
    ranges, used = acquire(p, "b", [b(0, 4), b(5, 9)])
    assert ranges == [Acquired(3, 3, 2)]
    assert used == [b(0, 4)]


# --- acknowledging -----------------------------------------------------------------------


def test_one_type_for_a_range() -> None:
    p = part()
    acquire(p, "a", [b(0, 9)])
    ack(p, "a", (2, 5, [A]))
    assert all(view(p)[o] == (RecordState.ACKNOWLEDGED, 1, None) for o in range(2, 6))
    assert p.start == 0
    ack(p, "a", (0, 1, [X]))
    assert p.start == 6
    assert p.in_flight() == 4


def test_one_type_per_offset() -> None:
    p = part()
    acquire(p, "a", [b(0, 3)])
    ack(p, "a", (0, 3, [A, R, X, G]))
    assert view(p) == {
        1: (RecordState.AVAILABLE, 1, None),
        2: (RecordState.ARCHIVED, 1, None),
        3: (RecordState.ARCHIVED, 1, None),
    }
    assert p.start == 1
    assert p.next_deadline() is None


def test_release_makes_a_record_deliverable_again_and_counts_the_next_delivery() -> None:
    p = part()
    acquire(p, "a", [b(0, 0)])
    ack(p, "a", (0, 0, [R]))
    assert view(p) == {0: (RecordState.AVAILABLE, 1, None)}
    ranges, _ = acquire(p, "b", [b(0, 0)])
    assert ranges == [Acquired(0, 0, 2)]


def test_release_at_the_delivery_limit_archives() -> None:
    p = part(limit=2)
    acquire(p, "a", [b(0, 1)])
    ack(p, "a", (0, 1, [R]))
    acquire(p, "a", [b(0, 1)])
    assert view(p)[0] == (RecordState.ACQUIRED, 2, "a")
    ack(p, "a", (1, 1, [R]))
    assert view(p)[1] == (RecordState.ARCHIVED, 2, None)
    ack(p, "a", (0, 0, [R]))
    assert (p.start, p.records) == (2, {})
    assert acquire(p, "a", [b(0, 1)]) == ([], [])


def test_reject_and_gap_archive_at_any_count() -> None:
    p = part(limit=5)
    acquire(p, "a", [b(0, 2)])
    ack(p, "a", (1, 1, [X]), (2, 2, [G]))
    assert view(p)[1] == view(p)[2] == (RecordState.ARCHIVED, 1, None)
    assert acquire(p, "b", [b(0, 2)]) == ([], [])


def _held_by_a_and_b() -> SharePartition:
    """0-4 acquired by a; 5 available (released by a); 6 acknowledged (not at the head); 7-9
    acquired by b."""
    p = part()
    acquire(p, "a", [b(0, 6)])
    ack(p, "a", (5, 5, [R]), (6, 6, [A]))
    acquire(p, "b", [b(7, 9)])
    return p


@pytest.mark.parametrize(
    ("member", "batch"),
    [
        ("a", (5, 5, [A])),  # not acquired (available)
        ("a", (6, 6, [A])),  # already acknowledged
        ("a", (7, 7, [A])),  # acquired by another member
        ("b", (0, 0, [R])),  # acquired by another member
        ("a", (10, 10, [A])),  # past the end: never acquired
        ("a", (3, 12, [A])),  # runs past the end
        ("c", (0, 0, [A])),  # a member that holds nothing
    ],
)
def test_invalid_record_state(member: str, batch: tuple[int, int, list[int]]) -> None:
    p = _held_by_a_and_b()
    before = whole(p)
    with pytest.raises(KafkaError) as e:
        ack(p, member, batch)
    assert e.value.code == ErrorCode.invalid_record_state
    assert whole(p) == before


def test_invalid_record_state_below_the_start() -> None:
    p = part(5)
    acquire(p, "a", [b(5, 9)])
    ack(p, "a", (5, 6, [A]))
    assert p.start == 7
    for batch in [(5, 5, [A]), (6, 7, [A]), (0, 0, [R])]:
        with pytest.raises(KafkaError) as e:
            ack(p, "a", batch)
        assert e.value.code == ErrorCode.invalid_record_state


def test_a_record_acknowledged_twice() -> None:
    p = part()
    acquire(p, "a", [b(0, 3)])
    ack(p, "a", (1, 1, [A]))
    with pytest.raises(KafkaError) as e:
        ack(p, "a", (1, 1, [A]))
    assert e.value.code == ErrorCode.invalid_record_state


@pytest.mark.parametrize(
    "batches",
    [
        [(3, 2, [A])],  # first > last
        [(-1, 0, [A])],  # a negative offset
        [(0, 2, [A, A])],  # two types for three offsets
        [(0, 0, [A, A])],
        [(0, 2, [])],  # no type
        [(0, 0, [4])],  # unknown types
        [(0, 0, [-1])],
        [(0, 1, [A, 9])],
        [(0, 1, [A]), (1, 2, [A])],  # overlapping
        [(0, 3, [A]), (2, 2, [R])],
        [(2, 2, [A]), (0, 0, [A])],  # out of order
        [(0, 0, [A]), (0, 0, [R])],  # the same offset twice
        [(0, 1, [A]), (2, 3, [A]), (5, 4, [A])],  # the malformed one last
        [(7, 7, [A]), (0, 0, [7])],  # malformed even though another batch is not held
    ],
)
def test_invalid_request_changes_nothing(batches: list[tuple[int, int, list[int]]]) -> None:
    p = part()
    acquire(p, "a", [b(0, 4)])
    before = whole(p)
    with pytest.raises(KafkaError) as e:
        p.acknowledge("a", batches)
    assert e.value.code == ErrorCode.invalid_request
    assert whole(p) == before


def test_the_same_offset_named_twice_cannot_be_accepted_then_released() -> None:
    """Found by these tests: the two batches each saw the record acquired, then were both
    applied, so an accepted record became available again (and was redelivered)."""
    p = part()
    acquire(p, "a", [b(0, 0)])
    with pytest.raises(KafkaError):
        ack(p, "a", (0, 0, [A]), (0, 0, [R]))
    ack(p, "a", (0, 0, [A]))
    assert acquire(p, "b", [b(0, 0)]) == ([], [])


@pytest.mark.parametrize("bad", [(8, 8, [A]), (4, 5, [A]), (6, 6, [R])])
def test_acknowledgements_are_all_or_none(bad: tuple[int, int, list[int]]) -> None:
    """Valid batches before a batch that names a record not held: none is applied."""
    p = part()
    acquire(p, "a", [b(0, 4)])
    acquire(p, "b", [b(5, 9)])
    before = whole(p)
    with pytest.raises(KafkaError) as e:
        ack(p, "a", (0, 1, [A]), (2, 3, [R, X]), bad)
    assert e.value.code == ErrorCode.invalid_record_state
    assert whole(p) == before


def test_acknowledging_nothing_changes_nothing() -> None:
    p = part()
    acquire(p, "a", [b(0, 1)])
    before = whole(p)
    p.acknowledge("a", [])
    assert whole(p) == before


# --- locks, members, the start offset ----------------------------------------------------


def test_expire_locks_releases_and_keeps_the_count() -> None:
    p = part(limit=2)
    acquire(p, "a", [b(0, 1)], now=100)
    acquire(p, "b", [b(2, 3)], now=600)
    assert p.next_deadline() == 100 + LOCK_MS
    assert not p.expire_locks(100 + LOCK_MS - 1)
    assert p.expire_locks(100 + LOCK_MS)  # a deadline is inclusive
    assert view(p) == {
        0: (RecordState.AVAILABLE, 1, None),
        1: (RecordState.AVAILABLE, 1, None),
        2: (RecordState.ACQUIRED, 1, "b"),
        3: (RecordState.ACQUIRED, 1, "b"),
    }
    assert p.next_deadline() == 600 + LOCK_MS
    with pytest.raises(KafkaError) as e:
        ack(p, "a", (0, 0, [A]))  # too late: its lock ran out
    assert e.value.code == ErrorCode.invalid_record_state
    ranges, _ = acquire(p, "c", [b(0, 1)], now=2_000)
    assert ranges == [Acquired(0, 1, 2)]
    assert p.expire_locks(10_000)  # the second expiry is at the limit: archived
    assert view(p) == {2: (RecordState.AVAILABLE, 1, None), 3: (RecordState.AVAILABLE, 1, None)}
    assert p.start == 2
    assert not p.expire_locks(20_000)
    assert p.next_deadline() is None


def test_release_member() -> None:
    p = part(limit=1)
    acquire(p, "a", [b(0, 4)])
    acquire(p, "b", [b(5, 9)])
    ack(p, "a", (4, 4, [A]))
    assert p.release_member("b")  # at the limit: archived
    assert all(view(p)[o] == (RecordState.ARCHIVED, 1, None) for o in range(5, 10))
    assert not p.release_member("b")
    assert not p.release_member("c")
    assert view(p)[0] == (RecordState.ACQUIRED, 1, "a")
    q = part(limit=3)
    acquire(q, "a", [b(0, 4)])
    acquire(q, "b", [b(5, 9)])
    assert q.release_member("a")
    assert all(view(q)[o] == (RecordState.AVAILABLE, 1, None) for o in range(5))
    assert all(view(q)[o][2] == "b" for o in range(5, 10))
    assert q.next_fetch_offset() == 0


def test_release_member_uncounted() -> None:
    """A closed share session's records: released as if never delivered (Kafka decreases
    their delivery count), so even at the limit they are delivered again."""
    p = part(limit=2)
    acquire(p, "a", [b(0, 1)])
    ack(p, "a", (0, 1, [R]))
    acquire(p, "a", [b(0, 1)])
    acquire(p, "b", [b(2, 2)])
    assert p.release_member("a", uncount=True)
    assert view(p) == {
        0: (RecordState.AVAILABLE, 1, None),
        1: (RecordState.AVAILABLE, 1, None),
        2: (RecordState.ACQUIRED, 1, "b"),
    }
    assert p.release_member("b", uncount=True)
    assert view(p)[2] == (RecordState.AVAILABLE, 0, None)
    ranges, _ = acquire(p, "c", [b(0, 1), b(2, 2)])
    assert ranges == [Acquired(0, 1, 2), Acquired(2, 2, 1)]


def test_the_start_advances_over_done_records_only() -> None:
    p = part()
    acquire(p, "a", [b(0, 9)])
    ack(p, "a", (2, 4, [A]))
    assert p.start == 0
    ack(p, "a", (1, 1, [R]))
    assert p.start == 0
    ack(p, "a", (0, 0, [A]))
    assert p.start == 1  # 1 is available again: the start stops there
    acquire(p, "a", [b(0, 9)])
    ack(p, "a", (1, 1, [X]))
    assert p.start == 5
    assert sorted(p.records) == list(range(5, 10))


def test_truncate_to() -> None:
    p = part()
    acquire(p, "a", [b(0, 9)])
    p.truncate_to(0)
    p.truncate_to(-5)
    assert (p.start, p.end) == (0, 10)
    p.truncate_to(4)
    assert (p.start, p.end) == (4, 10)
    assert sorted(p.records) == list(range(4, 10))
    with pytest.raises(KafkaError) as e:
        ack(p, "a", (3, 3, [A]))  # gone with the log
    assert e.value.code == ErrorCode.invalid_record_state
    ack(p, "a", (4, 9, [A]))
    assert (p.start, p.end) == (10, 10)
    p.truncate_to(25)
    assert (p.start, p.end, p.records) == (25, 25, {})
    assert p.next_fetch_offset() == 25


def test_truncate_to_moves_over_a_done_head() -> None:
    """Found by these tests: truncation left a done record at the head, so the start was
    not where a restore of the same snapshot put it."""
    p = part()
    acquire(p, "a", [b(0, 9)])
    ack(p, "a", (5, 6, [A]), (7, 7, [X]))
    p.truncate_to(5)
    assert p.start == 8
    restored = SharePartition.restore(p.snapshot(), delivery_limit=3, max_locks=100)
    assert restored.start == p.start


def test_reset() -> None:
    p = part()
    acquire(p, "a", [b(0, 9)])
    p.reset(3)
    assert (p.start, p.end, p.records, p.state_epoch) == (3, 3, {}, 1)
    ranges, _ = acquire(p, "a", [b(0, 9)])
    assert ranges == [Acquired(3, 9, 1)]
    p.reset(100)
    assert (p.start, p.end, p.state_epoch) == (100, 100, 2)


# --- persistence -------------------------------------------------------------------------


def _mixed() -> SharePartition:
    p = part(7, limit=4)
    acquire(p, "a", [b(7, 9), b(12, 15), b(16, 16, control=True), b(17, 20)])
    ack(p, "a", (8, 8, [A]), (9, 9, [R]), (12, 13, [X, G]))
    acquire(p, "b", [b(7, 9)])  # 9 again: count 2
    p.state_epoch = 3
    return p


def test_snapshot_runs() -> None:
    p = _mixed()
    assert p.snapshot() == {
        "start": 7,
        "end": 21,
        "epoch": 3,
        "runs": [
            [7, 7, 0, 1],  # acquired: stored available, with its count
            [8, 8, 2, 1],
            [9, 9, 0, 2],
            [10, 11, 4, 0],  # the gap
            [12, 13, 4, 1],
            [14, 15, 0, 1],
            [16, 16, 4, 0],  # the control record
            [17, 20, 0, 1],
        ],
    }


def test_snapshot_restore_round_trip() -> None:
    p = _mixed()
    value = msgpack.unpackb(msgpack.packb(p.snapshot()))  # as stored
    q = SharePartition.restore(value, delivery_limit=4, max_locks=100)
    assert (q.start, q.end, q.state_epoch) == (p.start, p.end, p.state_epoch)
    assert set(q.records) == set(p.records)
    for offset, r in p.records.items():
        kept = RecordState.AVAILABLE if r.state == RecordState.ACQUIRED else r.state
        assert view(q)[offset] == (kept, r.count, None)
    assert q.in_flight() == 0
    assert q.snapshot() == p.snapshot()
    ranges, _ = acquire(q, "c", [b(7, 9), b(12, 15), b(17, 20)])
    assert ranges == [Acquired(7, 7, 2), Acquired(9, 9, 3), Acquired(14, 15, 2), Acquired(17, 20, 2)]


def test_restore_advances_over_a_done_head() -> None:
    q = SharePartition.restore(
        {"start": 0, "end": 6, "epoch": 0, "runs": [[0, 1, 2, 1], [2, 2, 4, 0], [3, 5, 0, 1]]},
        delivery_limit=3,
        max_locks=100,
    )
    assert (q.start, q.end) == (3, 6)
    empty = SharePartition.restore({"start": 9, "end": 9, "epoch": 2, "runs": []}, delivery_limit=3, max_locks=100)
    assert (empty.start, empty.end, empty.state_epoch, empty.records) == (9, 9, 2, {})


def test_a_record_acquired_at_its_last_delivery_is_not_delivered_again_after_a_restore() -> None:
    """Found by these tests: its lock died with the broker, which is a release at the limit,
    but the restored record was available with its count at the limit and the next
    acquisition delivered it once more than allowed."""
    p = part(limit=2)
    acquire(p, "a", [b(0, 1)])
    ack(p, "a", (0, 1, [R]))
    acquire(p, "a", [b(0, 1)])  # the last delivery allowed
    q = SharePartition.restore(p.snapshot(), delivery_limit=2, max_locks=100)
    assert view(q)[0] == (RecordState.AVAILABLE, 2, None)
    assert acquire(q, "b", [b(0, 1), b(2, 2)]) == ([Acquired(2, 2, 1)], [b(2, 2)])
    assert (q.start, q.end) == (2, 3)  # 0 and 1 archived (the start moved over them), 2 in flight
    assert acquire(q, "b", [b(0, 1)]) == ([], [])


def _value(**changes: Any) -> dict[str, Any]:
    value: dict[str, Any] = {"start": 5, "end": 10, "epoch": 0, "runs": [[5, 9, 0, 1]]}
    value.update(changes)
    return value


MALFORMED_VALUES: list[Any] = [
    {},
    {"start": 5, "end": 10, "epoch": 0},
    _value(start="5"),
    _value(start=True),
    _value(end=None),
    _value(end=10.0),
    _value(epoch=[0]),
    _value(runs={"5": 1}),
    _value(runs=None),
    _value(start=-1),
    _value(start=11),  # start past end
    _value(start=0, end=1_000_001),  # a window no broker writes
    _value(start=2**40, end=2**41),
    _value(runs=[[5, 9, 0]]),
    _value(runs=[[5, 9, 0, 1, 1]]),
    _value(runs=[(5, 9, 0, 1)]),
    _value(runs=[[5, 9, 0, "1"]]),
    _value(runs=[[5, 9, 0, True]]),
    _value(runs=[[5, 9, None, 1]]),
    _value(runs=["run"]),
    _value(runs=[[4, 9, 0, 1]]),  # below the start
    _value(runs=[[5, 10, 0, 1]]),  # at the end
    _value(runs=[[7, 6, 0, 1]]),  # first > last
    _value(runs=[[5, 9, 3, 1]]),  # no such state
    _value(runs=[[5, 9, -1, 1]]),
    _value(runs=[[5, 9, 0, -1]]),  # a negative count
    _value(runs=[[5, 9, 0, 1], [5, 9, 2, 1]]),  # overlapping runs: restoring would not be linear
    _value(runs=[[8, 9, 0, 1], [5, 6, 2, 1]]),  # out of order
]


@pytest.mark.parametrize("value", MALFORMED_VALUES, ids=[str(i) for i in range(len(MALFORMED_VALUES))])
def test_restore_of_a_malformed_value_raises_value_error(value: Any) -> None:
    with pytest.raises(ValueError):
        SharePartition.restore(value, delivery_limit=3, max_locks=100)


def test_restore_of_the_well_formed_counterparts() -> None:
    q = SharePartition.restore(_value(runs=[[5, 6, 0, 1], [7, 7, 1, 2], [8, 9, 2, 1]]), delivery_limit=3, max_locks=5)
    assert view(q) == {
        5: (RecordState.AVAILABLE, 1, None),
        6: (RecordState.AVAILABLE, 1, None),
        7: (RecordState.AVAILABLE, 2, None),  # an acquired run comes back available
        8: (RecordState.ACKNOWLEDGED, 1, None),
        9: (RecordState.ACKNOWLEDGED, 1, None),
    }
    big = SharePartition.restore(_value(start=0, end=10_000, runs=[]), delivery_limit=3, max_locks=5)
    assert (big.start, big.end) == (10_000, 10_000)  # offsets without a run are done
    with pytest.raises(ValueError):  # wider than any window the broker keeps
        SharePartition.restore(_value(start=0, end=10_001, runs=[]), delivery_limit=3, max_locks=5)


# --- a stateful machine ----------------------------------------------------------------------


def _stored(value: dict[str, object]) -> Any:
    """A value as a replay reads it back."""
    return msgpack.unpackb(msgpack.packb(value))


MEMBERS = ("a", "b", "c")
LIMIT = 3
WINDOW = 12


class SharePartitionMachine(RuleBasedStateMachine):
    """A log that grows (batches, control batches, compaction gaps) and is truncated; three
    members fetch, acknowledge (valid or not), are released, let their locks run out; the
    broker restarts (a snapshot, stored and restored); every other step an update is written
    and replayed over a replica of the stored state.  The model keeps what the members
    hold, how often each record was delivered, what was acknowledged or archived."""

    def __init__(self) -> None:
        super().__init__()
        self.p = SharePartition(0, delivery_limit=LIMIT, max_locks=WINDOW)
        self.log: list[BatchSpan] = []
        self.log_start = 0
        self.log_end = 0
        self.now = 0
        self.held: dict[str, set[int]] = {m: set() for m in MEMBERS}
        self.count: dict[int, int] = {}  # deliveries per offset
        self.accepted: set[int] = set()
        self.rejected: set[int] = set()  # REJECT or GAP
        self.archived: set[int] = set()  # ever seen archived
        self.last_start = 0
        # What a replay would rebuild: the first snapshot, then each update written since.
        self.replica = SharePartition.restore(_stored(self.p.snapshot()), delivery_limit=LIMIT, max_locks=WINDOW)
        self.steps = 0

    # --- the model ---

    def control(self) -> set[int]:
        return {o for batch in self.log if batch.control for o in range(batch.base_offset, batch.last_offset + 1)}

    def data(self) -> set[int]:
        return {o for batch in self.log if not batch.control for o in range(batch.base_offset, batch.last_offset + 1)}

    def done_in_model(self, offset: int) -> bool:
        return offset in self.accepted or offset in self.rejected or self.count.get(offset, 0) >= LIMIT

    # --- rules ---

    @rule(size=st.integers(1, 5), gap=st.sampled_from([0, 0, 0, 1, 3]), control=st.sampled_from([False] * 4 + [True]))
    def produce(self, size: int, gap: int, control: bool) -> None:
        base = self.log_end + gap
        self.log.append(BatchSpan(base, base + (0 if control else size - 1), control))
        self.log_end = self.log[-1].last_offset + 1

    @rule(member=st.sampled_from(MEMBERS), max_records=st.integers(1, 8))
    def fetch(self, member: str, max_records: int) -> None:
        self.p.truncate_to(self.log_start)  # as the coordinator, before every fetch
        offset = self.p.next_fetch_offset()
        if offset is None or offset >= self.log_end:
            return
        batches = [batch for batch in self.log if batch.last_offset >= offset]
        before = {o: (r.state, r.count) for o, r in self.p.records.items()}
        ranges, used = self.p.acquire(member, batches, max_records, self.now, LOCK_MS)
        data = self.data()
        got: list[int] = []
        for r in ranges:
            assert r.first_offset <= r.last_offset
            for o in range(r.first_offset, r.last_offset + 1):
                got.append(o)
                assert o in data, f"{o} is not a data record (a control record or a gap)"
                assert o not in self.accepted, f"{o} was acknowledged, then delivered again"
                assert o not in self.archived, f"{o} was archived, then delivered again"
                assert not any(o in h for h in self.held.values()), f"{o} is held already"
                assert before.get(o, (RecordState.AVAILABLE, 0))[0] == RecordState.AVAILABLE
                self.count[o] = self.count.get(o, 0) + 1
                assert r.delivery_count == self.count[o]
                record = self.p.records[o]
                assert (record.state, record.member, record.count) == (RecordState.ACQUIRED, member, self.count[o])
                assert record.deadline_ms == self.now + LOCK_MS
        assert len(got) == len(set(got))
        assert got == sorted(got)
        if got:
            # Rounded up to a batch's end only: no batch is started once max_records is reached.
            assert len([o for o in got if o < used[-1].base_offset]) < max_records
        assert all(any(batch.base_offset <= o <= batch.last_offset for o in got) for batch in used)
        self.held[member] |= set(got)

    @precondition(lambda self: any(self.held.values()))
    @rule(data=st.data())
    def acknowledge(self, data: st.DataObject) -> None:
        member = data.draw(st.sampled_from([m for m in MEMBERS if self.held[m]]))
        chosen = sorted(data.draw(st.sets(st.sampled_from(sorted(self.held[member])), min_size=1)))
        types = [data.draw(st.sampled_from([A, A, R, X, G])) for _ in chosen]
        batches: list[tuple[int, int, list[int]]] = []
        i = 0
        while i < len(chosen):  # contiguous runs; one type for a run where all agree
            j = i
            while j + 1 < len(chosen) and chosen[j + 1] == chosen[j] + 1:
                j += 1
            run = [int(t) for t in types[i : j + 1]]
            batches.append((chosen[i], chosen[j], run[:1] if len(set(run)) == 1 else run))
            i = j + 1
        self.p.acknowledge(member, batches)
        for offset, t in zip(chosen, types, strict=True):
            self.held[member].discard(offset)
            if t == A:
                self.accepted.add(offset)
            elif t in (X, G):
                self.rejected.add(offset)
            record = self.p.records.get(offset)
            if t == R and self.count[offset] < LIMIT:
                assert record is not None
                assert record.state == RecordState.AVAILABLE
            elif record is not None:
                assert record.state == (RecordState.ACKNOWLEDGED if t == A else RecordState.ARCHIVED)

    @rule(data=st.data(), member=st.sampled_from(MEMBERS), kind=st.sampled_from(["state", "request"]))
    def acknowledge_wrongly(self, data: st.DataObject, member: str, kind: str) -> None:
        """A valid batch (if the member holds anything) followed by a bad one: nothing changes."""
        batches: list[tuple[int, int, list[int]]] = []
        if self.held[member]:
            first = min(self.held[member])
            batches.append((first, first, [int(A)]))
        after = batches[-1][1] + 1 if batches else 0
        if kind == "state":
            lo = max(after, self.p.start - 3, 0)
            candidates = [o for o in range(lo, self.p.end + 3) if o not in self.held[member]]
            if not candidates:
                return
            o = data.draw(st.sampled_from(candidates))
            batches.append((o, o, [data.draw(st.sampled_from([int(A), int(R), int(X)]))]))
            code = ErrorCode.invalid_record_state
        else:
            bad = data.draw(
                st.sampled_from([(after + 2, after + 1, [1]), (after, after + 2, [1, 1]), (after, after, [5])])
            )
            batches.append(bad)
            if batches[0][0] == bad[0]:
                batches.append((bad[0], bad[0], [1]))  # and overlapping
            code = ErrorCode.invalid_request
        before = whole(self.p)
        with pytest.raises(KafkaError) as e:
            self.p.acknowledge(member, batches)
        assert e.value.code == code
        assert whole(self.p) == before

    @rule(member=st.sampled_from(MEMBERS), uncount=st.booleans())
    def release(self, member: str, uncount: bool) -> None:
        """The member left (counted) or its share session closed (uncounted)."""
        assert self.p.release_member(member, uncount=uncount) == bool(self.held[member])
        if uncount:
            for o in self.held[member]:
                self.count[o] -= 1
        self.held[member].clear()

    @rule(ms=st.integers(0, 1_500))
    def time_passes(self, ms: int) -> None:
        self.now += ms
        expired = {
            o for o, r in self.p.records.items() if r.state == RecordState.ACQUIRED and r.deadline_ms <= self.now
        }
        assert self.p.expire_locks(self.now) == bool(expired)
        for h in self.held.values():
            h.difference_update(expired)

    @rule(k=st.integers(1, 6))
    def truncate(self, k: int) -> None:
        self.log_start = min(self.log_end, self.log_start + k)
        self.log = [batch for batch in self.log if batch.last_offset >= self.log_start]
        self.p.truncate_to(self.log_start)
        for h in self.held.values():
            h.difference_update({o for o in h if o < self.log_start})

    @rule()
    def restart(self) -> None:
        before = self.p
        stored = _stored(before.snapshot())
        self.p = SharePartition.restore(stored, delivery_limit=LIMIT, max_locks=WINDOW)
        self.replica = SharePartition.restore(stored, delivery_limit=LIMIT, max_locks=WINDOW)
        assert (self.p.start, self.p.end, self.p.state_epoch) == (before.start, before.end, before.state_epoch)
        for offset, r in before.records.items():
            kept = RecordState.AVAILABLE if r.state == RecordState.ACQUIRED else r.state
            assert view(self.p)[offset] == (kept, r.count, None)
        for h in self.held.values():
            h.clear()  # locks do not survive

    # --- invariants ---

    @invariant()
    def updates_replay_the_state(self) -> None:
        """Every other step an update is written (so one holds the changes of two steps):
        replayed over what was written before, it gives back what a snapshot would store."""
        self.steps += 1
        if self.steps % 2 == 0:
            self.replica.apply(_stored(self.p.changes()))
            assert self.replica.snapshot() == self.p.snapshot()

    @invariant()
    def the_window_is_whole(self) -> None:
        p = self.p
        assert set(p.records) == set(range(p.start, p.end))
        assert p.end - p.start <= WINDOW
        assert p.start >= self.last_start, "the start moved back"
        self.last_start = p.start
        if p.start < p.end:
            assert p.records[p.start].state not in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)

    @invariant()
    def holders_and_counts(self) -> None:
        seen: dict[int, str] = {}
        for member, h in self.held.items():
            for o in h:
                assert o not in seen, f"{o} held by {seen[o]} and {member}"
                seen[o] = member
        acquired = {o: r.member for o, r in self.p.records.items() if r.state == RecordState.ACQUIRED}
        assert acquired == seen
        for o, r in self.p.records.items():
            assert r.count <= LIMIT
            assert r.count == self.count.get(o, 0)
            assert (r.member is None) == (r.state != RecordState.ACQUIRED)
            if r.state == RecordState.ARCHIVED:
                self.archived.add(o)
            if r.state == RecordState.ACKNOWLEDGED:
                assert o in self.accepted
            if o in self.accepted:
                assert r.state == RecordState.ACKNOWLEDGED
        assert all(c <= LIMIT for c in self.count.values())

    @invariant()
    def nothing_is_lost(self) -> None:
        """A data record still in the log, below `end`: in flight, or done for a reason (it
        was accepted, rejected, or delivered as often as allowed)."""
        for o in self.data():
            if self.log_start <= o < self.p.end:
                if o >= self.p.start:
                    assert o in self.p.records
                else:
                    assert self.done_in_model(o), f"{o} was skipped without being consumed"
        for o in self.control():
            assert o not in self.count, f"control record {o} was delivered"


TestSharePartitionMachine = SharePartitionMachine.TestCase
TestSharePartitionMachine.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
