"""The consumer group protocol (KIP-848) for one group through ConsumerGroups: members joining,
reconciliation (revocation first, then release), epochs bumped by subscription changes, lost
responses and the assignment told again to a heartbeat that reports its partitions.

Time is the `now` argument throughout: nothing sleeps.  The store is a real MetadataStore in a
temporary directory (topics are created on disk, and each creation bumps `store.version`).
"""

from __future__ import annotations

import pytest

from broker.coordinator.consumer_group import ConsumerGroupState, MemberState
from broker.metadata import MetadataStore
from broker.protocol.errors import ErrorCode, KafkaError
from tests.support.consumer_group_harness import (
    Client,
    Harness,
    assert_exclusive,
    load,
    partitions_of,
    settle,
    stable_pair,
    stored_view,
)


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_members_join_one_by_one_and_leave_without_a_partition_ever_held_twice(
    store: MetadataStore, h: Harness, assignor: str
) -> None:
    t0 = store.create_topic("t0", 6, {}).topic_id
    t1 = store.create_topic("t1", 5, {}).topic_id
    everything = {(t0, p) for p in range(6)} | {(t1, p) for p in range(5)}
    clients: list[Client] = []
    for i in range(4):
        c = Client(f"member-{i}", ("t0", "t1"))
        before = {x.member_id: partitions_of(x.owned) for x in clients}
        clients.append(c)
        c.heartbeat(h, server_assignor=assignor)
        settle(h, clients)
        g = h.group()
        assert g.epoch == g.assignment_epoch == i + 1
        assert all(m.epoch == g.assignment_epoch and m.state == MemberState.STABLE for m in g.members.values())
        assert [x.epoch for x in clients] == [g.assignment_epoch] * len(clients)
        owned = [partitions_of(x.owned) for x in clients]
        assert sum(len(o) for o in owned) == len(everything)
        assert set().union(*owned) == everything
        if assignor == "uniform":
            assert max(map(len, owned)) - min(map(len, owned)) <= 1
            for x in clients[:-1]:  # the others only gave partitions up
                assert partitions_of(x.owned) <= before[x.member_id]
        else:
            for t, n in ((t0, 6), (t1, 5)):
                sizes = [len(x.owned.get(t, frozenset())) for x in clients]
                assert max(sizes) - min(sizes) <= 1
                assert sum(sizes) == n
    while len(clients) > 1:
        gone = clients.pop(0)
        before = {x.member_id: partitions_of(x.owned) for x in clients}
        assert h.heartbeat(gone.member_id, -1).member_epoch == -1
        settle(h, clients)
        owned = [partitions_of(x.owned) for x in clients]
        assert sum(len(o) for o in owned) == len(everything)
        assert set().union(*owned) == everything
        if assignor == "uniform":
            assert max(map(len, owned)) - min(map(len, owned)) <= 1
            for x in clients:  # only the leaver's partitions moved
                assert before[x.member_id] <= partitions_of(x.owned)
    assert stored_view(h.reload()) == stored_view(h.groups)


def test_revocation_handshake(store: MetadataStore, h: Harness) -> None:
    t = store.create_topic("t", 4, {}).topic_id
    first = h.join("a", ("t",))
    assert (first.member_epoch, first.assignment) == (1, {t: frozenset({0, 1, 2, 3})})
    second = h.join("b", ("t",))
    # b is at the new epoch but gets nothing yet: a still holds what b is to get.
    assert second.member_epoch == 2
    assert second.assignment == {}
    g = h.group()
    assert g.members["b"].state == MemberState.UNRELEASED_PARTITIONS
    b_target = g.target["b"][t]
    a_target = g.target["a"][t]
    assert len(b_target) == len(a_target) == 2

    everything = {t: frozenset(range(4))}
    revoked = h.heartbeat("a", 1, owned=everything)
    assert revoked.member_epoch == 1  # unchanged while revoking
    assert revoked.assignment == {t: a_target}
    assert g.members["a"].state == MemberState.UNREVOKED_PARTITIONS
    assert g.members["a"].revoking == {t: b_target}

    # a keeps reporting a revoked partition (or reports nothing): it stays, and nothing is written.
    for owned in (everything, {t: a_target | {min(b_target)}}, None):
        written = len(h.log)
        h.now += 100
        still = h.heartbeat("a", 1, owned=owned)
        assert still.member_epoch == 1
        assert still.assignment == (None if owned is None else {t: a_target})
        assert g.members["a"].state == MemberState.UNREVOKED_PARTITIONS
        assert len(h.log) == written
        waiting = h.heartbeat("b", 2, owned={})
        assert (waiting.member_epoch, waiting.assignment) == (2, {})
        assert g.members["b"].assigned == {}
        assert_exclusive(g)

    done = h.heartbeat("a", 1, owned={t: a_target})
    assert (done.member_epoch, done.assignment) == (2, {t: a_target})
    a = g.members["a"]
    assert (a.state, a.revoking, a.revoke_deadline_ms) == (MemberState.STABLE, {}, None)
    got = h.heartbeat("b", 2, owned={})
    assert (got.member_epoch, got.assignment) == (2, {t: b_target})
    assert g.state == ConsumerGroupState.STABLE
    assert_exclusive(g)


