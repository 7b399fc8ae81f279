"""Share groups (KIP-932) without a network: share sessions (epochs, the limit), membership
(ShareGroupHeartbeat's validation, joins, fencing, the size limit), the `simple` assignor's
properties, and the ShareCoordinator over a real MetadataStore: heartbeats and assignment
epochs, fetching through it, a leave and an expired session releasing what the member
held, expired locks, and the state in `__share_group_state` replayed after a restart,
malformed records skipped and counted.

Time is a ManualClock: nothing sleeps.
"""

from __future__ import annotations

import random
import uuid
import zlib
from collections import Counter
from collections.abc import Awaitable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.clock import ManualClock
from broker.config import BrokerConfig
from broker.coordinator.assignors import Assignment
from broker.log.partition_log import PartitionLog
from broker.metadata import MetadataStore
from broker.protocol.control import ControlType
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import Record, build_batch
from broker.share.coordinator import STATE_TOPIC, GroupSettings, ShareConfig, ShareCoordinator
from broker.share.group import (
    MAX_MEMBER_ID,
    ShareGroup,
    ShareGroupState,
    ShareHeartbeat,
    join_or_beat,
    simple,
    validate,
)
from broker.share.partition import Acquired, RecordState, SharePartition
from broker.share.sessions import FINAL_EPOCH, MAX_EPOCH, ShareSessions

# --- share sessions ------------------------------------------------------------------------


CONN, OTHER = object(), object()  # two connections


def code_of(e: pytest.ExceptionInfo[KafkaError]) -> ErrorCode:
    return e.value.code


def test_a_session_opens_at_epoch_one_and_counts_up() -> None:
    s = ShareSessions(10)
    session, previous = s.open("g", "a", CONN)
    assert (session.group_id, session.member_id, session.epoch, previous) == ("g", "a", 1, None)
    for epoch in range(1, 5):
        assert s.next("g", "a", epoch, CONN) is session
        assert session.epoch == epoch + 1


def test_a_wrong_epoch_is_refused_and_changes_nothing() -> None:
    s = ShareSessions(10)
    session, _ = s.open("g", "a", CONN)
    s.next("g", "a", 1, CONN)
    for wrong in (1, 3, 0, -2, MAX_EPOCH):
        with pytest.raises(KafkaError) as e:
            s.next("g", "a", wrong, CONN)
        assert code_of(e) == ErrorCode.invalid_share_session_epoch
        assert session.epoch == 2
    assert s.next("g", "a", 2, CONN) is session


def test_no_session() -> None:
    s = ShareSessions(10)
    s.open("g", "a", CONN)
    for group, member, epoch in [("g", "b", 1), ("h", "a", 1), ("g", "b", 0)]:
        with pytest.raises(KafkaError) as e:
            s.next(group, member, epoch, CONN)
        assert code_of(e) == ErrorCode.share_session_not_found
    with pytest.raises(KafkaError) as e:  # a final request needs one too (Kafka's)
        s.next("g", "b", FINAL_EPOCH, CONN)
    assert code_of(e) == ErrorCode.share_session_not_found


def test_a_session_is_its_connections_alone() -> None:
    """Another connection naming the member finds no session, at any epoch, and cannot open
    one over it; the epoch does not move, and the owner goes on."""
    s = ShareSessions(10)
    session, _ = s.open("g", "a", CONN)
    for epoch in (1, 2, FINAL_EPOCH):
        with pytest.raises(KafkaError) as e:
            s.next("g", "a", epoch, OTHER)
        assert code_of(e) == ErrorCode.share_session_not_found
    with pytest.raises(KafkaError) as e:
        s.open("g", "a", OTHER)
    assert code_of(e) == ErrorCode.invalid_share_session_epoch
    assert s.find("g", "a", OTHER) is None
    assert s.find("g", "a", CONN) is session
    assert s.next("g", "a", 1, CONN) is session
    s.close("g", "a")  # its connection closed: another may open one
    assert s.open("g", "a", OTHER)[0].owner is OTHER


def test_the_epoch_wraps_to_one() -> None:
    s = ShareSessions(10)
    session, _ = s.open("g", "a", CONN)
    session.epoch = MAX_EPOCH
    s.next("g", "a", MAX_EPOCH, CONN)
    assert session.epoch == 1
    s.next("g", "a", 1, CONN)
    assert session.epoch == 2


def test_the_final_epoch_finds_the_session_without_moving_it_and_close_ends_it() -> None:
    s = ShareSessions(10)
    session, _ = s.open("g", "a", CONN)
    s.next("g", "a", 1, CONN)
    assert s.next("g", "a", FINAL_EPOCH, CONN) is session
    assert session.epoch == 2
    assert s.close("g", "a") is session
    assert s.close("g", "a") is None
    with pytest.raises(KafkaError) as e:
        s.next("g", "a", 2, CONN)
    assert code_of(e) == ErrorCode.share_session_not_found


