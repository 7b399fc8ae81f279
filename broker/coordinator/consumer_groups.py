"""The consumer group protocol (KIP-848): ConsumerGroupHeartbeat's behaviour, session and
revocation timers, and the records each change writes to `__consumer_offsets`.

Each heartbeat (1) creates or updates its member, bumping the group epoch when the
subscription changed; (2) recomputes the target assignment with the group's server-side
assignor when the group epoch is ahead of it; (3) moves the member one step towards its
target (broker/coordinator/consumer_group.py).  What changed is written as records split
the way Kafka splits them (broker/coordinator/consumer_group_records.py), and the heartbeat
is answered once they are fsynced.  Heartbeats that change nothing write nothing.

Regular-expression subscriptions use RE2 (Kafka uses RE2/J): matching is linear in the
topic name whatever the pattern, so a member's pattern cannot stall the broker.
"""

from __future__ import annotations

import collections
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import re2
import structlog

from broker.coordinator.assignors import ASSIGNORS, Assignment
from broker.coordinator.consumer_group import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    is_subset,
)
from broker.coordinator.consumer_group_records import (
    current_record,
    group_record,
    member_record,
    member_tombstones,
    target_record,
)
from broker.coordinator.consumer_group_records import replay as replay_record
from broker.coordinator.records import Rec as Rec  # noqa: PLC0414 - re-exported: the heartbeat returns them
from broker.group_configs import parse_value
from broker.metadata import MetadataStore
from broker.protocol.errors import ErrorCode, KafkaError

log = structlog.get_logger(__name__)

MAX_REGEX_CHARS = 1024  # longer patterns are refused: no topic name is longer than 249


@dataclass(frozen=True)
class ConsumerGroupConfig:
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 250
    assignors: tuple[str, ...] = ("uniform", "range")  # the first is the default
    max_size: int = 1000


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A ConsumerGroupHeartbeat as the coordinator sees it; None: unchanged since the last."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int  # -1: unchanged
    topic_names: tuple[str, ...] | None
    topic_regex: str | None
    server_assignor: str | None
    owned: Assignment | None
    client_id: str
    client_host: str
    generated_member_id: bool = False  # v0: the broker names new members
    may_describe: Callable[[str], bool] | None = None  # the member's view of topics (None: all)


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    member_id: str
    member_epoch: int
    assignment: Assignment | None  # None: the member's assignment did not change


