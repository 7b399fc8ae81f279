"""What one look at the cluster found (`Observation`), and what the page shows of it: rates and
lag from two observations, rebalances counted across observations, the chart history.

Pure functions and small classes, no I/O: `services.dashboard.kafka_reader` makes observations,
`services.dashboard.poller` feeds them through here.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from contracts.commit_note import CommitNote

__all__ = [
    "REBALANCING_STATES",
    "BrokerInfo",
    "GroupInfo",
    "History",
    "MemberInfo",
    "Observation",
    "PartitionInfo",
    "PartitionLag",
    "RebalanceCounter",
    "TopicInfo",
    "cluster_json",
    "group_lags",
    "groups_json",
    "history_point",
    "iso",
    "messages_in_rates",
    "messages_out_rates",
    "rate",
]

TopicPartitionKey = tuple[str, int]
REBALANCING_STATES = frozenset({"PreparingRebalance", "CompletingRebalance"})


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition: its leader, log start and end offsets, bytes on disk (None: unknown), and
    its replicas: all of them, those in sync (ISR), those on brokers that are down."""

    partition: int
    leader: int
    start: int | None
    end: int | None
    size: int | None = None
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    offline_replicas: tuple[int, ...] = ()

    @property
    def offline(self) -> bool:
        """No leader: nothing can be written to or read from it."""
        return self.leader < 0

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    internal: bool
    partitions: tuple[PartitionInfo, ...]

    @property
    def start_total(self) -> int | None:
        return _sum(p.start for p in self.partitions)

    @property
    def end_total(self) -> int | None:
        return _sum(p.end for p in self.partitions)

    @property
    def size_total(self) -> int | None:
        return _sum(p.size for p in self.partitions)


@dataclass(frozen=True, slots=True)
class MemberInfo:
    """A group member and the partitions assigned to it, ``((topic, (partition, ...)), ...)``."""

    member_id: str
    client_id: str
    client_host: str
    assignment: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def partitions(self) -> set[TopicPartitionKey]:
        return {(topic, p) for topic, parts in self.assignment for p in parts}


@dataclass(frozen=True, slots=True)
class GroupInfo:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberInfo, ...]
    committed: Mapping[TopicPartitionKey, int] = field(default_factory=dict)
    # A job that commits without joining (the analytics job) notes itself in its commits.
    committer: CommitNote | None = None
    error: str | None = None  # the group could not be read fully this time
    # "classic", "consumer" (KIP-848) or "share" (KIP-932, whose `committed` are the partitions'
    # start offsets) as ListGroups v5 says; None from a broker without v5.
    group_type: str | None = None

    def assigned(self) -> dict[TopicPartitionKey, MemberInfo]:
        return {tp: m for m in self.members for tp in m.partitions()}

    def signature(self) -> frozenset[tuple[str, tuple[tuple[str, tuple[int, ...]], ...]]]:
        """Who holds what: changes exactly when membership or assignments change."""
        return frozenset((m.member_id, m.assignment) for m in self.members)

    def topics(self) -> list[str]:
        """Topics the assignments cover; for a group without members (Empty, or one that only
        commits, like the Spark job), the topics it has committed offsets for."""
        assigned = {topic for m in self.members for topic, _ in m.assignment}
        return sorted(assigned or {topic for topic, _ in self.committed})


