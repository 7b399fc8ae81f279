"""Group membership: every group's members, generations (classic) and epochs (the consumer
group protocol, KIP-848), rebalances, their records on `__consumer_offsets` and their
replay (Kafka's GroupMetadataManager).  Committed offsets are not here
(broker/coordinator/offsets.py): the shard (broker/coordinator/coordinator.py) asks this
manager whether a commit may be made, whether a group is empty or may be deleted, and
stores the offsets there.

Records are written through the shard, which owns the log: `append` writes them now,
`write` too and returns the wait for their fsync.  Expiry (sessions, pending member ids,
join deadlines, idle groups) runs from the shard's `tick`, by the broker's injected clock.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import structlog

from broker.clock import Clock
from broker.coordinator.classic_members import ClassicMembers
from broker.coordinator.config import CoordinatorConfig
from broker.coordinator.consumer_group import ConsumerGroup
from broker.coordinator.consumer_group_records import RECORD_KINDS as CONSUMER_GROUP_RECORDS
from broker.coordinator.consumer_groups import ConsumerGroups, Heartbeat, HeartbeatResult
from broker.coordinator.group import Group, GroupState, JoinRequest, JoinResult, Member
from broker.coordinator.group_records import group_record, read_group, tombstone
from broker.coordinator.records import Rec
from broker.metadata import MetadataStore
from broker.protocol.errors import ErrorCode, KafkaError

log = structlog.get_logger(__name__)

# g: a classic group's record (broker/coordinator/group_records.py); the others a consumer group's
RECORD_KINDS = CONSUMER_GROUP_RECORDS | {"g"}
MAX_GROUP_ID = 249  # Kafka's limit on a group id's length is that of a topic name

Append = Callable[[str, list[Rec]], object]
Write = Callable[[str, list[Rec]], Awaitable[None]]


class GroupMembership:
    """Classic groups (`groups`) and consumer groups (`consumer.groups`) by id; a group id is
    in at most one of them."""

    def __init__(
        self, store: MetadataStore, clock: Clock, config: CoordinatorConfig, append: Append, write: Write
    ) -> None:
        self.store = store
        self.clock = clock
        self.config = config
        self._append = append
        self._write = write
        self.groups: dict[str, Group] = {}
        self.empty_since: dict[str, int] = {}  # when each classic group last became empty
        self.consumer = ConsumerGroups(store, config.consumer, self._claim_for_consumer_group)
        self.classic_members = ClassicMembers(self.consumer)
        self.is_share_group: Callable[[str], bool] = lambda _: False  # share group ids are taken

    # --- queries -----------------------------------------------------------------------

    def exists(self, group_id: str) -> bool:
        return group_id in self.groups or group_id in self.consumer.groups

    def group_ids(self) -> set[str]:
        return set(self.groups) | set(self.consumer.groups)

    def has_members(self, group_id: str) -> bool:
        """Whether the group has members: while it has, its offsets never expire (KIP-211)."""
        group = self.groups.get(group_id)
        consumer_group = self.consumer.groups.get(group_id)
        return bool((group is not None and group.members) or (consumer_group is not None and consumer_group.members))

    # --- records -----------------------------------------------------------------------

    def replay(self, key: list[Any], value: dict[str, Any] | None, now: int) -> None:
        """Apply one record of RECORD_KINDS; raises, changing nothing, on a shape the
        coordinator does not write."""
        if key[0] != "g":
            self.consumer.replay(key, value)
            return
        group_id = key[1]
        if value is None:
            self.groups.pop(group_id, None)
            self.empty_since.pop(group_id, None)
            return
        group, empty_since = read_group(group_id, value, now, self.config.initial_rebalance_delay_ms)
        if empty_since is not None:
            self.empty_since[group_id] = empty_since
        self.groups[group_id] = group

    def loaded(self, now: int) -> None:
        """After the replay: the consumer groups' owners and timers."""
        self.consumer.loaded(now)

    def _group_record(self, group: Group) -> Rec:
        return group_record(group, self.empty_since.get(group.group_id))

    async def _persist_group(self, group: Group) -> None:
        await self._write(group.group_id, [self._group_record(group)])

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
        return result, self._write(req.group_id, records)

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
        return converted, [*records, tombstone(group_id)]

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
            await self._write(req.group_id, records)
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

    def expire_members(self, now: int) -> None:
        """Members past their session, pending member ids past their deadline, join phases
        past their end."""
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

    def drop_idle(self, now: int, has_offsets: Callable[[str], bool]) -> None:
        """Groups empty for a cleanup interval and with no offsets go away, as Kafka's
        periodic metadata cleanup does."""
        for group_id, group in list(self.groups.items()):
            if group.state != GroupState.EMPTY or group.members or group.pending or has_offsets(group_id):
                continue
            if now - group.state_changed_ms < self.config.cleanup_interval_ms:
                continue
            if group.generation > 0:
                self._append(group_id, [tombstone(group_id)])
            self._forget(group_id)
        for group_id, consumer_group in list(self.consumer.groups.items()):
            idle = now - consumer_group.state_changed_ms >= self.config.cleanup_interval_ms
            if not consumer_group.members and not has_offsets(group_id) and idle:
                self._append(group_id, self.consumer.delete(group_id))

    def drop_if_empty(self, group_id: str) -> list[Rec]:
        """The group whose last offsets expired goes too if it is empty (Kafka's
        maybeDeleteGroup); returns its tombstones."""
        records: list[Rec] = []
        group = self.groups.get(group_id)
        if group is not None and group.state == GroupState.EMPTY and not group.pending:
            records.append(tombstone(group_id))
            self._forget(group_id)
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None and not consumer_group.members:
            records.extend(self.consumer.delete(group_id))
        return records

    def _forget(self, group_id: str) -> None:
        group = self.groups.pop(group_id, None)
        if group is not None:
            group.state = GroupState.DEAD
        self.empty_since.pop(group_id, None)

    # --- offsets: whether they may be committed or read ----------------------------------

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

    def add_standalone(self, group_id: str, now: int) -> None:
        """A commit from outside the group protocol creates an empty group to hang its
        offsets on (its record `standalone_record` is in the commit's batch)."""
        self._group(group_id)
        self.empty_since[group_id] = now

    def standalone_record(self, group_id: str, now: int) -> Rec:
        """The record of the group `add_standalone` makes (pure: built off the loop too)."""
        return group_record(Group(group_id, self.config.initial_rebalance_delay_ms), now)

    # --- DeleteGroups ------------------------------------------------------------------

    def check_empty(self, group_id: str) -> None:
        """DeleteGroups' refusal of a group with members (or members joining)."""
        group = self.groups.get(group_id)
        consumer_group = self.consumer.groups.get(group_id)
        if (group is not None and (group.members or group.pending)) or (consumer_group and consumer_group.members):
            raise KafkaError(ErrorCode.non_empty_group, f"group {group_id!r} has active members")

    def delete(self, group_id: str) -> list[Rec]:
        """Forget the (empty) group; returns the tombstones of its records."""
        records = self.consumer.delete(group_id) if group_id in self.consumer.groups else []
        records.append(tombstone(group_id))
        self._forget(group_id)
        return records
