"""The analytics orders job under load: backlog throughput, start-up cost, and freshness.

Starts a streamshop broker (child process) and a schema registry (in a thread), then:

1. backlog: after a warm-up run over 60,000 events (Python workers started, decoders compiled),
   produces `--backlog` OrderCreated events (1M by default, created_at spread over an hour, 6
   partitions) and times `run_jobs(--once, jobs=orders)` in this process over all of them:
   decode + aggregate + ledger + Parquet + results topic, events/s;
2. start-up: `streamshop analytics run` as a child process on that backlog, limited to 6,000
   records a batch: launch -> ready line, and launch -> first batch done (JVM, session, Python
   workers, schema fetch, first batch), then SIGTERM;
3. freshness: `streamshop analytics run --trigger 2` as a child process (new group, from the
   latest offsets) while orders are produced at `--rate` events/s for `--seconds`, plus one
   probe order a second in a currency of its own: freshness = time from producing a probe to
   its `orders.count` row arriving on `analytics.metrics` (the dashboard's view), p50/p95.

Everything shares the host's cores: the broker, the load generator, Spark's JVM and its
Python workers.

    python -m loadtest.bench_analytics [--backlog 1000000] [--rate 1000] [--seconds 60]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import string
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from itertools import product
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

from analytics.runner import run_jobs
from analytics.settings import AnalyticsConfig
from analytics.spark import spark_session, stop_spark_session
from loadtest.bench_spark_source import ThreadRegistry, register
from loadtest.brokers import child_process, create_topic, streamshop_broker
from schemas.catalog import default_catalog
from schemas.serde import AvroSchema, encode, frame, unframe

TOPIC = "orders"
PARTITIONS = 6
FRESHNESS_TARGET_S = 10.0
THROUGHPUT_TARGET = 200_000  # events/s decoded, measured at the source by bench_spark_source


def order(schema: AvroSchema, schema_id: int, i: int, created: datetime, currency: str = "EUR") -> bytes:
    datum = dict(default_catalog().example("OrderCreated"))
    price = Decimal(f"{i % 90 + 1}.99")
    datum.update(
        envelope={**datum["envelope"], "occurred_at": created},
        items=[{"sku": f"SKU-{i % 500:04d}", "quantity": 1, "unit_price": price}],
        total=price,
        currency=currency,
        created_at=created,
    )
    return frame(schema_id, encode(schema, datum, validate_record=False))


def producer(bootstrap: str) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
        }
    )


def send(p: Producer, value: bytes, key: str, partition: int = -1) -> None:
    while True:
        try:
            p.produce(TOPIC, key=key, value=value, partition=partition)
            return
        except BufferError:
            p.poll(0.05)


def produce_backlog(bootstrap: str, schema: AvroSchema, schema_id: int, events: int, *, day: int = 1) -> None:
    start = datetime(2026, 1, day, tzinfo=UTC)
    distinct = [order(schema, schema_id, i, start + timedelta(seconds=i * 3600 // 500)) for i in range(500)]
    p = producer(bootstrap)
    for i in range(events):
        # Spread over an hour: the i-th event of each block of 500 takes the block's times.
        send(p, distinct[i % 500], f"order-{i}")
        if i % 10_000 == 0:
            p.poll(0)
    if p.flush(120):
        raise RuntimeError("backlog not delivered")


class Lines:
    """The lines a child process wrote to its log so far, with when this process saw them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seen: list[tuple[float, str]] = []
        self._offset = 0

    def poll(self) -> list[tuple[float, str]]:
        with self.path.open("rb") as f:
            f.seek(self._offset)
            data = f.read()
        complete = data.rsplit(b"\n", 1)[0] + b"\n" if b"\n" in data else b""
        self._offset += len(complete)
        now = time.monotonic()
        new = [(now, line) for line in complete.decode(errors="replace").splitlines()]
        self.seen.extend(new)
        return new

    def wait_for(self, prefix: str, timeout: float, proc: Any) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for at, line in self.poll():
                if line.startswith(prefix):
                    return at
            if proc.poll() is not None:
                raise RuntimeError(f"the job exited: see {self.path}")
            time.sleep(0.01)
        raise TimeoutError(f"no line starting {prefix!r} within {timeout} s: see {self.path}")