def test_opening_again_replaces_the_session_and_returns_the_previous() -> None:
    s = ShareSessions(10)
    first, _ = s.open("g", "a", CONN)
    first.partitions[(uuid.UUID(int=1), 0)] = None
    s.next("g", "a", 1, CONN)
    second, previous = s.open("g", "a", CONN)
    assert previous is first
    assert second is not first
    assert (second.epoch, second.partitions) == (1, {})
    with pytest.raises(KafkaError):
        s.next("g", "a", 2, CONN)  # the old session's epoch means nothing now


def test_the_session_limit() -> None:
    s = ShareSessions(2)
    a, _ = s.open("g", "a", CONN)
    s.open("h", "a", CONN)  # another group: another session
    with pytest.raises(KafkaError) as e:
        s.open("g", "b", CONN)
    assert code_of(e) == ErrorCode.share_session_limit_reached
    assert set(s.sessions) == {("g", "a"), ("h", "a")}
    again, previous = s.open("g", "a", CONN)  # replacing one's own session takes no new slot
    assert previous is a
    assert s.sessions[("g", "a")] is again
    assert set(s.sessions) == {("g", "a"), ("h", "a")}
    s.close("h", "a")
    s.open("g", "b", CONN)
    assert set(s.sessions) == {("g", "a"), ("g", "b")}


def test_a_failed_open_keeps_the_previous_session() -> None:
    s = ShareSessions(3)
    a, _ = s.open("g", "a", CONN)
    s.next("g", "a", 1, CONN)
    s.open("g", "b", CONN)
    s.open("g", "c", CONN)
    s.max_sessions = 1  # lowered under the sessions held
    with pytest.raises(KafkaError) as e:
        s.open("g", "a", CONN)
    assert code_of(e) == ErrorCode.share_session_limit_reached
    assert s.sessions[("g", "a")] is a
    assert s.next("g", "a", 2, CONN) is a


@settings(max_examples=100, deadline=None)
@given(start=st.integers(1, MAX_EPOCH), steps=st.integers(0, 20))
def test_epochs_run_on_and_wrap(start: int, steps: int) -> None:
    s = ShareSessions(1)
    session, _ = s.open("g", "a", CONN)
    session.epoch = start
    for _ in range(steps):
        s.next("g", "a", session.epoch, CONN)
        assert 1 <= session.epoch <= MAX_EPOCH
    assert session.epoch == (start - 1 + steps) % MAX_EPOCH + 1


# --- membership ------------------------------------------------------------------------------


def hb(
    member_id: str = "a",
    epoch: int = 0,
    topics: tuple[str, ...] | None = ("t",),
    *,
    group_id: str = "g",
    client_id: str = "client",
) -> ShareHeartbeat:
    return ShareHeartbeat(group_id, member_id, epoch, None, topics, client_id, "/10.0.0.1")


@pytest.mark.parametrize(
    ("req", "message"),
    [
        (hb(""), "MemberId can't be empty."),
        (hb("m" * (MAX_MEMBER_ID + 1)), f"MemberId is longer than {MAX_MEMBER_ID} characters."),
        (hb(epoch=-2), "MemberEpoch is -2: it must be -1, 0 or positive."),
        (hb(epoch=0, topics=None), "SubscribedTopicNames must be set in first request."),
        (hb(epoch=0, topics=()), "SubscribedTopicNames must be set in first request."),
        (hb(epoch=0, topics=("t", "")), "SubscribedTopicNames contains an empty topic name."),
        (hb(epoch=3, topics=("",)), "SubscribedTopicNames contains an empty topic name."),
    ],
)
def test_validate_errors(req: ShareHeartbeat, message: str) -> None:
    with pytest.raises(KafkaError) as e:
        validate(req)
    assert (e.value.code, e.value.message) == (ErrorCode.invalid_request, message)


@pytest.mark.parametrize(
    "req",
    [hb(), hb("m" * MAX_MEMBER_ID), hb(epoch=-1, topics=None), hb(epoch=4, topics=None), hb(epoch=4, topics=())],
)
def test_validate_accepts(req: ShareHeartbeat) -> None:
    validate(req)


