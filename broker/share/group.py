"""A share group's membership (KIP-932): ShareGroupHeartbeat's behaviour and the `simple`
assignor.

Unlike a consumer group, a share group needs no reconciliation: members may share a
partition, so nothing is revoked before it is given to another.  A join, a leave or a new
subscription bumps the group epoch and recomputes the assignment; each member takes its new
assignment, and the epoch with it, at its next heartbeat.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from broker.coordinator.assignors import Assignment
from broker.protocol.errors import ErrorCode, KafkaError

LEAVE_EPOCH = -1
MAX_MEMBER_ID = 36 * 4  # a client-made UUID is 22 (base64) or 36 characters


class ShareGroupState(enum.Enum):
    EMPTY = "Empty"
    STABLE = "Stable"


@dataclass(slots=True)
class ShareMember:
    member_id: str
    epoch: int = 0
    previous_epoch: int = -1  # accepted too: the answer that moved the member on may be lost
    client_id: str = ""
    client_host: str = ""
    rack_id: str | None = None
    topic_names: tuple[str, ...] = ()
    assigned: Assignment = field(default_factory=dict)
    session_deadline_ms: int = 0


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)

    @property
    def state(self) -> ShareGroupState:
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY

    def subscribed(self) -> Collection[str]:
        """Every topic name a member subscribes to, once (a lone member's own names, without
        copying its 100,000 of them into a set)."""
        if len(self.members) == 1:
            return next(iter(self.members.values())).topic_names
        return {t for m in self.members.values() for t in m.topic_names}


@dataclass(frozen=True, slots=True)
class ShareHeartbeat:
    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None
    topic_names: tuple[str, ...] | None  # None: unchanged
    client_id: str
    client_host: str
    names_sorted: bool = False  # topic_names sorted and distinct already (the handler did it in steps)


@dataclass(frozen=True, slots=True)
class ShareHeartbeatResult:
    member_epoch: int
    assignment: Assignment | None  # None: unchanged since the member was last told


def unknown_member(group_id: str, member_id: str) -> KafkaError:
    """A share request from a member id the group does not have (never joined, left, or
    expired): it may not open a session or acquire records."""
    return KafkaError(ErrorCode.unknown_member_id, f"Member {member_id} is not a member of share group {group_id}.")


def validate(req: ShareHeartbeat) -> None:
    def invalid(message: str) -> KafkaError:
        return KafkaError(ErrorCode.invalid_request, message)

    if not req.member_id:
        raise invalid("MemberId can't be empty.")
    if len(req.member_id) > MAX_MEMBER_ID:
        raise invalid(f"MemberId is longer than {MAX_MEMBER_ID} characters.")
    if req.member_epoch < LEAVE_EPOCH:
        raise invalid(f"MemberEpoch is {req.member_epoch}: it must be -1, 0 or positive.")
    if req.member_epoch == 0 and not req.topic_names:
        raise invalid("SubscribedTopicNames must be set in first request.")
    if req.topic_names is not None and any(not t for t in req.topic_names):
        raise invalid("SubscribedTopicNames contains an empty topic name.")


def join_or_beat(
    group: ShareGroup, req: ShareHeartbeat, now: int, session_timeout_ms: int, max_size: int
) -> tuple[ShareMember, bool]:
    """The member the heartbeat is from (created on join); True when the group's membership
    or subscriptions changed, so its assignment must be recomputed."""
    member = group.members.get(req.member_id)
    if member is None:
        if req.member_epoch != 0:
            raise KafkaError(ErrorCode.unknown_member_id, f"Member {req.member_id} is not a member of the group.")
        if len(group.members) >= max_size:
            raise KafkaError(
                ErrorCode.group_max_size_reached,
                f"The share group has reached its maximum capacity of {max_size} members.",
            )
        member = group.members[req.member_id] = ShareMember(req.member_id)
        changed = True
    elif req.member_epoch not in (0, member.epoch, member.previous_epoch):
        relation = "greater" if req.member_epoch > member.epoch else "smaller"
        raise KafkaError(
            ErrorCode.fenced_member_epoch,
            f"The share group member has a {relation} member epoch ({req.member_epoch}) than the one known by "
            f"the group coordinator ({member.epoch}). The member must abandon all its partitions and rejoin.",
        )
    else:
        changed = False
    member.client_id, member.client_host, member.rack_id = req.client_id, req.client_host, req.rack_id
    if req.topic_names is not None:
        # once: a member may name 100,000
        names = req.topic_names if req.names_sorted else tuple(sorted(set(req.topic_names)))
        if names != member.topic_names:
            member.topic_names = names
            changed = True
    member.session_deadline_ms = now + session_timeout_ms
    return member, changed


def simple(members: Mapping[str, frozenset[uuid.UUID]], partitions: Mapping[uuid.UUID, int]) -> dict[str, Assignment]:
    """Kafka's `simple` share assignor, per topic over the members subscribed to it: with
    no more members than partitions, the partitions dealt out in turn (each to one member);
    with more, the members dealt over the partitions (a partition shared by several), so no
    member is idle and no partition unread."""
    out: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    for topic in sorted(partitions, key=str):
        count = partitions[topic]
        subscribed = sorted(m for m, topics in members.items() if topic in topics)
        if not subscribed or count <= 0:
            continue
        if len(subscribed) <= count:
            for p in range(count):
                out[subscribed[p % len(subscribed)]].setdefault(topic, set()).add(p)
        else:
            for i, m in enumerate(subscribed):
                out[m].setdefault(topic, set()).add(i % count)
    return {m: {t: frozenset(ps) for t, ps in assigned.items()} for m, assigned in out.items()}
