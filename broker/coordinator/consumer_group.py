"""One consumer group under the consumer group protocol (KIP-848): members, epochs and the
reconciliation of each member's assignment with the group's target, sans-io.

Three epochs order everything:
- the **group epoch** rises whenever what the assignment depends on changes: a member
  joins, leaves or changes its subscription, or a subscribed topic appears, goes or grows;
- the **assignment epoch** is the group epoch the current target assignment was computed at;
- each **member epoch** is the assignment epoch the member has caught up with.

A member moves towards its target one heartbeat at a time.  Partitions it must give up are
revoked first (the member keeps its epoch until it reports them gone); partitions it gains
that another member still holds wait until that member has released them.  So no partition
is ever owned by two members, and members that lose nothing keep consuming throughout.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field

from broker.coordinator.assignors import Assignment

LEAVE_EPOCH = -1  # the member leaves
STATIC_LEAVE_EPOCH = -2  # a static member leaves for now, keeping its partitions


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"  # waits for the member to give partitions up
    UNRELEASED_PARTITIONS = "unreleased_partitions"  # waits for others to release the member's new partitions


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


@dataclass(frozen=True, slots=True)
class ClassicProtocol:
    """A member that speaks the classic protocol inside a consumer group (an online
    upgrade): its protocols (name, subscription) and session timeout, from its JoinGroup."""

    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int

    @property
    def name(self) -> str:
        return self.protocols[0][0]


@dataclass(slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    topic_names: tuple[str, ...] = ()
    topic_regex: str | None = None
    regex_topics: frozenset[str] = frozenset()  # what the pattern matched, as the member may see it
    regex_version: int = -1  # the metadata version it was matched at (not stored: matched again)
    server_assignor: str | None = None
    rebalance_timeout_ms: int = 300_000
    state: MemberState = MemberState.STABLE
    epoch: int = 0
    previous_epoch: int = 0
    assigned: Assignment = field(default_factory=dict)
    revoking: Assignment = field(default_factory=dict)
    classic: ClassicProtocol | None = None
    # Not stored: timers restart when the broker does.
    session_deadline_ms: int = 0
    revoke_deadline_ms: int | None = None

    def subscription(self) -> tuple[tuple[str, ...], str | None]:
        return self.topic_names, self.topic_regex


@dataclass
class ConsumerGroup:
    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    # Who holds each partition, being revoked included: a partition is free when absent.
    owners: dict[tuple[uuid.UUID, int], str] = field(default_factory=dict)
    # What the target was computed from: the subscribed topics (name, id, partitions), and
    # the metadata version that was read at.
    subscribed: frozenset[tuple[str, uuid.UUID, int]] = frozenset()
    metadata_version: int = -1
    state_changed_ms: int = 0
    rebalances: int = 0  # epoch bumps since the broker started (metrics)

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(m.epoch != self.assignment_epoch or m.state != MemberState.STABLE for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def add_member(self, member: ConsumerMember) -> None:
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static[member.instance_id] = member.member_id

    def remove_member(self, member_id: str) -> ConsumerMember | None:
        """Drop a member and free every partition it held; the caller bumps the epoch."""
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self.target.pop(member_id, None)
        if member.instance_id is not None and self.static.get(member.instance_id) == member_id:
            del self.static[member.instance_id]
        self._release(member, member.assigned)
        self._release(member, member.revoking)
        return member

    def rebuild_owners(self) -> None:
        self.owners = {}
        for member in self.members.values():
            for assignment in (member.assigned, member.revoking):
                for topic, parts in assignment.items():
                    for p in parts:
                        self.owners.setdefault((topic, p), member.member_id)

    def _release(self, member: ConsumerMember, assignment: Assignment) -> None:
        for topic, parts in assignment.items():
            for p in parts:
                if self.owners.get((topic, p)) == member.member_id:
                    del self.owners[(topic, p)]

    # --- reconciliation ----------------------------------------------------------------

    def reconcile(self, member: ConsumerMember, owned: Assignment | None, now_ms: int) -> bool:
        """Move `member` one step towards its target; `owned` is what it reports holding
        (None: not reported in this heartbeat).  Returns whether the member changed."""
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            if owned is None or _overlaps(owned, member.revoking):
                return False  # still holds partitions it must give up
            self._release(member, member.revoking)
            member.revoking = {}
            member.revoke_deadline_ms = None
            self._next_assignment(member, now_ms)
            return True
        if member.state == MemberState.STABLE and member.epoch == self.assignment_epoch:
            return False
        before = (member.state, member.epoch, member.assigned, member.revoking)
        self._next_assignment(member, now_ms)
        return before != (member.state, member.epoch, member.assigned, member.revoking)

    def _next_assignment(self, member: ConsumerMember, now_ms: int) -> None:
        target = self.target.get(member.member_id, {})
        kept: dict[uuid.UUID, frozenset[int]] = {}  # held and still wanted
        gained: dict[uuid.UUID, frozenset[int]] = {}  # wanted and free to take now
        revoke: dict[uuid.UUID, frozenset[int]] = {}
        unreleased = False
        for topic in set(target) | set(member.assigned):
            current = member.assigned.get(topic, frozenset())
            wanted = target.get(topic, frozenset())
            if current & wanted:
                kept[topic] = current & wanted
            if current - wanted:
                revoke[topic] = current - wanted
            free = frozenset(
                p for p in wanted - current if self.owners.get((topic, p), member.member_id) == member.member_id
            )
            if free:
                gained[topic] = free
            unreleased |= len(free) < len(wanted - current)
        if revoke:
            # Give up first; the new partitions come once the member has confirmed.
            member.assigned = kept
            member.revoking = revoke
            member.state = MemberState.UNREVOKED_PARTITIONS
            member.revoke_deadline_ms = now_ms + member.rebalance_timeout_ms
            return
        member.assigned = {t: kept.get(t, frozenset()) | gained.get(t, frozenset()) for t in set(kept) | set(gained)}
        for topic, parts in gained.items():
            for p in parts:
                self.owners[(topic, p)] = member.member_id
        if member.epoch != self.assignment_epoch:
            member.previous_epoch, member.epoch = member.epoch, self.assignment_epoch
        member.state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE


def _overlaps(owned: Assignment, revoking: Assignment) -> bool:
    return any(owned.get(topic, frozenset()) & parts for topic, parts in revoking.items())


def is_subset(owned: Assignment | None, assigned: Assignment) -> bool:
    """Kafka's test for a lost response: what the member reports is within what it has."""
    if owned is None:
        return False
    return all(parts <= assigned.get(topic, frozenset()) for topic, parts in owned.items())