def test_join_and_beat() -> None:
    group = ShareGroup("g")
    empty = group.state
    member, changed = join_or_beat(group, hb(topics=("u", "t", "t")), 100, 5_000, 10)
    assert changed
    assert group.members == {"a": member}
    assert (empty, group.state) == (ShareGroupState.EMPTY, ShareGroupState.STABLE)
    assert (member.topic_names, member.session_deadline_ms, member.client_id) == (("t", "u"), 5_100, "client")
    member.epoch = 3
    same, changed = join_or_beat(group, hb(epoch=3, topics=None, client_id="other"), 200, 5_000, 10)
    assert same is member
    assert not changed
    assert (member.session_deadline_ms, member.client_id) == (5_200, "other")
    _, changed = join_or_beat(group, hb(epoch=3, topics=("u", "t")), 300, 5_000, 10)
    assert not changed  # the same set of topics
    _, changed = join_or_beat(group, hb(epoch=3, topics=("t",)), 400, 5_000, 10)
    assert changed
    assert member.topic_names == ("t",)
    assert group.subscribed() == {"t"}
    _, changed = join_or_beat(group, hb(epoch=0, topics=("t",)), 500, 5_000, 10)
    assert not changed  # a rejoin under the same id: no fencing
    assert member.epoch == 3


def test_an_unknown_member() -> None:
    group = ShareGroup("g")
    join_or_beat(group, hb("a"), 0, 5_000, 10)
    with pytest.raises(KafkaError) as e:
        join_or_beat(group, hb("b", epoch=1), 0, 5_000, 10)
    assert (e.value.code, e.value.message) == (ErrorCode.unknown_member_id, "Member b is not a member of the group.")
    assert set(group.members) == {"a"}


@pytest.mark.parametrize(
    ("epoch", "message"),
    [
        (
            6,
            "The share group member has a greater member epoch (6) than the one known by the group coordinator (4). "
            "The member must abandon all its partitions and rejoin.",
        ),
        (
            2,
            "The share group member has a smaller member epoch (2) than the one known by the group coordinator (4). "
            "The member must abandon all its partitions and rejoin.",
        ),
    ],
)
def test_a_fenced_member_epoch(epoch: int, message: str) -> None:
    group = ShareGroup("g")
    member, _ = join_or_beat(group, hb(), 0, 5_000, 10)
    member.epoch = 4
    with pytest.raises(KafkaError) as e:
        join_or_beat(group, hb(epoch=epoch, topics=("other",)), 100, 5_000, 10)
    assert (e.value.code, e.value.message) == (ErrorCode.fenced_member_epoch, message)
    assert (member.topic_names, member.session_deadline_ms) == (("t",), 5_000)  # unchanged


def test_the_group_size_limit() -> None:
    group = ShareGroup("g")
    for m in ("a", "b"):
        join_or_beat(group, hb(m), 0, 5_000, 2)
    with pytest.raises(KafkaError) as e:
        join_or_beat(group, hb("c"), 0, 5_000, 2)
    assert (e.value.code, e.value.message) == (
        ErrorCode.group_max_size_reached,
        "The share group has reached its maximum capacity of 2 members.",
    )
    assert set(group.members) == {"a", "b"}
    join_or_beat(group, hb("a"), 0, 5_000, 2)  # a member of a full group may still rejoin


# --- the simple assignor ---------------------------------------------------------------------

TOPIC_IDS = [uuid.UUID(int=i + 1) for i in range(4)]


@st.composite
def assignor_inputs(draw: st.DrawFn) -> tuple[dict[str, frozenset[uuid.UUID]], dict[uuid.UUID, int]]:
    """Up to 4 topics of up to 10 partitions, up to 8 members, each subscribed to a subset."""
    counts = draw(st.lists(st.integers(0, 10), min_size=1, max_size=4))
    topics = TOPIC_IDS[: len(counts)]
    masks = draw(st.lists(st.integers(0, (1 << len(topics)) - 1), min_size=1, max_size=8))
    members = {f"m{i}": frozenset(t for j, t in enumerate(topics) if mask >> j & 1) for i, mask in enumerate(masks)}
    return members, dict(zip(topics, counts, strict=True))


def owners(out: Mapping[str, Assignment], topic: uuid.UUID) -> Counter[int]:
    return Counter(p for a in out.values() for p in a.get(topic, frozenset()))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inputs=assignor_inputs(), seed=st.randoms(use_true_random=False))
def test_simple_assignor_properties(
    inputs: tuple[dict[str, frozenset[uuid.UUID]], dict[uuid.UUID, int]], seed: random.Random
) -> None:
    members, partitions = inputs
    out = simple(members, partitions)
    assert set(out) == set(members)
    for m, assigned in out.items():
        assert set(assigned) <= members[m], f"{m} got a topic it does not subscribe to"
        assert all(ps for ps in assigned.values())
        for topic, ps in assigned.items():
            assert ps <= set(range(partitions[topic]))
    for topic, count in partitions.items():
        subscribed = [m for m, topics in members.items() if topic in topics]
        held = owners(out, topic)
        if not subscribed or count == 0:
            assert not held
            continue
        assert set(held) == set(range(count)), "a partition of a subscribed topic is unread"
        loads = [len(out[m].get(topic, frozenset())) for m in subscribed]
        if len(subscribed) <= count:
            assert set(held.values()) == {1}, "a partition is shared though there are enough of them"
            assert max(loads) - min(loads) <= 1
        else:
            assert loads == [1] * len(subscribed), "every member gets exactly one partition of the topic"
            assert max(held.values()) - min(held.values()) <= 1
    # Deterministic: the same for the same input, whatever the order of the members.
    order = list(members)
    seed.shuffle(order)
    assert simple({m: members[m] for m in order}, dict(reversed(list(partitions.items())))) == out


