"""The group coordinator driven directly, over a real MetadataStore and log, with a
ManualClock: member ids, generations, states, the initial delay, session and rebalance
timeouts, static membership, committed offsets (validation, expiry, reload from the log,
deletion) and compaction of `__consumer_offsets`.

Time only moves when a test advances the clock and calls `tick()`; nothing here sleeps.
`settle()` just lets the event loop run the join tasks up to where they wait.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Coroutine, Iterable
from pathlib import Path
from typing import Any, TypeVar

import msgpack
import pytest

from broker.clock import ManualClock
from broker.config import BrokerConfig
from broker.coordinator.consumer_protocol import encode_assignment
from broker.coordinator.coordinator import OFFSETS_TOPIC, CoordinatorConfig, GroupCoordinator, JoinRequest
from broker.coordinator.group import Group, GroupState, JoinResult
from broker.log import cleaner
from broker.log.flusher import Flusher
from broker.log.partition_log import PartitionLog
from broker.metadata import MetadataStore
from broker.protocol.batch import split_batches
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import Record, decode_records

T = TypeVar("T")

INITIAL_DELAY_MS = 100
SESSION_MS = 10_000
REBALANCE_MS = 30_000
RETENTION_MS = 60_000
CLEANUP_INTERVAL_MS = 1_000
CONFIG = CoordinatorConfig(
    offsets_partitions=4,
    initial_rebalance_delay_ms=INITIAL_DELAY_MS,
    offsets_retention_ms=RETENTION_MS,
    cleanup_interval_ms=CLEANUP_INTERVAL_MS,
)


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0, as clients send it in JoinGroup."""
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return out + struct.pack(">i", -1)


class Harness:
    """A coordinator over a real store in `tmp_path`, fsyncing through a real Flusher."""

    def __init__(self, data_dir: Path) -> None:
        self.clock = ManualClock()
        self.broker_config = BrokerConfig(data_dir=data_dir)
        self.flusher = Flusher()
        self.flusher.start()
        self.store, self.coordinator = self._open()

    def _open(self, config: CoordinatorConfig = CONFIG) -> tuple[MetadataStore, GroupCoordinator]:
        store = MetadataStore(self.broker_config, self.clock, recover=False)
        return store, GroupCoordinator(store, self.clock, config, self.flusher.sync)

    def reopen(self, config: CoordinatorConfig = CONFIG) -> GroupCoordinator:
        """Close the store and load a new coordinator, configured by `config`, from what is on disk."""
        self.store.close(clean=True)
        self.store, self.coordinator = self._open(config)
        return self.coordinator

    def group(self, group_id: str) -> Group:
        return self.coordinator.groups[group_id]

    def offsets_log(self, group_id: str) -> PartitionLog:
        plog = self.store.partition_log(OFFSETS_TOPIC, self.coordinator.partition_for(group_id))
        assert plog is not None
        return plog

    def advance(self, ms: int) -> None:
        self.clock.advance(ms)
        self.coordinator.tick()

    async def close(self) -> None:
        await self.flusher.stop()
        self.store.close(clean=True)


@pytest.fixture
async def h(tmp_path: Path) -> AsyncIterator[Harness]:
    harness = Harness(tmp_path)
    yield harness
    await harness.close()


async def settle() -> None:
    """Let every runnable task reach its next wait (no time passes)."""
    for _ in range(5):
        await asyncio.sleep(0)


