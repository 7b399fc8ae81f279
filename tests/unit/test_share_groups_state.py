"""Share groups (KIP-932): the state in `__share_group_state` replayed by a new coordinator after
a restart, deleted state and deleted topics forgotten, malformed records skipped and counted.

Time is a ManualClock: nothing sleeps.
"""

from __future__ import annotations

import uuid
import zlib
from typing import Any

import msgpack
import pytest

from broker.config import BrokerConfig
from broker.metadata import MetadataStore
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import Record, build_batch
from broker.share.coordinator import STATE_TOPIC
from broker.share.partition import Acquired, RecordState
from tests.support.share_coordinator import Env, durable, states, stored


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