def test_simple_assignor_examples() -> None:
    t, u = TOPIC_IDS[:2]
    assert simple({"a": frozenset({t}), "b": frozenset({t})}, {t: 3}) == {
        "a": {t: frozenset({0, 2})},
        "b": {t: frozenset({1})},
    }
    assert simple({"a": frozenset({t}), "b": frozenset({t}), "c": frozenset({t, u})}, {t: 2, u: 1}) == {
        "a": {t: frozenset({0})},
        "b": {t: frozenset({1})},
        "c": {t: frozenset({0}), u: frozenset({0})},
    }
    assert simple({"a": frozenset()}, {t: 3}) == {"a": {}}
    assert simple({}, {t: 3}) == {}


# --- the coordinator -------------------------------------------------------------------------

LOCK_MS = 1_000
SESSION_MS = 5_000


async def nothing(logs: Iterable[PartitionLog]) -> None:
    return None


async def durable(pending: Awaitable[None] | None) -> None:
    if pending is not None:
        await pending


def group_settings(group_id: str) -> GroupSettings:
    return GroupSettings(
        lock_duration_ms=LOCK_MS,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=1_000,
        auto_offset_reset="earliest",
    )


class Env:
    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path
        self.clock = ManualClock()
        self.store = MetadataStore(BrokerConfig(data_dir=tmp_path), self.clock, recover=False)
        self.config = ShareConfig(state_partitions=3, delivery_limit=3, max_locks=100)
        self.consumer_groups: set[str] = set()
        self.shares = self.coordinator()

    def coordinator(self) -> ShareCoordinator:
        return ShareCoordinator(
            self.store,
            self.clock,
            self.config,
            nothing,
            settings=group_settings,
            other_kind=lambda g: "consumer" if g in self.consumer_groups else None,
        )

    def resolve(self, name: str) -> tuple[uuid.UUID, int] | None:
        topic = self.store.get(name)
        return None if topic is None else (topic.topic_id, topic.partitions)

    async def beat(
        self, member_id: str, epoch: int, topics: tuple[str, ...] | None = None, group_id: str = "g"
    ) -> tuple[int, Assignment | None]:
        result, pending = self.shares.heartbeat(hb(member_id, epoch, topics, group_id=group_id), self.resolve)
        await durable(pending)
        return result.member_epoch, result.assignment

    def produce(self, topic: str, partition: int, n: int) -> None:
        plog = self.plog(topic, partition)
        now = self.clock.now_ms()
        plog.append_internal(build_batch([Record(i, now, None, b"v%d" % i) for i in range(n)]))

    def plog(self, topic: str, partition: int) -> PartitionLog:
        plog = self.store.partition_log(topic, partition)
        assert plog is not None
        return plog

    def fetch(self, member_id: str, topic: str, partition: int, max_records: int = 100) -> list[Acquired]:
        """What a ShareFetch of the member does for one partition: a session (opened on first
        use) names it, the partition starts, records are acquired."""
        if ("g", member_id) not in self.shares.sessions.sessions:
            self.shares.open_session("g", member_id, CONN)
        session = self.shares.sessions.sessions[("g", member_id)]
        topic_id = self.topic_id(topic)
        session.partitions[(topic_id, partition)] = None
        plog = self.plog(topic, partition)
        part, _ = self.shares.partition("g", topic_id, partition, plog)
        key = ("g", topic_id, partition)
        return self.shares.acquire(member_id, key, part, plog, max_records=max_records, max_bytes=1 << 20).acquired

    def topic_id(self, topic: str) -> uuid.UUID:
        found = self.resolve(topic)
        assert found is not None
        return found[0]

    def part(self, topic: str, partition: int) -> SharePartition:
        return self.shares.partitions[("g", self.topic_id(topic), partition)]


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path)
    yield e
    e.store.close(clean=True)


def states(p: SharePartition) -> dict[int, tuple[RecordState, int, str | None]]:
    return {o: (r.state, r.count, r.member) for o, r in sorted(p.records.items())}


