"""The group coordinator: every consumer group and its committed offsets (kept by
broker/coordinator/offsets.py; membership is here and in the modules it calls).

Committed offsets and group metadata are records in the compacted internal topic
`__consumer_offsets` of the broker's own log (msgpack keys and values), in the partition
`crc32(group) % offsets.topic.num.partitions` (Kafka places a group the same way, by its
own hash).  They are replayed on start; a commit is answered only after its record is
fsynced.  Compaction keeps the topic's size bounded (one live record per group and
partition, tombstones for deleted ones).

Expiry (sessions, pending member ids, join deadlines, offset retention) runs in `tick`,
driven by the broker's injected clock.
"""

from __future__ import annotations

import asyncio
import uuid
import zlib
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import msgpack
import structlog

from broker.clock import Clock
from broker.coordinator.classic_members import ClassicMembers
from broker.coordinator.consumer_group import ConsumerGroup
from broker.coordinator.consumer_groups import ConsumerGroupConfig, ConsumerGroups, Heartbeat, HeartbeatResult, Rec
from broker.coordinator.group import Group, GroupState, JoinRequest, JoinResult, Member
from broker.coordinator.offsets import CommittedOffset as CommittedOffset  # noqa: PLC0414 - re-exported: committed() returns it
from broker.coordinator.offsets import CommittedOffsets, commit_records
from broker.log.partition_log import PartitionLog
from broker.metadata import MetadataStore
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import Record, build_batch
from broker.replay import is_int, need

log = structlog.get_logger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
CONSUMER_GROUP_RECORDS = frozenset({"cg", "cgm", "cgt", "cgtm", "cgc"})  # broker/coordinator/consumer_groups.py
MANY_OFFSETS = 1_000  # a commit of more has its batch built in a worker thread
MAX_GROUP_ID = 249  # Kafka's limit on a group id's length is that of a topic name
# Kafka's settings of its coordinators' compacted internal topics (the transaction coordinator's too).
COORDINATOR_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": str(8 * 1024 * 1024),
    "retention.ms": "-1",
    "min.cleanable.dirty.ratio": "0.5",
    "message.timestamp.after.max.ms": str((1 << 63) - 1),
}


@dataclass(frozen=True)
class CoordinatorConfig:
    offsets_partitions: int = 1
    initial_rebalance_delay_ms: int = 100
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    max_metadata_bytes: int = 4096
    cleanup_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    consumer: ConsumerGroupConfig = field(default_factory=ConsumerGroupConfig)  # the consumer group protocol (KIP-848)


Sync = Callable[[Iterable[PartitionLog]], Awaitable[None]]


