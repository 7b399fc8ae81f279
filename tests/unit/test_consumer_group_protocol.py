"""The consumer group protocol (KIP-848) without a network: the server-side assignors' properties,
one group's reconciliation (revocation first, then release), ConsumerGroupHeartbeat's validation,
epochs, leaves (dynamic and static), timers (session, revocation), regular-expression
subscriptions, and the records: replayed, in order or compacted, they give back the groups.

Time is the `now` argument throughout: nothing sleeps.  The store is a real MetadataStore in a
temporary directory (topics are created on disk, and each creation bumps `store.version`).
"""

from __future__ import annotations

import copy
import random
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import pytest
import re2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.clock import ManualClock
from broker.config import BrokerConfig
from broker.coordinator.assignors import ASSIGNORS, Assignment, range_, uniform
from broker.coordinator.consumer_group import ConsumerGroup, ConsumerGroupState, MemberState
from broker.coordinator.consumer_groups import ConsumerGroupConfig, ConsumerGroups, Heartbeat, HeartbeatResult, Rec
from broker.metadata import MetadataStore
from broker.protocol.errors import ErrorCode, KafkaError
from broker.replay import Malformed

Partition = tuple[uuid.UUID, int]


def no_claim(group_id: str, now: int) -> tuple[ConsumerGroup | None, list[Rec]]:
    return None, []


# --- helpers -------------------------------------------------------------------------------


def partitions_of(assignment: Mapping[uuid.UUID, frozenset[int]]) -> set[Partition]:
    return {(t, p) for t, ps in assignment.items() for p in ps}


def load(assignment: Mapping[uuid.UUID, frozenset[int]]) -> int:
    return sum(len(ps) for ps in assignment.values())


def assert_exclusive(group: ConsumerGroup) -> None:
    """No partition is in two members' `assigned | revoking`, and `owners` says exactly who
    holds each held partition."""
    held: dict[Partition, str] = {}
    for member in group.members.values():
        for tp in partitions_of(member.assigned) | partitions_of(member.revoking):
            assert tp not in held, f"{tp} held by {held[tp]} and {member.member_id}"
            held[tp] = member.member_id
        assert not partitions_of(member.assigned) & partitions_of(member.revoking)
    assert group.owners == held


def encoded(records: list[Rec]) -> list[tuple[Any, Any]]:
    """Records as the coordinator writes and reads them (msgpack: tuples become lists)."""
    return [
        (msgpack.unpackb(msgpack.packb(k)), None if v is None else msgpack.unpackb(msgpack.packb(v)))
        for k, v in records
    ]


def compacted(rows: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """What a compacted `__consumer_offsets` keeps of encoded records: the last record of
    each key, in log order."""
    last = {msgpack.packb(k): i for i, (k, _) in enumerate(rows)}
    return [rows[i] for i in sorted(last.values())]


def stored_view(groups: ConsumerGroups) -> dict[str, Any]:
    """Everything about the groups that the records must reproduce (timers, the resolved
    subscription and metrics are rebuilt or restarted, not stored)."""
    out: dict[str, Any] = {}
    for gid, g in groups.groups.items():
        out[gid] = {
            "epoch": g.epoch,
            "assignment_epoch": g.assignment_epoch,
            "target": dict(g.target),
            "static": dict(g.static),
            "owners": dict(g.owners),
            "state": g.state,
            "members": {
                mid: (
                    m.instance_id,
                    m.rack_id,
                    m.client_id,
                    m.client_host,
                    m.topic_names,
                    m.topic_regex,
                    m.regex_topics,
                    m.server_assignor,
                    m.rebalance_timeout_ms,
                    m.classic,
                    m.state,
                    m.epoch,
                    m.previous_epoch,
                    m.assigned,
                    m.revoking,
                )
                for mid, m in g.members.items()
            },
        }
    return out


def replayed(store: MetadataStore, rows: list[tuple[Any, Any]], now: int) -> ConsumerGroups:
    fresh = ConsumerGroups(store, ConsumerGroupConfig(), no_claim)
    for key, value in rows:
        fresh.replay(key, value)
    fresh.loaded(now)
    return fresh


class Harness:
    """ConsumerGroups over a real store, with the records it wrote and a settable `now`."""

    def __init__(self, store: MetadataStore, config: ConsumerGroupConfig | None = None) -> None:
        self.store = store
        self.groups = ConsumerGroups(store, config or ConsumerGroupConfig(), no_claim)
        self.log: list[Rec] = []
        self.now = 1_000

    def heartbeat(
        self,
        member_id: str,
        epoch: int,
        *,
        group_id: str = "g",
        instance_id: str | None = None,
        rack_id: str | None = None,
        rebalance_timeout_ms: int = -1,
        topic_names: tuple[str, ...] | None = None,
        topic_regex: str | None = None,
        server_assignor: str | None = None,
        owned: Assignment | None = None,
        client_id: str = "client",
        client_host: str = "/10.0.0.1",
        generated_member_id: bool = False,
        may_describe: Callable[[str], bool] | None = None,
    ) -> HeartbeatResult:
        req = Heartbeat(
            group_id=group_id,
            member_id=member_id,
            member_epoch=epoch,
            instance_id=instance_id,
            rack_id=rack_id,
            rebalance_timeout_ms=rebalance_timeout_ms,
            topic_names=topic_names,
            topic_regex=topic_regex,
            server_assignor=server_assignor,
            owned=owned,
            client_id=client_id,
            client_host=client_host,
            generated_member_id=generated_member_id,
            may_describe=may_describe,
        )
        result, records = self.groups.heartbeat(req, self.now)
        self.log.extend(records)
        return result

    def join(
        self,
        member_id: str,
        topics: tuple[str, ...] | None = None,
        *,
        regex: str | None = None,
        rebalance_timeout_ms: int = 60_000,
        **kw: Any,
    ) -> HeartbeatResult:
        return self.heartbeat(
            member_id,
            0,
            topic_names=topics,
            topic_regex=regex,
            rebalance_timeout_ms=rebalance_timeout_ms,
            owned={},
            **kw,
        )

    def expire(self) -> list[str]:
        out = self.groups.expire(self.now)
        for _, records in out:
            self.log.extend(records)
        return [gid for gid, _ in out]

    def group(self, group_id: str = "g") -> ConsumerGroup:
        return self.groups.groups[group_id]

    def reload(self) -> ConsumerGroups:
        return replayed(self.store, encoded(self.log), self.now)


@dataclass
class Client:
    """A member as a client sees itself: its epoch and the partitions it holds."""

    member_id: str
    topics: tuple[str, ...]
    epoch: int = 0
    owned: Assignment = field(default_factory=dict)
    instance_id: str | None = None

    def heartbeat(self, h: Harness, **kw: Any) -> HeartbeatResult:
        if self.epoch == 0:
            result = h.join(self.member_id, self.topics, instance_id=self.instance_id, **kw)
        else:
            result = h.heartbeat(self.member_id, self.epoch, owned=self.owned, instance_id=self.instance_id, **kw)
        self.epoch = result.member_epoch
        if result.assignment is not None:
            self.owned = dict(result.assignment)
        return result


def assert_clients_exclusive(clients: list[Client]) -> None:
    seen: dict[Partition, str] = {}
    for c in clients:
        for tp in partitions_of(c.owned):
            assert tp not in seen, f"{tp} owned by {seen[tp]} and {c.member_id}"
            seen[tp] = c.member_id


def settle(h: Harness, clients: list[Client], *, rounds: int = 12) -> None:
    """Heartbeat the clients round-robin until the group is Stable and a whole round wrote
    nothing; checks exclusivity (the coordinator's books and the clients' own view) after
    every heartbeat."""
    for _ in range(rounds):
        written = len(h.log)
        for c in clients:
            h.now += 100
            c.heartbeat(h)
            assert_exclusive(h.group())
            assert_clients_exclusive(clients)
        if len(h.log) == written and h.group().state == ConsumerGroupState.STABLE:
            return
    raise AssertionError(f"group did not settle: {h.group().state}")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MetadataStore]:
    s = MetadataStore(BrokerConfig(data_dir=tmp_path), ManualClock(), recover=False)
    yield s
    s.close(clean=True)


