"""The analytics jobs end to end: a real broker and schema registry, real producers with the
project's Avro serde, local Spark.  The in-process tests share one SparkSession and one data
set (processed by two `--once` runs); the crash tests run `streamshop analytics run` as a child
process and SIGKILL it."""

from __future__ import annotations

import io
import re
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind
from pyspark.sql import SparkSession

from analytics.results import read_metrics, read_quarantine
from analytics.runner import replay_jobs, run_jobs
from analytics.settings import AnalyticsConfig
from analytics.source import StreamshopKafkaSource
from analytics.tracing import SAMPLE
from schemas.serde import encode, frame
from tests.support.analytics import (
    CATALOG,
    T0,
    TOPICS,
    Produced,
    Producer,
    create_topics,
    expected_metrics,
    group_lag,
    ledger_reach,
    meta_totals,
    parquet_values,
    produce_events,
    producer_traceparent,
    records_read,
    topic_values,
)
from tests.support.analytics_job import BATCH, JOB_TIMEOUT, Job, kill_after_batches, orders_only, wait_until_committed
from tests.support.harness import ThreadBroker
from tests.support.registry import ThreadRegistry
from tests.support.spans import recorder
from tests.support.spark import committed, planned_end

pytestmark = pytest.mark.spark

JOB_TOPICS = {"orders", "otp.deliveries", "logs.app", "logs.ingress", "logs.db"}


def config(bootstrap: str, registry_url: str, data_dir: Path, **overrides: Any) -> AnalyticsConfig:
    # Lateness 10 min: the generated events span 5 min, so batching can never make one late.
    settings: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "registry_url": registry_url,
        "data_dir": data_dir,
        "once": True,
        "lateness_seconds": 600.0,
        **overrides,
    }
    return AnalyticsConfig(**settings)


@dataclass
class Processed:
    """The shared data set after two `--once` runs, and what was observed along the way."""

    bootstrap: str
    registry_url: str
    data_dir: Path
    produced: Produced
    bad: list[tuple[str, int, int, str]]
    second_batch_records: int
    lag_after_first: dict[tuple[str, int], int] = field(default_factory=dict)
    lag_before_second: dict[tuple[str, int], int] = field(default_factory=dict)
    lag_after_second: dict[tuple[str, int], int] = field(default_factory=dict)
    output: str = ""
    spans: tuple[ReadableSpan, ...] = ()  # what the two runs traced


@pytest.fixture(scope="module")
def processed(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Processed]:
    root = tmp_path_factory.mktemp("analytics")
    broker = ThreadBroker(root / "broker").start()
    registry = ThreadRegistry(broker.bootstrap)
    try:
        create_topics(broker.bootstrap, extra={"logs.app.dlq": 1})
        producer = Producer(broker.bootstrap, registry.url)
        produced = produce_events(producer, orders=60)
        # Orders of an aborted transaction sit on disk between the committed ones: the job reads
        # read_committed, so the exact totals below prove none of them reaches Parquet.
        phantom = [{**o, "order_id": f"00000000-0000-4000-8000-{i:012d}"} for i, o in enumerate(produced.orders[:9])]
        assert producer.send_aborted("orders", "OrderCreated", phantom) == 9
        example = CATALOG.example("LogRecord")
        log_id = producer.schema_id("logs.app", "LogRecord")
        good_log = frame(log_id, encode(CATALOG.schema("LogRecord"), example))
        bad = []
        for topic, value, error in (
            ("orders", b'{"order_id": "not avro"}', "unknown magic byte 0x7b"),
            (
                "orders",
                frame(9999, encode(CATALOG.schema("OrderCreated"), produced.orders[0])),
                "schema id 9999 not found",
            ),
            ("logs.app", good_log[:-3], f"schema id {log_id} (io.streamshop.events.logs.LogRecord): "),
        ):
            report = producer.send_raw(topic, value)
            bad.append((topic, report.partition() or 0, report.offset() or 0, error))
        producer.send_raw("logs.app.dlq", good_log)  # a dead-letter topic: not the job's
        data_dir = root / "data"
        out = io.StringIO()
        result = Processed(broker.bootstrap, registry.url, data_dir, produced, bad, 0)
        traced = recorder()

        assert (
            run_jobs(config(broker.bootstrap, registry.url, data_dir, max_records_per_trigger=40), spark=spark, out=out)
            == 0
        )
        result.lag_after_first = group_lag(broker.bootstrap, "analytics")
        more = produce_events(producer, orders=30, start=60, older_writers=False)
        result.second_batch_records = len(more.orders) + len(more.status_changes) + len(more.logs)
        result.lag_before_second = group_lag(broker.bootstrap, "analytics")
        assert (
            run_jobs(config(broker.bootstrap, registry.url, data_dir, max_records_per_trigger=40), spark=spark, out=out)
            == 0
        )
        result.lag_after_second = group_lag(broker.bootstrap, "analytics")
        produced += more
        result.output = out.getvalue()
        result.spans = traced.get_finished_spans()
        yield result
    finally:
        registry.close()
        broker.close()


