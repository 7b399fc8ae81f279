"""Share-partition state in `__share_group_state` as updates and snapshots: an
acknowledgement writes what it changed (not the in-flight window), every SNAPSHOT_EVERY
updates a snapshot supersedes them, and a replay (all records, or what compaction leaves of
them) gives back the state the broker held; updates that cannot follow their snapshot are
skipped and counted.  A real MetadataStore, a ManualClock, no network."""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from broker.config import BrokerConfig
from broker.log.partition_log import PartitionLog
from broker.metadata import MetadataStore
from broker.protocol.records import Record, build_batch
from broker.share.coordinator import SNAPSHOT_EVERY, STATE_TOPIC, Key, ShareConfig
from tests.support.share_coordinator import Env, durable, stored


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path / "a")
    yield e
    e.store.close(clean=True)


def _records(env: Env, group: str = "g") -> list[tuple[Any, Any]]:
    """The group's records in `__share_group_state`, decoded, in log order."""
    plog = env.store.partition_log(STATE_TOPIC, zlib.crc32(group.encode()) % env.shares.state_partitions)
    assert plog is not None
    decoded = [
        (msgpack.unpackb(r.key), None if r.value is None else msgpack.unpackb(r.value))
        for r in plog.records(lambda offset, why: None)
    ]
    return [(k, v) for k, v in decoded if k[0] in ("sp", "su")]


async def _started(env: Env, records: int = 100) -> Key:
    """Member a holds `records` records of t-0 (the whole window), the first start stored."""
    env.store.create_topic("t", 1, {})
    if records:
        env.produce("t", 0, records)
    await env.beat("a", 0, ("t",))
    env.fetch("a", "t", 0, max_records=records)
    key = ("g", env.topic_id("t"), 0)
    await durable(env.shares.persist("g", [key]))
    return key


async def test_an_acknowledgement_writes_what_it_changed_not_the_window(env: Env) -> None:
    key = await _started(env)
    first = _records(env)
    assert [k[0] for k, _ in first] == ["sp"]  # a share partition's first write is a snapshot
    assert len(first[0][1]["runs"]) == 1  # 100 records acquired once: stored as available, count 1
    env.shares.acknowledge("a", key, [(40, 40, [1])])
    await durable(env.shares.persist("g", [key]))
    ((update_key, update),) = _records(env)[1:]
    assert update_key == ["su", "g", env.topic_id("t").bytes, 0, 1]
    assert update == {"start": 0, "end": 100, "epoch": 0, "runs": [[40, 40, 2, 1]]}
    env.shares.acknowledge("a", key, [(0, 1, [1, 3])])
    await durable(env.shares.persist("g", [key]))
    assert _records(env)[-1][1] == {"start": 2, "end": 100, "epoch": 0, "runs": []}  # the start says it


async def test_a_snapshot_every_so_many_updates_supersedes_them(env: Env) -> None:
    env.config = ShareConfig(state_partitions=3, delivery_limit=3, max_locks=1_000)
    env.shares = env.coordinator()
    key = await _started(env, records=SNAPSHOT_EVERY + 10)
    for offset in range(SNAPSHOT_EVERY + 1):
        env.shares.acknowledge("a", key, [(offset, offset, [2])])  # released: a change each
        await durable(env.shares.persist("g", [key]))
    written = _records(env)
    last_batch = written[-(SNAPSHOT_EVERY + 1) :]
    assert [k for k, v in last_batch[:-1]] == [["su", "g", key[1].bytes, 0, n] for n in range(1, SNAPSHOT_EVERY + 1)]
    assert all(v is None for _, v in last_batch[:-1])
    assert last_batch[-1] == (["sp", "g", key[1].bytes, 0], env.shares.partitions[key].snapshot())
    assert env.shares.partitions[key].updates == 0


def _compacted(records: list[tuple[Any, Any]], *, drop_tombstones: bool) -> list[tuple[Any, Any]]:
    """What compaction leaves: the last record of each key, where it was."""
    last = {msgpack.packb(k): i for i, (k, _) in enumerate(records)}
    kept = [records[i] for i in sorted(last.values())]
    return [(k, v) for k, v in kept if not (drop_tombstones and v is None)]


async def _busy(env: Env, rng: random.Random, writes: int) -> None:
    """Two members acquire, accept, release and reject at random, each change written; the
    locks of what they leave unacknowledged run out as time goes by."""
    key = await _started(env, records=0)
    for _ in range(writes):
        env.clock.advance(250)
        env.shares.tick()
        env.produce("t", 0, rng.randint(1, 8))
        member = rng.choice("ab")
        if member not in env.shares.groups["g"].members:  # b's first time, or its session ran out
            await env.beat(member, 0, ("t",))
        got = env.fetch(member, "t", 0, max_records=rng.randint(1, 20))
        acks = []
        for a in got:
            for offset in range(a.first_offset, a.last_offset + 1):
                if rng.random() < 0.7:
                    acks.append((offset, offset, [rng.choice([1, 1, 1, 2, 3])]))
        if acks:
            env.shares.acknowledge(member, key, acks)
        await durable(env.shares.persist("g", [key]))


