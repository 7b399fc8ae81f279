"""Classic-protocol members inside a consumer group: Kafka's online upgrade and downgrade.

A group moving to the consumer group protocol (KIP-848) has its consumers restarted one by
one with `group.protocol=consumer`.  Meanwhile the group holds members of both kinds, as in
Kafka:

- **Upgrade**: the first consumer-protocol member to join a Stable classic group of the
  "consumer" protocol type converts it: every classic member becomes a member of the consumer
  group, keeping its subscription, its assignment and its generation as member epoch.
- **Classic members in a consumer group** keep speaking JoinGroup, SyncGroup, Heartbeat and
  LeaveGroup.  The coordinator assigns them as it assigns everyone: JoinGroup answers at once
  with the member's epoch as the generation and no leader (so no member computes an
  assignment), SyncGroup with the member's current assignment in the consumer protocol's
  encoding.  When the group changes, a classic member's Heartbeat answers
  REBALANCE_IN_PROGRESS and it rejoins: the partitions it reports owning in its subscription
  tell the coordinator what it has given up.
- **Downgrade**: when the last consumer-protocol member leaves, the group becomes a classic
  group again (the remaining members rejoin through a classic rebalance).
"""

from __future__ import annotations

import uuid

from broker.coordinator.assignors import Assignment
from broker.coordinator.consumer_group import ClassicProtocol, ConsumerGroup, ConsumerMember, MemberState
from broker.coordinator.consumer_groups import ConsumerGroups, Rec
from broker.coordinator.consumer_protocol import (
    assignment_partitions,
    decode_subscription,
    encode_assignment,
)
from broker.coordinator.group import Group, GroupState, JoinRequest, JoinResult, Member
from broker.protocol.errors import ErrorCode, KafkaError

PROTOCOL_TYPE = "consumer"


