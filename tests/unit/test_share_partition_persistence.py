"""The share partition's (KIP-932) persisted snapshot: what it holds, the round trip through
restore, the delivery limit kept across it, and malformed values refused.

Time is the `now` argument throughout: nothing sleeps.
"""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from broker.share.partition import Acquired, RecordState, SharePartition
from tests.support.share_partition import A, G, R, X, ack, acquire, b, part, view


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