@pytest.mark.parametrize("drop_tombstones", [None, False, True])
async def test_a_replay_gives_back_the_state_whatever_compaction_left(
    env: Env, tmp_path: Path, drop_tombstones: bool | None
) -> None:
    """Several snapshots' worth of updates; replayed from every record, or from what compaction
    leaves (tombstones kept, or already removed), in a store of its own."""
    await _busy(env, random.Random(7), writes=3 * SNAPSHOT_EVERY + 17)
    before = stored(env.shares)
    held = before["partitions"][("g", env.topic_id("t"), 0)]
    assert held["runs"]  # something in flight worth comparing
    records = _records(env)
    last_snapshot = max(i for i, (k, v) in enumerate(records) if k[0] == "sp")
    assert sum(1 for k, v in records[last_snapshot:] if k[0] == "su" and v["runs"]) > 5  # updates that matter
    if drop_tombstones is not None:
        records = _compacted(records, drop_tombstones=drop_tombstones)
    other = Env(tmp_path / "b")
    try:
        other.shares.ensure_state_topic()
        plog = other.store.partition_log(STATE_TOPIC, zlib.crc32(b"g") % other.shares.state_partitions)
        assert plog is not None
        plog.append_internal(
            build_batch(
                [
                    Record(i, 0, msgpack.packb(k), None if v is None else msgpack.packb(v))
                    for i, (k, v) in enumerate(records)
                ]
            )
        )
        replayed = other.coordinator()
        assert other.store.skipped.counts[STATE_TOPIC] == 0
        assert stored(replayed)["partitions"] == before["partitions"]
    finally:
        other.store.close(clean=True)


async def test_a_restart_replays_updates_and_numbers_the_next_ones_after_them(env: Env) -> None:
    key = await _started(env)
    for offset in range(5):
        env.shares.acknowledge("a", key, [(offset * 2, offset * 2, [1])])
        await durable(env.shares.persist("g", [key]))
    before = stored(env.shares)
    env.store.close(clean=True)
    env.store = MetadataStore(BrokerConfig(data_dir=env.path), env.clock, recover=True)
    env.shares = env.coordinator()
    assert stored(env.shares) == before
    part = env.shares.partitions[key]
    assert part.updates == 5
    await env.beat("a", 0, ("t",))
    env.fetch("a", "t", 0, max_records=3)
    env.shares.acknowledge("a", key, [(1, 1, [1])])
    await durable(env.shares.persist("g", [key]))
    assert _records(env)[-1][0][-1] == 6


def _append(env: Env, records: list[tuple[Any, Any]]) -> None:
    env.shares.ensure_state_topic()
    plog = env.store.partition_log(STATE_TOPIC, zlib.crc32(b"g") % env.shares.state_partitions)
    assert plog is not None
    packed = [(msgpack.packb(k), None if v is None else msgpack.packb(v)) for k, v in records]
    plog.append_internal(build_batch([Record(i, 0, k, v) for i, (k, v) in enumerate(packed)]))


TID = bytes(range(16))
SNAP = (["sp", "g", TID, 0], {"start": 0, "end": 4, "epoch": 2, "runs": [[0, 3, 0, 1]]})


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (["su", "g", TID, 0, 1], {"start": 0, "end": 4, "epoch": 1, "runs": [[1, 1, 2, 1]]}),  # another epoch
        (["su", "h", TID, 0, 1], {"start": 0, "end": 4, "epoch": 2, "runs": []}),  # no snapshot
        (["su", "g", TID, 0, 0], {"start": 0, "end": 4, "epoch": 2, "runs": []}),  # numbered from 1
        (["su", "g", TID, 0, SNAPSHOT_EVERY + 1], {"start": 0, "end": 4, "epoch": 2, "runs": []}),
        (["su", "g", TID, 0, "1"], {"start": 0, "end": 4, "epoch": 2, "runs": []}),
        (["su", "g", TID, 0], {"start": 0, "end": 4, "epoch": 2, "runs": []}),
        (["su", "g", TID, 0, 1], {"start": 0, "end": 20_000, "epoch": 2, "runs": []}),  # no such window
        (["su", "g", TID, 0, 1], {"start": 0, "end": 4, "epoch": 2, "runs": [[3, 3, 2, 1], [1, 1, 2, 1]]}),
        (["su", "g", TID, 0, 1], {"start": 0, "end": 4, "epoch": 2, "runs": [[2, 9, 2, 1]]}),
        (["su", "g", TID, 0, 1], {"start": 0, "end": 4, "epoch": 2}),
        (["su", "g", TID, 0, 1], [0, 4]),
    ],
)
def test_an_update_that_cannot_follow_its_snapshot_is_skipped_and_counted(env: Env, key: Any, value: Any) -> None:
    _append(env, [SNAP, (key, value), (["su", "g", TID, 0, 2], {"start": 0, "end": 5, "epoch": 2, "runs": []})])
    shares = env.coordinator()
    assert env.store.skipped.counts[STATE_TOPIC] == 1
    part = next(p for k, p in shares.partitions.items() if k[0] == "g")
    # The snapshot, then the well-formed update after the skipped one (the window grew by one).
    assert (part.start, part.end, part.state_epoch) == (0, 5, 2)
    assert [r.state for r in part.records.values()][:4] == [0, 0, 0, 0]


async def test_after_a_write_the_disk_refused_the_next_one_is_a_snapshot(env: Env) -> None:
    """An update holds only what changed since the previous one: if that one may not have
    reached the disk, the next write carries the whole state."""
    key = await _started(env)
    failing = True

    async def sync(logs: Iterable[PartitionLog]) -> None:
        if failing:
            raise OSError("no space left on device")

    env.shares._sync = sync
    env.shares.acknowledge("a", key, [(3, 3, [1])])
    with pytest.raises(OSError, match="no space"):
        await durable(env.shares.persist("g", [key]))
    failing = False
    env.shares.acknowledge("a", key, [(5, 5, [1])])
    await durable(env.shares.persist("g", [key]))
    last_key, last_value = _records(env)[-1]
    assert last_key[0] == "sp"
    assert last_value == env.shares.partitions[key].snapshot()