def test_the_metrics_are_exactly_those_of_the_generated_events(processed: Processed) -> None:
    assert parquet_values(processed.data_dir) == expected_metrics(processed.produced)
    # Two figures worked out by hand: the SMS latencies of the first window are 1..100 ms.
    sms = {m.metric: m.value for m in read_metrics(processed.data_dir) if m.dimensions == {"channel": "sms"}}
    assert sms["otp.latency_p50"] == Decimal(50)
    assert sms["otp.latency_p95"] == Decimal(95)


def test_events_of_an_older_schema_version_are_read_as_the_current_one(processed: Processed) -> None:
    values = parquet_values(processed.data_dir)

    def total(metric: str) -> int:
        return sum(count for key, (_, count) in values.items() if key.startswith(f"{metric}|"))

    produced = processed.produced
    # Three OtpFailed were written by an older version without `will_retry` (added later with
    # default false): they are read, and count as final outcomes of their channel.
    older = [f for f in produced.failures if "will_retry" not in f]
    final = [f for f in produced.failures if f.get("will_retry") is False]
    assert (len(older), len(final)) == (3, 2)
    assert total("otp.failed") == len(produced.failures)
    assert total("otp.success_rate") == len(produced.deliveries) + len(final) + len(older)
    # Half of the first run's orders were written by a version whose envelope had no trace_id.
    assert total("orders.count") == len(produced.orders)


def test_the_results_topic_holds_the_parquet_values_keyed_by_window(processed: Processed) -> None:
    latest, records = topic_values(processed.bootstrap, "analytics.metrics")

    assert latest == {**parquet_values(processed.data_dir), **parquet_values(processed.data_dir, meta=True)}
    assert {r["envelope"]["producer"]["service"] for r in records} == {"analytics"}
    assert {r["job"] for r in records} == {"orders", "otp", "logs"}
    assert {r["generation"] for r in records} == {1, 2}  # each run of a job is a generation


def test_bad_records_are_quarantined_with_their_coordinates_never_dropped(processed: Processed) -> None:
    quarantined = read_quarantine(processed.data_dir)

    assert [(q.topic, q.partition, q.offset) for q in quarantined] == sorted((t, p, o) for t, p, o, _ in processed.bad)
    for q, (_, _, _, error) in zip(quarantined, sorted(processed.bad), strict=True):
        assert q.error.startswith(error) or error in q.error, q.error
        assert q.value is not None
        assert q.key == "bad"
    assert meta_totals(processed.data_dir) == {
        ("analytics.quarantined", "topic=orders"): 2,
        ("analytics.quarantined", "topic=logs.app"): 1,
    }


def test_the_group_lag_shrinks_to_zero_and_covers_only_the_jobs_topics(processed: Processed) -> None:
    assert {t for t, _ in processed.lag_after_first} == JOB_TOPICS  # logs.app.dlq is not read
    assert set(processed.lag_after_first.values()) == {0}
    assert sum(processed.lag_before_second.values()) == processed.second_batch_records
    assert set(processed.lag_after_second.values()) == {0}


