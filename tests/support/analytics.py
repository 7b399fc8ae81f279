"""Helpers for tests of the analytics jobs: deterministic events of every job, produced with the
project's Avro serde and real registry subjects, the metrics they must give (computed here
independently of `analytics.metrics`), and readers of the job's outputs."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import re
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Message, TopicPartition
from confluent_kafka import Producer as ConfluentProducer

from analytics.metrics import window_key
from analytics.results import read_metrics
from schemas.catalog import default_catalog
from schemas.serde import AvroSchema, decode, encode, frame, unframe
from streamshop.cli import build_parser
from tests.support.kafka_clients import confluent_produce, create_topic
from tests.support.spark import register

CATALOG = default_catalog()
T0 = datetime(2026, 1, 2, 10, 0, tzinfo=UTC)
TOPICS = {"orders": 3, "otp.deliveries": 2, "logs.app": 1, "logs.ingress": 1, "logs.db": 1}
_PLACES = Decimal("0.0001")

Values = dict[str, tuple[Decimal, int]]  # window key -> (value, count)


def create_topics(bootstrap: str, extra: Mapping[str, int] | None = None) -> None:
    for name, partitions in {**TOPICS, **(extra or {})}.items():
        create_topic(bootstrap, name, partitions)


def _envelope(service: str, at: datetime, i: int) -> dict[str, Any]:
    return {
        "event_id": str(uuid.UUID(int=i)),
        "occurred_at": at,
        "producer": {"service": service, "instance": f"{service}-1"},
        "trace_id": None,
    }


def _older(name: str, drop: str, envelope_without_trace_id: bool = False) -> AvroSchema:
    """An earlier version of a catalog record: without field `drop` (which has a default now)."""
    schema = json.loads(CATALOG.schema(name).text)
    schema["fields"] = [f for f in schema["fields"] if f["name"] != drop]
    if envelope_without_trace_id:
        envelope = schema["fields"][0]["type"]
        envelope["fields"] = [f for f in envelope["fields"] if f["name"] != "trace_id"]
    return AvroSchema.parse(schema)


@dataclass
class Produced:
    """What a test sent: the data, per kind, and the bad records' coordinates."""

    orders: list[dict[str, Any]] = field(default_factory=list)
    status_changes: list[dict[str, Any]] = field(default_factory=list)
    deliveries: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)  # will_retry absent: an older writer
    logs: list[dict[str, Any]] = field(default_factory=list)
    bad: list[tuple[str, int, int, str]] = field(default_factory=list)  # topic, partition, offset, error start

    def __iadd__(self, other: Produced) -> Produced:
        self.orders += other.orders
        self.status_changes += other.status_changes
        self.deliveries += other.deliveries
        self.failures += other.failures
        self.logs += other.logs
        self.bad += other.bad
        return self


class Producer:
    """Registers the schemas under their catalog subjects and produces framed Avro records."""

    def __init__(self, bootstrap: str, registry_url: str) -> None:
        self.bootstrap = bootstrap
        self.registry_url = registry_url
        self.ids: dict[tuple[str, str], int] = {}

    def schema_id(self, topic: str, name: str, schema: AvroSchema | None = None) -> int:
        schema = schema or CATALOG.schema(name)
        key = (topic, schema.text)
        if key not in self.ids:
            self.ids[key] = register(self.registry_url, CATALOG.subject(topic, name), schema)
        return self.ids[key]

    def send(self, topic: str, name: str, data: Iterable[dict[str, Any]], schema: AvroSchema | None = None) -> None:
        schema = schema or CATALOG.schema(name)
        schema_id = self.schema_id(topic, name, schema)
        records = [
            {
                "value": frame(schema_id, encode(schema, d)),
                "partition": i % TOPICS[topic],
                "key": f"k{i}",
                "headers": [("traceparent", producer_traceparent(topic, i).encode())],
            }
            for i, d in enumerate(data)
        ]
        confluent_produce(self.bootstrap, topic, records)

    def send_aborted(self, topic: str, name: str, data: Iterable[dict[str, Any]]) -> int:
        """Write `data` to every partition of `topic` in a transaction, then abort it: records on
        disk that no read_committed reader may see.  Returns how many were written."""
        schema = CATALOG.schema(name)
        schema_id = self.schema_id(topic, name)
        producer = ConfluentProducer({"bootstrap.servers": self.bootstrap, "transactional.id": f"aborted-{topic}"})
        producer.init_transactions(15)
        producer.begin_transaction()
        count = 0
        for i, d in enumerate(data):
            producer.produce(
                topic, frame(schema_id, encode(schema, d)), key=f"aborted-{i}", partition=i % TOPICS[topic]
            )
            count += 1
        assert producer.flush(15) == 0
        producer.abort_transaction(15)
        return count

    def send_raw(self, topic: str, value: bytes) -> Message:
        (report,) = confluent_produce(self.bootstrap, topic, [{"value": value, "key": "bad", "partition": 0}])
        return report


