"""The consumer group protocol (KIP-848): leaves, dynamic and static (a static member leaving for
now and a new instance taking over without a rebalance), and the timers that remove a member:
the session timeout and the rebalance timeout of a member that does not revoke in time.

Time is the `now` argument throughout: nothing sleeps.  The store is a real MetadataStore in a
temporary directory (topics are created on disk, and each creation bumps `store.version`).
"""

from __future__ import annotations

import pytest

from broker.coordinator.consumer_group import ConsumerGroupState, MemberState
from broker.metadata import MetadataStore
from broker.protocol.errors import ErrorCode, KafkaError
from tests.support.consumer_group_harness import (
    Harness,
    assert_exclusive,
    partitions_of,
    settle,
    stable_pair,
    stored_view,
)


def test_leave(store: MetadataStore, h: Harness) -> None:
    t, _a, b = stable_pair(store, h)
    epoch = h.group().epoch
    left = h.heartbeat("a", -1)
    assert (left.member_id, left.member_epoch, left.assignment) == ("a", -1, None)
    g = h.group()
    assert "a" not in g.members
    assert "a" not in g.target
    assert g.epoch == epoch + 1
    assert h.log[-4:-1] == [(["cgm", "g", "a"], None), (["cgtm", "g", "a"], None), (["cgc", "g", "a"], None)]
    assert h.log[-1][0] == ["cg", "g"]
    assert h.log[-1][1] is not None
    assert h.log[-1][1]["epoch"] == epoch + 1
    assert_exclusive(g)
    assert all(g.owners[(t, p)] == "b" for p in b.owned[t])
    settle(h, [b])
    assert b.owned == {t: frozenset(range(4))}
    with pytest.raises(KafkaError) as e:
        h.heartbeat("a", -1)
    assert (e.value.code, e.value.message) == (ErrorCode.unknown_member_id, "Member a is not a member of group g.")
    with pytest.raises(KafkaError) as e:
        h.heartbeat("a", -1, group_id="nope")
    assert e.value.code == ErrorCode.group_id_not_found


def test_static_member_leaves_for_now_and_a_new_instance_takes_over_without_a_rebalance(
    store: MetadataStore, h: Harness
) -> None:
    _t, a, b = stable_pair(store, h, a_instance="i-a")
    g = h.group()
    epoch, a_parts, a_epoch = g.epoch, a.owned, a.epoch
    # While a is there, another member cannot take its instance id.
    with pytest.raises(KafkaError) as e:
        h.join("a2", ("t",), instance_id="i-a")
    assert e.value.code == ErrorCode.unreleased_instance_id
    assert e.value.message == (
        "Static member a2 with instance id i-a cannot join the group because the instance id is owned by a member."
    )
    assert "a2" not in g.members

    left = h.heartbeat("a", -2, instance_id="i-a")
    assert (left.member_epoch, left.assignment) == (-2, None)
    assert g.epoch == epoch  # no rebalance
    assert g.members["a"].epoch == -2
    assert g.members["a"].assigned == a_parts
    h.now += 100
    b_parts = b.owned
    assert b.heartbeat(h).assignment == b_parts  # b gets none of a's partitions meanwhile
    assert partitions_of(b.owned).isdisjoint(partitions_of(a_parts))

    back = h.join("a2", ("t",), instance_id="i-a")
    assert (back.member_id, back.member_epoch, back.assignment) == ("a2", a_epoch, a_parts)
    assert g.members["a2"].previous_epoch >= 0  # the "left for now" marker is not its predecessor's epoch
    assert g.epoch == epoch
    assert "a" not in g.members
    assert g.static == {"i-a": "a2"}
    assert g.target["a2"] == a_parts
    assert "a" not in g.target
    assert g.members["a2"].state == MemberState.STABLE
    assert g.state == ConsumerGroupState.STABLE
    assert_exclusive(g)
    # The old member id is fenced now.
    with pytest.raises(KafkaError) as e:
        h.heartbeat("a", a_epoch, instance_id="i-a", owned=a_parts)
    assert e.value.code == ErrorCode.fenced_instance_id
    with pytest.raises(KafkaError) as e:
        h.heartbeat("x", 3, instance_id="i-unknown")
    assert e.value.code == ErrorCode.unknown_member_id
    assert stored_view(h.reload()) == stored_view(h.groups)