@pytest.fixture
def h(store: MetadataStore) -> Harness:
    return Harness(store)


# --- assignors: properties ----------------------------------------------------------------

TOPIC_IDS = [uuid.UUID(int=i + 1) for i in range(4)]


@st.composite
def assignor_inputs(
    draw: st.DrawFn, *, homogeneous: bool = False
) -> tuple[dict[str, frozenset[uuid.UUID]], dict[uuid.UUID, int]]:
    """Up to 4 topics of up to 12 partitions, up to 6 members, each subscribed to a subset
    (a bit mask over the topics; the same non-empty one for all when `homogeneous`)."""
    counts = draw(st.lists(st.integers(0, 12), min_size=1, max_size=4))
    topics = TOPIC_IDS[: len(counts)]
    everything = (1 << len(topics)) - 1
    if homogeneous:
        masks = [draw(st.integers(1, everything))] * draw(st.integers(1, 6))
    else:
        masks = draw(st.lists(st.integers(0, everything), min_size=1, max_size=6))
    members = {f"m{i}": frozenset(t for j, t in enumerate(topics) if mask >> j & 1) for i, mask in enumerate(masks)}
    return members, dict(zip(topics, counts, strict=True))


@st.composite
def any_previous(draw: st.DrawFn, members: Mapping[str, frozenset[uuid.UUID]]) -> dict[str, Assignment]:
    """A previous target that may be inconsistent: partitions twice, gone, or of unsubscribed
    topics, members that are no longer there."""
    ids = [*members, "gone"]
    triples = draw(
        st.lists(st.tuples(st.integers(0, len(ids) - 1), st.integers(0, len(TOPIC_IDS) - 1), st.integers(0, 14)))
    )
    out: dict[str, dict[uuid.UUID, frozenset[int]]] = {}
    for m, t, p in triples:
        topic = TOPIC_IDS[t]
        parts = out.setdefault(ids[m], {})
        parts[topic] = parts.get(topic, frozenset()) | {p}
    return out


def assert_valid(
    members: Mapping[str, frozenset[uuid.UUID]], partitions: Mapping[uuid.UUID, int], out: dict[str, Assignment]
) -> None:
    """Every member has an entry; every partition of a subscribed topic is assigned exactly
    once, to a member subscribed to it; nothing else is assigned."""
    assert set(out) == set(members)
    counts = Counter(tp for a in out.values() for tp in partitions_of(a))
    expected = {(t, p) for t, n in partitions.items() if any(t in s for s in members.values()) for p in range(n)}
    assert set(counts) == expected
    assert all(c == 1 for c in counts.values())
    for m, a in out.items():
        assert set(a) <= members[m], f"{m} got a topic it does not subscribe to"
        assert all(ps for ps in a.values()), "empty partition sets are not listed"


ASSIGNOR_SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("assignor", sorted(ASSIGNORS))
@ASSIGNOR_SETTINGS
@given(data=st.data())
def test_every_partition_of_a_subscribed_topic_goes_to_exactly_one_subscriber(
    assignor: str, data: st.DataObject
) -> None:
    members, partitions = data.draw(assignor_inputs())
    previous = data.draw(any_previous(members))
    assert_valid(members, partitions, ASSIGNORS[assignor](members, partitions, previous))


@pytest.mark.parametrize("assignor", sorted(ASSIGNORS))
@ASSIGNOR_SETTINGS
@given(data=st.data())
def test_assignors_are_deterministic_whatever_the_order_of_their_input(assignor: str, data: st.DataObject) -> None:
    members, partitions = data.draw(assignor_inputs())
    previous = data.draw(any_previous(members))
    first = ASSIGNORS[assignor](members, partitions, previous)
    rng = random.Random(data.draw(st.integers(0, 1000)))

    def shuffled(d: Mapping[Any, Any]) -> dict[Any, Any]:
        items = list(d.items())
        rng.shuffle(items)
        return dict(items)

    again = ASSIGNORS[assignor](shuffled(members), shuffled(partitions), shuffled(previous))
    assert again == first


