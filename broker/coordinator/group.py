"""One consumer group under Kafka's classic protocol: members, generations and states.

States: Empty -> PreparingRebalance -> CompletingRebalance -> Stable (-> Dead when
deleted).  A rebalance holds every JoinGroup until all known members have rejoined (or
the rebalance timeout drops the laggards), then answers them all: the leader with every
member's metadata, the others with none.  SyncGroup from the leader carries the
assignment, which every member's SyncGroup then receives.

Time comes from the caller (`now` arguments): the coordinator drives expiry from an
injected clock, so tests move time instead of sleeping.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from enum import Enum

from broker.protocol.errors import ErrorCode, KafkaError


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class JoinResult:
    generation: int
    protocol_type: str | None
    protocol_name: str | None
    leader: str
    member_id: str
    members: list[tuple[str, str | None, bytes]]  # leader only: (member id, instance id, metadata)
    error: ErrorCode = ErrorCode.none


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int  # -1: not given (JoinGroup v0)
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool  # JoinGroup v4+ (KIP-394)


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    last_heartbeat_ms: int
    assignment: bytes = b""
    join_future: asyncio.Future[JoinResult] | None = None
    sync_future: asyncio.Future[bytes] | None = None

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    @property
    def awaiting_join(self) -> bool:
        return self.join_future is not None and not self.join_future.done()


@dataclass
class Group:
    group_id: str
    initial_delay_ms: int
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: dict[str, int] = field(default_factory=dict)  # MEMBER_ID_REQUIRED ids -> deadline
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    join_deadline_ms: int = 0  # the join phase ends here, dropping members that did not rejoin
    delay_until_ms: int = 0  # a new group waits this long for more members (initial delay)
    rebalances: int = 0
    state_changed_ms: int = 0

    # --- queries ---------------------------------------------------------------------

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to, when they use the consumer protocol."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        from broker.coordinator.consumer_protocol import subscription_topics

        topics: set[str] = set()
        for member in self.members.values():
            found = subscription_topics(member.metadata_for(self.protocol_name))
            if found is None:
                return None
            topics |= found
        return topics

    def _transition(self, state: GroupState, now: int) -> None:
        self.state = state
        self.state_changed_ms = now

    # --- join ------------------------------------------------------------------------

    def select_protocol(self) -> str:
        """The protocol every member supports that most members prefer (Kafka's vote)."""
        candidates = None
        for member in self.members.values():
            names = {name for name, _ in member.protocols}
            candidates = names if candidates is None else candidates & names
        if not candidates:
            raise KafkaError(ErrorCode.inconsistent_group_protocol, "members share no protocol")
        votes: dict[str, int] = dict.fromkeys(candidates, 0)
        for member in self.members.values():
            for name, _ in member.protocols:
                if name in candidates:
                    votes[name] += 1
                    break
        # Ties go to the first candidate in the leader's (or any member's) order.
        order = [name for name, _ in next(iter(self.members.values())).protocols if name in candidates]
        return max(order, key=lambda name: votes[name])

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Kafka's check: the same protocol type, and a protocol every member supports."""
        if not protocols:
            return False
        if not self.members:
            return bool(protocol_type)  # Kafka: an empty group takes any non-empty protocol type
        if protocol_type != self.protocol_type:
            return False
        names = {name for name, _ in protocols}
        for member in self.members.values():
            names &= {n for n, _ in member.protocols}
        return bool(names)

    def prepare_rebalance(self, now: int, *, initial: bool = False) -> None:
        if self.state == GroupState.COMPLETING_REBALANCE:
            # Members waiting on SyncGroup must rejoin: tell them now.
            for member in self.members.values():
                if member.sync_future is not None and not member.sync_future.done():
                    member.sync_future.set_exception(KafkaError(ErrorCode.rebalance_in_progress))
                member.sync_future = None
        timeout = max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
        self.join_deadline_ms = now + timeout
        self.delay_until_ms = now + self.initial_delay_ms if initial else now
        self._transition(GroupState.PREPARING_REBALANCE, now)
        self.rebalances += 1

    def member_arrived(self, now: int) -> None:
        """During a new group's initial delay every arrival extends the wait (Kafka's
        InitialDelayedJoin), never past the rebalance timeout."""
        if self.delay_until_ms > self.state_changed_ms:
            self.delay_until_ms = min(now + self.initial_delay_ms, self.join_deadline_ms)

    def join_due(self, now: int) -> bool:
        if self.state != GroupState.PREPARING_REBALANCE:
            return False
        return now >= self.join_deadline_ms or (self.all_joined() and now >= self.delay_until_ms)

    def all_joined(self) -> bool:
        return not self.pending and all(m.awaiting_join for m in self.members.values())

    def complete_join(self, now: int) -> None:
        """End the join phase: drop members that did not rejoin, start a generation and
        answer every waiting JoinGroup."""
        for member_id in [mid for mid, m in self.members.items() if not m.awaiting_join]:
            self.remove_member(member_id)
        self.pending.clear()
        self.generation += 1
        if not self.members:
            self.protocol_name = None
            self.leader = None
            self._transition(GroupState.EMPTY, now)
            return
        try:
            self.protocol_name = self.select_protocol()
        except KafkaError:
            for member in self.members.values():
                if member.join_future is not None and not member.join_future.done():
                    member.join_future.set_exception(KafkaError(ErrorCode.inconsistent_group_protocol))
            self.members.clear()
            self._transition(GroupState.EMPTY, now)
            return
        if self.leader not in self.members:
            self.leader = next(iter(self.members))
        self._transition(GroupState.COMPLETING_REBALANCE, now)
        everyone = [
            (m.member_id, m.group_instance_id, m.metadata_for(self.protocol_name)) for m in self.members.values()
        ]
        for member in self.members.values():
            member.last_heartbeat_ms = now
            if member.join_future is not None and not member.join_future.done():
                member.join_future.set_result(self.join_result(member.member_id, everyone))

    def join_result(self, member_id: str, everyone: list[tuple[str, str | None, bytes]] | None = None) -> JoinResult:
        assert self.leader is not None
        members = []
        if member_id == self.leader:
            members = (
                everyone
                if everyone is not None
                else [
                    (m.member_id, m.group_instance_id, m.metadata_for(self.protocol_name or ""))
                    for m in self.members.values()
                ]
            )
        return JoinResult(self.generation, self.protocol_type, self.protocol_name, self.leader, member_id, members)

    def remove_member(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        for future in (member.join_future, member.sync_future):
            if future is not None and not future.done():
                future.set_exception(KafkaError(ErrorCode.unknown_member_id))
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)
        return member

    # --- sync ------------------------------------------------------------------------

    def assign(self, assignments: dict[str, bytes]) -> None:
        """The leader's assignment, recorded before it is persisted; nobody is answered yet."""
        for member in self.members.values():
            member.assignment = assignments.get(member.member_id, b"")

    def complete_sync(self, now: int) -> None:
        """Once the assignment is durable: answer every member waiting in SyncGroup."""
        for member in self.members.values():
            if member.sync_future is not None and not member.sync_future.done():
                member.sync_future.set_result(member.assignment)
            member.sync_future = None
        self._transition(GroupState.STABLE, now)