def test_static_member_with_a_pattern_takes_over_without_a_rebalance(store: MetadataStore, h: Harness) -> None:
    store.create_topic("orders-eu", 2, {})
    h.join("a", regex="orders-.*", instance_id="i-a")
    epoch = h.group().epoch
    h.heartbeat("a", -2, instance_id="i-a")
    back = h.join("a2", regex="orders-.*", instance_id="i-a")
    assert h.group().epoch == epoch
    assert back.member_epoch == epoch
    assert stored_view(h.reload()) == stored_view(h.groups)


def test_static_member_taken_over_by_an_identical_client_is_replayed(store: MetadataStore, h: Harness) -> None:
    """The new member's metadata is written even when the join changes none of its fields."""
    store.create_topic("t", 2, {})
    h.join("a", ("t",), instance_id="i-a", client_id="", client_host="")
    h.heartbeat("a", -2, instance_id="i-a")
    h.join("a2", ("t",), instance_id="i-a", client_id="", client_host="")
    reloaded = h.reload()
    assert reloaded.groups["g"].members["a2"].topic_names == ("t",)
    assert stored_view(reloaded) == stored_view(h.groups)


def test_a_static_member_that_does_not_come_back_is_removed_at_its_session_timeout(
    store: MetadataStore, h: Harness
) -> None:
    t, _a, b = stable_pair(store, h, a_instance="i-a")
    h.heartbeat("a", -2, instance_id="i-a")
    deadline = h.group().members["a"].session_deadline_ms
    h.now = deadline - 100
    b.heartbeat(h)  # b keeps its session
    h.now = deadline
    assert h.expire() == []
    h.now = deadline + 1
    assert h.expire() == ["g"]
    assert "a" not in h.group().members
    assert h.group().static == {}
    settle(h, [b])
    assert b.owned == {t: frozenset(range(4))}


def test_session_expiry(store: MetadataStore, h: Harness) -> None:
    t, a, b = stable_pair(store, h)
    epoch = h.group().epoch
    a_deadline = h.group().members["a"].session_deadline_ms
    assert a_deadline == h.now - 100 + 45_000  # a's last heartbeat was the one before b's
    for _ in range(4):  # b keeps heartbeating, a has gone silent
        h.now += 10_000
        b.heartbeat(h)
        assert h.expire() == []
    h.now = a_deadline
    assert h.expire() == []
    h.now = a_deadline + 1
    assert h.expire() == ["g"]
    g = h.group()
    assert set(g.members) == {"b"}
    assert g.epoch == epoch + 1
    assert h.log[-1][0] == ["cg", "g"]
    assert h.log[-1][1] is not None
    assert h.log[-1][1]["epoch"] == epoch + 1
    assert_exclusive(g)
    r = b.heartbeat(h)
    assert r.member_epoch == epoch + 1
    assert b.owned == {t: frozenset(range(4))}
    with pytest.raises(KafkaError) as e:
        h.heartbeat("a", a.epoch, owned=a.owned)
    assert e.value.code == ErrorCode.unknown_member_id
    # It may rejoin under the same id (KIP-1082 clients keep theirs).
    assert h.join("a", ("t",)).member_epoch == epoch + 2


def test_a_member_that_does_not_revoke_in_time_is_fenced(store: MetadataStore, h: Harness) -> None:
    t = store.create_topic("t", 4, {}).topic_id
    h.join("a", ("t",), rebalance_timeout_ms=5_000)
    h.now += 100
    h.join("b", ("t",))
    h.now += 100
    h.heartbeat("a", 1, owned={t: frozenset(range(4))})
    deadline = h.group().members["a"].revoke_deadline_ms
    assert deadline == h.now + 5_000
    # a keeps its session alive but never gives the partitions up.
    while h.now < deadline:
        h.now = min(h.now + 1_000, deadline)
        h.heartbeat("a", 1, owned={t: frozenset(range(4))})
        h.heartbeat("b", 2, owned={})
        assert h.expire() == []
        assert h.group().members["a"].revoke_deadline_ms == deadline  # not pushed back
    h.now = deadline + 1
    assert h.expire() == ["g"]
    g = h.group()
    assert set(g.members) == {"b"}
    assert g.epoch == 3
    got = h.heartbeat("b", 2, owned={})
    assert (got.member_epoch, got.assignment) == (3, {t: frozenset(range(4))})
    with pytest.raises(KafkaError) as e:
        h.heartbeat("a", 1, owned={t: frozenset(range(4))})
    assert e.value.code == ErrorCode.unknown_member_id