class ConsumerGroups:
    def __init__(
        self,
        store: MetadataStore,
        config: ConsumerGroupConfig,
        claim: Callable[[str, int], tuple[ConsumerGroup | None, list[Rec]]],
        overrides: Callable[[str], Mapping[str, str]] | None = None,
    ) -> None:
        self.store = store
        self.config = config
        # A group's own configs (kafka-configs --entity-type groups), checked when they were set.
        self._overrides = overrides or (lambda group_id: store.group_configs.get(group_id, {}))
        # A classic group of that id: gone if empty, converted if not (or raises).
        self._claim = claim
        self.groups: dict[str, ConsumerGroup] = {}
        self.rebalances = 0

    # --- the group's configs -------------------------------------------------------------

    def _own(self, group_id: str, name: str, default: int) -> int:
        raw = self._overrides(group_id).get(name)
        value = default if raw is None else parse_value(name, raw)
        return value if isinstance(value, int) else default

    def session_timeout_ms(self, group_id: str) -> int:
        """The group's consumer.session.timeout.ms, else the broker's."""
        return self._own(group_id, "consumer.session.timeout.ms", self.config.session_timeout_ms)

    def heartbeat_interval_ms(self, group_id: str) -> int:
        """The group's consumer.heartbeat.interval.ms, else the broker's: what members are told."""
        return self._own(group_id, "consumer.heartbeat.interval.ms", self.config.heartbeat_interval_ms)

    # --- the heartbeat -----------------------------------------------------------------

    def heartbeat(self, req: Heartbeat, now: int) -> tuple[HeartbeatResult, list[Rec]]:
        self._validate(req)
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(req, now)
        records: list[Rec] = []
        group = self.groups.get(req.group_id)
        if group is None:
            if req.member_epoch != 0:
                raise KafkaError(ErrorCode.group_id_not_found, f"consumer group {req.group_id} not found")
            converted, claimed = self._claim(req.group_id, now)
            records.extend(claimed)
            group = converted or ConsumerGroup(req.group_id, state_changed_ms=now)
            self.groups[req.group_id] = group
        member, new = self._member(group, req, records)
        before = member.assigned
        fields: dict[str, object] = {
            "instance_id": req.instance_id,
            "rack_id": req.rack_id,
            "server_assignor": req.server_assignor,
            "rebalance_timeout_ms": req.rebalance_timeout_ms if req.rebalance_timeout_ms >= 0 else None,
            "client_id": req.client_id,
            "client_host": req.client_host,
        }
        if member.classic is not None:  # a classic member restarted with the consumer protocol
            member.classic = None
            new = True
        self._apply(
            group,
            member,
            new=new,
            fields=fields,
            topic_names=req.topic_names,
            topic_regex=req.topic_regex,
            owned=req.owned,
            now=now,
            records=records,
            may_describe=req.may_describe,
        )
        member.session_deadline_ms = now + self.session_timeout_ms(group.group_id)
        # As Kafka: the assignment is sent to a member that joins, whose assignment changed, or
        # that reported its partitions (it may have missed the response that told it).
        full = req.member_epoch == 0 or req.owned is not None
        assignment = member.assigned if full or member.assigned != before else None
        return HeartbeatResult(member.member_id, member.epoch, assignment), records

    def _apply(
        self,
        group: ConsumerGroup,
        member: ConsumerMember,
        *,
        new: bool,
        fields: dict[str, object],
        topic_names: tuple[str, ...] | None,
        topic_regex: str | None,
        owned: Assignment | None,
        now: int,
        records: list[Rec],
        may_describe: Callable[[str], bool] | None = None,
    ) -> None:
        """The heartbeat's three steps for `member`, in either protocol: update the member
        (bumping the group epoch if its subscription changed), recompute the target if the
        epoch moved, then one reconciliation step."""
        bump = group.epoch == 0 or new
        changed = new
        for name, value in fields.items():
            if value is not None and getattr(member, name) != value:
                setattr(member, name, value)
                changed = True
        if topic_names is not None and tuple(sorted(set(topic_names))) != member.topic_names:
            member.topic_names = tuple(sorted(set(topic_names)))
            changed = bump = True
        if topic_regex is not None and (topic_regex or None) != member.topic_regex:
            member.topic_regex = topic_regex or None
            changed = bump = True
            member.regex_version = -1
        if member.regex_version != self.store.version and self._match(member, may_describe):
            changed = bump = True
        if member.member_id not in group.members:
            group.add_member(member)
        if changed:
            records.append(member_record(group, member))
        if bump or group.metadata_version != self.store.version:
            subscribed = self.resolve(group)
            if subscribed != group.subscribed:
                group.subscribed = subscribed
                bump = True
        if bump:
            group.epoch += 1
            group.rebalances += 1
            self.rebalances += 1
            records.append(group_record(group))
            log.info("consumer group epoch bumped", group=group.group_id, epoch=group.epoch, members=len(group.members))
        if group.epoch > group.assignment_epoch:
            self._assign(group, records)
        if group.reconcile(member, owned, now):
            records.append(current_record(group, member))

    def classic_heartbeat(
        self,
        group: ConsumerGroup,
        member: ConsumerMember,
        *,
        topics: tuple[str, ...],
        owned: Assignment,
        rebalance_timeout_ms: int,
        client: tuple[str, str],
        now: int,
    ) -> tuple[int, list[Rec]]:
        """A classic member's JoinGroup: the same steps, with what its subscription says it
        still owns; returns its epoch (the generation it is told)."""
        records: list[Rec] = []
        fields: dict[str, object] = {
            "rebalance_timeout_ms": rebalance_timeout_ms,
            "client_id": client[0],
            "client_host": client[1],
        }
        new = not member.topic_names and member.epoch == 0
        self._apply(
            group,
            member,
            new=new,
            fields=fields,
            topic_names=topics,
            topic_regex=None,
            owned=owned,
            now=now,
            records=records,
        )
        # A member that gave its partitions up before rejoining (every classic one that
        # rebalances eagerly) has finished revoking already.
        if member.state == MemberState.UNREVOKED_PARTITIONS and group.reconcile(member, owned, now):
            records.append(current_record(group, member))
        if not any(r[0][0] == "cgm" for r in records):
            records.append(member_record(group, member))  # its protocols may have changed
        return member.epoch, records

    def snapshot(self, group: ConsumerGroup) -> list[Rec]:
        """Every record of a group, as written when a classic group becomes a consumer group."""
        records: list[Rec] = [group_record(group), (["cgt", group.group_id], {"epoch": group.assignment_epoch})]
        for member in group.members.values():
            records.append(member_record(group, member))
            records.append(target_record(group, member.member_id))
            records.append(current_record(group, member))
        return records

    def _validate(self, req: Heartbeat) -> None:
        def invalid(message: str) -> KafkaError:
            return KafkaError(ErrorCode.invalid_request, message)

        if not req.group_id:
            raise invalid("GroupId can't be empty.")
        if not req.member_id and not (req.generated_member_id and req.member_epoch == 0):
            raise invalid("MemberId can't be empty.")
        if req.instance_id == "":
            raise invalid("InstanceId can't be empty.")
        if req.rack_id == "":
            raise invalid("RackId can't be empty.")
        if req.member_epoch == 0:
            if req.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if req.owned is None or req.owned:
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if req.topic_names is None and req.topic_regex is None:
                raise invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.")
        elif req.member_epoch == STATIC_LEAVE_EPOCH:
            if req.instance_id is None:
                raise invalid("InstanceId can't be null.")
        elif req.member_epoch < STATIC_LEAVE_EPOCH:
            raise invalid("MemberEpoch is invalid.")
        if req.rebalance_timeout_ms < -1:
            raise invalid("RebalanceTimeoutMs is invalid.")
        if req.server_assignor is not None and req.server_assignor not in self.config.assignors:
            raise KafkaError(
                ErrorCode.unsupported_assignor,
                f"ServerAssignor {req.server_assignor} is not supported. "
                f"Supported assignors: {', '.join(self.config.assignors)}.",
            )
        if req.topic_regex:
            compile_regex(req.topic_regex)

    def _member(self, group: ConsumerGroup, req: Heartbeat, records: list[Rec]) -> tuple[ConsumerMember, bool]:
        member_id = req.member_id or str(uuid.uuid4())
        member = group.members.get(member_id)
        if req.instance_id is not None:
            holder = group.static.get(req.instance_id)
            if req.member_epoch == 0 and holder is not None and holder != member_id:
                old = group.members[holder]
                if old.epoch != STATIC_LEAVE_EPOCH:
                    raise KafkaError(
                        ErrorCode.unreleased_instance_id,
                        f"Static member {member_id} with instance id {req.instance_id} cannot join the group "
                        f"because the instance id is owned by {holder} member.",
                    )
                return self.replace_static(group, old, member_id, records), False
            if req.member_epoch != 0:
                if holder is None:
                    raise KafkaError(ErrorCode.unknown_member_id, f"Instance id {req.instance_id} is unknown.")
                if holder != member_id:
                    raise KafkaError(
                        ErrorCode.fenced_instance_id,
                        f"Static member {member_id} with instance id {req.instance_id} was fenced by member {holder}.",
                    )
        if member is None:
            if req.member_epoch != 0:
                raise KafkaError(
                    ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group.group_id}."
                )
            if len(group.members) >= self.config.max_size:
                raise KafkaError(
                    ErrorCode.group_max_size_reached,
                    f"The consumer group has reached its maximum capacity of {self.config.max_size} members.",
                )
            return ConsumerMember(member_id), True
        if req.member_epoch != 0:
            _check_epoch(member, req.member_epoch, req.owned)
        return member, False

    def replace_static(
        self, group: ConsumerGroup, old: ConsumerMember, member_id: str, records: list[Rec]
    ) -> ConsumerMember:
        """A static member back under a new member id takes over its predecessor's
        partitions and epoch: no rebalance (KIP-345's promise, kept by KIP-848)."""
        target = group.target.get(old.member_id)
        group.remove_member(old.member_id)
        records.extend(member_tombstones(group.group_id, old.member_id))
        member = ConsumerMember(
            member_id,
            instance_id=old.instance_id,
            rack_id=old.rack_id,
            client_id=old.client_id,
            client_host=old.client_host,
            topic_names=old.topic_names,
            topic_regex=old.topic_regex,
            regex_topics=old.regex_topics,  # as matched: a pattern that matches the same is no change
            regex_version=old.regex_version,
            server_assignor=old.server_assignor,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
            state=old.state,
            epoch=old.previous_epoch if old.epoch == STATIC_LEAVE_EPOCH else old.epoch,
            previous_epoch=old.previous_epoch,
            assigned=old.assigned,
            revoking=old.revoking,
            classic=old.classic,
            revoke_deadline_ms=old.revoke_deadline_ms,
        )
        group.add_member(member)
        # Written whatever the heartbeat changes next: the new member id has no record yet.
        records.append(member_record(group, member))
        if target is not None:
            group.target[member_id] = target
            records.append(target_record(group, member_id))
        for assignment in (member.assigned, member.revoking):
            for topic, parts in assignment.items():
                for p in parts:
                    group.owners[(topic, p)] = member_id
        records.append(current_record(group, member))
        log.info("static member replaced", group=group.group_id, instance=old.instance_id, member=member_id)
        return member

    def _leave(self, req: Heartbeat, now: int) -> tuple[HeartbeatResult, list[Rec]]:
        group = self.groups.get(req.group_id)
        if group is None:
            raise KafkaError(ErrorCode.group_id_not_found, f"consumer group {req.group_id} not found")
        member_id = req.member_id
        if req.instance_id is not None:
            holder = group.static.get(req.instance_id)
            if holder is None:
                raise KafkaError(ErrorCode.unknown_member_id, f"Instance id {req.instance_id} is unknown.")
            if holder != member_id:
                raise KafkaError(
                    ErrorCode.fenced_instance_id,
                    f"Static member {member_id} with instance id {req.instance_id} was fenced by member {holder}.",
                )
        member = group.members.get(member_id)
        if member is None:
            raise KafkaError(
                ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group.group_id}."
            )
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            # It keeps its partitions for its session timeout: an instance back in time
            # takes them over without a rebalance.
            if member.epoch != STATIC_LEAVE_EPOCH:
                member.previous_epoch, member.epoch = member.epoch, STATIC_LEAVE_EPOCH
            log.info("static member left for now", group=group.group_id, member=member_id)
            return HeartbeatResult(member_id, STATIC_LEAVE_EPOCH, None), [current_record(group, member)]
        records = self.fence(group, member_id, "left the group", now)
        return HeartbeatResult(member_id, LEAVE_EPOCH, None), records

    def fence(self, group: ConsumerGroup, member_id: str, reason: str, now: int) -> list[Rec]:
        group.remove_member(member_id)
        group.epoch += 1
        group.state_changed_ms = now
        group.rebalances += 1
        self.rebalances += 1
        log.info(
            "consumer group member removed", group=group.group_id, member=member_id, reason=reason, epoch=group.epoch
        )
        return [*member_tombstones(group.group_id, member_id), group_record(group)]

    # --- assignment --------------------------------------------------------------------

    def resolve(self, group: ConsumerGroup) -> frozenset[tuple[str, uuid.UUID, int]]:
        """The topics the members subscribe to, by name or pattern, as they exist now."""
        group.metadata_version = self.store.version
        names: set[str] = set()
        for member in group.members.values():
            names.update(member.topic_names)
            names.update(member.regex_topics)
        topics = self.store.topics
        return frozenset((n, topics[n].topic_id, topics[n].partitions) for n in names if n in topics)

    def _match(self, member: ConsumerMember, may_describe: Callable[[str], bool] | None) -> bool:
        """Resolve the member's pattern over today's topics, those it may describe only (as
        Kafka does: a pattern must not hand a member topics hidden from it).  Returns
        whether the matches changed."""
        matched: frozenset[str] = frozenset()
        if member.topic_regex:
            regex = compile_regex(member.topic_regex)
            matched = frozenset(
                n
                for n, t in self.store.topics.items()
                if not t.internal and regex.fullmatch(n) and (may_describe is None or may_describe(n))
            )
        member.regex_version = self.store.version
        if matched == member.regex_topics:
            return False
        member.regex_topics = matched
        return True

    def member_topics(self, group: ConsumerGroup, member: ConsumerMember) -> set[str]:
        return {n for n, _, _ in group.subscribed if n in member.topic_names or n in member.regex_topics}

    def assignor_of(self, group: ConsumerGroup) -> str:
        """The assignor most members ask for, else the broker's default."""
        asked = collections.Counter(m.server_assignor for m in group.members.values() if m.server_assignor)
        if not asked:
            return self.config.assignors[0]
        top = max(asked.values())
        return next(a for a in self.config.assignors if asked.get(a) == top)

    def _assign(self, group: ConsumerGroup, records: list[Rec]) -> None:
        ids = {n: topic_id for n, topic_id, _ in group.subscribed}
        partitions = {topic_id: count for _, topic_id, count in group.subscribed}
        subscriptions = {
            m.member_id: frozenset(ids[n] for n in self.member_topics(group, m)) for m in group.members.values()
        }
        target = ASSIGNORS[self.assignor_of(group)](subscriptions, partitions, group.target)
        for member_id, assignment in target.items():
            if group.target.get(member_id) != assignment:
                group.target[member_id] = assignment
                records.append(target_record(group, member_id))
        group.assignment_epoch = group.epoch
        records.append((["cgt", group.group_id], {"epoch": group.assignment_epoch}))

    # --- timers ------------------------------------------------------------------------

    def expire(self, now: int) -> list[tuple[str, list[Rec]]]:
        """Members past their session timeout, or that did not give partitions up within
        their rebalance timeout, are fenced: their partitions go to the others."""
        out = []
        for group in self.groups.values():
            for member in list(group.members.values()):
                if now > member.session_deadline_ms:
                    out.append((group.group_id, self.fence(group, member.member_id, "session timeout", now)))
                elif member.revoke_deadline_ms is not None and now > member.revoke_deadline_ms:
                    out.append(
                        (group.group_id, self.fence(group, member.member_id, "partitions not revoked in time", now))
                    )
        return out

    def restart_timers(self, now: int) -> None:
        for group in self.groups.values():
            for member in group.members.values():
                member.session_deadline_ms = now + self.session_timeout_ms(group.group_id)
                if member.state == MemberState.UNREVOKED_PARTITIONS:
                    member.revoke_deadline_ms = now + member.rebalance_timeout_ms

    # --- offsets of members ------------------------------------------------------------

    def validate_member(self, group: ConsumerGroup, member_id: str, epoch: int) -> None:
        """OffsetCommit and OffsetFetch (v9+) from a member: its epoch must be current."""
        member = group.members.get(member_id)
        if member is None:
            raise KafkaError(
                ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group.group_id}."
            )
        if epoch != member.epoch:
            raise KafkaError(
                ErrorCode.stale_member_epoch,
                f"The member epoch {epoch} of member {member_id} is not its current epoch {member.epoch}.",
            )

    def delete(self, group_id: str) -> list[Rec]:
        group = self.groups.pop(group_id)
        records: list[Rec] = [(["cg", group_id], None), (["cgt", group_id], None)]
        for member_id in list(group.members) + [m for m in group.target if m not in group.members]:
            records.extend(member_tombstones(group_id, member_id))
        return records

    def replay(self, key: list[Any], value: dict[str, Any] | None) -> None:
        """Apply one record of a consumer group (broker/coordinator/consumer_group_records.py)."""
        replay_record(self.groups, key, value)

    def loaded(self, now: int) -> None:
        """After the replay: owners from the members' assignments, timers from now."""
        for group in self.groups.values():
            group.rebuild_owners()
        self.restart_timers(now)