@dataclass(frozen=True, slots=True)
class TransactionInfo:
    """An open transaction and, per partition it wrote, the high watermark and the last stable
    offset: read_committed consumers wait for the records between them until it ends."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_ms: int
    partitions: tuple[tuple[str, int, int | None, int | None], ...]  # topic, partition, high watermark, LSO

    @property
    def lso_lag(self) -> int | None:
        lags = [hw - lso for _, _, hw, lso in self.partitions if hw is not None and lso is not None]
        return sum(lags) if lags else None


@dataclass(frozen=True, slots=True)
class Observation:
    """The cluster as one poll saw it.  `wall` is epoch seconds (shown), `mono` a monotonic
    clock (rates are computed from it, so a wall clock jump never makes a rate negative)."""

    wall: float
    mono: float
    brokers: tuple[BrokerInfo, ...]
    controller_id: int | None
    topics: Mapping[str, TopicInfo]
    groups: Mapping[str, GroupInfo]
    sizes_known: bool = False
    # The KRaft quorum's leader (DescribeMetadataQuorum), when the cluster answers it; Metadata's
    # controller id names a random broker under KRaft.
    quorum_leader: int | None = None
    # Open transactions; None when the cluster does not list them (no transaction APIs).
    transactions: tuple[TransactionInfo, ...] | None = ()
    # The bundled broker's log.durability (fsync, page-cache); None for a cluster without it.
    durability: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int | None
    end: int | None
    lag: int | None
    member: MemberInfo | None


def _sum(values: Iterable[int | None]) -> int | None:
    total = 0
    for v in values:
        if v is None:
            return None
        total += v
    return total


def _sum_known(values: Iterable[int | None]) -> int | None:
    """The sum of the known values; None when none is known."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def rate(previous: int | None, current: int | None, seconds: float) -> float | None:
    """Per-second increase; None when unknown.  A decrease (topic re-created, offsets reset) is
    no negative traffic: 0."""
    if previous is None or current is None or seconds <= 0:
        return None
    return max(0, current - previous) / seconds


def _earlier(previous: Observation | Sequence[Observation] | None) -> list[Observation]:
    if previous is None:
        return []
    return [previous] if isinstance(previous, Observation) else list(previous)


def messages_in_rates(
    previous: Observation | Sequence[Observation] | None, current: Observation
) -> dict[str, float | None]:
    """Records appended per second, per topic: the growth of the summed log end offsets since
    the oldest of the `previous` observations (oldest first) that saw the topic."""
    earlier = _earlier(previous)
    out: dict[str, float | None] = {}
    for name, topic in current.topics.items():
        base = next((o for o in earlier if name in o.topics), None)
        if base is None:
            out[name] = None
            continue
        out[name] = rate(base.topics[name].end_total, topic.end_total, current.mono - base.mono)
    return out


def messages_out_rates(
    previous: Observation | Sequence[Observation] | None, current: Observation
) -> dict[str, float | None]:
    """Records consumed per second, per group: the growth of its committed offsets since the
    oldest of the `previous` observations in which it had committed, over the partitions it had
    committed in both (a first commit is no burst of traffic)."""
    earlier = _earlier(previous)
    out: dict[str, float | None] = {}
    for group_id, group in current.groups.items():
        seen = [o for o in earlier if group_id in o.groups]
        base = next((o for o in seen if o.groups[group_id].committed.keys() & group.committed.keys()), None)
        if base is None:
            out[group_id] = 0.0 if seen else None  # seen before, but nothing committed then
            continue
        before = base.groups[group_id]
        common = group.committed.keys() & before.committed.keys()
        seconds = current.mono - base.mono
        moved = sum(max(0, group.committed[tp] - before.committed[tp]) for tp in common)
        out[group_id] = moved / seconds if seconds > 0 else None
    return out


def group_lags(group: GroupInfo, topics: Mapping[str, TopicInfo]) -> list[PartitionLag]:
    """Lag per partition the group is assigned or has committed, sorted by topic and partition.

    With a committed offset: end - committed.  Without one yet (a group that just joined), the
    records it will still read from the log start: end - start, since every streamshop consumer
    starts at the earliest offset.  None when the partition's offsets are unknown.
    """
    assigned = group.assigned()
    out: list[PartitionLag] = []
    for topic_name, partition in sorted(assigned.keys() | group.committed.keys()):
        topic = topics.get(topic_name)
        info = next((p for p in topic.partitions if p.partition == partition), None) if topic else None
        committed = group.committed.get((topic_name, partition))
        end = info.end if info else None
        if end is None:
            lag = None
        elif committed is not None:
            lag = max(0, end - committed)
        else:
            lag = None if info is None or info.start is None else max(0, end - info.start)
        out.append(PartitionLag(topic_name, partition, committed, end, lag, assigned.get((topic_name, partition))))
    return out


