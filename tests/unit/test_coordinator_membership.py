"""Group membership (broker/coordinator/membership.py): through the coordinator as the
handlers drive it (member ids, generations, states, the initial delay, session and rebalance
timeouts, static membership, SyncGroup's durable assignment), then the manager alone over a
real `__consumer_offsets` log (its records and their replay, what it tells the shard about
commits, emptiness and deletion).  Time only moves when a test advances the ManualClock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Iterable
from pathlib import Path
from typing import Any

import pytest

from broker.clock import ManualClock
from broker.config import BrokerConfig
from broker.coordinator.consumer_protocol import encode_assignment
from broker.coordinator.coordinator import COORDINATOR_TOPIC_CONFIG, OFFSETS_TOPIC
from broker.coordinator.group import GroupState, JoinResult
from broker.coordinator.group_records import group_record
from broker.coordinator.membership import RECORD_KINDS, GroupMembership
from broker.coordinator.records import Rec, decode, encode_batch
from broker.log.flusher import Flusher
from broker.log.partition_log import PartitionLog
from broker.metadata import MetadataStore
from broker.protocol.errors import ErrorCode, KafkaError
from tests.support.group_coordinator import (
    CONFIG,
    INITIAL_DELAY_MS,
    REBALANCE_MS,
    SESSION_MS,
    Harness,
    async_error_of,
    done,
    error_of,
    form_group,
    join,
    new_member_id,
    settle,
    spawn,
    subscription,
    sync,
)


@pytest.fixture
async def h(tmp_path: Path) -> AsyncIterator[Harness]:
    harness = Harness(tmp_path)
    yield harness
    await harness.close()


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


# --- the membership manager alone, over a real log -----------------------------------------


class MembershipLog:
    """GroupMembership writing to one partition of a real `__consumer_offsets` in `tmp_path`
    as the shard has it write (broker/coordinator/records.py), fsynced by a real Flusher."""

    def __init__(self, data_dir: Path) -> None:
        self.clock = ManualClock()
        self.store = MetadataStore(BrokerConfig(data_dir=data_dir), self.clock, recover=False)
        self.store.create_topic(OFFSETS_TOPIC, 1, COORDINATOR_TOPIC_CONFIG, internal=True)
        plog = self.store.partition_log(OFFSETS_TOPIC, 0)
        assert plog is not None
        self.plog: PartitionLog = plog
        self.flusher = Flusher()
        self.flusher.start()
        self.membership = self.manager()

    def manager(self) -> GroupMembership:
        return GroupMembership(self.store, self.clock, CONFIG, self._append, self._write)

    def _append(self, group_id: str, records: list[Rec]) -> PartitionLog:
        self.plog.append_internal(encode_batch(records, self.clock.now_ms()))
        return self.plog

    def _write(self, group_id: str, records: list[Rec]) -> Awaitable[None]:
        return self.flusher.sync([self._append(group_id, records)])

    def records(self) -> list[tuple[list[Any], dict[str, Any] | None]]:
        return [decode(r) for r in self.plog.records()]

    def replayed(self) -> GroupMembership:
        """A new manager from the records on the log, as the shard loads it."""
        again = self.manager()
        now = self.clock.now_ms()
        for key, value in self.records():
            assert key[0] in RECORD_KINDS
            again.replay(key, value, now)
        again.loaded(now)
        return again

    def advance(self, ms: int) -> None:
        self.clock.advance(ms)
        self.membership.expire_members(self.clock.now_ms())

    async def form(self, group_id: str) -> tuple[JoinResult, bytes]:
        """One member (pre-v4 join: a member at once) through a first rebalance: Stable."""
        task = spawn(join(self.membership, group_id, v4=False))
        await settle()
        self.advance(INITIAL_DELAY_MS)
        joined = await done(task)
        assignment = encode_assignment({"t": [0, 1]})
        await done(spawn(sync(self.membership, group_id, joined, {joined.member_id: assignment})))
        assert self.membership.groups[group_id].state == GroupState.STABLE
        return joined, assignment

    async def close(self) -> None:
        await self.flusher.stop()
        self.store.close(clean=True)


@pytest.fixture
async def ml(tmp_path: Path) -> AsyncIterator[MembershipLog]:
    opened = MembershipLog(tmp_path)
    yield opened
    await opened.close()


async def test_replayed_records_bring_back_a_group_its_generation_leader_and_assignment(ml: MembershipLog) -> None:
    joined, assignment = await ml.form("g")
    again = ml.replayed()
    group = again.groups["g"]
    assert (group.state, group.generation, group.leader) == (GroupState.STABLE, joined.generation, joined.member_id)
    assert {m.member_id: m.assignment for m in group.members.values()} == {joined.member_id: assignment}
    assert again.has_members("g")
    # The member carries on in its generation with the replayed manager.
    again.heartbeat("g", joined.generation, joined.member_id, None)


async def test_an_emptied_group_stores_when_it_emptied_for_the_offsets_retention(ml: MembershipLog) -> None:
    joined, _ = await ml.form("g")
    ml.clock.advance(5_000)
    ml.membership.leave("g", joined.member_id, None)
    emptied = ml.clock.now_ms()
    assert ml.membership.empty_since["g"] == emptied
    assert not ml.membership.has_members("g")
    ml.clock.advance(5_000)
    again = ml.replayed()
    assert again.groups["g"].state == GroupState.EMPTY
    assert again.empty_since["g"] == emptied  # from the record, not the time of the replay


async def test_commit_validation_is_membership_s_the_generation_and_the_member(ml: MembershipLog) -> None:
    m = ml.membership
    m.validate_commit("nobody", -1, "", None)  # a commit from outside the group protocol
    assert error_of(lambda: m.validate_commit("nobody", 1, "member", None)) == ErrorCode.group_id_not_found
    joined, _ = await ml.form("g")
    assert error_of(lambda: m.validate_commit("g", -1, "", None)) == ErrorCode.unknown_member_id
    assert error_of(lambda: m.validate_commit("g", joined.generation + 1, joined.member_id, None)) == (
        ErrorCode.illegal_generation
    )
    assert error_of(lambda: m.validate_commit("g", joined.generation, "stranger", None)) == ErrorCode.unknown_member_id
    m.validate_commit("g", joined.generation, joined.member_id, None)
    assert error_of(lambda: m.validate_commit("", -1, "", None)) == ErrorCode.invalid_group_id


async def test_a_standalone_group_s_record_is_the_one_its_group_writes_and_replays_as_empty(ml: MembershipLog) -> None:
    m = ml.membership
    now = ml.clock.now_ms()
    record = m.standalone_record("simple", now)
    assert not m.exists("simple")  # building the record changes nothing
    m.add_standalone("simple", now)
    assert m.exists("simple")
    assert record == group_record(m.groups["simple"], m.empty_since["simple"])
    ml.plog.append_internal(encode_batch([record], now))
    again = ml.replayed()
    assert again.groups["simple"].state == GroupState.EMPTY
    assert again.empty_since["simple"] == now


async def test_idle_groups_go_unless_the_offsets_manager_still_holds_offsets_for_them(ml: MembershipLog) -> None:
    m = ml.membership
    joined, _ = await ml.form("emptied")
    m.leave("emptied", joined.member_id, None)
    for group_id in ("kept", "idle"):
        m.add_standalone(group_id, ml.clock.now_ms())
    written = len(ml.records())
    ml.clock.advance(CONFIG.cleanup_interval_ms - 1)
    m.drop_idle(ml.clock.now_ms(), has_offsets=lambda group_id: False)
    assert {"emptied", "kept", "idle"} <= m.group_ids()  # not idle long enough yet

    ml.clock.advance(1)
    m.drop_idle(ml.clock.now_ms(), has_offsets=lambda group_id: group_id == "kept")
    assert m.group_ids() == {"kept"}
    # Only the group that ever had a generation has a record to remove.
    assert ml.records()[written:] == [(["g", "emptied"], None)]
    assert "emptied" not in ml.replayed().groups


async def test_deletion_refuses_a_group_with_members_then_returns_its_tombstones(ml: MembershipLog) -> None:
    m = ml.membership
    joined, _ = await ml.form("g")
    with pytest.raises(KafkaError) as refused:
        m.check_empty("g")
    assert refused.value.code == ErrorCode.non_empty_group
    assert m.drop_if_empty("g") == []  # offsets expired, but the group has a member: it stays
    m.leave("g", joined.member_id, None)
    m.check_empty("g")
    group = m.groups["g"]
    assert m.drop_if_empty("g") == [(["g", "g"], None)]
    assert group.state == GroupState.DEAD
    assert not m.exists("g")
    assert "g" not in m.empty_since
    m.add_standalone("simple", ml.clock.now_ms())
    assert m.delete("simple") == [(["g", "simple"], None)]
    assert m.group_ids() == set()