async def test_heartbeats_join_and_move_the_assignment_epoch(env: Env) -> None:
    t = env.store.create_topic("t", 3, {}).topic_id
    assert await env.beat("a", 0, ("t",)) == (1, {t: frozenset({0, 1, 2})})
    assert await env.beat("a", 1) == (1, None)  # steady: nothing to tell
    assert await env.beat("b", 0, ("t",)) == (2, {t: frozenset({1})})
    assert await env.beat("a", 1) == (2, {t: frozenset({0, 2})})  # the next epoch, and its assignment
    assert await env.beat("a", 2) == (2, None)
    group = env.shares.groups["g"]
    assert (group.epoch, group.assignment_epoch) == (2, 2)
    env.store.create_topic("u", 1, {})
    u = env.topic_id("u")
    assert await env.beat("b", 2, ("t", "u")) == (3, {t: frozenset({1}), u: frozenset({0})})
    assert await env.beat("a", 2) == (3, {t: frozenset({0, 2})})  # told with every new epoch
    assert await env.beat("a", 3) == (3, None)
    with pytest.raises(KafkaError) as e:
        await env.beat("a", 7)
    assert e.value.code == ErrorCode.fenced_member_epoch
    with pytest.raises(KafkaError) as e:
        await env.beat("zz", 3)
    assert e.value.code == ErrorCode.unknown_member_id


async def test_a_topic_that_grows_bumps_the_epoch_under_an_unchanged_membership(env: Env) -> None:
    t = env.store.create_topic("t", 1, {}).topic_id
    assert await env.beat("a", 0, ("t",)) == (1, {t: frozenset({0})})
    topic = env.store.topics["t"]
    env.store.add_partitions("t", env.store.open_partitions(topic, 1, 2))
    assert await env.beat("a", 1) == (2, {t: frozenset({0, 1})})


async def test_a_member_that_missed_the_answer_moving_its_epoch_is_not_fenced(env: Env) -> None:
    t = env.store.create_topic("t", 2, {}).topic_id
    assert await env.beat("a", 0, ("t",)) == (1, {t: frozenset({0, 1})})
    assert await env.beat("b", 0, ("t",)) == (2, {t: frozenset({1})})
    assert await env.beat("a", 1) == (2, {t: frozenset({0})})  # this answer is lost on its way
    assert await env.beat("a", 1) == (2, {t: frozenset({0})})  # Kafka's rule: accepted, and told again
    assert await env.beat("a", 2) == (2, None)
    with pytest.raises(KafkaError) as e:
        await env.beat("a", 0 + 3)
    assert e.value.code == ErrorCode.fenced_member_epoch


async def test_an_epoch_bumped_by_a_topic_change_is_stored(env: Env) -> None:
    env.store.create_topic("t", 1, {})
    await env.beat("a", 0, ("t",))
    topic = env.store.topics["t"]
    env.store.add_partitions("t", env.store.open_partitions(topic, 1, 2))
    assert (await env.beat("a", 1))[0] == 2
    assert env.coordinator().groups["g"].epoch == 2  # replayed: the epoch is not handed out twice


async def test_heartbeat_errors_for_unknown_and_foreign_groups(env: Env) -> None:
    env.consumer_groups.add("cg")
    with pytest.raises(KafkaError) as e:
        await env.beat("a", 0, ("t",), group_id="cg")
    assert e.value.code == ErrorCode.group_id_not_found
    with pytest.raises(KafkaError) as e:
        await env.beat("a", 3, group_id="nope")
    assert e.value.code == ErrorCode.unknown_member_id
    assert await env.beat("a", -1, group_id="nope") == (-1, None)  # leaving a group that is not there
    with pytest.raises(KafkaError) as e:
        await env.beat("", 0, ("t",))
    assert e.value.code == ErrorCode.invalid_request
    assert "nope" not in env.shares.groups