def job_command(bootstrap: str, registry: str, data_dir: Path, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "streamshop.cli",
        "analytics",
        "run",
        "--bootstrap",
        bootstrap,
        "--registry-url",
        registry,
        "--data-dir",
        str(data_dir),
        "--jobs",
        "orders",
        *args,
    ]


def startup(bootstrap: str, registry: str, workdir: Path) -> tuple[float, float]:
    """Seconds from launching `streamshop analytics run` to its ready line and to its first
    batch (6,000 records of the backlog) done."""
    log = workdir / "startup.log"
    cmd = job_command(
        bootstrap, registry, workdir / "startup", "--group", "bench-startup", "--max-records-per-trigger", "6000"
    )
    cmd += ["--results-topic", "bench.startup.metrics", "--starting-offsets", "earliest"]
    launched = time.monotonic()
    with child_process(cmd, log, env=dict(os.environ)) as proc:
        lines = Lines(log)
        ready = lines.wait_for("streamshop analytics ready", 120, proc)
        first = lines.wait_for("analytics orders batch 0:", 120, proc)
    return ready - launched, first - launched


def currencies() -> Iterator[str]:
    for a, b in product(string.ascii_uppercase, repeat=2):
        yield f"Q{a}{b}"


def freshness(
    bootstrap: str, registry: str, schema: AvroSchema, schema_id: int, workdir: Path, *, rate: int, seconds: int
) -> tuple[list[float], int, list[str]]:
    """Probe freshness samples (s), probes never seen, and the job's batch lines."""
    log = workdir / "freshness.log"
    cmd = job_command(bootstrap, registry, workdir / "fresh", "--group", "bench-freshness", "--trigger", "2")
    cmd += ["--starting-offsets", "latest", "--results-topic", "bench.freshness.metrics"]
    sent: dict[str, float] = {}
    seen: dict[str, float] = {}
    stop = threading.Event()

    def watch() -> None:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watch", "enable.auto.commit": False})
        consumer.assign([TopicPartition("bench.freshness.metrics", 0, OFFSET_END)])
        try:
            while not stop.is_set():
                message = consumer.poll(0.2)
                if message is None or message.error() is not None:
                    continue
                key = (message.key() or b"").decode()
                metric, _, rest = key.partition("|")
                if metric != "orders.count":
                    continue
                currency = json.loads(rest.partition("|")[2]).get("currency", "")
                if currency in sent and currency not in seen:
                    _, body = unframe(message.value() or b"")
                    seen[currency] = time.monotonic()
                    assert body  # a framed AnalyticsMetric
        finally:
            consumer.close()

    with child_process(cmd, log, env=dict(os.environ)) as proc:
        lines = Lines(log)
        lines.wait_for("streamshop analytics ready", 120, proc)
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        p = producer(bootstrap)
        # Warm-up, not part of the figures: the first batches start the Python workers (one per
        # core), each fetching the writer schema and compiling its decoder.
        for batch in range(2):
            for partition in range(PARTITIONS):
                send(p, order(schema, schema_id, partition, datetime.now(UTC)), "warm-up", partition)
            p.flush(10)
            lines.wait_for(f"analytics orders batch {batch}:", 120, proc)
        probes = currencies()
        started = time.monotonic()
        next_probe = started
        i = 0
        while (now := time.monotonic()) < started + seconds:
            due = int((now - started) * rate)
            while i < due:
                send(p, order(schema, schema_id, i, datetime.now(UTC)), f"load-{i}")
                i += 1
            if now >= next_probe:
                currency = next(probes)
                sent[currency] = time.monotonic()
                send(p, order(schema, schema_id, i, datetime.now(UTC), currency), f"probe-{currency}")
                p.flush(5)
                next_probe += 1.0
            p.poll(0)
            time.sleep(0.005)
        p.flush(30)
        deadline = time.monotonic() + 30
        while len(seen) < len(sent) and time.monotonic() < deadline:
            time.sleep(0.1)
        stop.set()
        watcher.join(5)
        lines.poll()
    samples = [seen[c] - sent[c] for c in sent if c in seen]
    batches = [line for _, line in lines.seen if line.startswith("analytics orders batch")]
    return samples, len(sent) - len(samples), batches


