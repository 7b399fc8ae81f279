"""Helpers of the share group unit tests (KIP-932, without a network): ShareGroupHeartbeat
requests, and an Env of a ShareCoordinator over a real MetadataStore with a ManualClock that
beats, produces and fetches the way the handlers do.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Iterable
from pathlib import Path
from typing import Any

import pytest

from broker.clock import ManualClock
from broker.config import BrokerConfig
from broker.coordinator.assignors import Assignment
from broker.log.partition_log import PartitionLog
from broker.metadata import MetadataStore
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import Record, build_batch
from broker.share.coordinator import GroupSettings, ShareConfig, ShareCoordinator
from broker.share.group import (
    ShareHeartbeat,
)
from broker.share.partition import Acquired, RecordState, SharePartition

CONN, OTHER = object(), object()  # two connections


def code_of(e: pytest.ExceptionInfo[KafkaError]) -> ErrorCode:
    return e.value.code


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


def states(p: SharePartition) -> dict[int, tuple[RecordState, int, str | None]]:
    return {o: (r.state, r.count, r.member) for o, r in sorted(p.records.items())}


def stored(shares: ShareCoordinator) -> dict[Any, Any]:
    return {
        "partitions": {k: p.snapshot() for k, p in shares.partitions.items()},
        "groups": {g: group.epoch for g, group in shares.groups.items()},
    }