async def test_fetch_acknowledge_and_leave_releases_what_the_member_held(env: Env) -> None:
    env.store.create_topic("t", 1, {})
    env.produce("t", 0, 6)
    env.plog("t", 0).append_marker(7, 0, ControlType.COMMIT, coordinator_epoch=0)  # offset 6
    env.produce("t", 0, 3)  # 7-9
    t = env.topic_id("t")
    assert await env.beat("a", 0, ("t",)) == (1, {t: frozenset({0})})
    assert await env.beat("b", 0, ("t",)) == (2, {t: frozenset({0})})  # more members than partitions: shared
    assert await env.beat("a", 1) == (2, {t: frozenset({0})})
    assert env.fetch("a", "t", 0, max_records=6) == [Acquired(0, 5, 1)]
    assert env.fetch("b", "t", 0) == [Acquired(7, 9, 1)]  # never the marker
    assert states(env.part("t", 0))[6] == (RecordState.ARCHIVED, 0, None)
    key = ("g", env.topic_id("t"), 0)
    env.shares.acknowledge("a", key, [(0, 1, [1])])
    await durable(env.shares.persist("g", [key]))
    assert env.part("t", 0).start == 2
    with pytest.raises(KafkaError) as e:
        env.shares.acknowledge("a", key, [(7, 7, [1])])
    assert e.value.code == ErrorCode.invalid_record_state
    with pytest.raises(KafkaError) as e:
        env.shares.acknowledge("a", ("g", uuid.UUID(int=99), 0), [(0, 0, [1])])
    assert e.value.code == ErrorCode.invalid_record_state
    assert await env.beat("a", -1) == (-1, None)
    assert set(env.shares.groups["g"].members) == {"b"}
    assert env.shares.groups["g"].epoch == 3
    # The leave keeps a's share session: its last acknowledgements race the leave heartbeat.
    p = env.part("t", 0)
    assert all(states(p)[o] == (RecordState.ACQUIRED, 1, "a") for o in range(2, 6))
    env.shares.acknowledge("a", key, [(2, 2, [1])])
    session = env.shares.sessions.sessions[("g", "a")]
    env.shares.close_session(session)  # its final request: what it still holds is released, uncounted
    assert all(states(p)[o] == (RecordState.AVAILABLE, 0, None) for o in range(3, 6))
    assert all(states(p)[o][2] == "b" for o in range(7, 10))
    assert ("g", "a") not in env.shares.sessions.sessions
    env.shares.close_session(session)  # twice: nothing more
    env.shares.close_session(None)
    assert env.fetch("b", "t", 0) == [Acquired(3, 5, 1)]


async def test_only_a_current_member_may_open_a_share_session(env: Env) -> None:
    """A member id the group does not have (never joined, or left) opens no session, and
    so acquires nothing: UNKNOWN_MEMBER_ID."""
    env.store.create_topic("t", 1, {})
    for _ in range(2):  # no group yet, then a group without it
        with pytest.raises(KafkaError) as e:
            env.shares.open_session("g", "ghost", CONN)
        assert code_of(e) == ErrorCode.unknown_member_id
        await env.beat("a", 0, ("t",))
    assert not env.shares.is_member("g", "ghost")
    assert env.shares.open_session("g", "a", CONN).owner is CONN
    assert await env.beat("a", -1) == (-1, None)
    assert not env.shares.is_member("g", "a")
    with pytest.raises(KafkaError) as e:
        env.shares.open_session("g", "a", CONN)
    assert code_of(e) == ErrorCode.unknown_member_id
    assert ("g", "ghost") not in env.shares.sessions.sessions


async def test_an_expired_session_releases_what_the_member_held(env: Env) -> None:
    env.store.create_topic("t", 1, {})
    env.produce("t", 0, 4)
    await env.beat("a", 0, ("t",))
    env.clock.advance(SESSION_MS - 1_000)
    await env.beat("b", 0, ("t",))
    env.fetch("a", "t", 0)
    env.clock.advance(999)
    env.shares.tick()
    assert set(env.shares.groups["g"].members) == {"a", "b"}
    env.clock.advance(1)  # a's session ran out (its lock had not)
    env.shares.tick()
    group = env.shares.groups["g"]
    assert set(group.members) == {"b"}
    assert group.epoch == 3
    assert states(env.part("t", 0)) == dict.fromkeys(range(4), (RecordState.AVAILABLE, 1, None))
    assert ("g", "a") not in env.shares.sessions.sessions
    assert await env.beat("b", 2) == (3, {env.topic_id("t"): frozenset({0})})
    with pytest.raises(KafkaError) as e:
        await env.beat("a", 1)
    assert e.value.code == ErrorCode.unknown_member_id


async def test_an_expired_lock_is_released_by_tick(env: Env) -> None:
    env.store.create_topic("t", 1, {})
    env.produce("t", 0, 2)
    await env.beat("a", 0, ("t",))
    assert env.fetch("a", "t", 0) == [Acquired(0, 1, 1)]
    env.clock.advance(LOCK_MS - 1)
    env.shares.tick()
    assert states(env.part("t", 0))[0] == (RecordState.ACQUIRED, 1, "a")
    env.clock.advance(1)
    env.shares.tick()
    assert states(env.part("t", 0)) == {0: (RecordState.AVAILABLE, 1, None), 1: (RecordState.AVAILABLE, 1, None)}
    assert env.fetch("a", "t", 0) == [Acquired(0, 1, 2)]
    reloaded = env.coordinator()  # the expiry was written
    p = reloaded.partitions[("g", env.topic_id("t"), 0)]
    assert states(p) == {0: (RecordState.AVAILABLE, 1, None), 1: (RecordState.AVAILABLE, 1, None)}