@ASSIGNOR_SETTINGS
@given(inputs=assignor_inputs(homogeneous=True), data=st.data())
def test_uniform_is_balanced_and_a_fixed_point_when_subscriptions_are_the_same(
    inputs: tuple[dict[str, frozenset[uuid.UUID]], dict[uuid.UUID, int]], data: st.DataObject
) -> None:
    members, partitions = inputs
    previous = data.draw(any_previous(members))
    out = uniform(members, partitions, previous)
    assert_valid(members, partitions, out)
    loads = [load(a) for a in out.values()]
    assert max(loads) - min(loads) <= 1
    # Sticky: recomputed with nothing changed, nothing moves.
    assert uniform(members, partitions, out) == out


@ASSIGNOR_SETTINGS
@given(inputs=assignor_inputs(homogeneous=True), data=st.data())
def test_uniform_moves_only_the_leaving_members_partitions(
    inputs: tuple[dict[str, frozenset[uuid.UUID]], dict[uuid.UUID, int]], data: st.DataObject
) -> None:
    members, partitions = inputs
    before = uniform(members, partitions, {})
    gone = data.draw(st.sampled_from(sorted(members)))
    rest = {m: s for m, s in members.items() if m != gone}
    after = uniform(rest, partitions, before)
    assert_valid(rest, partitions, after)
    for m in rest:
        assert partitions_of(before[m]) <= partitions_of(after[m]), f"{m} lost partitions when {gone} left"
    loads = [load(a) for a in after.values()] or [0]
    assert max(loads) - min(loads) <= 1


@ASSIGNOR_SETTINGS
@given(inputs=assignor_inputs(homogeneous=True))
def test_uniform_a_member_joining_takes_only_what_it_must(
    inputs: tuple[dict[str, frozenset[uuid.UUID]], dict[uuid.UUID, int]],
) -> None:
    members, partitions = inputs
    before = uniform(members, partitions, {})
    subscribed = next(iter(members.values()))
    grown = {**members, "zz-new": subscribed}
    after = uniform(grown, partitions, before)
    assert_valid(grown, partitions, after)
    total = sum(partitions[t] for t in subscribed)
    assert load(after["zz-new"]) == total // len(grown)
    # The others only give partitions up (to the newcomer), never swap among themselves.
    for m in members:
        assert partitions_of(after[m]) <= partitions_of(before[m])


@ASSIGNOR_SETTINGS
@given(inputs=assignor_inputs())
def test_uniform_leaves_no_member_able_to_take_a_partition_from_one_with_two_more(
    inputs: tuple[dict[str, frozenset[uuid.UUID]], dict[uuid.UUID, int]],
) -> None:
    members, partitions = inputs
    out = uniform(members, partitions, {})
    for giver, a in out.items():
        for t in a:
            takers = [m for m, s in members.items() if t in s and load(out[m]) + 1 < load(a)]
            assert not takers, f"{takers} could take a partition of {t} from {giver}"


def test_uniform_recomputed_with_nothing_changed_moves_nothing_with_different_subscriptions() -> None:
    t1, t2 = TOPIC_IDS[:2]
    members = {"m0": frozenset({t1}), "m1": frozenset({t1}), "m2": frozenset({t1, t2})}
    partitions = {t1: 9, t2: 3}
    first = uniform(members, partitions, {})
    assert uniform(members, partitions, first) == first


@pytest.mark.parametrize(
    ("counts", "expected"),
    [
        (2, {"a": [0], "b": [1], "c": []}),
        (3, {"a": [0], "b": [1], "c": [2]}),
        (7, {"a": [0, 1, 2], "b": [3, 4], "c": [5, 6]}),
        (8, {"a": [0, 1, 2], "b": [3, 4, 5], "c": [6, 7]}),
    ],
)
def test_range_gives_contiguous_ranges_in_member_id_order_the_first_ones_one_more(
    counts: int, expected: dict[str, list[int]]
) -> None:
    t = TOPIC_IDS[0]
    members = {"c": frozenset({t}), "a": frozenset({t}), "b": frozenset({t})}  # not in id order
    out = range_(members, {t: counts}, {})
    assert {m: sorted(out[m].get(t, frozenset())) for m in members} == expected


@ASSIGNOR_SETTINGS
@given(inputs=assignor_inputs())
def test_range_per_topic_ranges_are_contiguous_sized_by_member_order(
    inputs: tuple[dict[str, frozenset[uuid.UUID]], dict[uuid.UUID, int]],
) -> None:
    members, partitions = inputs
    out = range_(members, partitions, {})
    assert_valid(members, partitions, out)
    for t, n in partitions.items():
        subscribers = sorted(m for m, s in members.items() if t in s)
        start = 0
        for i, m in enumerate(subscribers):
            size = n // len(subscribers) + (1 if i < n % len(subscribers) else 0)
            assert sorted(out[m].get(t, frozenset())) == list(range(start, start + size))
            start += size


@ASSIGNOR_SETTINGS
@given(n_members=st.integers(1, 6), count=st.integers(0, 12), n_topics=st.integers(2, 4))
def test_range_co_partitions_topics_of_the_same_size(n_members: int, count: int, n_topics: int) -> None:
    topics = TOPIC_IDS[:n_topics]
    members = {f"m{i}": frozenset(topics) for i in range(n_members)}
    out = range_(members, dict.fromkeys(topics, count), {})
    for m, a in out.items():
        numbers = {t: a.get(t, frozenset()) for t in topics}
        assert len(set(numbers.values())) == 1, f"{m} does not get the same partitions of each topic: {numbers}"


def test_range_ignores_the_previous_target() -> None:
    t = TOPIC_IDS[0]
    members = {"a": frozenset({t}), "b": frozenset({t})}
    assert range_(members, {t: 4}, {"b": {t: frozenset({0, 1})}}) == {
        "a": {t: frozenset({0, 1})},
        "b": {t: frozenset({2, 3})},
    }


def test_uniform_concrete_join_and_leave() -> None:
    t = TOPIC_IDS[0]
    both = {"a": frozenset({t}), "b": frozenset({t})}
    first = uniform(both, {t: 4}, {})
    assert sorted(load(a) for a in first.values()) == [2, 2]
    three = uniform({**both, "c": frozenset({t})}, {t: 4}, first)
    assert load(three["c"]) == 1
    assert sum(len(partitions_of(first[m]) - partitions_of(three[m])) for m in both) == 1
    # The member with no subscription gets an entry and nothing.
    assert uniform({**both, "idle": frozenset()}, {t: 4}, first)["idle"] == {}


