"""Where a micro-batch's results go: Parquet files and the `analytics.metrics` topic.

Parquet, under the job's data directory (Hive-style partitions, readable by Spark, pyarrow,
DuckDB, pandas...)::

    metrics/metric=<name>/date=<yyyy-mm-dd>/<job>-g<generation>-b<batch>.parquet
    quarantine/topic=<topic>/<job>-g<generation>-b<batch>.parquet

Each micro-batch writes its own files, named after it, all at once (temporary name, then
rename): a batch that runs again replaces its files instead of adding to them.  A metrics file
holds the current values of the windows the batch changed; a window key's newest row (highest
generation, then batch) is its value -- `analytics.results.read_metrics` does exactly that.

The topic is compacted, keyed by the window key, values `AnalyticsMetric` in Avro (Confluent
framing, schema registered under `<topic>-value`): the latest record of a key is its value, and
a re-run batch publishes the same values under the same event ids.
"""

from __future__ import annotations

import json
import os
import socket
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from analytics.jobs import Quarantined
from analytics.ledger import atomic_write
from analytics.metrics import MetricValue, instant
from schemas.blocking_registry import registry_request
from schemas.catalog import default_catalog
from schemas.serde import encode, frame

__all__ = ["METRIC_SCHEMA", "QUARANTINE_SCHEMA", "ParquetOutputs", "ResultsTopic", "batch_file_name"]

_TS = pa.timestamp("ms", tz="UTC")
METRIC_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("window_start", _TS),
        ("window_end", _TS),
        ("dimensions", pa.map_(pa.string(), pa.string())),
        ("value", pa.decimal128(18, 4)),
        ("count", pa.int64()),
        ("job", pa.string()),
        ("generation", pa.int32()),
        ("batch_id", pa.int64()),
        ("computed_at", _TS),
    ]
)
QUARANTINE_SCHEMA = pa.schema(
    [
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", _TS),
        ("key", pa.string()),
        ("error", pa.string()),
        ("value", pa.binary()),
        ("job", pa.string()),
        ("generation", pa.int32()),
        ("batch_id", pa.int64()),
    ]
)
_V1 = "application/vnd.schemaregistry.v1+json"
# Event ids of published values are uuid5s in this namespace (see `ResultsTopic.publish`).
_EVENT_IDS = uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/streamshop/analytics.metrics")


def batch_file_name(job: str, generation: int, batch_id: int) -> str:
    return f"{job}-g{generation:04d}-b{batch_id:09d}.parquet"


def _parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return bytes(sink.getvalue().to_pybytes())