def _check_epoch(member: ConsumerMember, received: int, owned: Assignment | None) -> None:
    if received > member.epoch:
        raise KafkaError(
            ErrorCode.fenced_member_epoch,
            f"The consumer group member has a greater member epoch ({received}) than the one known by the group "
            f"coordinator ({member.epoch}). The member must abandon all its partitions and rejoin.",
        )
    if received < member.epoch and (received != member.previous_epoch or not is_subset(owned, member.assigned)):
        raise KafkaError(
            ErrorCode.fenced_member_epoch,
            f"The consumer group member has a smaller member epoch ({received}) than the one known by the group "
            f"coordinator ({member.epoch}). The member must abandon all its partitions and rejoin.",
        )


def compile_regex(pattern: str) -> Any:
    if len(pattern) > MAX_REGEX_CHARS:
        raise KafkaError(
            ErrorCode.invalid_regular_expression,
            f"SubscribedTopicRegex is longer than {MAX_REGEX_CHARS} characters.",
        )
    try:
        return _compiled(pattern)
    except re2.error as e:
        why = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        raise KafkaError(
            ErrorCode.invalid_regular_expression,
            f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: {why}.",
        ) from e


_CACHE: dict[str, Any] = {}
_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a member's bad pattern is its error, not a line in the broker's log


def _compiled(pattern: str) -> Any:
    regex = _CACHE.get(pattern)
    if regex is None:
        if len(_CACHE) >= 1024:
            _CACHE.clear()
        regex = _CACHE[pattern] = re2.compile(pattern, options=_OPTIONS)
    return regex