# --- one group, through ConsumerGroups -----------------------------------------------------


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


def stable_pair(store: MetadataStore, h: Harness, **join: Any) -> tuple[uuid.UUID, Client, Client]:
    t = store.create_topic("t", 4, {}).topic_id
    a = Client("a", ("t",), instance_id=join.get("a_instance"))
    b = Client("b", ("t",), instance_id=join.get("b_instance"))
    a.heartbeat(h)
    b.heartbeat(h)
    settle(h, [a, b])
    return t, a, b


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


# --- subscriptions by pattern ----------------------------------------------------------------


def test_a_pattern_picks_up_topics_created_later_and_grown(store: MetadataStore, h: Harness) -> None:
    eu = store.create_topic("orders-eu", 2, {}).topic_id
    store.create_topic("payments", 1, {})
    store.create_topic("__consumer_offsets", 3, {}, internal=True)
    r = h.join("a", regex="orders-.*")
    assert r.assignment == {eu: frozenset({0, 1})}
    epoch = h.group().epoch
    assert h.group().members["a"].regex_topics == {"orders-eu"}
    # Unchanged topics: nothing is matched again, nothing written.
    written = len(h.log)
    assert h.heartbeat("a", epoch).assignment is None
    assert len(h.log) == written

    version = store.version
    us = store.create_topic("orders-us", 3, {}).topic_id
    assert store.version > version
    r = h.heartbeat("a", epoch)
    assert h.group().epoch == epoch + 1
    assert r.member_epoch == epoch + 1
    assert r.assignment == {eu: frozenset({0, 1}), us: frozenset({0, 1, 2})}
    # A topic that does not match changes nothing for the group.
    store.create_topic("payments-eu", 1, {})
    assert h.heartbeat("a", epoch + 1).assignment is None
    assert h.group().epoch == epoch + 1

    topic = store.topics["orders-eu"]
    store.add_partitions("orders-eu", store.open_partitions(topic, 2, 4))
    r = h.heartbeat("a", epoch + 1)
    assert r.member_epoch == epoch + 2
    assert r.assignment == {eu: frozenset(range(4)), us: frozenset({0, 1, 2})}
    assert stored_view(h.reload()) == stored_view(h.groups)


def test_a_named_subscription_follows_a_topic_created_or_grown_later(store: MetadataStore, h: Harness) -> None:
    r = h.join("a", ("later",))
    assert (r.member_epoch, r.assignment) == (1, {})
    later = store.create_topic("later", 2, {}).topic_id
    r = h.heartbeat("a", 1)
    assert (r.member_epoch, r.assignment) == (2, {later: frozenset({0, 1})})


def test_a_deleted_topic_is_revoked_and_the_group_epoch_bumps(store: MetadataStore, h: Harness) -> None:
    x = store.create_topic("x", 2, {}).topic_id
    y = store.create_topic("y", 1, {}).topic_id
    r = h.join("a", ("x", "y"))
    assert r.assignment == {x: frozenset({0, 1}), y: frozenset({0})}
    for plog in store.delete_topic("y"):
        plog.delete()
    r = h.heartbeat("a", 1, owned={x: frozenset({0, 1}), y: frozenset({0})})
    assert h.group().epoch == 2
    assert (r.member_epoch, r.assignment) == (1, {x: frozenset({0, 1})})  # y is being revoked
    r = h.heartbeat("a", 1, owned={x: frozenset({0, 1})})
    assert (r.member_epoch, r.assignment) == (2, {x: frozenset({0, 1})})
    assert h.group().owners == {(x, 0): "a", (x, 1): "a"}


def test_patterns_match_whole_names_never_internal_topics_only_describable_ones(
    store: MetadataStore, h: Harness
) -> None:
    store.create_topic("orders", 1, {})
    store.create_topic("orders-eu", 1, {})
    store.create_topic("secret", 1, {})
    store.create_topic("__consumer_offsets", 2, {}, internal=True)
    store.create_topic("__transaction_state", 2, {}, internal=True)
    h.join("a", regex="order", group_id="g1")
    assert h.group("g1").members["a"].regex_topics == frozenset()
    h.join("a", regex="orders", group_id="g2")
    assert h.group("g2").members["a"].regex_topics == {"orders"}
    r = h.join("a", regex=".*", group_id="g3", may_describe=lambda name: name != "secret")
    assert h.group("g3").members["a"].regex_topics == {"orders", "orders-eu"}
    assert {store.by_id[t].name for t in r.assignment or {}} == {"orders", "orders-eu"}