def spawn(coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    return asyncio.get_running_loop().create_task(coro)


async def done(task: asyncio.Task[T]) -> T:
    return await asyncio.wait_for(task, 10)


def join(
    coordinator: GroupCoordinator,
    group_id: str,
    member_id: str = "",
    *,
    instance: str | None = None,
    topics: Iterable[str] = ("t",),
    protocols: list[tuple[str, bytes]] | None = None,
    protocol_type: str = "consumer",
    session_ms: int = SESSION_MS,
    rebalance_ms: int = REBALANCE_MS,
    v4: bool = True,
) -> Coroutine[Any, Any, JoinResult]:
    return coordinator.join(
        JoinRequest(
            group_id=group_id,
            member_id=member_id,
            group_instance_id=instance,
            client_id="client",
            client_host="/127.0.0.1",
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=rebalance_ms,
            protocol_type=protocol_type,
            protocols=protocols if protocols is not None else [("range", subscription(*topics))],
            require_known_member_id=v4,
        )
    )


def sync(
    coordinator: GroupCoordinator,
    group_id: str,
    result: JoinResult,
    assignments: dict[str, bytes] | None = None,
    *,
    instance: str | None = None,
    generation: int | None = None,
) -> Coroutine[Any, Any, tuple[str | None, str | None, bytes]]:
    return coordinator.sync_group(
        group_id=group_id,
        generation=result.generation if generation is None else generation,
        member_id=result.member_id,
        group_instance_id=instance,
        protocol_type="consumer",
        protocol_name=result.protocol_name,
        assignments=assignments or {},
    )


async def new_member_id(h: Harness, group_id: str) -> str:
    """KIP-394: a v4+ JoinGroup without a member id gets one back with MEMBER_ID_REQUIRED."""
    result = await join(h.coordinator, group_id)
    assert result.error == ErrorCode.member_id_required
    assert result.member_id
    return result.member_id


async def form_group(
    h: Harness, group_id: str, count: int = 2, *, instances: tuple[str, ...] = (), **kwargs: Any
) -> list[tuple[JoinResult, bytes]]:
    """Members join (static ones with their instance ids), the initial delay passes, the
    leader assigns one distinct partition list per member, everybody syncs.  Returns
    (join result, assignment) per member, in join order; the group is Stable."""
    tasks = []
    if instances:
        for instance in instances:
            tasks.append(spawn(join(h.coordinator, group_id, instance=instance, **kwargs)))
            await settle()
    else:
        for _ in range(count):
            member_id = await new_member_id(h, group_id)
            tasks.append(spawn(join(h.coordinator, group_id, member_id, **kwargs)))
            await settle()
    h.advance(INITIAL_DELAY_MS)
    results = [await done(t) for t in tasks]
    leader = next(r for r in results if r.member_id == r.leader)
    assignments = {r.member_id: encode_assignment({"t": [i]}) for i, r in enumerate(results)}
    syncs = []
    for r, instance in zip(results, instances or [None] * len(results), strict=True):
        if r is not leader:
            syncs.append(spawn(sync(h.coordinator, group_id, r, instance=instance)))
    await settle()
    leader_instance = instances[results.index(leader)] if instances else None
    await done(spawn(sync(h.coordinator, group_id, leader, assignments, instance=leader_instance)))
    for task in syncs:
        await done(task)
    assert h.group(group_id).state == GroupState.STABLE
    return [(r, assignments[r.member_id]) for r in results]


def error_of(call: Any) -> ErrorCode:
    with pytest.raises(KafkaError) as info:
        call()
    return info.value.code


async def async_error_of(coro: Coroutine[Any, Any, Any]) -> ErrorCode:
    with pytest.raises(KafkaError) as info:
        await done(spawn(coro))
    return info.value.code


def log_records(plog: PartitionLog) -> list[Record]:
    out: list[Record] = []
    offset = plog.log_start_offset
    while offset < plog.next_offset:
        data = plog.read(offset, 1 << 20)
        if not data:
            break
        for raw in split_batches(data):
            header, records = decode_records(raw)
            out.extend(records)
            offset = header.last_offset + 1
    return out


# --- membership --------------------------------------------------------------------------


async def test_v4_join_hands_out_a_member_id_first_then_accepts_only_that_id(h: Harness) -> None:
    member_id = await new_member_id(h, "g")
    assert member_id in h.group("g").pending
    assert h.group("g").state == GroupState.EMPTY  # nobody is a member yet

    assert await async_error_of(join(h.coordinator, "g", "made-up-id")) == ErrorCode.unknown_member_id

    task = spawn(join(h.coordinator, "g", member_id))
    await settle()
    h.advance(INITIAL_DELAY_MS)
    result = await done(task)
    assert result.error == ErrorCode.none
    assert (result.member_id, result.leader, result.generation) == (member_id, member_id, 1)
    assert result.protocol_type == "consumer"
    assert result.protocol_name == "range"
    assert member_id not in h.group("g").pending


async def test_join_with_a_member_id_for_a_group_that_does_not_exist_creates_nothing(h: Harness) -> None:
    assert await async_error_of(join(h.coordinator, "ghost", "some-member")) == ErrorCode.unknown_member_id
    assert "ghost" not in h.coordinator.groups


async def test_pre_v4_join_becomes_a_member_at_once(h: Harness) -> None:
    task = spawn(join(h.coordinator, "g", v4=False))
    await settle()
    h.advance(INITIAL_DELAY_MS)
    result = await done(task)
    assert result.error == ErrorCode.none
    assert result.member_id
    assert result.generation == 1


async def test_states_leader_metadata_and_assignment_flow_through_a_first_rebalance(h: Harness) -> None:
    c = h.coordinator
    first = await new_member_id(h, "g")
    second = await new_member_id(h, "g")
    t1 = spawn(join(c, "g", first, topics=("t", "u")))
    await settle()
    assert h.group("g").state == GroupState.PREPARING_REBALANCE
    t2 = spawn(join(c, "g", second, topics=("t",)))
    await settle()
    h.advance(INITIAL_DELAY_MS)
    r1, r2 = await done(t1), await done(t2)

    group = h.group("g")
    assert group.state == GroupState.COMPLETING_REBALANCE
    assert r1.generation == r2.generation == group.generation == 1
    assert r1.leader == r2.leader == first
    # Only the leader learns every member's subscription.
    assert sorted((m, meta) for m, _, meta in r1.members) == sorted(
        [(first, subscription("t", "u")), (second, subscription("t"))]
    )
    assert r2.members == []

    follower_sync = spawn(sync(c, "g", r2))
    await settle()
    assert not follower_sync.done()  # waits for the leader's assignment
    assignments = {first: encode_assignment({"t": [0], "u": [0]}), second: encode_assignment({"t": [1]})}
    _, _, leader_assignment = await done(spawn(sync(c, "g", r1, assignments)))
    protocol_type, protocol_name, follower_assignment = await done(follower_sync)
    assert (leader_assignment, follower_assignment) == (assignments[first], assignments[second])
    assert (protocol_type, protocol_name) == ("consumer", "range")
    assert group.state == GroupState.STABLE
    c.heartbeat("g", 1, first, None)
    c.heartbeat("g", 1, second, None)

    # A late SyncGroup in a Stable group gets the stored assignment back.
    assert (await done(spawn(sync(c, "g", r2))))[2] == assignments[second]


async def test_initial_rebalance_delay_waits_for_more_members_and_each_arrival_extends_it(h: Harness) -> None:
    c = h.coordinator
    a = await new_member_id(h, "g")
    ta = spawn(join(c, "g", a))
    await settle()
    h.advance(INITIAL_DELAY_MS - 40)
    b = await new_member_id(h, "g")
    tb = spawn(join(c, "g", b))
    await settle()
    h.advance(40)  # the first member's delay is over, but b's arrival moved the end
    await settle()
    assert not ta.done()
    assert not tb.done()
    h.advance(INITIAL_DELAY_MS - 40 - 1)
    await settle()
    assert not ta.done()
    h.advance(1)
    ra, rb = await done(ta), await done(tb)
    assert ra.generation == rb.generation == 1
    assert {m for m, _, _ in (ra.members or rb.members)} == {a, b}
    assert h.group("g").rebalances == 1


async def test_session_timeout_expires_a_silent_member_and_the_rest_rebalance(h: Harness) -> None:
    c = h.coordinator
    (r1, _), (r2, _) = await form_group(h, "g")
    rebalances = h.group("g").rebalances
    h.advance(SESSION_MS // 2)
    c.heartbeat("g", 1, r2.member_id, None)  # only the second member heartbeats
    h.advance(SESSION_MS // 2)
    assert r1.member_id in h.group("g").members  # exactly the timeout: not yet expired
    h.advance(2)
    group = h.group("g")
    assert r1.member_id not in group.members
    assert group.state == GroupState.PREPARING_REBALANCE
    assert group.rebalances == rebalances + 1
    assert error_of(lambda: c.heartbeat("g", 1, r1.member_id, None)) == ErrorCode.unknown_member_id
    assert error_of(lambda: c.heartbeat("g", 1, r2.member_id, None)) == ErrorCode.rebalance_in_progress

    rejoined = await done(spawn(join(c, "g", r2.member_id)))
    assert rejoined.generation == 2
    assert rejoined.leader == r2.member_id
    assert [m for m, _, _ in rejoined.members] == [r2.member_id]


async def test_rebalance_timeout_drops_members_that_do_not_rejoin(h: Harness) -> None:
    c = h.coordinator
    (r1, _), (r2, _) = await form_group(h, "g", session_ms=REBALANCE_MS * 2, rebalance_ms=REBALANCE_MS)
    newcomer = await new_member_id(h, "g")
    t3 = spawn(join(c, "g", newcomer, session_ms=REBALANCE_MS * 2, rebalance_ms=REBALANCE_MS))
    await settle()
    assert h.group("g").state == GroupState.PREPARING_REBALANCE
    t1 = spawn(join(c, "g", r1.member_id, session_ms=REBALANCE_MS * 2, rebalance_ms=REBALANCE_MS))
    await settle()
    # r2 stays silent (well within its session timeout) and never rejoins.
    h.advance(REBALANCE_MS - 1)
    await settle()
    assert not t1.done()
    assert not t3.done()
    h.advance(1)
    j1, j3 = await done(t1), await done(t3)
    group = h.group("g")
    assert j1.generation == j3.generation == 2
    assert set(group.members) == {r1.member_id, newcomer}
    assert group.state == GroupState.COMPLETING_REBALANCE
    assert error_of(lambda: c.heartbeat("g", 1, r2.member_id, None)) == ErrorCode.unknown_member_id


async def test_join_refuses_bad_session_timeouts_and_inconsistent_protocols(h: Harness) -> None:
    c = h.coordinator
    too_short = CONFIG.min_session_timeout_ms - 1
    too_long = CONFIG.max_session_timeout_ms + 1
    for session in (too_short, too_long):
        assert await async_error_of(join(c, "g", session_ms=session)) == ErrorCode.invalid_session_timeout
    await form_group(h, "g", count=1)
    assert await async_error_of(join(c, "g", protocol_type="connect")) == ErrorCode.inconsistent_group_protocol
    no_common = [("roundrobin", subscription("t"))]
    assert await async_error_of(join(c, "g", protocols=no_common)) == ErrorCode.inconsistent_group_protocol
    assert await async_error_of(join(c, "g", protocols=[])) == ErrorCode.inconsistent_group_protocol
    assert await async_error_of(join(c, "new", protocol_type="")) == ErrorCode.inconsistent_group_protocol
    assert h.group("g").state == GroupState.STABLE  # the refused joins changed nothing
    assert await async_error_of(join(c, "", v4=False)) == ErrorCode.invalid_group_id
    assert await async_error_of(join(c, "x" * 250, v4=False)) == ErrorCode.invalid_group_id


# --- static membership -------------------------------------------------------------------


async def test_restarted_static_member_gets_its_assignment_back_without_a_rebalance(h: Harness) -> None:
    c = h.coordinator
    (leader, _), (follower, follower_assignment) = await form_group(h, "g", instances=("a", "b"))
    group = h.group("g")
    generation, rebalances = group.generation, group.rebalances

    # "b" restarts: a new JoinGroup with no member id but the same instance id.
    restarted = await done(spawn(join(c, "g", instance="b")))
    assert restarted.error == ErrorCode.none
    assert restarted.member_id != follower.member_id
    assert restarted.generation == generation
    assert restarted.leader == leader.member_id
    _, _, assignment = await done(spawn(sync(c, "g", restarted, instance="b")))
    assert assignment == follower_assignment
    assert group.state == GroupState.STABLE
    assert (group.generation, group.rebalances) == (generation, rebalances)
    assert group.static_members["b"] == restarted.member_id
    c.heartbeat("g", generation, leader.member_id, "a")  # the other member is undisturbed
    c.heartbeat("g", generation, restarted.member_id, "b")

    # The old incarnation is fenced (Kafka's FENCED_INSTANCE_ID for a stale static member).
    old = follower.member_id
    assert error_of(lambda: c.heartbeat("g", generation, old, "b")) == ErrorCode.fenced_instance_id


async def test_static_member_that_never_returns_expires_after_its_session(h: Harness) -> None:
    (leader, _), (follower, _) = await form_group(h, "g", instances=("a", "b"))
    h.advance(SESSION_MS - 1)
    h.coordinator.heartbeat("g", 1, leader.member_id, "a")
    h.advance(2)
    group = h.group("g")
    assert follower.member_id not in group.members
    assert "b" not in group.static_members
    assert group.state == GroupState.PREPARING_REBALANCE


# --- offsets ----------------------------------------------------------------------------


async def test_standalone_commits_are_allowed_only_while_the_group_has_no_members(h: Harness) -> None:
    c = h.coordinator
    c.validate_commit("g", -1, "", None)  # no group at all yet: a simple consumer may commit
    await c.commit("g", {("t", 0): (5, 3, "standalone")})
    stored = c.committed("g")[("t", 0)]
    assert (stored.offset, stored.leader_epoch, stored.metadata) == (5, 3, "standalone")
    assert h.group("g").state == GroupState.EMPTY

    [(member, _)] = await form_group(h, "g", count=1)
    generation = member.generation
    assert error_of(lambda: c.validate_commit("g", -1, "", None)) == ErrorCode.unknown_member_id
    assert error_of(lambda: c.validate_commit("g", generation - 1, member.member_id, None)) == (
        ErrorCode.illegal_generation
    )
    assert error_of(lambda: c.validate_commit("g", generation, "stranger", None)) == ErrorCode.unknown_member_id
    c.validate_commit("g", generation, member.member_id, None)
    await c.commit("g", {("t", 0): (9, -1, "member"), ("t", 1): (2, -1, "")})
    assert {tp: o.offset for tp, o in c.committed("g").items()} == {("t", 0): 9, ("t", 1): 2}

    c.leave("g", member.member_id, None)
    assert h.group("g").state == GroupState.EMPTY
    c.validate_commit("g", -1, "", None)  # empty again: standalone commits are back
    # Kafka checks "generation < 0 and the group is empty" first, whatever the member id.
    c.validate_commit("g", -1, "some-member", None)
    c.validate_commit("missing", -1, "some-member", None)


async def test_commit_while_completing_a_rebalance_is_rebalance_in_progress(h: Harness) -> None:
    c = h.coordinator
    member_id = await new_member_id(h, "g")
    task = spawn(join(c, "g", member_id))
    await settle()
    h.advance(INITIAL_DELAY_MS)
    result = await done(task)
    assert h.group("g").state == GroupState.COMPLETING_REBALANCE
    code = error_of(lambda: c.validate_commit("g", result.generation, member_id, None))
    assert code == ErrorCode.rebalance_in_progress


async def test_commit_with_a_generation_to_a_group_that_does_not_exist_is_group_id_not_found(h: Harness) -> None:
    """Kafka (OffsetCommit v9+): GROUP_ID_NOT_FOUND; the handler maps it to
    ILLEGAL_GENERATION for older versions."""
    code = error_of(lambda: h.coordinator.validate_commit("nobody", 1, "member", None))
    assert code == ErrorCode.group_id_not_found
    assert "nobody" not in h.coordinator.groups


async def test_offsets_of_an_empty_group_expire_after_retention_counted_from_when_it_emptied(h: Harness) -> None:
    c = h.coordinator
    [(member, _)] = await form_group(h, "g", count=1)
    await c.commit("g", {("t", 0): (7, -1, "")})
    # While the group has a member its offsets never expire, however old.
    for _ in range(RETENTION_MS // (SESSION_MS - 1) + 1):
        h.advance(SESSION_MS - 1)
        c.heartbeat("g", member.generation, member.member_id, None)
    assert h.clock.now_ms() - c.committed("g")[("t", 0)].commit_ms > RETENTION_MS
    assert ("t", 0) in c.committed("g")

    c.leave("g", member.member_id, None)
    h.advance(RETENTION_MS - CLEANUP_INTERVAL_MS)
    assert ("t", 0) in c.committed("g")
    h.advance(CLEANUP_INTERVAL_MS)
    assert c.committed("g") == {}
    assert "g" not in c.groups  # an empty group without offsets is gone
    # The expiry is durable: a reload does not bring the offsets back.
    assert h.reopen().committed("g") == {}


async def test_standalone_offsets_expire_after_retention(h: Harness) -> None:
    c = h.coordinator
    await c.commit("simple", {("t", 0): (1, -1, "")})
    h.advance(CLEANUP_INTERVAL_MS)
    await c.commit("simple", {("t", 1): (1, -1, "")})
    h.advance(RETENTION_MS - CLEANUP_INTERVAL_MS)
    assert set(c.committed("simple")) == {("t", 1)}  # the first one reached its retention
    h.advance(CLEANUP_INTERVAL_MS)
    assert c.committed("simple") == {}


async def test_an_existing_offsets_topic_keeps_its_partition_count_whatever_the_setting(h: Harness) -> None:
    """The setting sizes `__consumer_offsets` when it is created; afterwards the topic's own
    count places the groups (as in Kafka), or a changed setting would lose their offsets."""
    c = h.coordinator
    group = next(f"g{i}" for i in range(100) if c.partition_for(f"g{i}") != 0)  # one that moves
    await c.commit(group, {("t", 0): (42, -1, "")})
    reloaded = h.reopen(CoordinatorConfig())
    assert CoordinatorConfig().offsets_partitions == 1  # the default differs from this topic's 4
    assert reloaded.partitions == CONFIG.offsets_partitions
    assert reloaded.partition_for(group) == c.partition_for(group)
    assert reloaded.committed(group)[("t", 0)].offset == 42


async def test_offsets_and_group_metadata_survive_a_reload_from_the_log(h: Harness) -> None:
    c = h.coordinator
    await c.commit("simple", {("t", 0): (11, 2, "meta-0"), ("u", 3): (4, -1, "")})
    (r1, a1), (r2, a2) = await form_group(h, "members")
    c.validate_commit("members", r1.generation, r1.member_id, None)
    await c.commit("members", {("t", 1): (100, 5, "by-member")})
    await c.commit("members", {("t", 1): (101, 5, "later")})

    reloaded = h.reopen()
    assert reloaded is not c
    simple = reloaded.committed("simple")
    assert {tp: (o.offset, o.leader_epoch, o.metadata) for tp, o in simple.items()} == {
        ("t", 0): (11, 2, "meta-0"),
        ("u", 3): (4, -1, ""),
    }
    latest = reloaded.committed("members")[("t", 1)]
    assert (latest.offset, latest.metadata) == (101, "later")
    group = reloaded.groups["members"]
    assert group.generation == r1.generation
    assert group.leader == r1.leader
    assert {m.member_id: m.assignment for m in group.members.values()} == {r1.member_id: a1, r2.member_id: a2}
    # The members carry on in the same generation after the reload.
    reloaded.heartbeat("members", r1.generation, r2.member_id, None)


async def test_delete_group_is_refused_while_members_exist_and_then_removes_its_offsets(h: Harness) -> None:
    c = h.coordinator
    [(member, _)] = await form_group(h, "g", count=1)
    c.validate_commit("g", member.generation, member.member_id, None)
    await c.commit("g", {("t", 0): (3, -1, "")})
    assert await async_error_of(c.delete_group("g")) == ErrorCode.non_empty_group
    assert ("t", 0) in c.committed("g")

    c.leave("g", member.member_id, None)
    group = h.group("g")
    assert group.state == GroupState.EMPTY
    await c.delete_group("g")
    assert group.state == GroupState.DEAD
    assert c.committed("g") == {}
    assert "g" not in c.groups
    assert await async_error_of(c.delete_group("g")) == ErrorCode.group_id_not_found
    reloaded = h.reopen()
    assert reloaded.committed("g") == {}
    assert "g" not in reloaded.groups


async def test_a_deleted_group_is_not_known_again_after_a_reload(h: Harness) -> None:
    """Replaying the deletion's offset tombstones leaves nothing under the group's id, so
    neither ListGroups nor DescribeGroups finds it after a restart."""
    c = h.coordinator
    await c.commit("standalone", {("t", 0): (1, -1, ""), ("t", 1): (2, -1, "")})
    [(member, _)] = await form_group(h, "classic", count=1)
    c.validate_commit("classic", member.generation, member.member_id, None)
    await c.commit("classic", {("t", 0): (3, -1, "")})
    c.leave("classic", member.member_id, None)
    await c.delete_group("standalone")
    await c.delete_group("classic")
    assert c.known_groups() == []

    reloaded = h.reopen()
    assert reloaded.known_groups() == []
    assert reloaded.offsets == {}
    assert await async_error_of(reloaded.delete_group("classic")) == ErrorCode.group_id_not_found


async def test_a_deleted_topics_offsets_go_from_every_group_and_stay_gone_after_a_reload(h: Harness) -> None:
    c = h.coordinator
    await c.commit("a", {("t", 0): (5, -1, ""), ("u", 0): (7, -1, "")})
    await c.commit("b", {("t", 1): (9, -1, "")})
    await c.commit("c", {("u", 1): (4, -1, "")})

    logs = c.forget_topics({"t"})
    # The logs holding the tombstones, for the caller to sync before answering.
    assert {id(plog) for plog in logs} == {id(h.offsets_log("a")), id(h.offsets_log("b"))}
    assert len(logs) == len({c.partition_for(g) for g in ("a", "b")})
    assert set(c.committed("a")) == {("u", 0)}
    assert "b" not in c.offsets
    assert set(c.committed("c")) == {("u", 1)}
    assert c.forget_topics({"t"}) == []  # nothing left to remove: nothing written

    reloaded = h.reopen()
    assert {tp: o.offset for tp, o in reloaded.committed("a").items()} == {("u", 0): 7}
    assert reloaded.committed("b") == {}
    assert {tp: o.offset for tp, o in reloaded.committed("c").items()} == {("u", 1): 4}


async def test_an_expired_standalone_group_leaves_nothing_behind(h: Harness) -> None:
    c = h.coordinator
    await c.commit("simple", {("t", 0): (1, -1, "")})
    assert "simple" in c.empty_since
    h.advance(RETENTION_MS)
    assert "simple" not in c.groups
    assert "simple" not in c.offsets
    assert "simple" not in c.empty_since


async def test_compaction_keeps_only_the_latest_record_per_key(h: Harness) -> None:
    c = h.coordinator
    partitions = [("t", p) for p in range(3)]
    commits = 40
    for i in range(commits):
        await c.commit("g", {tp: (i * 10 + tp[1], -1, f"c{i}") for tp in partitions})
    await c.delete_offsets("g", [("t", 2)])
    plog = h.offsets_log("g")
    before = log_records(plog)
    # One group record (the standalone commit created the group), every commit, a tombstone.
    assert len(before) == 1 + commits * len(partitions) + 1
    plog.roll()  # close the segment so the cleaner may compact it

    stats = cleaner.clean(plog)
    assert stats is not None
    after = log_records(plog)
    keys = [msgpack.unpackb(r.key) for r in after]
    assert len(keys) == len({tuple(k) for k in keys})  # one record per key
    assert sorted(tuple(k) for k in keys) == sorted(
        [("g", "g"), ("o", "g", "t", 0), ("o", "g", "t", 1), ("o", "g", "t", 2)]
    )
    values = {tuple(msgpack.unpackb(r.key)): r.value for r in after}
    assert values[("o", "g", "t", 2)] is None  # the deletion's tombstone is what is kept
    assert msgpack.unpackb(values[("o", "g", "t", 0)])["o"] == (commits - 1) * 10
    assert stats.records_removed == len(before) - len(after)

    reloaded = h.reopen()
    assert {tp: o.offset for tp, o in reloaded.committed("g").items()} == {
        ("t", 0): (commits - 1) * 10,
        ("t", 1): (commits - 1) * 10 + 1,
    }


async def _two_joined(h: Harness, group_id: str) -> tuple[JoinResult, JoinResult]:
    tasks = []
    for _ in range(2):
        member_id = await new_member_id(h, group_id)
        tasks.append(spawn(join(h.coordinator, group_id, member_id)))
        await settle()
    h.advance(INITIAL_DELAY_MS)
    first, second = [await done(t) for t in tasks]
    return (first, second) if first.member_id == first.leader else (second, first)


async def test_sync_group_persists_the_assignment_before_answering_any_member(h: Harness) -> None:
    """Kafka's order: the leader's assignment is durable first, then every member (followers
    and leader) is answered; a restart right after finds the assignment stored."""
    events: list[str] = []
    durable = h.coordinator._sync

    async def observed(logs: Iterable[PartitionLog]) -> None:
        events.append("persisting")
        await durable(logs)
        events.append("persisted")

    h.coordinator._sync = observed
    leader, follower = await _two_joined(h, "g")
    events.clear()
    follower_sync = spawn(sync(h.coordinator, "g", follower))
    follower_sync.add_done_callback(lambda _: events.append("follower answered"))
    await settle()
    assignments = {leader.member_id: encode_assignment({"t": [0]}), follower.member_id: encode_assignment({"t": [1]})}
    leader_sync = spawn(sync(h.coordinator, "g", leader, assignments))
    leader_sync.add_done_callback(lambda _: events.append("leader answered"))
    assert (await done(follower_sync))[2] == assignments[follower.member_id]
    assert (await done(leader_sync))[2] == assignments[leader.member_id]
    assert events[:2] == ["persisting", "persisted"]
    assert sorted(events[2:]) == ["follower answered", "leader answered"]

    reloaded = h.reopen().groups["g"]
    assert {m: reloaded.members[m].assignment for m in assignments} == assignments


async def test_sync_group_whose_assignment_cannot_be_stored_answers_no_member_with_it(h: Harness) -> None:
    leader, follower = await _two_joined(h, "g")

    async def failing(logs: Iterable[PartitionLog]) -> None:
        raise OSError(28, "No space left on device")

    h.coordinator._sync = failing
    follower_sync = spawn(sync(h.coordinator, "g", follower))
    await settle()
    with pytest.raises(KafkaError) as leader_error:
        await sync(h.coordinator, "g", leader, {follower.member_id: encode_assignment({"t": [1]})})
    assert leader_error.value.code == ErrorCode.coordinator_not_available
    with pytest.raises(KafkaError) as follower_error:
        await done(follower_sync)
    assert follower_error.value.code == ErrorCode.coordinator_not_available
    assert h.group("g").state == GroupState.COMPLETING_REBALANCE
