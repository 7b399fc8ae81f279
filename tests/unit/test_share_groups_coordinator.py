"""Share groups (KIP-932): the ShareCoordinator over a real MetadataStore: heartbeats and
assignment epochs, fetching through it, a leave and an expired session releasing what the
member held, and expired locks.

Time is a ManualClock: nothing sleeps.
"""

from __future__ import annotations

import uuid

import pytest

from broker.protocol.control import ControlType
from broker.protocol.errors import ErrorCode, KafkaError
from broker.share.partition import Acquired, RecordState
from tests.support.share_coordinator import CONN, LOCK_MS, SESSION_MS, Env, code_of, durable, states


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