class GroupCoordinator:
    def __init__(self, store: MetadataStore, clock: Clock, config: CoordinatorConfig, sync: Sync) -> None:
        self.store = store
        self.clock = clock
        self.config = config
        self._sync = sync
        self._packer = msgpack.Packer()  # packb builds a Packer per call; commits pack 24 values
        self.groups: dict[str, Group] = {}
        self.committed_offsets = CommittedOffsets()
        # Read by the handlers, the admin API and metrics: a group's entry exists while it has any.
        self.offsets = self.committed_offsets.by_group
        self.empty_since: dict[str, int] = {}  # when each group last became empty
        self._last_cleanup_ms = clock.now_ms()
        self.consumer = ConsumerGroups(store, config.consumer, self._claim_for_consumer_group)
        self.classic_members = ClassicMembers(self.consumer)
        self.is_share_group: Callable[[str], bool] = lambda _: False  # share group ids are taken
        topic = store.get(OFFSETS_TOPIC)
        self.partitions = topic.partitions if topic is not None else config.offsets_partitions
        if topic is not None:
            self._load()

    def ensure_offsets_topic(self) -> None:
        """Create `__consumer_offsets` on first use, as Kafka does."""
        if self.store.get(OFFSETS_TOPIC) is None:
            self.store.create_topic(OFFSETS_TOPIC, self.partitions, COORDINATOR_TOPIC_CONFIG, internal=True)

    # --- persistence -----------------------------------------------------------------

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
        self.consumer.loaded(now)
        log.info(
            "group coordinator loaded", groups=len(self.groups), offsets=sum(len(o) for o in self.offsets.values())
        )

    def _replay(self, record: Record, now: int) -> None:
        """Apply one record; raises (before changing anything) when it has a shape the
        coordinator does not write."""
        key = msgpack.unpackb(record.key or b"\x90")
        need(isinstance(key, list) and len(key) >= 2 and isinstance(key[1], str), "key is not [kind, group, ...]")
        value = None if record.value is None else msgpack.unpackb(record.value)
        need(value is None or isinstance(value, dict), "value is not a map")
        if key[0] == "o":
            self.committed_offsets.replay(key, value)
        elif key[0] in CONSUMER_GROUP_RECORDS:
            self.consumer.replay(key, value)
        elif key[0] == "g":
            group_id = key[1]
            if value is None:
                self.groups.pop(group_id, None)
                self.empty_since.pop(group_id, None)
                return
            self._replay_group(group_id, value, now)
        else:
            need(False, f"unknown record kind {key[0]!r}")

    def _replay_group(self, group_id: str, value: dict[str, Any], now: int) -> None:
        generation: Any = value.get("generation")
        members: Any = value.get("members")
        protocol_type, protocol, leader = value.get("protocol_type"), value.get("protocol"), value.get("leader")
        need(is_int(generation) and isinstance(members, list), "group value is malformed")
        need(all(x is None or isinstance(x, str) for x in (protocol_type, protocol, leader)), "group names malformed")
        need(all(_member_row(m) for m in members), "a member of the group is malformed")
        empty_since: Any = value.get("empty_since")
        group = Group(group_id, self.config.initial_rebalance_delay_ms)
        group.generation = generation
        group.protocol_type = protocol_type
        group.protocol_name = protocol
        group.leader = leader
        for m in members:
            member = Member(
                member_id=m[0],
                group_instance_id=m[1],
                client_id=m[2],
                client_host=m[3],
                session_timeout_ms=m[4],
                rebalance_timeout_ms=m[5],
                protocol_type=group.protocol_type or "",
                protocols=[(group.protocol_name or "", m[6])],
                last_heartbeat_ms=now,
                assignment=m[7],
            )
            group.members[member.member_id] = member
            if member.group_instance_id:
                group.static_members[member.group_instance_id] = member.member_id
        # Members come back after a restart with their ids: a generation in progress
        # resumes as Stable and expires members that do not return.
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        if not group.members:
            self.empty_since[group_id] = empty_since if is_int(empty_since) else now
        self.groups[group_id] = group

    def _append(self, group_id: str, records: list[tuple[list[object], dict[str, object] | None]]) -> PartitionLog:
        now = self.clock.now_ms()
        pack = self._packer.pack
        batch = build_batch(
            [
                Record(i, now, pack(key), None if value is None else pack(value))
                for i, (key, value) in enumerate(records)
            ]
        )
        plog = self._log_for(group_id)
        plog.append_internal(batch)
        return plog

    def _group_record(self, group: Group) -> tuple[list[object], dict[str, object] | None]:
        return (
            ["g", group.group_id],
            {
                "generation": group.generation,
                "protocol_type": group.protocol_type,
                "protocol": group.protocol_name,
                "leader": group.leader,
                "empty_since": self.empty_since.get(group.group_id),
                "members": [
                    [
                        m.member_id,
                        m.group_instance_id,
                        m.client_id,
                        m.client_host,
                        m.session_timeout_ms,
                        m.rebalance_timeout_ms,
                        m.metadata_for(group.protocol_name or ""),
                        m.assignment,
                    ]
                    for m in group.members.values()
                ],
            },
        )

    async def _persist_group(self, group: Group) -> None:
        plog = self._append(group.group_id, [self._group_record(group)])
        await self._sync([plog])

    # --- validation ------------------------------------------------------------------

    def _check_group_id(self, group_id: str | None) -> str:
        if not group_id:
            raise KafkaError(ErrorCode.invalid_group_id, "the group id is empty")
        if len(group_id) > MAX_GROUP_ID:
            raise KafkaError(ErrorCode.invalid_group_id, f"the group id is longer than {MAX_GROUP_ID} characters")
        if self.is_share_group(group_id):
            raise KafkaError(ErrorCode.group_id_not_found, f"Group {group_id} is a share group.")
        return group_id

    def _group(self, group_id: str) -> Group:
        group = self.groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            group = self.groups[group_id] = Group(group_id, self.config.initial_rebalance_delay_ms)
            group.state_changed_ms = self.clock.now_ms()
        return group

    # --- JoinGroup -------------------------------------------------------------------

    async def join(self, req: JoinRequest) -> JoinResult:
        self._check_group_id(req.group_id)
        if not self.config.min_session_timeout_ms <= req.session_timeout_ms <= self.config.max_session_timeout_ms:
            raise KafkaError(
                ErrorCode.invalid_session_timeout,
                f"session timeout {req.session_timeout_ms} ms is outside [{self.config.min_session_timeout_ms}, "
                f"{self.config.max_session_timeout_ms}]",
            )
        now = self.clock.now_ms()
        known = req.group_id in self.groups or req.group_id in self.consumer.groups
        if req.member_id and not known:
            raise KafkaError(ErrorCode.unknown_member_id, f"member {req.member_id!r} is not in group {req.group_id!r}")
        self._claim_for_classic_group(req.group_id)
        consumer_group = self.consumer.groups.get(req.group_id)
        if consumer_group is not None:
            return await self._classic_join(consumer_group, req)
        group = self._group(req.group_id)
        if not group.supports(req.protocol_type, req.protocols):
            raise KafkaError(ErrorCode.inconsistent_group_protocol, "the member's protocols do not match the group's")
        if req.rebalance_timeout_ms < 0:
            req = replace(req, rebalance_timeout_ms=req.session_timeout_ms)  # JoinGroup v0 has none

        if not req.member_id:
            new_id = f"{req.client_id or 'member'}-{uuid.uuid4()}"
            if req.group_instance_id is not None:
                return await self._join_static(group, req, new_id, now)
            group.pending[new_id] = now + req.session_timeout_ms
            if req.require_known_member_id:
                # KIP-394: hand out the id first; the member joins with it.
                return JoinResult(-1, None, None, "", new_id, [], ErrorCode.member_id_required)
            req = replace(req, member_id=new_id)

        member = group.members.get(req.member_id)
        if member is None:
            member = self._add_member(group, req, now)
        else:
            if (
                req.group_instance_id is not None
                and group.static_members.get(req.group_instance_id) != member.member_id
            ):
                raise KafkaError(
                    ErrorCode.fenced_instance_id, f"instance {req.group_instance_id} has a newer member id"
                )
            changed = member.protocols != req.protocols
            member.protocols = req.protocols
            member.session_timeout_ms = req.session_timeout_ms
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
            member.last_heartbeat_ms = now
            if group.state == GroupState.STABLE and not changed and member.member_id != group.leader:
                return group.join_result(member.member_id)
            if group.state == GroupState.COMPLETING_REBALANCE and not changed:
                return group.join_result(member.member_id)
            if group.state != GroupState.PREPARING_REBALANCE:
                self._rebalance(group, now)
        return await self._await_join(group, member)

    def _add_member(self, group: Group, req: JoinRequest, now: int) -> Member:
        if req.member_id not in group.pending:
            raise KafkaError(
                ErrorCode.unknown_member_id, f"member {req.member_id!r} is not in group {group.group_id!r}"
            )
        del group.pending[req.member_id]
        member = Member(
            req.member_id,
            req.group_instance_id,
            req.client_id,
            req.client_host,
            req.session_timeout_ms,
            req.rebalance_timeout_ms,
            req.protocol_type,
            req.protocols,
            now,
        )
        group.members[member.member_id] = member
        if req.group_instance_id is not None:
            group.static_members[req.group_instance_id] = member.member_id
        if group.protocol_type is None or len(group.members) == 1:
            group.protocol_type = req.protocol_type
        self.empty_since.pop(group.group_id, None)
        if group.state == GroupState.PREPARING_REBALANCE:
            group.member_arrived(now)
        self._rebalance(group, now)
        return member

    async def _join_static(self, group: Group, req: JoinRequest, new_id: str, now: int) -> JoinResult:
        instance_id = req.group_instance_id
        assert instance_id is not None
        old_id = group.static_members.get(instance_id)
        old = group.members.get(old_id) if old_id else None
        if old is None:
            group.pending[new_id] = now + req.session_timeout_ms
            return await self.join(replace(req, member_id=new_id, require_known_member_id=False))
        # A known static member restarted: it takes over its old identity (and its
        # partitions) under a new member id, without a rebalance when nothing changed.
        group.members.pop(old.member_id)
        for future in (old.join_future, old.sync_future):
            if future is not None and not future.done():
                future.set_exception(KafkaError(ErrorCode.fenced_instance_id))
        old.member_id = new_id
        old.client_id, old.client_host = req.client_id, req.client_host
        old.session_timeout_ms, old.rebalance_timeout_ms = req.session_timeout_ms, req.rebalance_timeout_ms
        old.last_heartbeat_ms = now
        old.join_future = old.sync_future = None
        changed = old.protocols != req.protocols
        old.protocols = req.protocols
        group.members[new_id] = old
        group.static_members[instance_id] = new_id
        if group.leader == old_id:
            group.leader = new_id
        if group.state == GroupState.STABLE and not changed:
            await self._persist_group(group)
            return group.join_result(new_id)
        if group.state != GroupState.PREPARING_REBALANCE:
            self._rebalance(group, now)
        return await self._await_join(group, old)

    def _rebalance(self, group: Group, now: int) -> None:
        if group.state == GroupState.PREPARING_REBALANCE:
            return
        initial = group.state == GroupState.EMPTY
        group.prepare_rebalance(now, initial=initial)
        log.info("rebalancing", group=group.group_id, members=len(group.members), generation=group.generation)

    async def _await_join(self, group: Group, member: Member) -> JoinResult:
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        member.join_future = future
        self._maybe_complete_join(group, self.clock.now_ms())
        return await future

    def _maybe_complete_join(self, group: Group, now: int) -> None:
        if group.join_due(now):
            group.complete_join(now)
            if group.state == GroupState.EMPTY:
                self.empty_since[group.group_id] = now

    # --- the consumer group protocol (KIP-848) -----------------------------------------

    def consumer_heartbeat(self, req: Heartbeat) -> tuple[HeartbeatResult, Awaitable[None] | None]:
        """The heartbeat's effect at once (in request order); what it wrote is durable
        once the returned coroutine, if any, has run."""
        self._check_group_id(req.group_id)
        result, records = self.consumer.heartbeat(req, self.clock.now_ms())
        if result.member_epoch < 0:  # it left
            records.extend(self._maybe_downgrade(req.group_id))
        if not records:
            return result, None
        plog = self._append(req.group_id, records)
        return result, self._sync([plog])

    def _claim_for_consumer_group(self, group_id: str, now: int) -> tuple[ConsumerGroup | None, list[Rec]]:
        """A consumer-protocol member arrives where a classic group is: an empty one makes
        way (its offsets stay); a Stable one with members becomes a consumer group with them
        (Kafka's online upgrade, broker/coordinator/classic_members.py)."""
        group = self.groups.get(group_id)
        if group is None:
            return None, []
        converted: ConsumerGroup | None = None
        records: list[Rec] = []
        if group.members or group.pending:
            converted, records = self.classic_members.upgrade(group, now)
            log.info("classic group upgraded to a consumer group", group=group_id, members=len(group.members))
        del self.groups[group_id]
        self.empty_since.pop(group_id, None)
        return converted, [*records, (["g", group_id], None)]

    def _claim_for_classic_group(self, group_id: str) -> None:
        """A classic member may take over an empty consumer group (a group with members
        takes it in: `_classic_join`)."""
        group = self.consumer.groups.get(group_id)
        if group is not None and not group.members:
            self._append(group_id, self.consumer.delete(group_id))

    def _maybe_downgrade(self, group_id: str) -> list[Rec]:
        """When the last consumer-protocol member has gone, the classic members left make a
        classic group again, which rebalances."""
        group = self.consumer.groups.get(group_id)
        if group is None or not group.members or any(m.classic is None for m in group.members.values()):
            return []
        classic = self.classic_members.downgrade(group, self.clock.now_ms(), self.config.initial_rebalance_delay_ms)
        records = self.consumer.delete(group_id)
        self.groups[group_id] = classic
        log.info("consumer group downgraded to a classic group", group=group_id, members=len(classic.members))
        return [*records, self._group_record(classic)]

    async def _classic_join(self, group: ConsumerGroup, req: JoinRequest) -> JoinResult:
        result, records = self.classic_members.join(group, req, self.clock.now_ms())
        if records:
            await self._sync([self._append(req.group_id, records)])
        return result

    # --- SyncGroup -------------------------------------------------------------------

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
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            name, assignment = self.classic_members.sync(consumer_group, member_id, generation, self.clock.now_ms())
            if (protocol_type not in (None, "consumer")) or (protocol_name not in (None, name)):
                raise KafkaError(
                    ErrorCode.inconsistent_group_protocol, "protocol type or name differs from the member's"
                )
            return "consumer", name, assignment
        group, member = self._member_of_generation(group_id, generation, member_id, group_instance_id)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            raise KafkaError(ErrorCode.inconsistent_group_protocol, "protocol type or name differs from the group's")
        member.last_heartbeat_ms = self.clock.now_ms()
        if group.state == GroupState.PREPARING_REBALANCE:
            raise KafkaError(ErrorCode.rebalance_in_progress)
        if group.state == GroupState.STABLE:
            return group.protocol_type, group.protocol_name, member.assignment
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        member.sync_future = future
        if member_id == group.leader:
            # As Kafka: the assignment is persisted first, then every member is answered, so
            # no member acts on an assignment a crash could lose, nor before the leader.
            generation = group.generation
            group.assign(assignments)
            try:
                await self._persist_group(group)
            except OSError as e:
                log.error("cannot persist a group's assignment", group=group_id, error=str(e))  # noqa: TRY400 - an OSError, no traceback needed
                future.cancel()  # the leader gets the error raised below instead
                for waiting in group.members.values():
                    if waiting.sync_future is not None and not waiting.sync_future.done():
                        waiting.sync_future.set_exception(KafkaError(ErrorCode.coordinator_not_available, str(e)))
                raise KafkaError(ErrorCode.coordinator_not_available, "the assignment could not be stored") from e
            if group.generation == generation and group.state == GroupState.COMPLETING_REBALANCE:
                group.complete_sync(self.clock.now_ms())
        assignment = await future
        return group.protocol_type, group.protocol_name, assignment

    def _member_of_generation(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> tuple[Group, Member]:
        """Kafka's validateMember plus the generation check shared by SyncGroup,
        Heartbeat and OffsetCommit."""
        self._check_group_id(group_id)
        group = self.groups.get(group_id)
        self._fence_stale_instance(group, member_id, instance_id)
        if group is None or member_id not in group.members:
            raise KafkaError(ErrorCode.unknown_member_id, f"member {member_id!r} is not in group {group_id!r}")
        member = group.members[member_id]
        self._check_instance(group, member, instance_id)
        if generation != group.generation:
            raise KafkaError(ErrorCode.illegal_generation, f"generation {generation} is not {group.generation}")
        return group, member

    def _check_instance(self, group: Group, member: Member, instance_id: str | None) -> None:
        if instance_id is not None and group.static_members.get(instance_id) != member.member_id:
            raise KafkaError(ErrorCode.fenced_instance_id, f"instance {instance_id} belongs to another member")

    def _fence_stale_instance(self, group: Group | None, member_id: str, instance_id: str | None) -> None:
        """Kafka's validateMember: a request naming a static instance that now belongs to
        another member id comes from a stale incarnation: FENCED_INSTANCE_ID (fatal to
        it), not UNKNOWN_MEMBER_ID (which would make it rejoin and fence the new one)."""
        if group is None or instance_id is None:
            return
        current = group.static_members.get(instance_id)
        if current is not None and current != member_id:
            raise KafkaError(ErrorCode.fenced_instance_id, f"instance {instance_id} belongs to member {current}")

    # --- Heartbeat and LeaveGroup ----------------------------------------------------

    def heartbeat(self, group_id: str, generation: int, member_id: str, group_instance_id: str | None) -> None:
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            self.classic_members.heartbeat(consumer_group, member_id, generation, self.clock.now_ms())
            return
        group, member = self._member_of_generation(group_id, generation, member_id, group_instance_id)
        member.last_heartbeat_ms = self.clock.now_ms()
        if group.state == GroupState.PREPARING_REBALANCE:
            raise KafkaError(ErrorCode.rebalance_in_progress)

    def leave(self, group_id: str, member_id: str | None, group_instance_id: str | None) -> None:
        self._check_group_id(group_id)
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            if group_instance_id is not None and not member_id:
                member_id = consumer_group.static.get(group_instance_id)
            if not member_id or member_id not in consumer_group.members:
                raise KafkaError(ErrorCode.unknown_member_id, f"member {member_id!r} is not in group {group_id!r}")
            records = self.consumer.fence(consumer_group, member_id, "left the group", self.clock.now_ms())
            self._append(group_id, [*records, *self._maybe_downgrade(group_id)])
            return
        group = self.groups.get(group_id)
        if group is None:
            raise KafkaError(ErrorCode.unknown_member_id, f"group {group_id!r} has no members")
        if group_instance_id is not None:
            found = group.static_members.get(group_instance_id)
            if found is None or (member_id and member_id != found):
                raise KafkaError(
                    ErrorCode.fenced_instance_id if found else ErrorCode.unknown_member_id,
                    f"instance {group_instance_id} is not a member",
                )
            member_id = found
        if not member_id or member_id not in group.members:
            if member_id in group.pending:
                del group.pending[member_id]
                return
            raise KafkaError(ErrorCode.unknown_member_id, f"member {member_id!r} is not in group {group_id!r}")
        self._remove(group, member_id, "left the group")

    def _remove(self, group: Group, member_id: str, reason: str) -> None:
        now = self.clock.now_ms()
        group.remove_member(member_id)
        log.info("member removed", group=group.group_id, member=member_id, reason=reason)
        if group.state == GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group, now)
        elif group.members:
            self._rebalance(group, now)
        else:
            group.state = GroupState.EMPTY
            group.state_changed_ms = now
            group.generation += 1
            group.leader = group.protocol_name = None
            self.empty_since[group.group_id] = now
            self._append(group.group_id, [self._group_record(group)])

    # --- expiry ----------------------------------------------------------------------

    def tick(self) -> None:
        now = self.clock.now_ms()
        for group_id, records in self.consumer.expire(now):
            self._append(group_id, [*records, *self._maybe_downgrade(group_id)])
        for group in list(self.groups.values()):
            for member_id, deadline in list(group.pending.items()):
                if now >= deadline:
                    del group.pending[member_id]
            for member in list(group.members.values()):
                if member.awaiting_join or (member.sync_future is not None and not member.sync_future.done()):
                    continue
                if now - member.last_heartbeat_ms > member.session_timeout_ms:
                    self._remove(group, member.member_id, "session timeout")
            self._maybe_complete_join(group, now)
        if now - self._last_cleanup_ms >= self.config.cleanup_interval_ms:
            self._last_cleanup_ms = now
            self._expire_offsets(now)
            self._drop_idle_groups(now)

    def _drop_idle_groups(self, now: int) -> None:
        """Empty groups with no offsets go away, as Kafka's periodic metadata cleanup does."""
        for group_id, group in list(self.groups.items()):
            if group.state != GroupState.EMPTY or group.members or group.pending or group_id in self.offsets:
                continue
            if now - group.state_changed_ms < self.config.cleanup_interval_ms:
                continue
            if group.generation > 0:
                self._append(group_id, [(["g", group_id], None)])
            group.state = GroupState.DEAD
            del self.groups[group_id]
            self.empty_since.pop(group_id, None)
        for group_id, consumer_group in list(self.consumer.groups.items()):
            idle = now - consumer_group.state_changed_ms >= self.config.cleanup_interval_ms
            if not consumer_group.members and group_id not in self.offsets and idle:
                self._append(group_id, self.consumer.delete(group_id))

    def _expire_offsets(self, now: int) -> None:
        retention = self.config.offsets_retention_ms
        for group_id in list(self.offsets):
            group = self.groups.get(group_id)
            consumer_group = self.consumer.groups.get(group_id)
            if (group is not None and group.members) or (consumer_group is not None and consumer_group.members):
                continue  # offsets of an active group never expire (KIP-211)
            expired = self.committed_offsets.expired(group_id, self.empty_since.get(group_id), now, retention)
            if expired:
                self._append(group_id, self.committed_offsets.remove(group_id, expired))
                log.info("offsets expired", group=group_id, partitions=len(expired))
            if group_id not in self.offsets:
                if group is not None and group.state == GroupState.EMPTY and not group.pending:
                    self._append(group_id, [(["g", group_id], None)])
                    group.state = GroupState.DEAD
                    del self.groups[group_id]
                    self.empty_since.pop(group_id, None)
                if consumer_group is not None and not consumer_group.members:
                    self._append(group_id, self.consumer.delete(group_id))

    # --- offsets ---------------------------------------------------------------------

    def validate_commit(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> None:
        """Kafka's checks before any partition is looked at."""
        self._check_group_id(group_id)
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            # Admin tools and assign() consumers commit with no epoch while the group is empty.
            if not (generation < 0 and not consumer_group.members):
                self.consumer.validate_member(consumer_group, member_id, generation)
            return
        group = self.groups.get(group_id)
        if generation < 0 and (not member_id or group is None or not group.members):
            # A commit from outside the group protocol (assign() consumers, tools):
            # allowed while the group has no members.
            if group is not None and group.members:
                raise KafkaError(ErrorCode.unknown_member_id, "the group has active members")
            return
        if group is None:
            # Kafka: GROUP_ID_NOT_FOUND from OffsetCommit v9 on (the handler answers
            # older versions with ILLEGAL_GENERATION, as Kafka does).
            raise KafkaError(ErrorCode.group_id_not_found, f"group {group_id!r} does not exist")
        _, member = self._member_of_generation(group_id, generation, member_id, instance_id)
        if group.state == GroupState.COMPLETING_REBALANCE:
            raise KafkaError(ErrorCode.rebalance_in_progress)
        member.last_heartbeat_ms = self.clock.now_ms()

    def validate_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> None:
        """OffsetFetch v9+ from a member of a consumer group: its epoch must be current
        (requests with neither, from tools, read freely)."""
        group = self.consumer.groups.get(group_id)
        if group is None or (member_epoch < 0 and not member_id):
            return
        self.consumer.validate_member(group, member_id or "", member_epoch)

    async def commit(self, group_id: str, offsets: dict[tuple[str, int], tuple[int, int, str]]) -> None:
        """Store validated offsets durably: (topic, partition) -> (offset, epoch, metadata).

        Kafka writes a commit as one batch.  Here the offsets change in memory and their batch
        is appended in one step, so memory and the log agree and no other change of the group
        comes between; the batch is built before, for a commit of many offsets in a worker
        thread while the loop serves others (50,000 records took it a second)."""
        if not offsets:
            return
        now = self.clock.now_ms()
        standalone = self._standalone(group_id)
        while True:
            if len(offsets) <= MANY_OFFSETS:
                batch = self._commit_batch(group_id, offsets, now, standalone)
                break
            batch = await asyncio.to_thread(self._commit_batch, group_id, offsets, now, standalone)
            if self._standalone(group_id) == standalone:
                break
            standalone = not standalone  # the group appeared or went meanwhile: its record with it
        self.committed_offsets.apply(group_id, offsets, now)
        if standalone:  # a standalone commit creates an empty group to hang the offsets on
            self._group(group_id)
            self.empty_since[group_id] = now
        plog = self._log_for(group_id)
        plog.append_internal(batch)
        await self._sync([plog])

    def _standalone(self, group_id: str) -> bool:
        return self.groups.get(group_id) is None and group_id not in self.consumer.groups

    def _commit_batch(
        self, group_id: str, offsets: Mapping[tuple[str, int], tuple[int, int, str]], now: int, standalone: bool
    ) -> bytes:
        """The batch of a commit (pure: its own packer, safe in a worker thread)."""
        records = commit_records(group_id, offsets, now)
        if standalone:  # the empty group `_group` makes, as it will be when the batch is appended
            key, value = self._group_record(Group(group_id, self.config.initial_rebalance_delay_ms))
            records.append((key, None if value is None else {**value, "empty_since": now}))
        pack = msgpack.Packer().pack
        return build_batch(
            [Record(i, now, pack(k), None if v is None else pack(v)) for i, (k, v) in enumerate(records)]
        )

    def committed(self, group_id: str) -> Mapping[tuple[str, int], CommittedOffset]:
        return self.committed_offsets.of(group_id)

    async def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> None:
        records = self.committed_offsets.remove(group_id, partitions)
        if records:
            await self._sync([self._append(group_id, records)])

    def forget_topics(self, topics: Collection[str]) -> list[PartitionLog]:
        """Deleted topics' committed offsets go with them, as Kafka's onPartitionsDeleted
        does, so a topic created again under a name starts every group afresh: gone from
        memory at once, their tombstones durable once the returned logs are synced."""
        logs: dict[int, PartitionLog] = {}
        for group_id, partitions in self.committed_offsets.of_topics(topics).items():
            plog = self._append(group_id, self.committed_offsets.remove(group_id, partitions))
            logs[self.partition_for(group_id)] = plog
        if logs:
            log.info("deleted topics' offsets removed", topics=sorted(topics), partitions=len(logs))
        return list(logs.values())

    def check_deletable(self, group_id: str) -> None:
        """DeleteGroups' refusals: a group that does not exist, or has members."""
        group = self.groups.get(group_id)
        consumer_group = self.consumer.groups.get(group_id)
        if group is None and consumer_group is None and group_id not in self.offsets:
            raise KafkaError(ErrorCode.group_id_not_found, f"group {group_id!r} does not exist")
        if (group is not None and (group.members or group.pending)) or (consumer_group and consumer_group.members):
            raise KafkaError(ErrorCode.non_empty_group, f"group {group_id!r} has active members")

    async def delete_group(self, group_id: str) -> None:
        self.check_deletable(group_id)
        group = self.groups.get(group_id)
        consumer_group = self.consumer.groups.get(group_id)
        records = self.committed_offsets.remove_group(group_id)
        if consumer_group is not None:
            records.extend(self.consumer.delete(group_id))
        records.append((["g", group_id], None))
        plog = self._append(group_id, records)
        self.empty_since.pop(group_id, None)
        if group is not None:
            group.state = GroupState.DEAD
            self.groups.pop(group_id, None)
        await self._sync([plog])

    def known_groups(self) -> list[str]:
        return sorted(set(self.groups) | set(self.consumer.groups) | set(self.offsets))


def _member_row(m: object) -> bool:
    """[member_id, instance_id, client_id, host, session_ms, rebalance_ms, metadata, assignment]"""
    return (
        isinstance(m, list)
        and len(m) == 8
        and isinstance(m[0], str)
        and (m[1] is None or isinstance(m[1], str))
        and isinstance(m[2], str)
        and isinstance(m[3], str)
        and is_int(m[4])
        and is_int(m[5])
        and isinstance(m[6], bytes)
        and isinstance(m[7], bytes)
    )