def test_each_batch_is_a_span_linked_to_a_sample_of_its_records_producers(processed: Processed) -> None:
    """A ``process {topics}`` span per batch of each job, in a trace of its own, with its
    records and offsets, linked to the producers of up to 32 of its records; each of those
    records also has a ``process`` span in its producer's trace, linked back to the batch."""
    producers = {
        (int(tp.split("-")[1], 16), int(tp.split("-")[2], 16))
        for topic in TOPICS
        for i in range(200)
        for tp in [producer_traceparent(topic, i)]
    }
    batches = [s for s in processed.spans if s.parent is None and s.name == "process orders"]
    assert len(batches) >= 2  # two runs, at most 40 records a batch
    by_id = {}
    for batch in batches:
        assert batch.kind == SpanKind.CONSUMER
        assert batch.attributes is not None
        assert batch.attributes["streamshop.analytics.job"] == "orders"
        assert batch.attributes["messaging.consumer.group.name"] == "analytics"
        assert 0 < int(str(batch.attributes["messaging.batch.message_count"])) <= 40
        offsets = batch.attributes["streamshop.analytics.offsets"]
        assert isinstance(offsets, tuple)
        assert all(str(o).startswith("orders-") for o in offsets)
        assert len(batch.links) <= SAMPLE  # none for a batch of records without a traceparent
        assert {(link.context.trace_id, link.context.span_id) for link in batch.links} <= producers
        assert batch.context is not None
        by_id[batch.context.span_id] = batch
    assert sum(len(b.links) for b in batches) >= 2 * 30  # the two 40-record batches: 10 of each partition
    sampled = [s for s in processed.spans if s.parent is not None and s.name == "process orders"]
    assert len(sampled) == sum(len(b.links) for b in batches)
    for span in sampled:
        assert span.parent is not None
        assert (span.parent.trace_id, span.parent.span_id) in producers  # in the producer's trace
        (back,) = span.links
        assert back.context.span_id in by_id


def test_each_batch_prints_a_progress_line(processed: Processed) -> None:
    lines = processed.output.splitlines()
    # one ready line per run of the job (the fixture runs it twice), once the first query is past
    # its first batch, so before the second query (started after that) has run one
    ready = [line for line in lines if line.startswith("streamshop analytics ready: ")]
    assert len(ready) == 2, lines[:5]
    first_otp_batch = next(i for i, line in enumerate(lines) if line.startswith("analytics otp batch "))
    assert lines.index(ready[0]) < first_otp_batch
    assert all(line.startswith("streamshop analytics ready: jobs orders,otp,logs, group analytics") for line in ready)
    batches = [line for line in lines if line.startswith("analytics orders batch ")]
    assert len(batches) >= 3  # 60 orders and their status changes, 40 records a batch
    assert re.fullmatch(
        r"analytics orders batch \d+: [\d,]+ records, [\d,]+ metric values, \d+ quarantined, 0 late, "
        r"lag 0 \([\d.]+ s\)",
        batches[-1],
    ), batches[-1]
    assert "analytics otp: stopped after" in processed.output


def test_replay_recomputes_everything_beside_the_live_job(processed: Processed, spark: SparkSession) -> None:
    partitions = list(processed.lag_after_second)
    live_offsets = committed(processed.bootstrap, "analytics", partitions)
    live = config(processed.bootstrap, processed.registry_url, processed.data_dir)
    replay = live.replay()

    assert replay_jobs(live, spark=spark, out=io.StringIO()) == 0

    assert replay.data_dir == processed.data_dir / "replay"
    assert parquet_values(replay.data_dir) == parquet_values(processed.data_dir)
    assert topic_values(processed.bootstrap, "analytics.metrics.replay")[0] == {
        **parquet_values(replay.data_dir),
        **parquet_values(replay.data_dir, meta=True),
    }
    assert committed(processed.bootstrap, "analytics", partitions) == live_offsets
    # the replay's group only carried its progress: deleted once the replay is complete
    admin = AdminClient({"bootstrap.servers": processed.bootstrap})
    groups = {g.group_id for g in admin.list_consumer_groups(request_timeout=10).result(timeout=15).valid}
    assert "analytics" in groups
    assert "analytics-replay" not in groups


def test_a_late_event_is_counted_apart_and_its_window_stays_final(
    spark: SparkSession, broker: ThreadBroker, tmp_path: Path
) -> None:
    registry = ThreadRegistry(broker.bootstrap)
    try:
        create_topics(broker.bootstrap)
        producer = Producer(broker.bootstrap, registry.url)
        example = CATALOG.example("OrderCreated")

        def orders(*minutes: int) -> None:
            producer.send(
                "orders", "OrderCreated", [{**example, "created_at": T0 + timedelta(minutes=m)} for m in minutes]
            )

        settings = config(broker.bootstrap, registry.url, tmp_path, jobs=("orders",), lateness_seconds=120.0)
        orders(1, 10)
        assert run_jobs(settings, spark=spark, out=io.StringIO()) == 0  # newest event 10:10: watermark 10:08
        orders(2, 9)  # 10:02 ended before 10:08: late; 10:09 ends at 10:10: on time
        out = io.StringIO()
        assert run_jobs(settings, spark=spark, out=out) == 0
    finally:
        registry.close()

    counts = {m.window_start.minute: m.count for m in read_metrics(tmp_path, metric="orders.count")}
    assert counts == {1: 1, 9: 1, 10: 1}
    late = {m.window_start.minute: m.count for m in read_metrics(tmp_path, metric="analytics.late_events")}
    assert late == {2: 1}
    assert "1 late" in out.getvalue()