class RebalanceCounter:
    """Rebalances seen, per group.

    DescribeGroups carries no generation id, so the dashboard counts what it can observe: the
    group entering PreparingRebalance/CompletingRebalance, or its members or assignments
    differing between two polls with no rebalancing state seen in between (the whole rebalance
    happened between the polls).  Rebalances quicker than the refresh interval that end with
    the same members and assignments go unseen.
    """

    def __init__(self) -> None:
        self._last: dict[str, tuple[bool, frozenset[Any]]] = {}
        self.counts: dict[str, int] = {}

    def observe(self, group: GroupInfo) -> int:
        """Take one poll's view of the group into account; its count so far."""
        rebalancing = group.state in REBALANCING_STATES
        signature = group.signature()
        count = self.counts.get(group.group_id, 0)
        last = self._last.get(group.group_id)
        if last is None:
            count += rebalancing  # first seen mid-rebalance: that one is seen
        else:
            was_rebalancing, last_signature = last
            if not was_rebalancing and (rebalancing or signature != last_signature):
                count += 1
        self._last[group.group_id] = (rebalancing, signature)
        self.counts[group.group_id] = count
        return count

    def forget_missing(self, present: Iterable[str]) -> None:
        """Drop groups that no longer exist (deleted), so the memory stays bounded."""
        keep = set(present)
        for group_id in [g for g in self._last if g not in keep]:
            del self._last[group_id]
            self.counts.pop(group_id, None)


def history_point(
    observation: Observation,
    in_rates: Mapping[str, float | None],
    out_rates: Mapping[str, float | None],
) -> dict[str, Any]:
    """One point of the charts: messages in/s per (non-internal) topic, messages out/s and total
    lag per group.  Unknown values are left out, so a chart shows a gap, not a false zero."""
    lags = {
        group_id: _sum_known(p.lag for p in group_lags(group, observation.topics))
        for group_id, group in observation.groups.items()
    }
    return {
        "t": round(observation.wall * 1000),
        "messages_in": {
            name: round(r, 3)
            for name, r in in_rates.items()
            if r is not None and name in observation.topics and not observation.topics[name].internal
        },
        "messages_out": {g: round(r, 3) for g, r in out_rates.items() if r is not None},
        "lag": {g: lag for g, lag in lags.items() if lag is not None},
    }


