"""The share partition (KIP-932) acknowledging records: each type (accept, release, reject, gap),
delivery counts and the delivery limit, every validation error, and all or none.

Time is the `now` argument throughout: nothing sleeps.
"""

from __future__ import annotations

import pytest

from broker.protocol.errors import ErrorCode, KafkaError
from broker.share.partition import Acquired, RecordState, SharePartition
from tests.support.share_partition import A, G, R, X, ack, acquire, b, part, view, whole


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
