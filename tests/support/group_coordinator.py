"""A group coordinator driven directly, over a real MetadataStore and log in a tmp dir,
fsyncing through a real Flusher, with a ManualClock: time only moves when a test advances
the clock (which calls `tick()`); nothing sleeps.  `settle()` lets the event loop run the
join tasks up to where they wait.  Used by tests/unit/test_group_coordinator.py (the shard:
offsets with membership) and tests/unit/test_coordinator_membership.py (whose `join` and
`sync` drive GroupMembership alone too)."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Coroutine, Iterable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from broker.clock import ManualClock
from broker.config import BrokerConfig
from broker.coordinator.consumer_protocol import encode_assignment
from broker.coordinator.coordinator import OFFSETS_TOPIC, CoordinatorConfig, GroupCoordinator, JoinRequest
from broker.coordinator.group import Group, GroupState, JoinResult
from broker.coordinator.membership import GroupMembership
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


async def settle() -> None:
    """Let every runnable task reach its next wait (no time passes)."""
    for _ in range(5):
        await asyncio.sleep(0)


def spawn(coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    return asyncio.get_running_loop().create_task(coro)


async def done(task: asyncio.Task[T]) -> T:
    return await asyncio.wait_for(task, 10)


def join(
    coordinator: GroupCoordinator | GroupMembership,
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
    coordinator: GroupCoordinator | GroupMembership,
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
