"""The share partition (KIP-932) beyond acknowledgements: lock expiry, a member's records released
(counted or not), the start offset advancing over done records, truncation and reset.

Time is the `now` argument throughout: nothing sleeps.
"""

from __future__ import annotations

import pytest

from broker.protocol.errors import ErrorCode, KafkaError
from broker.share.partition import Acquired, RecordState, SharePartition
from tests.support.share_partition import LOCK_MS, A, R, X, ack, acquire, b, part, view


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