class History:
    """The last `capacity` chart points (a ring buffer: memory stays bounded however long the
    dashboard runs)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be positive")
        self._points: deque[dict[str, Any]] = deque(maxlen=capacity)

    def add(self, point: dict[str, Any]) -> None:
        self._points.append(point)

    def __len__(self) -> int:
        return len(self._points)

    def points(self) -> list[dict[str, Any]]:
        return list(self._points)


def iso(epoch_seconds: float) -> str:
    """``2026-01-02T10:04:05.123Z``."""
    moment = datetime.fromtimestamp(epoch_seconds, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def cluster_json(observation: Observation, in_rates: Mapping[str, float | None]) -> dict[str, Any]:
    topics: list[dict[str, Any]] = []
    for name in sorted(observation.topics, key=lambda n: (observation.topics[n].internal, n)):
        topic = observation.topics[name]
        start, end = topic.start_total, topic.end_total
        topics.append(
            {
                "name": name,
                "internal": topic.internal,
                "partitions": len(topic.partitions),
                "start_offset": start,
                "end_offset": end,
                "messages": None if start is None or end is None else end - start,
                "size_bytes": topic.size_total if observation.sizes_known else None,
                "in_rate": _round(in_rates.get(name)),
                "partition_details": [
                    {
                        "partition": p.partition,
                        "leader": p.leader,
                        "start_offset": p.start,
                        "end_offset": p.end,
                        "size_bytes": p.size if observation.sizes_known else None,
                        "replicas": list(p.replicas),
                        "isr": list(p.isr),
                        "offline_replicas": list(p.offline_replicas),
                        "under_replicated": p.under_replicated,
                        "offline": p.offline,
                    }
                    for p in topic.partitions
                ],
                "replication_factor": max((len(p.replicas) for p in topic.partitions), default=0),
                "under_replicated": sum(p.under_replicated for p in topic.partitions),
                "offline": sum(p.offline for p in topic.partitions),
            }
        )
    visible = [t for t in topics if not t["internal"]]
    quorum = observation.quorum_leader
    return {
        "brokers": [
            {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack} for b in observation.brokers
        ],
        "controller_id": observation.controller_id,
        "active_controller": quorum if quorum is not None else observation.controller_id,
        "controller_source": "DescribeMetadataQuorum" if quorum is not None else "Metadata",
        "durability": observation.durability,
        "sizes_known": observation.sizes_known,
        "topics": topics,
        "totals": {
            "topics": len(visible),
            "partitions": sum(t["partitions"] for t in visible),
            "messages": _sum_known(t["messages"] for t in visible),
            "size_bytes": _sum_known(t["size_bytes"] for t in visible) if observation.sizes_known else None,
            "in_rate": _round(sum(t["in_rate"] or 0.0 for t in visible)),
            "under_replicated": sum(t["under_replicated"] for t in topics),
            "offline": sum(t["offline"] for t in topics),
        },
    }


def transactions_json(observation: Observation) -> dict[str, Any]:
    """Open transactions, oldest first, with the LSO lag each causes."""
    if observation.transactions is None:
        return {"known": False, "open": []}
    rows = [
        {
            "transactional_id": t.transactional_id,
            "producer_id": t.producer_id,
            "producer_epoch": t.producer_epoch,
            "state": t.state,
            "timeout_ms": t.timeout_ms,
            "started_at": iso(t.start_ms / 1000) if t.start_ms >= 0 else None,
            "age_s": round(observation.wall - t.start_ms / 1000, 1) if t.start_ms >= 0 else None,
            "lso_lag": t.lso_lag,
            "partitions": [
                {
                    "topic": topic,
                    "partition": partition,
                    "high_watermark": hw,
                    "last_stable_offset": lso,
                    "lso_lag": None if hw is None or lso is None else hw - lso,
                }
                for topic, partition, hw, lso in t.partitions
            ],
        }
        for t in sorted(observation.transactions, key=lambda t: (t.start_ms, t.transactional_id))
    ]
    return {"known": True, "open": rows}


def groups_json(
    observation: Observation, out_rates: Mapping[str, float | None], rebalances: Mapping[str, int]
) -> list[dict[str, Any]]:
    out = []
    for group_id in sorted(observation.groups):
        group = observation.groups[group_id]
        lags = group_lags(group, observation.topics)
        out.append(
            {
                "group_id": group_id,
                "state": group.state,
                "protocol_type": group.protocol_type,
                "protocol": group.protocol,
                "group_type": group.group_type,
                "members": [
                    {
                        "member_id": m.member_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "assignment": [{"topic": t, "partitions": list(ps)} for t, ps in m.assignment],
                    }
                    for m in sorted(group.members, key=lambda m: (m.client_id, m.member_id))
                ],
                "topics": group.topics(),
                "lag": _sum_known(p.lag for p in lags),
                "out_rate": _round(out_rates.get(group_id)),
                "rebalances": rebalances.get(group_id, 0),
                "committer": _committer(group, observation),
                "error": group.error,
                "partitions": [
                    {
                        "topic": p.topic,
                        "partition": p.partition,
                        "committed": p.committed,
                        "end_offset": p.end,
                        "lag": p.lag,
                        "member": p.member.client_id if p.member else None,
                        "member_id": p.member.member_id if p.member else None,
                    }
                    for p in lags
                ],
            }
        )
    return out


def _committer(group: GroupInfo, observation: Observation) -> dict[str, object] | None:
    note = group.committer
    return None if note is None else note.to_json(round(observation.wall * 1000))


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
