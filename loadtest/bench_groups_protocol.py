"""confluent-kafka consumer-group members for loadtest.bench_groups, in either group protocol:
classic (JoinGroup/SyncGroup/Heartbeat) or KIP-848 (`group.protocol=consumer`, ConsumerGroupHeartbeat
with server-side assignors).  Join and leave timings, and a steady group's heartbeats per second
beside the broker's CPU over the same window.  The module docstring of loadtest.bench_groups says
exactly what is measured.
"""

from __future__ import annotations

import collections
import contextlib
import json
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from loadtest.brokers import BrokerProcess, connect, cpu_seconds, recv_exactly, wait_idle

CONSUMERS = 4
PARTITIONS = 12
BALANCE_TIMEOUT = 90.0  # s: a group not balanced by then is reported as n/a
CHECK_INTERVAL = 0.002  # s between looks at the members' assignments
HEARTBEAT_MEMBERS = 8
SETTLE_S = 2.0  # s between balanced and the window
STATS_INTERVAL_MS = 500  # librdkafka's statistics.interval.ms in the heartbeat step


class Unavailable(Exception):
    """The broker could not do this step (refused it, or not in time); the message says why."""


def balanced(assignments: list[set[int]], partitions: int = PARTITIONS) -> bool:
    """Every member holds something and every partition is held by exactly one member."""
    if not all(assignments) or sum(len(a) for a in assignments) != partitions:
        return False
    return set().union(*assignments) == set(range(partitions))


def describe(assignments: list[set[int]]) -> str:
    return "[" + ", ".join(",".join(map(str, sorted(a))) or "-" for a in assignments) + "]"


@dataclass(frozen=True)
class GroupTimes:
    """One join-then-leave run: seconds until balanced, or the reason there is no figure."""

    join_s: float | None
    leave_s: float | None
    close_s: float | None  # how long the leaving member's close()/stop() call itself took
    failure: str | None = None


def reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, Unavailable) else f"{type(exc).__name__}: {text}"


# --- group join and leave: confluent-kafka ------------------------------------------------------


CONFLUENT_PROTOCOLS = {"confluent": "classic", "kip848": "consumer"}  # client -> group.protocol
CONSUMER_GROUP_HEARTBEAT = 68  # the API key KIP-848 needs


def offered_apis(bootstrap: str) -> set[int]:
    """The API keys the broker offers, from an ApiVersions v0 request on a socket of our own."""
    client_id = b"bench-groups"
    request = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    with connect(bootstrap) as sock:
        sock.sendall(struct.pack(">i", len(request)) + request)
        (size,) = struct.unpack(">i", recv_exactly(sock, 4))
        body = recv_exactly(sock, size)
    _correlation, error, count = struct.unpack_from(">ihi", body)
    if error:
        raise Unavailable(f"ApiVersions answered error {error}")
    return {struct.unpack_from(">h", body, 10 + 6 * i)[0] for i in range(count)}


def _check_protocol(bootstrap: str, client: str) -> None:
    """librdkafka 2.16 does not report a broker without ConsumerGroupHeartbeat to the application
    (it marks the coordinator dead and looks for it again, forever), so ask the broker first."""
    if CONFLUENT_PROTOCOLS[client] == "consumer":
        try:
            offered = offered_apis(bootstrap)
        except OSError as exc:
            raise Unavailable(f"ApiVersions: {reason(exc)}") from exc
        if CONSUMER_GROUP_HEARTBEAT not in offered:
            raise Unavailable("the broker does not offer ConsumerGroupHeartbeat (ApiVersions): no KIP-848")


def confluent_config(bootstrap: str, group: str, client: str) -> dict[str, Any]:
    """A confluent-kafka consumer's settings: the defaults, and `group.protocol=consumer` for KIP-848."""
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": group}
    if CONFLUENT_PROTOCOLS[client] == "consumer":
        config["group.protocol"] = "consumer"
    return config


@dataclass(frozen=True)
class _Sample:
    """From one statistics callback: when it came, librdkafka's clock, the requests counted."""

    at: float  # time.perf_counter() in the callback
    ts_us: int  # the statistics' `ts`
    heartbeats: int
    others: dict[str, int]  # any other request type sent: the per-type counters of `req`
    rebalances: int  # cgrp.rebalance_cnt