def producer_traceparent(topic: str, i: int) -> str:
    """The `traceparent` the i-th record `Producer.send` writes to `topic` carries: a producer's
    span of a trace of its own, as a service's relay would leave."""
    digest = hashlib.sha256(f"{topic}/{i}".encode()).hexdigest()
    return f"00-{digest[:32]}-{digest[32:48]}-01"


def produce_events(
    producer: Producer, *, orders: int, start: int = 0, minutes: int = 5, older_writers: bool = True
) -> Produced:
    """A deterministic mix of every job's events with event times in [T0, T0 + minutes).

    Order i is created at T0 + i * 7 s (mod `minutes`), in EUR or USD, totals of 4 decimal
    places; every third order is paid, every fifth of those shipped, some cancelled.  OTP: the
    SMS latencies of the first window are 1..100 ms, so p50 = 50 and p95 = 95.  With
    `older_writers`, some events are written with an earlier schema version (OtpFailed without
    `will_retry`, which reads as false; OrderCreated whose envelope has no trace_id).
    """
    out = Produced()
    span = minutes * 60

    def at(seconds: int) -> datetime:
        return T0 + timedelta(seconds=seconds % span, milliseconds=seconds % 1000)

    for i in range(start, start + orders):
        created = at(i * 7)
        quantity = i % 3 + 1
        price = Decimal(f"{i % 50 + 1}.{i % 10}{i % 7}{i % 3}5")
        out.orders.append(
            {
                "envelope": _envelope("orders", created, 1_000_000 + i),
                "order_id": str(uuid.UUID(int=10_000_000 + i)),
                "customer_id": f"cust-{i % 11}",
                "items": [{"sku": f"SKU-{i % 13}", "quantity": quantity, "unit_price": price}],
                "total": price * quantity,
                "currency": ("EUR", "USD")[i % 2],
                "created_at": created,
            }
        )
        moves = ["paid", "shipped", "delivered"] if i % 5 == 0 else ["paid"] if i % 3 == 0 else []
        if i % 7 == 3:
            moves = ["cancelled"]
        status = "created"
        for step, to in enumerate(moves):
            changed = at(i * 7 + 20 * (step + 1))
            out.status_changes.append(
                {
                    "envelope": _envelope("orders", changed, 2_000_000 + i * 10 + step),
                    "order_id": str(uuid.UUID(int=10_000_000 + i)),
                    "from_status": status,
                    "to_status": to,
                    "reason": None,
                    "changed_at": changed,
                }
            )
            status = to
    if start == 0:
        for i in range(100):
            out.deliveries.append(_delivery("sms", T0 + timedelta(seconds=i % 50), latency=i + 1, i=i))
        for i in range(12):
            out.deliveries.append(_delivery("email", at(60 + i * 17), latency=1000 + 37 * i, i=100 + i))
        for i in range(8):
            failure = _failure(("sms", "email")[i % 2], at(30 + i * 29), i=200 + i)
            if i < 5:
                failure["will_retry"] = i % 2 == 0
            out.failures.append(failure)
    services = ("orders", "otp", "sms-sender")
    levels = ("info", "info", "warning", "error", "critical")
    for i in range(start, start + orders // 2):
        level = levels[i % 5]
        out.logs.append(
            {
                "envelope": _envelope(services[i % 3], at(i * 11), 3_000_000 + i),
                "service": services[i % 3],
                "instance": f"{services[i % 3]}-1",
                "level": level,
                "event": f"event {i % 4}",
                "logger": "test",
                "timestamp": at(i * 11),
                "trace_id": None,
                "request_id": None,
                "fields": {"n": i},
            }
        )

    half = len(out.orders) // 2 if older_writers else 0
    older_order = _older("OrderCreated", "", envelope_without_trace_id=True)
    producer.send(
        "orders",
        "OrderCreated",
        [{**o, "envelope": {k: v for k, v in o["envelope"].items() if k != "trace_id"}} for o in out.orders[:half]],
        older_order,
    )
    producer.send("orders", "OrderCreated", out.orders[half:])
    producer.send("orders", "OrderStatusChanged", out.status_changes)
    producer.send("otp.deliveries", "OtpDelivered", out.deliveries)
    with_retry = [f for f in out.failures if "will_retry" in f]
    without = [f for f in out.failures if "will_retry" not in f]
    producer.send("otp.deliveries", "OtpFailed", with_retry)
    producer.send("otp.deliveries", "OtpFailed", without, _older("OtpFailed", "will_retry") if older_writers else None)
    for i, topic in enumerate(("logs.app", "logs.ingress", "logs.db")):
        producer.send(topic, "LogRecord", out.logs[i::3])
    return out


def _delivery(channel: str, at: datetime, *, latency: int, i: int) -> dict[str, Any]:
    return {
        "envelope": _envelope(f"{channel}-sender", at, 4_000_000 + i),
        "request_id": str(uuid.UUID(int=20_000_000 + i)),
        "channel": channel,
        "provider": "sink",
        "attempt": 1,
        "latency_ms": latency,
        "provider_latency_ms": latency // 2,
        "provider_message_id": None,
    }


def _failure(channel: str, at: datetime, *, i: int) -> dict[str, Any]:
    return {
        "envelope": _envelope(f"{channel}-sender", at, 5_000_000 + i),
        "request_id": str(uuid.UUID(int=30_000_000 + i)),
        "channel": channel,
        "provider": "sink",
        "attempt": 1,
        "latency_ms": 50,
        "provider_latency_ms": 20,
        "error_type": "timeout",
        "error": "provider did not answer",
    }


# -- the reference: what the metrics must be ----------------------------------------------------


def _window(at: datetime) -> int:
    ms = int(at.timestamp() * 1000)
    return ms - ms % 60_000


def expected_metrics(produced: Produced) -> Values:
    """Every metric of the jobs' families (not `analytics.*`) for these events, by window key."""
    out: Values = {}

    def put(metric: str, at: int, dims: dict[str, str], value: Decimal | int, count: int) -> None:
        out[window_key(metric, at, dims)] = (Decimal(value).quantize(_PLACES, ROUND_HALF_EVEN), count)

    orders: dict[tuple[int, str], list[Decimal]] = defaultdict(list)
    for o in produced.orders:
        orders[(_window(o["created_at"]), o["currency"])].append(o["total"])
    funnel: dict[tuple[int, str], int] = defaultdict(int)
    for (w, currency), totals in orders.items():
        revenue = sum(totals, Decimal(0))
        put("orders.count", w, {"currency": currency}, len(totals), len(totals))
        put("orders.revenue", w, {"currency": currency}, revenue, len(totals))
        put("orders.basket_avg", w, {"currency": currency}, revenue / len(totals), len(totals))
        funnel[(w, "created")] += len(totals)
    for s in produced.status_changes:
        funnel[(_window(s["changed_at"]), s["to_status"])] += 1
    for (w, status), n in funnel.items():
        put("orders.status", w, {"status": status}, n, n)

    latencies: dict[tuple[int, str], list[int]] = defaultdict(list)
    for d in produced.deliveries:
        latencies[(_window(d["envelope"]["occurred_at"]), d["channel"])].append(d["latency_ms"])
    failed: dict[tuple[int, str], list[bool]] = defaultdict(list)
    for f in produced.failures:
        failed[(_window(f["envelope"]["occurred_at"]), f["channel"])].append(f.get("will_retry", False))
    for (w, channel), values in latencies.items():
        ordered = sorted(values)
        n = len(ordered)
        put("otp.delivered", w, {"channel": channel}, n, n)
        put("otp.latency_p50", w, {"channel": channel}, ordered[math.ceil(0.50 * n) - 1], n)
        put("otp.latency_p95", w, {"channel": channel}, ordered[math.ceil(0.95 * n) - 1], n)
    for (w, channel), retries in failed.items():
        put("otp.failed", w, {"channel": channel}, len(retries), len(retries))
    for w, channel in set(latencies) | set(failed):
        ok = len(latencies.get((w, channel), []))
        final = sum(1 for retry in failed.get((w, channel), []) if not retry)
        if ok + final:
            put("otp.success_rate", w, {"channel": channel}, Decimal(ok) / Decimal(ok + final), ok + final)

    records: dict[tuple[int, str, str], int] = defaultdict(int)
    errors: dict[tuple[int, str], int] = defaultdict(int)
    error_events: dict[tuple[int, str, str], int] = defaultdict(int)
    for r in produced.logs:
        w = _window(r["timestamp"])
        records[(w, r["service"], r["level"])] += 1
        if r["level"] in ("error", "critical"):
            errors[(w, r["service"])] += 1
            error_events[(w, r["service"], r["event"])] += 1
    for (w, service, level), n in records.items():
        put("logs.records", w, {"service": service, "level": level}, n, n)
    for (w, service), n in errors.items():
        put("logs.errors", w, {"service": service}, n, n)
    for (w, service, event), n in error_events.items():
        put("logs.error_events", w, {"service": service, "event": event}, n, n)
    return out


# -- reading what the jobs wrote ---------------------------------------------------------------


def parquet_values(data_dir: Path, *, meta: bool = False) -> Values:
    """The current values in the Parquet output: the families' metrics, or only `analytics.*`."""
    return {m.key: (m.value, m.count) for m in read_metrics(data_dir) if m.metric.startswith("analytics.") == meta}


def meta_totals(data_dir: Path) -> dict[tuple[str, str], int]:
    """`analytics.*` metrics summed over windows: {(metric, "dim=value"): count}."""
    totals: dict[tuple[str, str], int] = defaultdict(int)
    for m in read_metrics(data_dir):
        if m.metric.startswith("analytics."):
            totals[(m.metric, ",".join(f"{k}={v}" for k, v in sorted(m.dimensions.items())))] += m.count
    return dict(totals)


def topic_values(bootstrap: str, topic: str) -> tuple[Values, list[dict[str, Any]]]:
    """The latest value of every key of the results topic, and every record decoded (log order)."""
    schema = CATALOG.schema("AnalyticsMetric")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-reader", "enable.auto.commit": False})
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        partitions = sorted(metadata.topics[topic].partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        decoded: list[dict[str, Any]] = []
        latest: Values = {}
        positions = dict.fromkeys(partitions, 0)
        while any(positions[p] < ends[p] for p in partitions):
            message = consumer.poll(10)
            assert message is not None, "the results topic ended early"
            assert message.error() is None, message.error()
            positions[message.partition() or 0] = (message.offset() or 0) + 1
            _, body = unframe(message.value() or b"")
            record = decode(body, schema)
            assert (message.key() or b"").decode() == window_key(
                record["metric"], int(record["window_start"].timestamp() * 1000), record["dimensions"]
            )
            decoded.append(record)
            latest[(message.key() or b"").decode()] = (record["value"], record["count"])
    finally:
        consumer.close()
    return latest, decoded


def describe_group(bootstrap: str, group: str) -> dict[str, Any]:
    """`streamshop groups describe GROUP --json`: the CLI's parser and command, in this process.
    Not `streamshop.cli.main`, whose global logging setup would outlive this test."""
    args = build_parser().parse_args(["groups", "--bootstrap", bootstrap, "describe", group, "--json"])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = args.func(args)
    assert status == 0, out.getvalue()
    (described,) = json.loads(out.getvalue())
    assert isinstance(described, dict)
    return described


def group_lag(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    return {(p["topic"], p["partition"]): p["lag"] for p in describe_group(bootstrap, group)["partitions"]}


_PROGRESS_LINE = re.compile(r"analytics (\S+) batch (\d+): ([\d,]+) records, ", re.MULTILINE)


def records_read(output: str, job: str) -> int:
    """The records a run of `job` read, summed over its progress lines
    (`analytics orders batch 12: 2,000 records, ...`)."""
    return sum(int(n.replace(",", "")) for name, _, n in _PROGRESS_LINE.findall(output) if name == job)


def ledger_reach(generation: Path) -> dict[tuple[str, int], int]:
    """Per partition, the offset after the last one the batch files of a ledger generation
    (`state/<job>/g<n>`) cover: how far the sink has recorded."""
    reach: dict[tuple[str, int], int] = {}
    for path in generation.glob("b*.json"):
        for topic, partition, _, last in json.loads(path.read_bytes())["coverage"]:
            reach[(topic, partition)] = max(reach.get((topic, partition), 0), last + 1)
    return reach