def percentile(samples: list[float], p: int) -> float:
    ordered = sorted(samples)
    return ordered[max(0, -(-p * len(ordered) // 100) - 1)]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m loadtest.bench_analytics", description=__doc__.split("\n")[0])
    ap.add_argument("--backlog", type=int, default=1_000_000, help="OrderCreated events for the backlog run")
    ap.add_argument("--rate", type=int, default=1_000, help="orders/s of steady load during the freshness run")
    ap.add_argument("--seconds", type=int, default=60, help="length of the freshness run")
    opts = ap.parse_args(argv)

    schema = default_catalog().schema("OrderCreated")
    with tempfile.TemporaryDirectory(prefix="bench-analytics-") as tmp, streamshop_broker(Path(tmp)) as broker:
        workdir = Path(tmp)
        registry = ThreadRegistry(broker.bootstrap)
        try:
            url = registry.running.url
            create_topic(broker.bootstrap, TOPIC, PARTITIONS)
            schema_id = register(url, f"{TOPIC}-{schema.name}", schema)
            warm_up = 60_000
            produce_backlog(broker.bootstrap, schema, schema_id, warm_up)

            t = time.perf_counter()
            spark = spark_session("bench-analytics", conf={"spark.sql.shuffle.partitions": "2"})
            session_s = time.perf_counter() - t
            out = io.StringIO()
            config = AnalyticsConfig(
                bootstrap_servers=broker.bootstrap,
                registry_url=url,
                data_dir=workdir / "backlog",
                jobs=("orders",),
                once=True,
                group_id="bench-backlog",
                results_topic="bench.backlog.metrics",
            )
            # A first run over a small backlog warms the session up (Python workers, decoders).
            if run_jobs(config, spark=spark, out=io.StringIO()) != 0:
                raise RuntimeError("the warm-up run failed")
            t = time.perf_counter()
            produce_backlog(broker.bootstrap, schema, schema_id, opts.backlog, day=2)
            print(f"produced {opts.backlog:,} events in {time.perf_counter() - t:.1f} s (not part of the figures)")
            t = time.perf_counter()
            if run_jobs(config, spark=spark, out=out) != 0:
                raise RuntimeError(f"the backlog run failed:\n{out.getvalue()}")
            backlog_s = time.perf_counter() - t
            stop_spark_session(spark)
            backlog_lines = [line for line in out.getvalue().splitlines() if line.startswith("analytics orders batch")]

            ready_s, first_s = startup(broker.bootstrap, url, workdir)
            samples, missing, batches = freshness(
                broker.bootstrap, url, schema, schema_id, workdir, rate=opts.rate, seconds=opts.seconds
            )
        finally:
            registry.close()

    print()
    print(f"analytics orders job, local[2] on {os.cpu_count()} cores shared with broker and load")
    print(
        f"backlog: {opts.backlog:,} events, one --once run in a session started in {session_s:.1f} s "
        "and warmed up by a run over 60,000 events"
    )
    print(f"  run_jobs total {backlog_s:.1f} s -> {opts.backlog / backlog_s:,.0f} events/s end to end")
    for line in backlog_lines:
        print(f"  {line}")
    print(
        f"start-up of `streamshop analytics run`: ready after {ready_s:.1f} s, first batch done after {first_s:.1f} s"
    )
    print(
        f"freshness at {opts.rate:,} orders/s for {opts.seconds} s, trigger 2 s: "
        f"{len(samples)} probes seen, {missing} missing"
    )
    if samples:
        p50, p95 = percentile(samples, 50), percentile(samples, 95)
        print(f"  p50 {p50:.2f} s, p95 {p95:.2f} s, max {max(samples):.2f} s, mean {statistics.fmean(samples):.2f} s")
        verdict = "met" if p95 < FRESHNESS_TARGET_S and not missing else "NOT met"
        print(f"  target p95 < {FRESHNESS_TARGET_S:.0f} s: {verdict}")
    durations = [float(line.rsplit("(", 1)[1].split(" ")[0]) for line in batches[1:]]
    if durations:
        print(
            f"  {len(batches)} batches; sink time per batch p50 {percentile(durations, 50):.2f} s, "
            f"max {max(durations):.2f} s"
        )


if __name__ == "__main__":
    main()