def _sample(text: str) -> _Sample:
    """Heartbeat = `Heartbeat` (classic) + ConsumerGroupHeartbeat.  librdkafka's statistics
    leave ConsumerGroupHeartbeat out of each connection's per-type `req` counters, but count
    it in `tx` (requests sent): on every connection, `tx` less the sum of `req` is the
    requests of unlisted types, and a consumer sends no other unlisted type."""
    stats = json.loads(text)
    heartbeats = 0
    others: collections.Counter[str] = collections.Counter()
    for broker in stats["brokers"].values():
        heartbeats += broker["tx"] - sum(broker["req"].values())
        for api, count in broker["req"].items():
            if api == "Heartbeat":
                heartbeats += count
            else:
                others[api] += count
    rebalances = stats.get("cgrp", {}).get("rebalance_cnt", 0)
    return _Sample(time.perf_counter(), stats["ts"], heartbeats, others, rebalances)


@dataclass
class _Member:
    """One confluent-kafka consumer polled by its own thread; `held` follows the rebalance callbacks
    (incremental with KIP-848, everything revoked then everything assigned with classic eager
    assignors: adding on assign and removing on revoke serves both).  Every call on the consumer
    is made from that thread (librdkafka 2.16 can deadlock on `assignment()` during another
    thread's `poll()` with KIP-848); `held` is replaced, never changed in place, for the readers."""

    topic: str
    pause: bool = False  # pause what it is given: no Fetch, only the group's own requests
    consumer: Any = None
    held: set[int] = field(default_factory=set)
    samples: list[_Sample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    closed: bool = False

    @classmethod
    def open(cls, config: dict[str, Any], topic: str, *, pause: bool = False, stats_ms: int = 0) -> _Member:
        member = cls(topic, pause)
        if stats_ms:
            config = {**config, "statistics.interval.ms": stats_ms, "stats_cb": member.on_stats}
        member.consumer = Consumer(config)
        return member

    def on_assign(self, _consumer: Any, partitions: list[Any]) -> None:
        self.held = self.held | {tp.partition for tp in partitions}

    def on_revoke(self, _consumer: Any, partitions: list[Any]) -> None:
        self.held = self.held - {tp.partition for tp in partitions}

    def on_stats(self, text: str) -> None:
        self.samples.append(_sample(text))

    def run(self) -> None:
        paused: set[int] = set()
        while not self.stop.is_set():
            msg = self.consumer.poll(0.05)
            if msg is not None and msg.error() is not None and not msg.error().retriable():
                self.errors.append(str(msg.error()))
            held = self.held
            if self.pause and held - paused:  # assigned by now: the binding assigns after on_assign
                self.consumer.pause([TopicPartition(self.topic, p) for p in held - paused])
            paused = held

    def start(self) -> None:
        self.consumer.subscribe(
            [self.topic], on_assign=self.on_assign, on_revoke=self.on_revoke, on_lost=self.on_revoke
        )
        self.thread = threading.Thread(target=self.run, name="group-member", daemon=True)
        self.thread.start()

    def halt(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(10)

    def close(self) -> None:
        """Stop polling, then close the consumer here (a member leaving: LeaveGroup, or a
        ConsumerGroupHeartbeat with epoch -1)."""
        self.halt()
        if not self.closed:
            self.closed = True
            self.consumer.close()


def _wait_balanced(members: list[_Member], started: float, what: str) -> float:
    deadline = started + BALANCE_TIMEOUT
    while True:
        now = time.perf_counter()
        if balanced([m.held for m in members]):
            return now - started
        _raise_errors(members, what)
        if now > deadline:
            held = describe([m.held for m in members])
            raise Unavailable(f"{what}: not balanced in {BALANCE_TIMEOUT:.0f} s (held {held})")
        time.sleep(CHECK_INTERVAL)


def _raise_errors(members: list[_Member], what: str) -> None:
    errors = [e for m in members for e in m.errors]
    if errors:
        raise Unavailable(f"{what}: {errors[0]}")


@contextlib.contextmanager
def _members(
    bootstrap: str, topic: str, group: str, client: str, count: int, *, pause: bool = False, stats_ms: int = 0
) -> Iterator[list[_Member]]:
    """`count` connected members, not yet subscribed; those still open are closed on the way out."""
    config = confluent_config(bootstrap, group, client)
    members = [_Member.open(config, topic, pause=pause, stats_ms=stats_ms) for _ in range(count)]
    try:
        for member in members:
            member.consumer.list_topics(topic, timeout=10)  # connected before the clock starts
        yield members
    finally:
        for member in members:
            member.stop.set()  # all stop polling at once
        for member in members:
            member.close()


def group_confluent(bootstrap: str, topic: str, group: str, client: str = "confluent") -> GroupTimes:
    """Join and leave with confluent-kafka, classic protocol (`confluent`) or KIP-848 (`kip848`)."""
    join_s = leave_s = close_s = None
    try:
        _check_protocol(bootstrap, client)
        with _members(bootstrap, topic, group, client, CONSUMERS) as members:
            started = time.perf_counter()
            for member in members:
                member.start()
            join_s = _wait_balanced(members, started, "join")
            leaving, staying = members[-1], members[:-1]
            leaving.halt()  # its thread stops polling; close() runs here
            started = time.perf_counter()
            leaving.close()
            close_s = time.perf_counter() - started
            leave_s = _wait_balanced(staying, started, "leave")
    except (Unavailable, KafkaException, RuntimeError) as exc:
        return GroupTimes(join_s, leave_s, close_s, reason(exc))
    return GroupTimes(join_s, leave_s, close_s)


# --- the heartbeat path's cost ------------------------------------------------------------------


@dataclass(frozen=True)
class HeartbeatCost:
    """A steady group over one window: its requests per second and the broker's CPU beside idle."""

    heartbeats_per_s: float
    others_per_s: dict[str, float]  # any other request the members sent meanwhile, by type (none expected)
    cpu_ms_per_s: float  # broker CPU during the window
    idle_before_ms_per_s: float  # broker CPU without the group: half as long a window before,
    idle_after_ms_per_s: float  # and as long again after (the members gone, the broker idle)

    @property
    def idle_cpu_ms_per_s(self) -> float:
        return (self.idle_before_ms_per_s + self.idle_after_ms_per_s) / 2

    @property
    def over_idle_ms_per_s(self) -> float:
        return self.cpu_ms_per_s - self.idle_cpu_ms_per_s

    @property
    def ms_per_heartbeat(self) -> float | None:
        return self.over_idle_ms_per_s / self.heartbeats_per_s if self.heartbeats_per_s else None


def _rates(member: _Member, start: float, end: float) -> tuple[float, dict[str, float]]:
    """The member's heartbeats and other requests per second between its first and last
    statistics inside [start, end], by librdkafka's own clock."""
    inside = [s for s in list(member.samples) if start <= s.at <= end]
    if len(inside) < 2 or inside[-1].ts_us <= inside[0].ts_us:
        raise Unavailable(f"heartbeats: {len(inside)} statistics callbacks in the window")
    first, last = inside[0], inside[-1]
    if last.rebalances != first.rebalances:
        raise Unavailable(f"heartbeats: a member rebalanced in the window ({last.rebalances - first.rebalances}x)")
    seconds = (last.ts_us - first.ts_us) / 1e6
    others = {api: (n - first.others.get(api, 0)) / seconds for api, n in last.others.items()}
    return (last.heartbeats - first.heartbeats) / seconds, {api: rate for api, rate in others.items() if rate}


def _check_steady(members: list[_Member], when: str) -> None:
    _raise_errors(members, "heartbeats")
    if not balanced([m.held for m in members]):
        raise Unavailable(f"heartbeats: the group moved {when} (held {describe([m.held for m in members])})")


def heartbeat_cost(broker: BrokerProcess, topic: str, group: str, client: str, window: float) -> HeartbeatCost:
    """HEARTBEAT_MEMBERS paused members of a steady group, their heartbeats and the broker's CPU."""
    _check_protocol(broker.bootstrap, client)
    idle_before = _cpu_rate(broker.pid, window / 2)
    try:
        with _members(
            broker.bootstrap, topic, group, client, HEARTBEAT_MEMBERS, pause=True, stats_ms=STATS_INTERVAL_MS
        ) as members:
            started = time.perf_counter()
            for member in members:
                member.start()
            _wait_balanced(members, started, "join")
            time.sleep(SETTLE_S)  # the new assignments' offset look-ups; the last reconciliations
            _check_steady(members, "after balancing")
            start, cpu_before = time.perf_counter(), cpu_seconds(broker.pid)
            time.sleep(window)
            end, cpu = time.perf_counter(), cpu_seconds(broker.pid) - cpu_before
            _check_steady(members, "in the window")
            rates = [_rates(m, start, end) for m in members]
    except KafkaException as exc:
        raise Unavailable(reason(exc)) from exc
    wait_idle(broker.pid)
    idle_after = _cpu_rate(broker.pid, window / 2)
    return HeartbeatCost(
        heartbeats_per_s=sum(r[0] for r in rates),
        others_per_s=dict(sum((collections.Counter(r[1]) for r in rates), collections.Counter())),
        cpu_ms_per_s=cpu * 1000 / (end - start),
        idle_before_ms_per_s=idle_before,
        idle_after_ms_per_s=idle_after,
    )


def _cpu_rate(pid: int, seconds: float) -> float:
    """The process's CPU over the next `seconds`, ms/s."""
    started, cpu_before = time.perf_counter(), cpu_seconds(pid)
    time.sleep(seconds)
    return (cpu_seconds(pid) - cpu_before) * 1000 / (time.perf_counter() - started)