async def _some_state(env: Env) -> None:
    env.store.create_topic("t", 2, {})
    env.produce("t", 0, 8)
    env.produce("t", 1, 3)
    await env.beat("a", 0, ("t",))
    await env.beat("b", 0, ("t",))
    env.fetch("a", "t", 0, max_records=8)
    env.fetch("b", "t", 1)
    k0, k1 = ("g", env.topic_id("t"), 0), ("g", env.topic_id("t"), 1)
    env.shares.acknowledge("a", k0, [(0, 2, [1]), (3, 5, [1, 2, 3])])
    env.shares.acknowledge("b", k1, [(1, 1, [2])])
    await durable(env.shares.persist("g", [k0, k1]))


def stored(shares: ShareCoordinator) -> dict[Any, Any]:
    return {
        "partitions": {k: p.snapshot() for k, p in shares.partitions.items()},
        "groups": {g: group.epoch for g, group in shares.groups.items()},
    }


async def test_the_state_is_replayed_by_a_new_coordinator(env: Env) -> None:
    await _some_state(env)
    before = stored(env.shares)
    p0 = env.shares.partitions[("g", env.topic_id("t"), 0)]
    assert (p0.start, p0.end) == (4, 8)
    assert stored(env.coordinator()) == before
    # And after a restart of the store itself, from the files.
    env.store.close(clean=True)
    env.store = MetadataStore(BrokerConfig(data_dir=env.path), env.clock, recover=True)
    env.shares = env.coordinator()
    assert stored(env.shares) == before
    p0 = env.part("t", 0)
    assert states(p0) == {
        4: (RecordState.AVAILABLE, 1, None),
        5: (RecordState.ARCHIVED, 1, None),
        6: (RecordState.AVAILABLE, 1, None),  # acquired by a before the restart: its lock died
        7: (RecordState.AVAILABLE, 1, None),
    }
    assert env.store.skipped.counts[STATE_TOPIC] == 0
    # Members are not stored: they rejoin, and the group epoch carries on from the stored one.
    with pytest.raises(KafkaError) as e:
        await env.beat("a", 2)
    assert e.value.code == ErrorCode.unknown_member_id
    assert await env.beat("a", 0, ("t",)) == (3, {env.topic_id("t"): frozenset({0, 1})})
    assert env.fetch("a", "t", 0) == [Acquired(4, 4, 2), Acquired(6, 7, 2)]


async def test_deleted_state_is_not_replayed(env: Env) -> None:
    await _some_state(env)
    await env.beat("a", -1)
    await env.beat("b", -1)
    await env.shares.delete_start_offsets("g", [(env.topic_id("t"), 1)])
    assert set(env.coordinator().partitions) == {("g", env.topic_id("t"), 0)}
    await env.shares.delete_group("g")
    reloaded = env.coordinator()
    assert (reloaded.partitions, reloaded.groups) == ({}, {})


async def test_a_deleted_topics_state_is_forgotten_in_memory_and_on_disk(env: Env) -> None:
    """DeleteTopics drops the store's topic, then the share state of its partitions: gone at
    once, not replayed after a restart, and a topic created again under the name starts the
    group afresh.  Another topic's state stays."""
    await _some_state(env)
    env.store.create_topic("u", 1, {})
    env.produce("u", 0, 4)
    env.fetch("a", "u", 0)
    env.shares.acknowledge("a", ("g", env.topic_id("u"), 0), [(0, 1, [1])])
    await durable(env.shares.persist("g", [("g", env.topic_id("u"), 0)]))
    old_t, kept = env.topic_id("t"), ("g", env.topic_id("u"), 0)
    for plog in env.store.delete_topic("t"):
        plog.delete()
    logs = env.shares.forget_topic("t")
    assert [plog.topic for plog in logs] == [STATE_TOPIC]
    assert set(env.shares.partitions) == {kept}
    assert env.shares.start_offsets("g") == {(env.topic_id("u"), 0): 2}
    assert env.shares.forget_topic("t") == []  # nothing left to forget: nothing written
    assert set(env.coordinator().partitions) == {kept}
    env.store.close(clean=True)
    env.store = MetadataStore(BrokerConfig(data_dir=env.path), env.clock, recover=True)
    env.shares = env.coordinator()
    assert set(env.shares.partitions) == {kept}
    assert env.store.skipped.counts[STATE_TOPIC] == 0
    env.store.create_topic("t", 2, {})
    assert env.topic_id("t") != old_t
    env.produce("t", 0, 2)
    await env.beat("a", 0, ("t",))  # a restarted coordinator knows no members: they join again
    assert env.fetch("a", "t", 0) == [Acquired(0, 1, 1)]  # earliest: the new topic's first record


def test_forgetting_a_topic_without_share_state_writes_nothing(env: Env) -> None:
    env.store.create_topic("t", 1, {})
    for plog in env.store.delete_topic("t"):
        plog.delete()
    assert env.shares.forget_topic("t") == []
    assert env.store.get(STATE_TOPIC) is None


TID = uuid.UUID(int=7).bytes