def test_a_query_whose_python_process_misses_sparks_connect_back_is_started_again(
    spark: SparkSession, broker: ThreadBroker, tmp_path: Path
) -> None:
    """Spark gives the Python process serving a Python source's offsets ten seconds to connect
    back. A Python that takes longer the first time (as on a saturated host) fails the query's
    first start; the job starts it again and counts every order once."""
    stalled = tmp_path / "stalled"
    python = tmp_path / "python"
    python.write_text(
        "#!/bin/sh\n"
        f'case "$*" in *python_streaming_source_runner*) [ -e {stalled} ] || {{ touch {stalled}; sleep 12; }};; esac\n'
        f'exec {sys.executable} "$@"\n'
    )
    python.chmod(0o755)
    registry = ThreadRegistry(broker.bootstrap)
    context = spark.sparkContext
    usual = context.pythonExec
    try:
        create_topics(broker.bootstrap)
        produced = produce_events(Producer(broker.bootstrap, registry.url), orders=12)
        context.pythonExec = str(python)  # read when a Python data source is registered
        spark.dataSource.register(StreamshopKafkaSource)
        out = io.StringIO()
        assert (
            run_jobs(config(broker.bootstrap, registry.url, tmp_path / "data", jobs=("orders",)), spark=spark, out=out)
            == 0
        )
    finally:
        context.pythonExec = usual
        spark.dataSource.register(StreamshopKafkaSource)
        registry.close()
    assert stalled.exists()
    assert "did not connect back in time; starting the query again in 5 s (2 of 6)" in out.getvalue()
    counts = read_metrics(tmp_path / "data", metric="orders.count")
    assert sum(m.count for m in counts) == len(produced.orders)


# -- SIGKILL -----------------------------------------------------------------------------------


def kill_between_plan_and_ledger(
    job: Job, data_dir: Path, generation: Path, batch_id: int, timeout: float = JOB_TIMEOUT
) -> bool:
    """SIGKILL the job once Spark has planned batch `batch_id` (`offsets/<id>` in the orders
    checkpoint: written after the source was asked for offsets, before the sink runs) and before
    the ledger has written it; whether that window was hit (False: the ledger's file for the
    batch appeared before the kill landed)."""
    planned = data_dir / "checkpoints" / "orders" / "offsets" / str(batch_id)
    written = generation / f"b{batch_id:09d}.json"
    deadline = time.monotonic() + timeout
    while not planned.exists():
        assert job.proc.poll() is None, job.output()
        assert time.monotonic() < deadline, job.output()
        time.sleep(0.01)
    job.kill()
    return not written.exists()


def assert_read_what_the_group_had_left(output: str, unread: int, *, exact: bool) -> None:
    """A restarted job read the records after the group's offsets at the kill (`unread`): all of
    them with a fresh checkpoint from the group (`exact`); from its checkpoint, within one
    batch either way (it re-runs the batch in flight, or resumes after a batch Spark had
    committed and the source not yet).  More would be a re-read the ledger's supersession would
    hide; fewer, records the group claimed but the sink never got."""
    read = records_read(output, "orders")
    if exact:
        assert read == unread, f"read {read} records, {unread} were after the group's offsets\n{output}"
    else:
        assert unread - BATCH <= read <= unread + BATCH, (
            f"read {read} records, {unread} were after the group's offsets\n{output}"
        )


