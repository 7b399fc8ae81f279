"""The share partition (KIP-932) acquiring records: control batches, compaction gaps,
`max_records` rounded up to a batch's end and the `max_locks` window.

Time is the `now` argument throughout: nothing sleeps.
"""

from __future__ import annotations

import pytest

from broker.share.partition import Acquired, RecordState
from tests.support.share_partition import LOCK_MS, A, R, ack, acquire, b, part, view


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