def _sp(**value: Any) -> tuple[Any, Any]:
    base: dict[str, Any] = {"start": 0, "end": 2, "epoch": 0, "runs": [[0, 1, 0, 1]]}
    base.update(value)
    return ["sp", "g", TID, 0], base


MALFORMED_RECORDS: list[tuple[Any, Any]] = [
    ("sp", {}),  # a key that is not a list
    (["sp"], {}),
    ([], {}),
    ([1, "g"], {}),  # the kind is not a string
    (["sp", 7, TID, 0], _sp()[1]),  # the group is not a string
    (["sp", "g", TID], _sp()[1]),
    (["sp", "g", TID, 0, 1], _sp()[1]),
    (["sp", "g", b"short", 0], _sp()[1]),
    (["sp", "g", "not-bytes-at-all!", 0], _sp()[1]),
    (["sp", "g", TID, -1], _sp()[1]),
    (["sp", "g", TID, True], _sp()[1]),
    (["sp", "g", TID, "0"], _sp()[1]),
    (["sp", "g", TID, 0], [0, 2]),  # the value is not a map
    (["sp", "g", TID, 0], "state"),
    _sp(start="0"),
    _sp(end=None),
    _sp(epoch=1.5),
    _sp(start=5),  # start past end
    _sp(start=-1),
    _sp(end=10_000_000),  # a window no broker writes
    _sp(runs=[[0, 1, 0]]),
    _sp(runs=[[0, 2, 0, 1]]),  # past the end
    _sp(runs=[[0, 1, 3, 1]]),  # no such state
    _sp(runs=[[0, 1, 0, -4]]),
    _sp(runs="runs"),
    (["sg", "g"], {"epoch": -1}),
    (["sg", "g"], {"epoch": "4"}),
    (["sg", "g"], {"epoch": True}),
    (["sg", "g"], {}),
    (["sg", "g"], [4]),
    (["zz", "g"], {"epoch": 1}),
]


def _append(env: Env, records: list[tuple[bytes | None, bytes | None]]) -> None:
    shares = env.shares
    shares.ensure_state_topic()
    plog = env.store.partition_log(STATE_TOPIC, zlib.crc32(b"g") % shares.state_partitions)
    assert plog is not None
    now = env.clock.now_ms()
    plog.append_internal(build_batch([Record(i, now, k, v) for i, (k, v) in enumerate(records)]))


def test_malformed_records_are_skipped_and_counted(env: Env) -> None:
    good_key, good_value = _sp(start=0, end=3, epoch=2, runs=[[0, 0, 2, 1], [1, 2, 0, 2]])
    _append(env, [(msgpack.packb(good_key), msgpack.packb(good_value))])
    _append(env, [(msgpack.packb(["sg", "g"]), msgpack.packb({"epoch": 4}))])
    raw: list[tuple[bytes | None, bytes | None]] = [(msgpack.packb(k), msgpack.packb(v)) for k, v in MALFORMED_RECORDS]
    raw += [
        (b"\xc1", msgpack.packb(good_value)),  # not msgpack
        (msgpack.packb(good_key), b"\xc1"),
        (None, msgpack.packb(good_value)),  # no key
    ]
    _append(env, raw)
    other_key = ["sp", "h", uuid.UUID(int=8).bytes, 3]  # after the malformed ones: still loaded
    _append(env, [(msgpack.packb(other_key), msgpack.packb({"start": 5, "end": 5, "epoch": 0, "runs": []}))])
    shares = env.coordinator()
    assert env.store.skipped.counts[STATE_TOPIC] == len(raw)
    p = shares.partitions[("g", uuid.UUID(int=7), 0)]
    assert (p.start, p.end, p.state_epoch) == (1, 3, 2)  # as the last well-formed record says
    assert states(p) == {1: (RecordState.AVAILABLE, 2, None), 2: (RecordState.AVAILABLE, 2, None)}
    assert shares.groups["g"].epoch == 4
    assert shares.partitions[("h", uuid.UUID(int=8), 3)].start == 5
    assert set(shares.partitions) == {("g", uuid.UUID(int=7), 0), ("h", uuid.UUID(int=8), 3)}
    assert set(shares.groups) == {"g", "h"}


@pytest.mark.parametrize(
    ("key", "value"), MALFORMED_RECORDS, ids=[f"{k!s:.20}-{i}" for i, (k, _) in enumerate(MALFORMED_RECORDS)]
)
def test_one_malformed_record_is_skipped_alone(env: Env, key: Any, value: Any) -> None:
    _append(env, [(msgpack.packb(key), msgpack.packb(value))])
    _append(env, [(msgpack.packb(["sg", "g"]), msgpack.packb({"epoch": 1}))])
    shares = env.coordinator()
    assert env.store.skipped.counts[STATE_TOPIC] == 1
    assert shares.partitions == {}
    assert shares.groups["g"].epoch == 1