def test_free_partitions_are_given_at_once_and_a_member_losing_nothing_just_moves_epoch(
    store: MetadataStore, h: Harness
) -> None:
    store.create_topic("x", 2, {})
    store.create_topic("y", 2, {})
    h.join("a", ("x",))
    b = h.join("b", ("y",))
    assert b.member_epoch == 2
    assert load(b.assignment or {}) == 2
    # a lost nothing when b joined: it moves to the new epoch at its next heartbeat, keeping all.
    again = h.heartbeat("a", 1, owned=h.group().members["a"].assigned)
    assert again.member_epoch == 2
    assert h.group().members["a"].state == MemberState.STABLE


def test_a_subscription_change_bumps_the_group_epoch_and_moves_partitions(store: MetadataStore, h: Harness) -> None:
    x = store.create_topic("x", 2, {}).topic_id
    y = store.create_topic("y", 2, {}).topic_id
    a, b = Client("a", ("x",)), Client("b", ("x",))
    a.heartbeat(h)
    b.heartbeat(h)
    settle(h, [a, b])
    epoch = h.group().epoch
    # The same topics, in another order or twice, are no change.
    written = len(h.log)
    h.heartbeat("b", b.epoch, topic_names=("x", "x"))
    assert (h.group().epoch, len(h.log)) == (epoch, written)
    b.topics = ("y", "x")
    b.heartbeat(h, topic_names=("y", "x"))
    assert h.group().epoch == epoch + 1
    assert h.group().members["b"].topic_names == ("x", "y")
    settle(h, [a, b])
    assert b.owned.get(y) == frozenset({0, 1})
    assert partitions_of(a.owned) | partitions_of(b.owned) == {(x, 0), (x, 1), (y, 0), (y, 1)}
    # Unsubscribing from everything gives everything up.
    b.heartbeat(h, topic_names=())
    settle(h, [a, b])
    assert (a.owned, b.owned) == ({x: frozenset({0, 1})}, {})


def test_a_lost_response_is_tolerated_only_at_the_previous_epoch_with_a_subset(
    store: MetadataStore, h: Harness
) -> None:
    t, a, _b = stable_pair(store, h)
    member = h.group().members["b"]
    assert (member.epoch, member.previous_epoch) == (2, 0)
    a_member = h.group().members["a"]
    assert (a_member.epoch, a_member.previous_epoch) == (2, 1)
    # a's response at epoch 2 was lost: it comes back at 1, with (a subset of) what it has.
    for owned in (a.owned, {}, {t: frozenset({min(a.owned[t])})}):
        back = h.heartbeat("a", 1, owned=owned, rebalance_timeout_ms=60_000, topic_names=("t",))
        assert back.member_epoch == 2
        assert back.assignment == a.owned
    with pytest.raises(KafkaError) as e:
        h.heartbeat("a", 1, owned={t: frozenset(range(4))})  # more than it has: fenced
    assert e.value.code == ErrorCode.fenced_member_epoch
    assert e.value.message == (
        "The consumer group member has a smaller member epoch (1) than the one known by the group coordinator (2). "
        "The member must abandon all its partitions and rejoin."
    )
    with pytest.raises(KafkaError) as e:
        h.heartbeat("a", 1, owned=None)  # nothing reported: not a lost response
    assert e.value.code == ErrorCode.fenced_member_epoch
    h.heartbeat("a", 2, owned=a.owned)
    with pytest.raises(KafkaError) as e:
        h.heartbeat("b", 1, owned={})  # b's previous epoch is 0, not 1
    assert e.value.code == ErrorCode.fenced_member_epoch
    with pytest.raises(KafkaError) as e:
        h.heartbeat("a", 3, owned=a.owned)
    assert e.value.code == ErrorCode.fenced_member_epoch
    assert e.value.message == (
        "The consumer group member has a greater member epoch (3) than the one known by the group coordinator (2). "
        "The member must abandon all its partitions and rejoin."
    )
    assert h.group().members["a"].epoch == 2  # a fenced request changes nothing


def test_a_heartbeat_that_reports_its_partitions_is_told_its_assignment(store: MetadataStore, h: Harness) -> None:
    """As Kafka: the assignment is in the response whenever the member reported its owned
    partitions, so a member whose response was lost learns what it missed."""
    t = store.create_topic("t", 2, {})
    h.join("a", ("t",))
    store.add_partitions("t", store.open_partitions(t, 2, 4))
    grown = h.heartbeat("a", 1)  # a gains partitions 2 and 3 at epoch 2: this response is lost
    assert (grown.member_epoch, grown.assignment) == (2, {t.topic_id: frozenset(range(4))})
    # Back at the previous epoch with what it had (a subset), not a full request.
    back = h.heartbeat("a", 1, owned={t.topic_id: frozenset({0, 1})})
    assert back.member_epoch == 2
    assert back.assignment == {t.topic_id: frozenset(range(4))}


def test_steady_heartbeats_write_nothing_and_return_no_assignment(store: MetadataStore, h: Harness) -> None:
    _, a, _b = stable_pair(store, h)
    written = len(h.log)
    for _ in range(3):
        h.now += 250
        r = h.heartbeat("a", a.epoch)
        assert (r.member_epoch, r.assignment) == (a.epoch, None)
    assert len(h.log) == written
