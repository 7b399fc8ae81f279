"""Helpers of the consumer group protocol's unit tests (KIP-848, without a network): a Harness
driving ConsumerGroups with `now` as an argument, simulated clients that apply what they are
told, the records' encoding as stored, and the assertions every file of them shares.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

from broker.coordinator.assignors import Assignment
from broker.coordinator.consumer_group import ConsumerGroup, ConsumerGroupState
from broker.coordinator.consumer_groups import ConsumerGroupConfig, ConsumerGroups, Heartbeat, HeartbeatResult, Rec
from broker.metadata import MetadataStore

Partition = tuple[uuid.UUID, int]


def no_claim(group_id: str, now: int) -> tuple[ConsumerGroup | None, list[Rec]]:
    return None, []


def partitions_of(assignment: Mapping[uuid.UUID, frozenset[int]]) -> set[Partition]:
    return {(t, p) for t, ps in assignment.items() for p in ps}


def load(assignment: Mapping[uuid.UUID, frozenset[int]]) -> int:
    return sum(len(ps) for ps in assignment.values())


def assert_exclusive(group: ConsumerGroup) -> None:
    """No partition is in two members' `assigned | revoking`, and `owners` says exactly who
    holds each held partition."""
    held: dict[Partition, str] = {}
    for member in group.members.values():
        for tp in partitions_of(member.assigned) | partitions_of(member.revoking):
            assert tp not in held, f"{tp} held by {held[tp]} and {member.member_id}"
            held[tp] = member.member_id
        assert not partitions_of(member.assigned) & partitions_of(member.revoking)
    assert group.owners == held


def encoded(records: list[Rec]) -> list[tuple[Any, Any]]:
    """Records as the coordinator writes and reads them (msgpack: tuples become lists)."""
    return [
        (msgpack.unpackb(msgpack.packb(k)), None if v is None else msgpack.unpackb(msgpack.packb(v)))
        for k, v in records
    ]


def compacted(rows: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """What a compacted `__consumer_offsets` keeps of encoded records: the last record of
    each key, in log order."""
    last = {msgpack.packb(k): i for i, (k, _) in enumerate(rows)}
    return [rows[i] for i in sorted(last.values())]


def stored_view(groups: ConsumerGroups) -> dict[str, Any]:
    """Everything about the groups that the records must reproduce (timers, the resolved
    subscription and metrics are rebuilt or restarted, not stored)."""
    out: dict[str, Any] = {}
    for gid, g in groups.groups.items():
        out[gid] = {
            "epoch": g.epoch,
            "assignment_epoch": g.assignment_epoch,
            "target": dict(g.target),
            "static": dict(g.static),
            "owners": dict(g.owners),
            "state": g.state,
            "members": {
                mid: (
                    m.instance_id,
                    m.rack_id,
                    m.client_id,
                    m.client_host,
                    m.topic_names,
                    m.topic_regex,
                    m.regex_topics,
                    m.server_assignor,
                    m.rebalance_timeout_ms,
                    m.classic,
                    m.state,
                    m.epoch,
                    m.previous_epoch,
                    m.assigned,
                    m.revoking,
                )
                for mid, m in g.members.items()
            },
        }
    return out


def replayed(store: MetadataStore, rows: list[tuple[Any, Any]], now: int) -> ConsumerGroups:
    fresh = ConsumerGroups(store, ConsumerGroupConfig(), no_claim)
    for key, value in rows:
        fresh.replay(key, value)
    fresh.loaded(now)
    return fresh


class Harness:
    """ConsumerGroups over a real store, with the records it wrote and a settable `now`."""

    def __init__(self, store: MetadataStore, config: ConsumerGroupConfig | None = None) -> None:
        self.store = store
        self.groups = ConsumerGroups(store, config or ConsumerGroupConfig(), no_claim)
        self.log: list[Rec] = []
        self.now = 1_000

    def heartbeat(
        self,
        member_id: str,
        epoch: int,
        *,
        group_id: str = "g",
        instance_id: str | None = None,
        rack_id: str | None = None,
        rebalance_timeout_ms: int = -1,
        topic_names: tuple[str, ...] | None = None,
        topic_regex: str | None = None,
        server_assignor: str | None = None,
        owned: Assignment | None = None,
        client_id: str = "client",
        client_host: str = "/10.0.0.1",
        generated_member_id: bool = False,
        may_describe: Callable[[str], bool] | None = None,
    ) -> HeartbeatResult:
        req = Heartbeat(
            group_id=group_id,
            member_id=member_id,
            member_epoch=epoch,
            instance_id=instance_id,
            rack_id=rack_id,
            rebalance_timeout_ms=rebalance_timeout_ms,
            topic_names=topic_names,
            topic_regex=topic_regex,
            server_assignor=server_assignor,
            owned=owned,
            client_id=client_id,
            client_host=client_host,
            generated_member_id=generated_member_id,
            may_describe=may_describe,
        )
        result, records = self.groups.heartbeat(req, self.now)
        self.log.extend(records)
        return result

    def join(
        self,
        member_id: str,
        topics: tuple[str, ...] | None = None,
        *,
        regex: str | None = None,
        rebalance_timeout_ms: int = 60_000,
        **kw: Any,
    ) -> HeartbeatResult:
        return self.heartbeat(
            member_id,
            0,
            topic_names=topics,
            topic_regex=regex,
            rebalance_timeout_ms=rebalance_timeout_ms,
            owned={},
            **kw,
        )

    def expire(self) -> list[str]:
        out = self.groups.expire(self.now)
        for _, records in out:
            self.log.extend(records)
        return [gid for gid, _ in out]

    def group(self, group_id: str = "g") -> ConsumerGroup:
        return self.groups.groups[group_id]

    def reload(self) -> ConsumerGroups:
        return replayed(self.store, encoded(self.log), self.now)


@dataclass
class Client:
    """A member as a client sees itself: its epoch and the partitions it holds."""

    member_id: str
    topics: tuple[str, ...]
    epoch: int = 0
    owned: Assignment = field(default_factory=dict)
    instance_id: str | None = None

    def heartbeat(self, h: Harness, **kw: Any) -> HeartbeatResult:
        if self.epoch == 0:
            result = h.join(self.member_id, self.topics, instance_id=self.instance_id, **kw)
        else:
            result = h.heartbeat(self.member_id, self.epoch, owned=self.owned, instance_id=self.instance_id, **kw)
        self.epoch = result.member_epoch
        if result.assignment is not None:
            self.owned = dict(result.assignment)
        return result


def assert_clients_exclusive(clients: list[Client]) -> None:
    seen: dict[Partition, str] = {}
    for c in clients:
        for tp in partitions_of(c.owned):
            assert tp not in seen, f"{tp} owned by {seen[tp]} and {c.member_id}"
            seen[tp] = c.member_id


def settle(h: Harness, clients: list[Client], *, rounds: int = 12) -> None:
    """Heartbeat the clients round-robin until the group is Stable and a whole round wrote
    nothing; checks exclusivity (the coordinator's books and the clients' own view) after
    every heartbeat."""
    for _ in range(rounds):
        written = len(h.log)
        for c in clients:
            h.now += 100
            c.heartbeat(h)
            assert_exclusive(h.group())
            assert_clients_exclusive(clients)
        if len(h.log) == written and h.group().state == ConsumerGroupState.STABLE:
            return
    raise AssertionError(f"group did not settle: {h.group().state}")


def stable_pair(store: MetadataStore, h: Harness, **join: Any) -> tuple[uuid.UUID, Client, Client]:
    t = store.create_topic("t", 4, {}).topic_id
    a = Client("a", ("t",), instance_id=join.get("a_instance"))
    b = Client("b", ("t",), instance_id=join.get("b_instance"))
    a.heartbeat(h)
    b.heartbeat(h)
    settle(h, [a, b])
    return t, a, b
