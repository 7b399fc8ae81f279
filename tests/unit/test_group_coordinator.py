"""The group coordinator's shard (broker/coordinator/coordinator.py) driven directly, over a
real MetadataStore and log, with a ManualClock: what composes group membership with committed
offsets (a commit validated by membership and stored by offsets, standalone commits, retention
that ends a group, DeleteGroups, deleted topics), the reload of both from one log, and
compaction of `__consumer_offsets`.  Membership alone: tests/unit/test_coordinator_membership.py;
offsets alone: tests/unit/test_coordinator_offsets.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import msgpack
import pytest

from broker.coordinator.coordinator import CoordinatorConfig
from broker.coordinator.group import GroupState
from broker.log import cleaner
from broker.protocol.errors import ErrorCode
from tests.support.group_coordinator import (
    CLEANUP_INTERVAL_MS,
    CONFIG,
    INITIAL_DELAY_MS,
    RETENTION_MS,
    SESSION_MS,
    Harness,
    async_error_of,
    done,
    error_of,
    form_group,
    join,
    log_records,
    new_member_id,
    settle,
    spawn,
)


@pytest.fixture
async def h(tmp_path: Path) -> AsyncIterator[Harness]:
    harness = Harness(tmp_path)
    yield harness
    await harness.close()


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
