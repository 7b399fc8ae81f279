"""The group coordinator: one shard of `__consumer_offsets` composing the two managers of
what it stores, as Kafka's GroupCoordinatorShard does: group membership
(broker/coordinator/membership.py: groups, members, generations, rebalances) and committed
offsets (broker/coordinator/offsets.py).  The shard owns the log: it appends what the
managers hand back, replays each record to the manager of its kind
(broker/coordinator/records.py), and composes the requests that need both (a commit:
membership validates the generation or epoch, offsets store; retention; DeleteGroups).

A group's records are in the partition `crc32(group) % offsets.topic.num.partitions`
(Kafka places a group the same way, by its own hash), replayed on start; a commit is
answered only after its record is fsynced.  Compaction keeps the topic's size bounded (one
live record per key, tombstones for deleted ones).  Expiry runs in `tick`, driven by the
broker's injected clock.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping

import msgpack
import structlog

from broker.clock import Clock
from broker.coordinator import records as coordinator_records
from broker.coordinator.config import CoordinatorConfig as CoordinatorConfig  # noqa: PLC0414 - re-exported
from broker.coordinator.consumer_groups import Heartbeat, HeartbeatResult
from broker.coordinator.group import JoinRequest as JoinRequest  # noqa: PLC0414 - re-exported
from broker.coordinator.group import JoinResult
from broker.coordinator.membership import RECORD_KINDS as MEMBERSHIP_RECORDS
from broker.coordinator.membership import GroupMembership
from broker.coordinator.offsets import RECORD_KINDS as OFFSET_RECORDS
from broker.coordinator.offsets import CommittedOffset as CommittedOffset  # noqa: PLC0414 - re-exported: committed() returns it
from broker.coordinator.offsets import CommittedOffsets, commit_records
from broker.coordinator.records import Rec
from broker.log.partition_log import PartitionLog
from broker.metadata import MetadataStore
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import Record
from broker.replay import need

log = structlog.get_logger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
MANY_OFFSETS = 1_000  # a commit of more has its batch built in a worker thread
# Kafka's settings of its coordinators' compacted internal topics (the transaction coordinator's too).
COORDINATOR_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": str(8 * 1024 * 1024),
    "retention.ms": "-1",
    "min.cleanable.dirty.ratio": "0.5",
    "message.timestamp.after.max.ms": str((1 << 63) - 1),
}

Sync = Callable[[Iterable[PartitionLog]], Awaitable[None]]


class GroupCoordinator:
    def __init__(self, store: MetadataStore, clock: Clock, config: CoordinatorConfig, sync: Sync) -> None:
        self.store = store
        self.clock = clock
        self.config = config
        self._sync = sync
        self._packer = msgpack.Packer()  # packb builds a Packer per call; commits pack 24 values
        self.membership = GroupMembership(store, clock, config, self._append, self._write)
        self.committed_offsets = CommittedOffsets()
        # Read by the handlers, the admin API and metrics.
        self.groups = self.membership.groups
        self.consumer = self.membership.consumer
        self.classic_members = self.membership.classic_members
        self.empty_since = self.membership.empty_since
        self.offsets = self.committed_offsets.by_group  # a group's entry exists while it has any
        self._last_cleanup_ms = clock.now_ms()
        topic = store.get(OFFSETS_TOPIC)
        self.partitions = topic.partitions if topic is not None else config.offsets_partitions
        if topic is not None:
            self._load()

    @property
    def is_share_group(self) -> Callable[[str], bool]:
        return self.membership.is_share_group

    @is_share_group.setter
    def is_share_group(self, predicate: Callable[[str], bool]) -> None:
        """The share groups' ids are taken (set by the broker, which owns both)."""
        self.membership.is_share_group = predicate

    def ensure_offsets_topic(self) -> None:
        """Create `__consumer_offsets` on first use, as Kafka does."""
        if self.store.get(OFFSETS_TOPIC) is None:
            self.store.create_topic(OFFSETS_TOPIC, self.partitions, COORDINATOR_TOPIC_CONFIG, internal=True)

    # --- the log -----------------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        # Stable across runs (Python's hash() of a str is salted per process).
        return zlib.crc32(group_id.encode()) % self.partitions

    def _log_for(self, group_id: str) -> PartitionLog:
        self.ensure_offsets_topic()
        plog = self.store.partition_log(OFFSETS_TOPIC, self.partition_for(group_id))
        assert plog is not None
        return plog

    def _load(self) -> None:
        now = self.clock.now_ms()
        skipped = self.store.skipped
        for p in range(self.partitions):
            plog = self.store.partition_log(OFFSETS_TOPIC, p)
            assert plog is not None
            for record in plog.records(lambda offset, why: skipped.skip(OFFSETS_TOPIC, offset, why)):
                try:
                    self._replay(record, now)
                except Exception as e:
                    skipped.skip(OFFSETS_TOPIC, record.offset, f"{type(e).__name__}: {e}")
        self.membership.loaded(now)
        log.info(
            "group coordinator loaded", groups=len(self.groups), offsets=sum(len(o) for o in self.offsets.values())
        )

    def _replay(self, record: Record, now: int) -> None:
        """Hand one record to the manager of its kind; raises (before changing anything) when
        it has a shape the coordinator does not write."""
        key, value = coordinator_records.decode(record)
        if key[0] in OFFSET_RECORDS:
            self.committed_offsets.replay(key, value)
        elif key[0] in MEMBERSHIP_RECORDS:
            self.membership.replay(key, value, now)
        else:
            need(False, f"unknown record kind {key[0]!r}")

    def _append(self, group_id: str, records: list[Rec]) -> PartitionLog:
        """Append `records` to the group's partition now (durable once the log is synced)."""
        plog = self._log_for(group_id)
        plog.append_internal(coordinator_records.encode_batch(records, self.clock.now_ms(), self._packer))
        return plog

    def _write(self, group_id: str, records: list[Rec]) -> Awaitable[None]:
        """Append now; the awaitable returned is their fsync."""
        return self._sync([self._append(group_id, records)])

    # --- membership --------------------------------------------------------------------

    async def join(self, req: JoinRequest) -> JoinResult:
        return await self.membership.join(req)

    async def sync_group(
        self,
        *,
        group_id: str,
        generation: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> tuple[str | None, str | None, bytes]:
        return await self.membership.sync_group(
            group_id=group_id,
            generation=generation,
            member_id=member_id,
            group_instance_id=group_instance_id,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            assignments=assignments,
        )

    def heartbeat(self, group_id: str, generation: int, member_id: str, group_instance_id: str | None) -> None:
        self.membership.heartbeat(group_id, generation, member_id, group_instance_id)

    def leave(self, group_id: str, member_id: str | None, group_instance_id: str | None) -> None:
        self.membership.leave(group_id, member_id, group_instance_id)

    def consumer_heartbeat(self, req: Heartbeat) -> tuple[HeartbeatResult, Awaitable[None] | None]:
        """The heartbeat's effect at once (in request order); what it wrote is durable
        once the returned awaitable, if any, has run."""
        return self.membership.consumer_heartbeat(req)

    # --- expiry ------------------------------------------------------------------------

    def tick(self) -> None:
        now = self.clock.now_ms()
        self.membership.expire_members(now)
        if now - self._last_cleanup_ms >= self.config.cleanup_interval_ms:
            self._last_cleanup_ms = now
            self._expire_offsets(now)
            self.membership.drop_idle(now, self.committed_offsets.__contains__)

    def _expire_offsets(self, now: int) -> None:
        """Kafka's cleanupGroupMetadata: the expired offsets of each group without members,
        then the group itself once it has none left and is empty."""
        retention = self.config.offsets_retention_ms
        for group_id in list(self.offsets):
            if self.membership.has_members(group_id):
                continue  # offsets of an active group never expire (KIP-211)
            empty_since = self.empty_since.get(group_id)
            records = self.committed_offsets.expire(group_id, empty_since, now, retention)
            if records:
                self._append(group_id, records)
            if group_id not in self.committed_offsets:
                tombstones = self.membership.drop_if_empty(group_id)
                if tombstones:
                    self._append(group_id, tombstones)

    # --- offsets -----------------------------------------------------------------------

    def validate_commit(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> None:
        """Kafka's checks before any partition is looked at: membership's (generation,
        member epoch)."""
        self.membership.validate_commit(group_id, generation, member_id, instance_id)

    def validate_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> None:
        self.membership.validate_fetch(group_id, member_id, member_epoch)

    async def commit(self, group_id: str, offsets: dict[tuple[str, int], tuple[int, int, str]]) -> None:
        """Store validated offsets durably: (topic, partition) -> (offset, epoch, metadata).

        Kafka writes a commit as one batch.  Here the offsets change in memory and their batch
        is appended in one step, so memory and the log agree and no other change of the group
        comes between; the batch is built before, for a commit of many offsets in a worker
        thread while the loop serves others (50,000 records took it a second)."""
        if not offsets:
            return
        if len(offsets) <= MANY_OFFSETS:
            await self._sync([self.commit_now(group_id, offsets)])
            return
        now = self.clock.now_ms()
        standalone = not self.membership.exists(group_id)
        while True:
            batch = await asyncio.to_thread(self._commit_batch, group_id, offsets, now, standalone)
            if self.membership.exists(group_id) != standalone:
                break
            standalone = not standalone  # the group appeared or went meanwhile: its record with it
        await self._sync([self._store_commit(group_id, offsets, now, standalone, batch)])

    def commit_now(self, group_id: str, offsets: Mapping[tuple[str, int], tuple[int, int, str]]) -> PartitionLog:
        """`commit` of few offsets (at most MANY_OFFSETS), in memory and the log at once,
        without waiting: durable once the returned log is synced (`sync`).  Lets a handler answer
        without a task when the broker's acknowledgements wait for nothing (page-cache)."""
        assert 0 < len(offsets) <= MANY_OFFSETS
        now = self.clock.now_ms()
        standalone = not self.membership.exists(group_id)
        batch = self._commit_batch(group_id, offsets, now, standalone)
        return self._store_commit(group_id, offsets, now, standalone, batch)

    def _store_commit(
        self,
        group_id: str,
        offsets: Mapping[tuple[str, int], tuple[int, int, str]],
        now: int,
        standalone: bool,
        batch: bytes,
    ) -> PartitionLog:
        self.committed_offsets.apply(group_id, offsets, now)
        if standalone:
            self.membership.add_standalone(group_id, now)
        plog = self._log_for(group_id)
        plog.append_internal(batch)
        return plog

    def sync(self, logs: Iterable[PartitionLog]) -> Awaitable[None]:
        """What an acknowledgement of appends to `logs` waits for (the broker's)."""
        return self._sync(logs)

    def _commit_batch(
        self, group_id: str, offsets: Mapping[tuple[str, int], tuple[int, int, str]], now: int, standalone: bool
    ) -> bytes:
        """The batch of a commit, with the record of the group a standalone commit creates
        (pure: its own packer, safe in a worker thread)."""
        records = commit_records(group_id, offsets, now)
        if standalone:
            records.append(self.membership.standalone_record(group_id, now))
        return coordinator_records.encode_batch(records, now)

    def committed(self, group_id: str) -> Mapping[tuple[str, int], CommittedOffset]:
        return self.committed_offsets.of(group_id)

    async def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> None:
        records = self.committed_offsets.remove(group_id, partitions)
        if records:
            await self._write(group_id, records)

    def forget_topics(self, topics: Collection[str]) -> list[PartitionLog]:
        """Deleted topics' committed offsets go with them, as Kafka's onPartitionsDeleted
        does, so a topic created again under a name starts every group afresh: gone from
        memory at once, their tombstones durable once the returned logs are synced."""
        logs: dict[int, PartitionLog] = {}
        for group_id, records in self.committed_offsets.remove_topics(topics).items():
            logs[self.partition_for(group_id)] = self._append(group_id, records)
        if logs:
            log.info("deleted topics' offsets removed", topics=sorted(topics), partitions=len(logs))
        return list(logs.values())

    # --- groups as a whole -------------------------------------------------------------

    def check_deletable(self, group_id: str) -> None:
        """DeleteGroups' refusals: a group that does not exist, or has members."""
        if not self.membership.exists(group_id) and group_id not in self.committed_offsets:
            raise KafkaError(ErrorCode.group_id_not_found, f"group {group_id!r} does not exist")
        self.membership.check_empty(group_id)

    async def delete_group(self, group_id: str) -> None:
        self.check_deletable(group_id)
        records = [*self.committed_offsets.remove_group(group_id), *self.membership.delete(group_id)]
        await self._write(group_id, records)

    def known_groups(self) -> list[str]:
        return sorted(self.membership.group_ids() | set(self.offsets))