def test_sigkill_mid_stream_then_restart_gives_exact_totals_with_or_without_the_checkpoint(
    broker: ThreadBroker, tmp_path: Path
) -> None:
    registry = ThreadRegistry(broker.bootstrap)
    jobs: list[Job] = []

    def job(*args: str) -> Job:
        jobs.append(Job(broker.bootstrap, registry.url, data, *args))
        return jobs[-1]

    try:
        create_topics(broker.bootstrap)
        producer = Producer(broker.bootstrap, registry.url)
        data = tmp_path / "data"
        state = data / "state" / "orders"
        produced = produce_events(producer, orders=120)
        tps = [("orders", p) for p in range(3)]
        total = len(produced.orders) + len(produced.status_changes)

        # 1. Killed mid-stream, restarted on its checkpoint; stopped with SIGTERM once the
        #    group has caught up.
        kill_after_batches(job("--trigger", "0.2"), state / "g0001", 2)
        at_kill = sum(committed(broker.bootstrap, "analytics", tps).values())
        assert 0 < at_kill < total - BATCH, f"not killed mid-stream: {at_kill} of {total} committed"
        restarted = job("--trigger", "0.2")
        wait_until_committed(restarted, broker.bootstrap, tps, total)
        restarted.proc.send_signal(signal.SIGTERM)
        assert restarted.wait(60) == 0, restarted.output()
        assert "analytics orders: stopped after" in restarted.output()
        assert_read_what_the_group_had_left(restarted.output(), total - at_kill, exact=False)

        assert parquet_values(data) == orders_only(expected_metrics(produced))
        assert set(group_lag(broker.bootstrap, "analytics").values()) == {0}

        # 2. More events in the same windows; killed mid-stream again; then the checkpoint is
        #    lost and a new query starts from the group's committed offsets.
        more = produce_events(producer, orders=120, start=120, older_writers=False)
        produced += more
        total += len(more.orders) + len(more.status_changes)
        kill_after_batches(job("--trigger", "0.2"), state / "g0003", 2)
        at_kill = sum(committed(broker.bootstrap, "analytics", tps).values())
        assert at_kill < total - BATCH, f"not killed mid-stream: {at_kill} of {total} committed"
        shutil.rmtree(data / "checkpoints" / "orders")
        fresh = job("--once", "--starting-offsets", "group")
        assert fresh.wait() == 0, fresh.output()
        assert_read_what_the_group_had_left(fresh.output(), total - at_kill, exact=True)
    finally:
        for j in jobs:
            if j.proc.poll() is None:
                j.kill()
        registry.close()

    assert parquet_values(data) == orders_only(expected_metrics(produced))
    assert sum(committed(broker.bootstrap, "analytics", tps).values()) == total
    latest, _ = topic_values(broker.bootstrap, "analytics.metrics")
    assert orders_only(latest) == parquet_values(data)


def test_sigkill_after_spark_planned_a_batch_before_the_sink_wrote_it_leaves_the_group_behind_the_sink(
    broker: ThreadBroker, tmp_path: Path
) -> None:
    registry = ThreadRegistry(broker.bootstrap)
    jobs: list[Job] = []
    data = tmp_path / "data"
    try:
        create_topics(broker.bootstrap)
        produced = produce_events(Producer(broker.bootstrap, registry.url), orders=60)
        tps = [("orders", p) for p in range(3)]
        total = len(produced.orders) + len(produced.status_changes)
        assert total > 3 * BATCH  # batch 2 is planned with data, after two full batches

        jobs.append(Job(broker.bootstrap, registry.url, data, "--trigger", "0.2"))
        hit = kill_between_plan_and_ledger(jobs[-1], data, data / "state" / "orders" / "g0001", 2)
        assert hit, "the ledger wrote batch 2 before the kill landed"

        group = committed(broker.bootstrap, "analytics", tps)
        end_of_batch_1 = planned_end(data / "checkpoints" / "orders", 1)
        recorded = ledger_reach(data / "state" / "orders" / "g0001")
        for tp in tps:
            assert group.get(tp, 0) <= end_of_batch_1.get(tp, 0), (tp, group, end_of_batch_1)
            assert group.get(tp, 0) <= recorded.get(tp, 0), (tp, group, recorded)
        # Not just behind: caught up with the sink when batch 2 was planned (module docstring).
        assert group == end_of_batch_1 == recorded

        shutil.rmtree(data / "checkpoints" / "orders")
        jobs.append(Job(broker.bootstrap, registry.url, data, "--once", "--starting-offsets", "group"))
        assert jobs[-1].wait() == 0, jobs[-1].output()
        assert_read_what_the_group_had_left(jobs[-1].output(), total - sum(group.values()), exact=True)
    finally:
        for j in jobs:
            if j.proc.poll() is None:
                j.kill()
        registry.close()

    assert parquet_values(data) == orders_only(expected_metrics(produced))
    assert committed(broker.bootstrap, "analytics", tps) == recorded | ledger_reach(data / "state" / "orders" / "g0002")
    assert sum(committed(broker.bootstrap, "analytics", tps).values()) == total
