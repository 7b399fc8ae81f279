"""Throughput of the `streamshop-kafka` Spark source: OrderCreated events/s decoded on local[2].

Starts a streamshop broker (child process) and a schema registry (in a thread), produces the
events first (not timed: a few hundred distinct OrderCreated records, pre-encoded, cycled), then
times, each over all the events:
- the decoder alone in this process (one core, no Kafka, no Spark), against fastavro;
- batch reads into Spark's `noop` sink (every column materialised, nothing written), after a
  small warm-up job that starts Spark's Python workers: raw values (no registry: Kafka + Arrow
  only), then with Avro decoding, first (cold: writer schema fetched and decoder compiled in
  each worker) and again (warm);
- a new streaming query's start-up: from start() until its first, small batch is done;
- a streaming `trigger(availableNow=True)` query over all the events into the `noop` sink;
- side by side, alternating, median of `--repeats`: the same batch read decoded by the project's
  source and by Spark's own (`spark-sql-kafka-0-10` + `from_avro` of `spark-avro`, from Maven
  Central: analytics.spark_kafka), into the same columns, in local[2] and then on a standalone
  cluster of `--workers` workers of one core (`streamshop spark-cluster`): events/s, and CPU
  seconds per million events of Spark (driver, executors, Python workers) and of the broker.

Everything shares the machine's cores: Spark's JVMs, its Python workers and the broker.

    python -m loadtest.bench_spark_source [--events 1000000] [--partitions 6] [--workers 2]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import statistics
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
from confluent_kafka import Producer
from fastavro import schemaless_reader
from pyspark import SparkContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from analytics.avro_columns import EventColumns
from analytics.spark import spark_session, stop_spark_session
from analytics.spark_kafka import read_kafka
from loadtest.brokers import BrokerProcess, cpu_seconds, create_topic, streamshop_broker, tree_cpu_seconds
from registry.app import RunningRegistry, start_registry
from registry.config import RegistryConfig
from schemas.catalog import default_catalog
from schemas.serde import AvroSchema, encode, frame
from streamshop import spark_cluster, spark_connectors

TOPIC = "orders"
TARGET = 200_000  # events/s decoded


class ThreadRegistry:
    """The bundled registry on an event loop of its own (Spark's workers call it over HTTP)."""

    def __init__(self, bootstrap: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="registry")
        self.thread.start()
        config = RegistryConfig(bootstrap_servers=bootstrap, listen="127.0.0.1", port=0, startup_timeout=60)
        self.running: RunningRegistry = asyncio.run_coroutine_threadsafe(start_registry(config), self.loop).result(90)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.running.stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def register(url: str, subject: str, schema: AvroSchema) -> int:
    request = urllib.request.Request(
        f"{url}/subjects/{subject}/versions",
        data=json.dumps({"schema": schema.text}).encode(),
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return int(json.loads(response.read())["id"])


def orders(schema: AvroSchema, distinct: int) -> list[bytes]:
    """`distinct` OrderCreated payloads (Avro binary, no header), one to three line items each."""
    example = default_catalog().example("OrderCreated")
    base = datetime(2026, 1, 1, tzinfo=UTC)
    out = []
    for i in range(distinct):
        prices = [(j + 1, Decimal(f"{(i + j) % 90 + 1}.99")) for j in range(i % 3 + 1)]
        items = [
            {"sku": f"SKU-{(i * 7 + j) % 500:04d}", "quantity": quantity, "unit_price": price}
            for j, (quantity, price) in enumerate(prices)
        ]
        total = sum((price * quantity for quantity, price in prices), Decimal(0))
        created = base + timedelta(seconds=i)
        datum = {
            **example,
            "envelope": {
                **example["envelope"],
                "event_id": f"00000000-0000-4000-8000-{i:012d}",
                "occurred_at": created,
            },
            "order_id": f"10000000-0000-4000-8000-{i:012d}",
            "customer_id": f"cust-{i % 1000}",
            "items": items,
            "total": total,
            "created_at": created,
        }
        out.append(encode(schema, datum))
    return out


def produce(bootstrap: str, values: list[bytes], events: int, partitions: int) -> float:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "compression.type": "none",  # as the services produce (aiokafka default)
        }
    )
    started = time.perf_counter()
    for i in range(events):
        while True:
            try:
                producer.produce(TOPIC, key=f"order-{i}", value=values[i % len(values)], partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    remaining = producer.flush(120)
    if remaining:
        raise RuntimeError(f"{remaining} events not delivered")
    return time.perf_counter() - started


def timed(action: Callable[[], Any]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def decoder_alone(schema: AvroSchema, values: list[bytes], events: int) -> tuple[float, float]:
    """Seconds for `events` records: our decoder + Arrow, and fastavro (dicts only, no Arrow)."""
    framed = [frame(1, v) for v in values]
    batch = (framed * (16_384 // len(framed) + 1))[:16_384]
    columns = EventColumns(schema)
    decode = columns.decoder(schema)
    types = [f.type for f in to_arrow_schema(StructType(columns.fields), timezone="UTC")]

    def ours() -> None:
        for _ in range(events // len(batch)):
            errors: list[tuple[int, str]] = []
            decode(batch, 5, 0, errors)
            pa.RecordBatch.from_arrays(columns.finish(types), names=columns.names)

    sample = values * (20_000 // len(values) + 1)

    def reference() -> None:
        for v in sample[:20_000]:
            schemaless_reader(io.BytesIO(v), schema.parsed, schema.parsed)

    return timed(ours) / (events // len(batch) * len(batch)), timed(reference) / 20_000


def read(spark: SparkSession, bootstrap: str, options: dict[str, str]) -> DataFrame:
    return spark.read.format("streamshop-kafka").option("bootstrap.servers", bootstrap).options(**options).load()


def noop(df: DataFrame) -> None:
    df.write.format("noop").mode("overwrite").save()


def stream_run(spark: SparkSession, bootstrap: str, options: dict[str, str], checkpoint: Path) -> float:
    """Seconds for a whole availableNow run into the noop sink."""
    df = spark.readStream.format("streamshop-kafka").option("bootstrap.servers", bootstrap).options(**options).load()
    started = time.perf_counter()
    query = (
        df.writeStream.format("noop").option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    )
    query.awaitTermination()
    return time.perf_counter() - started


def first_batch(spark: SparkSession, bootstrap: str, options: dict[str, str], checkpoint: Path) -> tuple[float, int]:
    """A new query's start-up: seconds from start() until its first (small) batch is done, and its rows."""
    df = spark.readStream.format("streamshop-kafka").option("bootstrap.servers", bootstrap).options(**options).load()
    started = time.perf_counter()
    query = df.writeStream.format("noop").option("checkpointLocation", str(checkpoint)).start()
    try:
        while not any(p["batchId"] == 0 for p in query.recentProgress):
            time.sleep(0.01)
        elapsed = time.perf_counter() - started
        rows = next(int(p["numInputRows"]) for p in query.recentProgress if p["batchId"] == 0)
    finally:
        query.stop()
    return elapsed, rows


OURS = "streamshop-kafka (Python)"
JVM = "kafka + from_avro (JVM)"


@dataclass
class Reading:
    seconds: float
    spark_cpu: float  # the driver's JVM, the executors and their Python workers
    broker_cpu: float


def side_by_side(
    spark: SparkSession,
    broker: BrokerProcess,
    registry_url: str,
    schema: AvroSchema,
    *,
    partitions: int,
    repeats: int,
    spark_pids: list[int],
) -> dict[str, list[Reading]]:
    """Both sources over the whole topic into the noop sink, alternating, `repeats` times each,
    after a warm-up read of each that also checks they decode the same values."""
    ours = {"topics": TOPIC, "schema.registry.url": registry_url, "valueRecord": "OrderCreated"}
    frames: dict[str, Callable[[dict[str, str]], DataFrame]] = {
        OURS: lambda extra: read(spark, broker.bootstrap, {**ours, **extra}),
        JVM: lambda extra: read_kafka(spark, broker.bootstrap, TOPIC, schema.text, extra),
    }
    head = {"endingOffsets": json.dumps({TOPIC: {str(p): 500 for p in range(partitions)}})}
    sums = {
        name: make(head).agg(F.count("order_id"), F.sum("total"), F.max("created_at")).first()
        for name, make in frames.items()
    }
    if sums[OURS] != sums[JVM]:
        raise RuntimeError(f"the sources decode differently: {sums}")
    readings: dict[str, list[Reading]] = {name: [] for name in frames}
    for _ in range(repeats):
        for name, make in frames.items():
            df = make({})
            spark0, broker0 = sum(tree_cpu_seconds(p) for p in spark_pids), cpu_seconds(broker.pid)
            seconds = timed(lambda df=df: noop(df))  # type: ignore[misc]
            spark1, broker1 = sum(tree_cpu_seconds(p) for p in spark_pids), cpu_seconds(broker.pid)
            readings[name].append(Reading(seconds, spark1 - spark0, broker1 - broker0))
    return readings


def driver_pid() -> int:
    """The pid of the session's JVM (PySpark's launcher ends in `exec java`)."""
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if proc is None:
        raise RuntimeError("no Spark JVM started by this process")
    return int(proc.pid)


def on_cluster(
    workdir: Path, workers: int, jars: list[str], run: Callable[[SparkSession, list[int]], dict[str, list[Reading]]]
) -> dict[str, list[Reading]]:
    """`run` on a standalone cluster of `workers` one-core workers, started and stopped here."""
    cluster = spark_cluster.start(workdir, workers=workers, cores=1, memory_mb=1024, timeout=180)
    try:
        spark = spark_session(
            "bench-spark-source-cluster", master=cluster.master_url, conf={"spark.jars": ",".join(jars)}
        )
        try:
            members = [m.pid for m in [cluster.master, *cluster.workers] if m.pid is not None]
            return run(spark, [driver_pid(), *members])
        finally:
            stop_spark_session(spark)
    finally:
        spark_cluster.stop(workdir)


def print_side_by_side(events: int, repeats: int, modes: dict[str, dict[str, list[Reading]]]) -> None:
    print(f"\nside by side: {events:,} OrderCreated events read and decoded into the noop sink, median of {repeats}")
    print(f"{'where':<30} {'source':<27} {'events/s':>10} {'Spark CPU-s/M':>14} {'broker CPU-s/M':>15}")
    per_million = 1_000_000 / events
    for mode, readings in modes.items():
        medians = {}
        for name, each in readings.items():
            rate = events / statistics.median(r.seconds for r in each)
            cpu = statistics.median(r.spark_cpu for r in each) * per_million
            broker_cpu = statistics.median(r.broker_cpu for r in each) * per_million
            medians[name] = (rate, cpu)
            print(f"{mode:<30} {name:<27} {rate:>10,.0f} {cpu:>14.2f} {broker_cpu:>15.2f}")
        (ours_rate, ours_cpu), (jvm_rate, jvm_cpu) = medians[OURS], medians[JVM]
        print(f"{mode:<30} {'ratio Python / JVM':<27} {ours_rate / jvm_rate:>9.2f}x {ours_cpu / jvm_cpu:>13.2f}x")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m loadtest.bench_spark_source", description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--distinct", type=int, default=500, help="distinct OrderCreated records, cycled")
    p.add_argument("--repeats", type=int, default=3, help="side-by-side reads of each source (median)")
    p.add_argument("--workers", type=int, default=2, help="workers of the standalone cluster (0: local[2] only)")
    opts = p.parse_args(argv)
    jars = spark_connectors.jars()

    schema = default_catalog().schema("OrderCreated")
    values = orders(schema, opts.distinct)
    per_event_ours, per_event_fastavro = decoder_alone(schema, values, min(opts.events, 200_000))

    with tempfile.TemporaryDirectory(prefix="bench-spark-") as tmp, streamshop_broker(Path(tmp)) as broker:
        registry = ThreadRegistry(broker.bootstrap)
        try:
            create_topic(broker.bootstrap, TOPIC, opts.partitions)
            schema_id = register(registry.running.url, f"{TOPIC}-value", schema)
            produced = produce(broker.bootstrap, [frame(schema_id, v) for v in values], opts.events, opts.partitions)
            print(f"produced {opts.events:,} events in {produced:.1f} s (not part of the figures)", flush=True)

            started = time.perf_counter()
            spark = spark_session("bench-spark-source", conf={"spark.jars": ",".join(jars)})
            session_s = time.perf_counter() - started
            decoded = {"topics": TOPIC, "schema.registry.url": registry.running.url, "valueRecord": "OrderCreated"}
            raw = {"topics": TOPIC}
            rows: list[tuple[str, int, float]] = [
                ("decoder alone, 1 core, this process (ours)", opts.events, per_event_ours * opts.events),
                ("decoder alone, 1 core, fastavro (dicts only)", opts.events, per_event_fastavro * opts.events),
            ]
            # Warm-up: the first job starts Spark's Python workers; that is not what is measured.
            noop(read(spark, broker.bootstrap, {**raw, "endingOffsets": json.dumps({TOPIC: {"0": 1000}})}))
            for name, options in (
                ("batch read, raw value (no decoding)", raw),
                ("batch read + Avro decode, cold workers", decoded),
                ("batch read + Avro decode, warm", decoded),
            ):
                df = read(spark, broker.bootstrap, options)
                rows.append((name, opts.events, timed(lambda df=df: noop(df))))  # type: ignore[misc]
            per_partition = 1_000
            first_s, first_rows = first_batch(
                spark,
                broker.bootstrap,
                {**decoded, "maxRecordsPerTrigger": str(per_partition * opts.partitions)},
                Path(tmp) / "first",
            )
            rows.append(("stream: new query, start() to first batch done", first_rows, first_s))
            total = stream_run(
                spark, broker.bootstrap, {**decoded, "maxRecordsPerTrigger": str(opts.events // 4)}, Path(tmp) / "all"
            )
            rows.append(("stream availableNow + decode, 4 batches", opts.events, total))

            def compare(session: SparkSession, pids: list[int]) -> dict[str, list[Reading]]:
                url = registry.running.url
                return side_by_side(
                    session, broker, url, schema, partitions=opts.partitions, repeats=opts.repeats, spark_pids=pids
                )

            modes = {"local[2]": compare(spark, [driver_pid()])}
            stop_spark_session(spark)
            if opts.workers:
                where = f"cluster, {opts.workers} workers x 1 core"
                modes[where] = on_cluster(Path(tmp) / "spark-cluster", opts.workers, jars, compare)
        finally:
            registry.close()

    print()
    cores = os.cpu_count()
    print(f"OrderCreated, {opts.partitions} partitions, local[2] on {cores} cores; session start {session_s:.1f} s")
    print(f"{'measurement':<46} {'events':>10} {'seconds':>8} {'events/s':>10}")
    for name, count, seconds in rows:
        print(f"{name:<46} {count:>10,} {seconds:>8.2f} {count / seconds:>10,.0f}")
    warm = next(c / s for n, c, s in rows if n.endswith("warm"))
    print(
        f"\ntarget {TARGET:,} events/s decoded: {'met' if warm >= TARGET else 'NOT met'} ({warm:,.0f} warm batch read)"
    )
    print_side_by_side(opts.events, opts.repeats, modes)


if __name__ == "__main__":
    main()