class ClassicMembers:
    def __init__(self, consumer: ConsumerGroups) -> None:
        self.consumer = consumer

    # --- upgrade and downgrade -----------------------------------------------------------

    def upgrade(self, classic: Group, now: int) -> tuple[ConsumerGroup, list[Rec]]:
        """A Stable classic consumer group as a consumer group: members, assignments and
        generation carried over."""
        if classic.protocol_type != PROTOCOL_TYPE or classic.state != GroupState.STABLE:
            raise KafkaError(
                ErrorCode.group_id_not_found,
                f"Cannot upgrade classic group {classic.group_id} to a consumer group: it is "
                f"{classic.state.value} with protocol type {classic.protocol_type!r}.",
            )
        ids = {name: topic.topic_id for name, topic in self.consumer.store.topics.items()}
        group = ConsumerGroup(classic.group_id, epoch=classic.generation, assignment_epoch=classic.generation)
        group.state_changed_ms = now
        for m in classic.members.values():
            subscription = decode_subscription(m.metadata_for(classic.protocol_name or ""))
            held = assignment_partitions(m.assignment)
            if subscription is None or held is None:
                raise KafkaError(
                    ErrorCode.group_id_not_found,
                    f"Cannot upgrade classic group {classic.group_id}: member {m.member_id}'s "
                    "subscription or assignment does not decode.",
                )
            assigned = {ids[t]: frozenset(ps) for t, ps in held.items() if t in ids and ps}
            member = ConsumerMember(
                m.member_id,
                instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                topic_names=tuple(sorted(set(subscription[0]))),
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                epoch=classic.generation,
                previous_epoch=classic.generation,
                assigned=assigned,
                classic=ClassicProtocol(tuple(m.protocols), m.session_timeout_ms),
            )
            member.session_deadline_ms = now + m.session_timeout_ms
            group.add_member(member)
            group.target[member.member_id] = dict(assigned)
        group.rebuild_owners()
        group.subscribed = self.consumer.resolve(group)
        records = self.consumer.snapshot(group)
        return group, records

    def downgrade(self, group: ConsumerGroup, now: int, initial_delay_ms: int) -> Group:
        """The classic group of the classic members left, set to rebalance at once."""
        names = {topic.topic_id: name for name, topic in self.consumer.store.topics.items()}
        classic = Group(group.group_id, initial_delay_ms)
        classic.generation = group.epoch
        classic.protocol_type = PROTOCOL_TYPE
        for m in group.members.values():
            assert m.classic is not None
            member = Member(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                m.classic.session_timeout_ms,
                m.rebalance_timeout_ms,
                PROTOCOL_TYPE,
                list(m.classic.protocols),
                now,
                assignment=encode_assignment({names[t]: sorted(ps) for t, ps in m.assigned.items() if t in names}),
            )
            classic.members[member.member_id] = member
            if member.group_instance_id is not None:
                classic.static_members[member.group_instance_id] = member.member_id
        first = next(iter(group.members.values()))
        assert first.classic is not None
        classic.protocol_name = first.classic.name
        classic.leader = first.member_id
        classic.state = GroupState.STABLE
        classic.prepare_rebalance(now)
        return classic

    # --- the classic APIs ----------------------------------------------------------------

    def join(self, group: ConsumerGroup, req: JoinRequest, now: int) -> tuple[JoinResult, list[Rec]]:
        if req.protocol_type != PROTOCOL_TYPE or not req.protocols:
            raise KafkaError(
                ErrorCode.inconsistent_group_protocol,
                f"Member {req.member_id or '(new)'}'s protocols are not supported: group {group.group_id} "
                "is a consumer group.",
            )
        subscription = decode_subscription(req.protocols[0][1])
        if subscription is None:
            raise KafkaError(ErrorCode.inconsistent_group_protocol, "the member's subscription does not decode")
        member_id = req.member_id or f"{req.client_id or 'member'}-{uuid.uuid4()}"
        if not req.member_id and req.require_known_member_id and req.group_instance_id is None:
            return JoinResult(-1, None, None, "", member_id, [], ErrorCode.member_id_required), []
        records: list[Rec] = []
        member = group.members.get(member_id)
        if req.group_instance_id is not None:
            holder = group.static.get(req.group_instance_id)
            if holder is not None and holder != member_id:
                old = group.members[holder]
                if req.member_id:
                    raise KafkaError(
                        ErrorCode.fenced_instance_id, f"instance {req.group_instance_id} belongs to member {holder}"
                    )
                # A static classic member back under a new id takes its predecessor's place.
                member = self.consumer.replace_static(group, old, member_id, records)
        if member is None:
            # As Kafka: a member id the group does not know (one handed out with
            # MEMBER_ID_REQUIRED, or from before a restart) joins as new.
            member = ConsumerMember(member_id, instance_id=req.group_instance_id)
            group.add_member(member)
        elif member.classic is None:
            raise KafkaError(ErrorCode.unknown_member_id, f"Member {member_id} does not use the classic protocol.")
        topics, owned_names = subscription
        owned = self._owned(owned_names)
        member.classic = ClassicProtocol(tuple(req.protocols), req.session_timeout_ms)
        result, more = self.consumer.classic_heartbeat(
            group,
            member,
            topics=tuple(topics),
            owned=owned,
            rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms >= 0 else req.session_timeout_ms,
            client=(req.client_id, req.client_host),
            now=now,
        )
        records.extend(more)
        member.session_deadline_ms = now + req.session_timeout_ms
        return JoinResult(result, PROTOCOL_TYPE, member.classic.name, "", member_id, []), records

    def _owned(self, owned: dict[str, list[int]]) -> Assignment:
        ids = {name: topic.topic_id for name, topic in self.consumer.store.topics.items()}
        return {ids[t]: frozenset(ps) for t, ps in owned.items() if t in ids}

    def member(self, group: ConsumerGroup, member_id: str, generation: int) -> ConsumerMember:
        member = group.members.get(member_id)
        if member is None or member.classic is None:
            raise KafkaError(ErrorCode.unknown_member_id, f"member {member_id!r} is not in group {group.group_id!r}")
        if generation != member.epoch:
            raise KafkaError(
                ErrorCode.illegal_generation,
                f"The request generation id {generation} is not equal to the member epoch {member.epoch} "
                f"of member {member_id}.",
            )
        return member

    def sync(self, group: ConsumerGroup, member_id: str, generation: int, now: int) -> tuple[str, bytes]:
        member = self.member(group, member_id, generation)
        if group.epoch > member.epoch and member.state != MemberState.UNREVOKED_PARTITIONS:
            # Not while it gives partitions up: what it gets here tells it which.
            raise KafkaError(
                ErrorCode.rebalance_in_progress,
                f"A new rebalance is triggered in group {group.group_id} and member {member_id} "
                "should rejoin to catch up.",
            )
        member.session_deadline_ms = now + self._session(member)
        names = {topic.topic_id: name for name, topic in self.consumer.store.topics.items()}
        assigned = {names[t]: sorted(ps) for t, ps in member.assigned.items() if t in names}
        assert member.classic is not None
        return member.classic.name, encode_assignment(assigned)

    def heartbeat(self, group: ConsumerGroup, member_id: str, generation: int, now: int) -> None:
        member = self.member(group, member_id, generation)
        member.session_deadline_ms = now + self._session(member)
        self._check_rebalance(group, member)

    def _check_rebalance(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        """A classic member learns of a change by rejoining; the rejoin tells what it gave up."""
        behind = group.epoch > member.epoch or member.state == MemberState.UNRELEASED_PARTITIONS
        if behind or member.state == MemberState.UNREVOKED_PARTITIONS:
            raise KafkaError(
                ErrorCode.rebalance_in_progress,
                f"A new rebalance is triggered in group {group.group_id} and member {member.member_id} "
                "should rejoin to catch up.",
            )

    @staticmethod
    def _session(member: ConsumerMember) -> int:
        assert member.classic is not None
        return member.classic.session_timeout_ms