def test_patterns_are_re2(store: MetadataStore, h: Harness) -> None:
    store.create_topic("Orders", 1, {})
    store.create_topic("orders", 1, {})
    # \p{Lu} is RE2 (Python's re has no \p): an upper-case letter.
    h.join("a", regex=r"\p{Lu}.*")
    assert h.group().members["a"].regex_topics == {"Orders"}
    # Look-arounds and back-references are not RE2.
    for pattern in ("(?=orders).*", r"(o)\1rders", "orders("):
        with pytest.raises(KafkaError) as e:
            h.join("b", regex=pattern)
        assert e.value.code == ErrorCode.invalid_regular_expression
        assert e.value.message is not None
        assert e.value.message.startswith(f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: ")
    with pytest.raises(KafkaError) as e:
        h.join("b", regex="o" * 1025)
    assert e.value.code == ErrorCode.invalid_regular_expression
    assert "b" not in h.group().members


def test_clearing_a_pattern_drops_its_topics(store: MetadataStore, h: Harness) -> None:
    t = store.create_topic("orders", 2, {}).topic_id
    h.join("a", regex="orders")
    assert h.group().members["a"].assigned == {t: frozenset({0, 1})}
    r = h.heartbeat("a", 1, topic_regex="", owned={t: frozenset({0, 1})})
    assert h.group().epoch == 2
    assert h.group().members["a"].topic_regex is None
    assert r.assignment == {}
    assert h.group().members["a"].state == MemberState.UNREVOKED_PARTITIONS
    r = h.heartbeat("a", 1, owned={})
    assert (r.member_epoch, h.group().members["a"].state) == (2, MemberState.STABLE)


# --- validation --------------------------------------------------------------------------------

JOIN: dict[str, Any] = {
    "group_id": "g",
    "member_id": "m",
    "member_epoch": 0,
    "instance_id": None,
    "rack_id": None,
    "rebalance_timeout_ms": 60_000,
    "topic_names": ("t",),
    "topic_regex": None,
    "server_assignor": None,
    "owned": {},
    "client_id": "c",
    "client_host": "h",
}
T = uuid.UUID(int=7)


@pytest.mark.parametrize(
    ("changes", "code", "message"),
    [
        ({"group_id": ""}, ErrorCode.invalid_request, "GroupId can't be empty."),
        ({"member_id": ""}, ErrorCode.invalid_request, "MemberId can't be empty."),
        ({"member_id": "", "member_epoch": 1}, ErrorCode.invalid_request, "MemberId can't be empty."),
        ({"instance_id": ""}, ErrorCode.invalid_request, "InstanceId can't be empty."),
        ({"rack_id": ""}, ErrorCode.invalid_request, "RackId can't be empty."),
        (
            {"rebalance_timeout_ms": -1},
            ErrorCode.invalid_request,
            "RebalanceTimeoutMs must be provided in first request.",
        ),
        ({"owned": None}, ErrorCode.invalid_request, "TopicPartitions must be empty when (re-)joining."),
        ({"owned": {T: frozenset({0})}}, ErrorCode.invalid_request, "TopicPartitions must be empty when (re-)joining."),
        (
            {"topic_names": None},
            ErrorCode.invalid_request,
            "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.",
        ),
        ({"member_epoch": -2}, ErrorCode.invalid_request, "InstanceId can't be null."),
        ({"member_epoch": -3}, ErrorCode.invalid_request, "MemberEpoch is invalid."),
        ({"member_epoch": 1, "rebalance_timeout_ms": -2}, ErrorCode.invalid_request, "RebalanceTimeoutMs is invalid."),
        (
            {"server_assignor": "sticky"},
            ErrorCode.unsupported_assignor,
            "ServerAssignor sticky is not supported. Supported assignors: uniform, range.",
        ),
        (
            {"topic_regex": "a[", "topic_names": None},
            ErrorCode.invalid_regular_expression,
            None,  # RE2's own description follows the prefix
        ),
        ({"member_epoch": 1}, ErrorCode.group_id_not_found, "consumer group g not found"),
        ({"member_epoch": -1}, ErrorCode.group_id_not_found, "consumer group g not found"),
    ],
)
def test_invalid_heartbeats_are_refused_with_kafkas_messages_and_change_nothing(
    h: Harness, changes: dict[str, Any], code: ErrorCode, message: str | None
) -> None:
    with pytest.raises(KafkaError) as e:
        h.groups.heartbeat(Heartbeat(**{**JOIN, **changes}), h.now)
    assert e.value.code == code
    if message is not None:
        assert e.value.message == message
    else:
        assert (e.value.message or "").startswith("SubscribedTopicRegex `a[` is not a valid regular expression: ")
    assert h.groups.groups == {}


def test_the_valid_join_of_the_table_above_is_accepted(h: Harness) -> None:
    result, records = h.groups.heartbeat(Heartbeat(**JOIN), h.now)
    assert (result.member_id, result.member_epoch, result.assignment) == ("m", 1, {})
    assert records


def test_a_v0_member_without_an_id_is_named_by_the_broker(h: Harness) -> None:
    r = h.heartbeat("", 0, topic_names=("t",), rebalance_timeout_ms=1_000, owned={}, generated_member_id=True)
    assert uuid.UUID(r.member_id)
    assert set(h.group().members) == {r.member_id}


def test_errors_against_an_existing_group(store: MetadataStore) -> None:
    h = Harness(store, ConsumerGroupConfig(max_size=2))
    store.create_topic("t", 2, {})
    h.join("a", ("t",))
    h.join("b", ("t",))
    snapshot = copy.deepcopy(h.groups.groups)
    written = len(h.log)
    cases: list[tuple[dict[str, Any], ErrorCode, str]] = [
        (
            {"member_id": "c"},
            ErrorCode.group_max_size_reached,
            "The consumer group has reached its maximum capacity of 2 members.",
        ),
        (
            {"member_id": "c", "member_epoch": 1, "owned": None},
            ErrorCode.unknown_member_id,
            "Member c is not a member of group g.",
        ),
        ({"member_id": "c", "member_epoch": -1}, ErrorCode.unknown_member_id, "Member c is not a member of group g."),
    ]
    for changes, code, message in cases:
        with pytest.raises(KafkaError) as e:
            h.groups.heartbeat(Heartbeat(**{**JOIN, **changes}), h.now)
        assert (e.value.code, e.value.message) == (code, message)
    assert h.groups.groups == snapshot
    assert len(h.log) == written


def test_the_assignor_most_members_ask_for_is_used(store: MetadataStore, h: Harness) -> None:
    t = store.create_topic("t", 4, {}).topic_id
    h.join("b", ("t",), server_assignor="range")
    h.join("a", ("t",), server_assignor="range")
    h.join("c", ("t",), server_assignor="uniform")
    assert h.groups.assignor_of(h.group()) == "range"
    g = h.group()
    assert g.target == range_({m: frozenset({t}) for m in ("a", "b", "c")}, {t: 4}, {})


def test_validate_member_for_offset_commits(store: MetadataStore, h: Harness) -> None:
    store.create_topic("t", 1, {})
    h.join("a", ("t",))
    g = h.group()
    h.groups.validate_member(g, "a", 1)
    with pytest.raises(KafkaError) as e:
        h.groups.validate_member(g, "a", 0)
    assert e.value.code == ErrorCode.stale_member_epoch
    with pytest.raises(KafkaError) as e:
        h.groups.validate_member(g, "zz", 1)
    assert e.value.code == ErrorCode.unknown_member_id


# --- records -------------------------------------------------------------------------------------


def test_delete_writes_tombstones_that_remove_the_group_at_replay(store: MetadataStore, h: Harness) -> None:
    stable_pair(store, h)
    h.heartbeat("a", -1)
    h.heartbeat("b", -1)
    assert h.group().state == ConsumerGroupState.EMPTY
    assert "g" in h.reload().groups
    h.log.extend(h.groups.delete("g"))
    assert "g" not in h.groups.groups
    assert h.reload().groups == {}
    assert replayed(store, compacted(encoded(h.log)), h.now).groups == {}


def test_replay_restores_revocations_in_progress(store: MetadataStore, h: Harness) -> None:
    t = store.create_topic("t", 4, {}).topic_id
    h.join("a", ("t",), instance_id="i-a", rack_id="r1", server_assignor="range")
    h.join("b", ("t",))
    h.heartbeat("a", 1, owned={t: frozenset(range(4))}, instance_id="i-a")
    h.heartbeat("b", 2, owned={})
    reloaded = h.reload()
    assert stored_view(reloaded) == stored_view(h.groups)
    member = reloaded.groups["g"].members["a"]
    assert member.state == MemberState.UNREVOKED_PARTITIONS
    assert member.revoke_deadline_ms == h.now + 60_000  # timers restart from the load
    assert member.session_deadline_ms == h.now + 45_000
    assert reloaded.groups["g"].members["b"].state == MemberState.UNRELEASED_PARTITIONS


def test_after_a_reload_a_heartbeat_that_changes_nothing_does_not_bump_the_group_epoch(
    store: MetadataStore, h: Harness
) -> None:
    _, a, _b = stable_pair(store, h)
    epoch = h.group().epoch
    h.groups = h.reload()
    r = h.heartbeat("a", a.epoch)
    assert (h.group().epoch, r.member_epoch) == (epoch, epoch)


def _uuid16(n: int) -> bytes:
    return uuid.UUID(int=n).bytes


def _member_value(**changes: Any) -> dict[str, Any]:
    value: dict[str, Any] = {
        "instance": None,
        "rack": None,
        "client": "other-client",
        "host": "other-host",
        "topics": ["t"],
        "regex": None,
        "regex_topics": [],
        "assignor": None,
        "rebalance_ms": 1,
        "classic": None,
    }
    return {**value, **changes}


def _current_value(**changes: Any) -> dict[str, Any]:
    value: dict[str, Any] = {"epoch": 9, "previous": 8, "state": "stable", "assigned": {}, "revoking": {}}
    return {**value, **changes}


MALFORMED: list[tuple[list[Any], dict[str, Any]]] = [
    (["cg", "g"], {"epoch": "1"}),
    (["cg", "g"], {"epoch": True}),
    (["cg", "g"], {"epoch": 1 << 40}),
    (["cg", "g"], {"epoch": 1, "subscribed": [["t", b"short", 1]]}),
    (["cg", "g"], {"epoch": 1, "subscribed": {"t": 1}}),
    (["cg", "g", "extra"], {"epoch": 1}),
    (["cg", "new"], {"epoch": None}),
    (["cgt", "new"], {}),
    (["cgtm", "g", 5], {"partitions": {}}),
    (["cgtm", "g"], {"partitions": {}}),
    (["cgtm", "new", "m"], {"partitions": [1]}),
    (["cgtm", "g", "a"], {"partitions": {b"short": [0]}}),
    (["cgtm", "g", "a"], {"partitions": {_uuid16(1): [-1]}}),
    (["cgtm", "g", "a"], {"partitions": {_uuid16(1): 3}}),
    (["cgm", "g", "a"], _member_value(topics="t")),
    (["cgm", "g", "a"], _member_value(client=None)),
    (["cgm", "g", "a"], _member_value(rack=3)),
    (["cgm", "g", "a"], _member_value(rebalance_ms=1 << 40)),
    (["cgm", "g", "a"], _member_value(regex_topics="orders")),
    (["cgm", "g", "a"], _member_value(regex_topics=None)),
    (["cgm", "g", "a"], _member_value(classic={"protocols": [], "session_ms": 1})),
    (["cgm", "g", "a"], _member_value(classic={"protocols": [["range", "not bytes"]], "session_ms": 1})),
    (["cgm", "g", "a"], _member_value(classic=[1])),
    (["cgm", "g", "zz"], _member_value(classic={"protocols": [["range", b""]], "session_ms": "1"})),
    (["cgm", "new", "zz"], _member_value(regex_topics=[1])),
    (["cgc", "g", "a"], _current_value(state="bogus")),
    (["cgc", "g", "a"], _current_value(state=["stable"])),
    (["cgc", "g", "a"], _current_value(state={"s": 1})),
    (["cgc", "g", "a"], _current_value(epoch=None)),
    (["cgc", "g", "a"], _current_value(previous=False)),
    (["cgc", "g", "a"], _current_value(revoking=None)),
    (["cgc", "g", "a"], _current_value(assigned={_uuid16(1): [0, "1"]})),
    (["cgc", "g", "zz"], _current_value(state="bogus")),
    (["cgc", "new", "zz"], _current_value(assigned=None)),
]


@pytest.mark.parametrize(("key", "value"), MALFORMED, ids=[f"{k}-{i}" for i, (k, _) in enumerate(MALFORMED)])
def test_a_malformed_record_raises_malformed_and_changes_nothing(
    store: MetadataStore, h: Harness, key: list[Any], value: dict[str, Any]
) -> None:
    t = store.create_topic("t", 2, {}).topic_id
    h.join("a", ("t",), instance_id="i-a")
    groups = h.reload()
    assert groups.groups["g"].members["a"].assigned == {t: frozenset({0, 1})}
    before = copy.deepcopy(groups.groups)
    with pytest.raises(Malformed):
        groups.replay(*encoded([(key, value)])[0])
    assert groups.groups == before


def test_a_record_of_the_well_formed_kind_is_accepted(store: MetadataStore, h: Harness) -> None:
    """The counterpart of the malformed cases: their well-formed versions replay."""
    store.create_topic("t", 2, {})
    h.join("a", ("t",))
    groups = h.reload()
    groups.replay(["cgm", "g", "a"], _member_value(classic={"protocols": [["range", b""]], "session_ms": 5}))
    groups.replay(["cgc", "g", "a"], _current_value(assigned={_uuid16(1): [0, 1]}))
    groups.replay(["cgtm", "g", "zz"], {"partitions": {_uuid16(1): [3]}})
    member = groups.groups["g"].members["a"]
    assert (member.client_id, member.epoch, member.assigned) == (
        "other-client",
        9,
        {uuid.UUID(int=1): frozenset({0, 1})},
    )
    assert member.classic is not None
    assert member.classic.session_timeout_ms == 5
    assert groups.groups["g"].target["zz"] == {uuid.UUID(int=1): frozenset({3})}


# --- replay of arbitrary histories (stateful) --------------------------------------------------

SUBSCRIPTIONS: list[tuple[tuple[str, ...] | None, str | None]] = [
    (("a",), None),
    (("b",), None),
    (("a", "b"), None),
    (None, "r.*"),
    (("b",), "r.*"),
]


@dataclass
class SimClient:
    member_id: str
    topics: tuple[str, ...] | None
    regex: str | None
    instance_id: str | None
    assignor: str | None
    rebalance_timeout_ms: int
    epoch: int = 0
    owned: Assignment = field(default_factory=dict)
    pending: Assignment | None = None  # an assignment it has been told but not applied yet
    full_next: bool = True  # after a join or a lost response, the client sends everything
    slow: bool = False  # applies what it is told at every other heartbeat only (a long callback)
    beats: int = 0


class GroupHistory(RuleBasedStateMachine):
    """Up to four simulated clients (static or not, by name or by pattern, prompt or slow to
    apply what they are told) join, heartbeat in bursts (full requests or not, reporting what
    they hold or not, losing responses), change subscriptions, leave, leave for now and come
    back under a new id, go silent past their session or their revocation timeout; topics
    appear and grow; the group is deleted when empty.  After every heartbeat no partition is
    held twice, by the coordinator's books or by the clients' own view; after every step the
    records written so far, replayed in order or compacted, give back the groups; and when
    everyone heartbeats promptly the group settles with every subscribed partition held once."""

    SESSION_MS = 10_000

    def __init__(self) -> None:
        super().__init__()
        self._dir = tempfile.TemporaryDirectory()
        self.store = MetadataStore(BrokerConfig(data_dir=Path(self._dir.name)), ManualClock(), recover=False)
        self.store.create_topic("a", 3, {})
        self.store.create_topic("b", 2, {})
        self.h = Harness(self.store, ConsumerGroupConfig(session_timeout_ms=self.SESSION_MS))
        self.clients: dict[str, SimClient] = {}
        self.away: dict[str, SimClient] = {}  # static members that left for now, by instance id
        self.serial = 0
        self.patterned = 0
        self.rows: list[tuple[Any, Any]] = []  # the records written so far, encoded

    def teardown(self) -> None:
        self.store.close(clean=True)
        self._dir.cleanup()

    def _new_id(self) -> str:
        self.serial += 1
        return f"m{self.serial}"

    def _send(
        self, c: SimClient, *, full: bool, report: bool, apply_now: bool, lose: bool, prompt: bool = False
    ) -> None:
        c.beats += 1
        apply_now = apply_now and (prompt or not c.slow or c.beats % 2 == 0)
        if c.pending is not None and apply_now:
            c.owned, c.pending = c.pending, None
        full = full or c.full_next or c.epoch == 0
        try:
            result = self.h.heartbeat(
                c.member_id,
                c.epoch,
                instance_id=c.instance_id,
                rebalance_timeout_ms=c.rebalance_timeout_ms if full else -1,
                topic_names=(c.topics or ()) if full else None,
                topic_regex=(c.regex or "") if full else None,
                server_assignor=c.assignor if full else None,
                owned={} if c.epoch == 0 else (c.owned if report or full else None),
            )
        except KafkaError as e:
            if e.code in (ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id, ErrorCode.group_id_not_found):
                c.epoch, c.owned, c.pending, c.full_next = 0, {}, None, True  # abandon all, rejoin
            elif e.code in (ErrorCode.fenced_instance_id, ErrorCode.unreleased_instance_id):
                del self.clients[c.member_id]  # a zombie (fatal) or a duplicate instance: it gives up
            else:
                raise
            return
        if lose:
            c.full_next = True
            return
        c.full_next = False
        c.epoch = result.member_epoch
        if result.assignment is not None:
            if apply_now:
                c.owned, c.pending = dict(result.assignment), None
            else:
                c.pending = dict(result.assignment)

    @precondition(lambda self: len(self.clients) + len(self.away) < 4)
    @rule(
        subscription=st.sampled_from(SUBSCRIPTIONS),
        static=st.booleans(),
        assignor=st.sampled_from([None, "uniform", "range"]),
        rebalance_timeout_ms=st.sampled_from([3_000, 60_000]),
        slow=st.booleans(),
    )
    def join(
        self,
        subscription: tuple[tuple[str, ...] | None, str | None],
        static: bool,
        assignor: str | None,
        rebalance_timeout_ms: int,
        slow: bool,
    ) -> None:
        member_id = self._new_id()
        topics, regex = subscription
        c = SimClient(member_id, topics, regex, f"i-{member_id}" if static else None, assignor, rebalance_timeout_ms)
        c.slow = slow
        self.clients[member_id] = c
        self.h.now += 10
        self._send(c, full=True, report=True, apply_now=True, lose=False)

    @precondition(lambda self: bool(self.clients))
    @rule(
        beats=st.lists(
            st.tuples(
                st.integers(0, 3), st.booleans(), st.booleans(), st.booleans(), st.sampled_from([False, False, True])
            ),
            min_size=1,
            max_size=8,
        )
    )
    def heartbeats(self, beats: list[tuple[int, bool, bool, bool, bool]]) -> None:
        """A burst of heartbeats: (which client, a full request, reporting what it holds,
        applying what it is told at once, losing the response)."""
        for which, full, report, apply_now, lose in beats:
            if not self.clients:
                return
            c = self.clients[sorted(self.clients)[which % len(self.clients)]]
            self.h.now += 100
            self._send(c, full=full, report=report, apply_now=apply_now, lose=lose)
            self.no_partition_is_held_twice()

    @precondition(lambda self: bool(self.clients))
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        c = self.clients.pop(data.draw(st.sampled_from(sorted(self.clients))))
        if c.epoch == 0:
            return  # never got in (or was fenced): nothing to leave
        self._leave(c, -1)

    def _leave(self, c: SimClient, epoch: int) -> HeartbeatResult | None:
        """Leave for good (-1) or for now (-2); None if the member was gone already."""
        self.h.now += 10
        try:
            return self.h.heartbeat(c.member_id, epoch, instance_id=c.instance_id)
        except KafkaError as e:
            if e.code not in (ErrorCode.unknown_member_id, ErrorCode.group_id_not_found, ErrorCode.fenced_instance_id):
                raise
            return None

    @precondition(lambda self: any(c.instance_id and c.epoch > 0 for c in self.clients.values()))
    @rule(data=st.data())
    def leave_for_now(self, data: st.DataObject) -> None:
        c = self.clients[
            data.draw(st.sampled_from(sorted(m for m, c in self.clients.items() if c.instance_id and c.epoch > 0)))
        ]
        del self.clients[c.member_id]
        r = self._leave(c, -2)
        if r is not None:
            assert r.member_epoch == -2
            assert c.instance_id is not None
            self.away[c.instance_id] = c

    @precondition(lambda self: bool(self.away))
    @rule(data=st.data())
    def come_back(self, data: st.DataObject) -> None:
        old = self.away.pop(data.draw(st.sampled_from(sorted(self.away))))
        c = SimClient(self._new_id(), old.topics, old.regex, old.instance_id, old.assignor, old.rebalance_timeout_ms)
        self.clients[c.member_id] = c
        g = self.h.groups.groups.get("g")
        before = g.members.get(old.member_id) if g is not None else None
        # Nothing else to pick up (no topic appeared or grew since the group or the member last
        # looked): the newcomer takes its predecessor's place without a rebalance.
        quiet = (
            g is not None
            and before is not None
            and g.metadata_version == self.store.version
            and (before.topic_regex is None or before.regex_version == self.store.version)
        )
        epoch = g.epoch if g is not None else None
        self.h.now += 10
        self._send(c, full=True, report=True, apply_now=True, lose=False)
        if quiet:
            g = self.h.group()
            assert g.epoch == epoch, "a static member coming back must not bump the group epoch"
            assert old.member_id not in g.members
            assert old.instance_id is not None
            assert g.static[old.instance_id] == c.member_id

    @precondition(lambda self: bool(self.clients))
    @rule(data=st.data(), subscription=st.sampled_from(SUBSCRIPTIONS))
    def resubscribe(self, data: st.DataObject, subscription: tuple[tuple[str, ...] | None, str | None]) -> None:
        c = self.clients[data.draw(st.sampled_from(sorted(self.clients)))]
        c.topics, c.regex = subscription
        self.h.now += 100
        self._send(c, full=True, report=True, apply_now=True, lose=False)

    @precondition(lambda self: bool(self.clients))
    @rule()
    def everyone_settles(self) -> None:
        """The clients heartbeat promptly, the others' sessions run out: the group converges,
        every subscribed partition with exactly one client, every client at the target epoch."""
        self.h.now += 100
        for c in list(self.clients.values()):
            self._send(c, full=False, report=True, apply_now=True, lose=False, prompt=True)
        self.h.now += self.SESSION_MS  # exactly the live clients' session: only the others expire
        self.h.expire()
        for _ in range(12):
            written = len(self.h.log)
            for c in list(self.clients.values()):
                self.h.now += 1
                self._send(c, full=False, report=True, apply_now=True, lose=False, prompt=True)
            g = self.h.groups.groups.get("g")
            if g is not None and len(self.h.log) == written and g.state == ConsumerGroupState.STABLE:
                break
        else:
            raise AssertionError("the group did not settle")
        if not self.clients:
            return
        assert set(g.members) == set(self.clients)
        assert {c.epoch for c in self.clients.values()} == {g.assignment_epoch}
        expected: set[Partition] = set()
        for c in self.clients.values():
            for name, topic in self.store.topics.items():
                if name in (c.topics or ()) or (c.regex and re2.fullmatch(c.regex, name)):
                    expected |= {(topic.topic_id, p) for p in range(topic.partitions)}
        owned = Counter(tp for c in self.clients.values() for tp in partitions_of(c.owned))
        assert set(owned) == expected
        assert set(owned.values()) <= {1}

    @rule(ms=st.integers(0, 12_000))
    def time_passes(self, ms: int) -> None:
        self.h.now += ms
        self.h.expire()

    @precondition(lambda self: self.patterned < 2)
    @rule(partitions=st.integers(1, 3))
    def a_matching_topic_appears(self, partitions: int) -> None:
        self.patterned += 1
        self.store.create_topic(f"r{self.patterned}", partitions, {})

    @precondition(lambda self: self.store.topics["a"].partitions < 5)
    @rule()
    def a_topic_grows(self) -> None:
        topic = self.store.topics["a"]
        self.store.add_partitions("a", self.store.open_partitions(topic, topic.partitions, topic.partitions + 1))

    @precondition(lambda self: "g" in self.h.groups.groups and not self.h.group().members)
    @rule()
    def delete_empty_group(self) -> None:
        self.h.log.extend(self.h.groups.delete("g"))

    @invariant()
    def no_partition_is_held_twice(self) -> None:
        g = self.h.groups.groups.get("g")
        if g is None:
            return
        assert_exclusive(g)
        assert set(g.target) <= set(g.members)
        assert g.assignment_epoch <= g.epoch
        live = [c for c in self.clients.values() if c.member_id in g.members]
        seen: dict[Partition, str] = {}
        for c in live:
            held = partitions_of(c.owned)
            # What a client holds the coordinator counts as its (assigned or being revoked).
            m = g.members[c.member_id]
            assert held <= partitions_of(m.assigned) | partitions_of(m.revoking), c.member_id
            for tp in held:
                assert tp not in seen, f"{tp} held by {seen[tp]} and {c.member_id}"
                seen[tp] = c.member_id

    @invariant()
    def the_records_give_the_groups_back(self) -> None:
        self.rows.extend(encoded(self.h.log[len(self.rows) :]))
        expected = stored_view(self.h.groups)
        assert stored_view(replayed(self.store, self.rows, self.h.now)) == expected
        assert stored_view(replayed(self.store, compacted(self.rows), self.h.now)) == expected


TestGroupHistory = GroupHistory.TestCase
TestGroupHistory.settings = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