class ParquetOutputs:
    """The Parquet side of the sink, rooted at the job's data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.metrics_dir = data_dir / "metrics"
        self.quarantine_dir = data_dir / "quarantine"

    def write_metrics(
        self, job: str, generation: int, batch_id: int, values: Sequence[MetricValue], computed_at: datetime
    ) -> int:
        """One file per (metric, date) the batch changed; the number of files."""
        groups: dict[tuple[str, str], list[MetricValue]] = defaultdict(list)
        for v in values:
            groups[(v.metric, v.window_start.strftime("%Y-%m-%d"))].append(v)
        name = batch_file_name(job, generation, batch_id)
        for (metric, date), rows in sorted(groups.items()):
            table = pa.table(
                {
                    "key": [v.key for v in rows],
                    "window_start": [v.window_start for v in rows],
                    "window_end": [v.window_end for v in rows],
                    "dimensions": [list(v.dimensions) for v in rows],
                    "value": [v.value for v in rows],
                    "count": [v.count for v in rows],
                    "job": [job] * len(rows),
                    "generation": [generation] * len(rows),
                    "batch_id": [batch_id] * len(rows),
                    "computed_at": [computed_at] * len(rows),
                },
                schema=METRIC_SCHEMA,
            )
            atomic_write(self.metrics_dir / f"metric={metric}" / f"date={date}" / name, _parquet_bytes(table))
        return len(groups)

    def write_quarantine(self, job: str, generation: int, batch_id: int, records: Sequence[Quarantined]) -> None:
        by_topic: dict[str, list[Quarantined]] = defaultdict(list)
        for q in records:
            by_topic[q.topic].append(q)
        name = batch_file_name(job, generation, batch_id)
        for topic, rows in sorted(by_topic.items()):
            table = pa.table(
                {
                    "partition": [q.partition for q in rows],
                    "offset": [q.offset for q in rows],
                    "timestamp": [None if q.timestamp_ms is None else instant(q.timestamp_ms) for q in rows],
                    "key": [q.key for q in rows],
                    "error": [q.error for q in rows],
                    "value": [q.value for q in rows],
                    "job": [job] * len(rows),
                    "generation": [generation] * len(rows),
                    "batch_id": [batch_id] * len(rows),
                },
                schema=QUARANTINE_SCHEMA,
            )
            atomic_write(self.quarantine_dir / f"topic={topic}" / name, _parquet_bytes(table))


class ResultsTopic:
    """Publishes metric values to the compacted results topic, Avro-encoded."""

    def __init__(self, kafka: Mapping[str, Any], registry_url: str, topic: str) -> None:
        self.kafka = dict(kafka)
        self.registry_url = registry_url.rstrip("/")
        self.topic = topic
        self.schema = default_catalog().schema("AnalyticsMetric")
        self.schema_id: int | None = None
        self.instance = f"analytics-{socket.gethostname()}-{os.getpid()}"
        self._producer: Producer | None = None

    def ensure(self, partitions: int = 1, timeout: float = 15.0) -> None:
        """Create the topic (compacted) unless it exists, and register the value schema."""
        admin = AdminClient(self.kafka)
        new = NewTopic(self.topic, partitions, replication_factor=-1, config={"cleanup.policy": "compact"})
        try:
            admin.create_topics([new], operation_timeout=timeout)[self.topic].result(timeout)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        request = registry_request(
            f"{self.registry_url}/subjects/{self.topic}-value/versions",
            data=json.dumps({"schema": self.schema.text}).encode(),
            headers={"Content-Type": _V1, "Accept": _V1},
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            self.schema_id = int(json.loads(response.read())["id"])
        self._producer = Producer(
            {
                **self.kafka,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                # The Java client's partitioner: a key lands where any Kafka client would put it.
                "partitioner": "murmur2_random",
            }
        )

    def publish(
        self, job: str, generation: int, batch_id: int, values: Sequence[MetricValue], computed_at: datetime
    ) -> None:
        """Send every value and wait until the broker has them all (raises if one failed)."""
        if self._producer is None or self.schema_id is None:
            raise RuntimeError("ResultsTopic.ensure() first")
        failures: list[str] = []

        def report(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                failures.append(f"{msg.key()!r}: {err}")

        for v in values:
            key = v.key
            datum = {
                "envelope": {
                    # The same value of the same batch always gets the same id: consumers that
                    # deduplicate on event_id see a re-run batch's values once.
                    "event_id": str(uuid.uuid5(_EVENT_IDS, f"{key}|{job}|{generation}|{batch_id}")),
                    "occurred_at": computed_at,
                    "producer": {"service": "analytics", "instance": self.instance},
                    "trace_id": None,
                },
                "metric": v.metric,
                "window_start": v.window_start,
                "window_end": v.window_end,
                "dimensions": dict(v.dimensions),
                "value": v.value,
                "count": v.count,
                "job": job,
                "generation": generation,
                "batch_id": batch_id,
                "computed_at": computed_at,
            }
            payload = frame(self.schema_id, encode(self.schema, datum))
            while True:
                try:
                    self._producer.produce(self.topic, key=key.encode(), value=payload, on_delivery=report)
                    break
                except BufferError:
                    self._producer.poll(0.1)
        remaining = self._producer.flush(60)
        if remaining:
            raise RuntimeError(f"{remaining} metric values not acknowledged by {self.topic} within 60 s")
        if failures:
            raise RuntimeError(f"{len(failures)} metric values not published to {self.topic}: {failures[0]}")

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(30)
            self._producer = None


def now() -> datetime:
    """computed_at: the driver's clock, millisecond precision (timestamp-millis)."""
    moment = datetime.now(UTC)
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)
