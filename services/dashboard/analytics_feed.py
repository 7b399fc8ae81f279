"""The analytics job's metrics, read from its compacted topic (``analytics.metrics``).

A group-less consumer reads every partition from the beginning (the topic is compacted: its
beginning is the current value of every key, plus some older ones not yet cleaned), decodes the
Confluent-framed Avro with the writer schema fetched from the registry by id, and keeps the
latest value per key: the highest (generation, batch_id), as docs/analytics.md
defines it.  Only the newest `window_minutes` of windows are kept, so memory stays bounded
however long the job has been running.

The topic may not exist yet (the job creates it on its first batch): the feed waits for it.  A
record that cannot be decoded is counted and skipped; the registry being unreachable makes the
feed wait and retry that record (it is not the record's fault).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import ConsumerRecord, TopicPartition

from kit.logging import get_logger
from schemas.client import RegistryError
from schemas.serde import AvroDeserializer, SchemaRegistry, SerdeError
from services.dashboard.poller import wait_or_stop

__all__ = ["FUNNEL_ORDER", "LatestValues", "MetricValue", "MetricsFeed", "analytics_json", "metric_value"]

log = get_logger(__name__)

RECORD_NAME = "io.streamshop.events.analytics.AnalyticsMetric"
FUNNEL_ORDER = ("created", "paid", "shipped", "delivered", "cancelled")
_MINUTE_MS = 60_000


@dataclass(frozen=True, slots=True)
class MetricValue:
    """One decoded AnalyticsMetric, reduced to what the page shows."""

    metric: str
    window_start_ms: int
    dimensions: tuple[tuple[str, str], ...]
    value: float  # for display only: the job's exact decimal is in the topic and the Parquet files
    count: int
    generation: int
    batch_id: int
    computed_at_ms: int

    @property
    def version(self) -> tuple[int, int]:
        return (self.generation, self.batch_id)

    def window_key(self) -> str:
        """The key the job publishes under (analytics.metrics.window_key), for keyless records."""
        start = datetime.fromtimestamp(self.window_start_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return f"{self.metric}|{start}|{json.dumps(dict(self.dimensions), separators=(',', ':'))}"


def _millis(value: Any) -> int:
    if isinstance(value, datetime):
        return round(value.timestamp() * 1000)
    return int(value)


def metric_value(record: Mapping[str, Any]) -> MetricValue:
    """A decoded AnalyticsMetric record; KeyError/TypeError/ValueError when it is not one."""
    dims = record["dimensions"]
    if not isinstance(dims, Mapping):
        raise TypeError("dimensions is not a map")
    value = record["value"]
    if not isinstance(value, (Decimal, int, float)):
        raise TypeError("value is not a number")
    return MetricValue(
        metric=str(record["metric"]),
        window_start_ms=_millis(record["window_start"]),
        dimensions=tuple(sorted((str(k), str(v)) for k, v in dims.items())),
        value=float(value),
        count=int(record["count"]),
        generation=int(record["generation"]),
        batch_id=int(record["batch_id"]),
        computed_at_ms=_millis(record["computed_at"]),
    )


class LatestValues:
    """The latest value per key, for the newest `window_minutes` of windows.

    `offer` keeps a value unless the key already holds a newer one, by (generation, batch_id); a
    tie goes to the value read later (the same batch published again).  Windows older than
    `window_minutes` before the newest window seen are dropped.
    """

    def __init__(self, window_minutes: int) -> None:
        self.window_ms = window_minutes * _MINUTE_MS
        self._values: dict[str, MetricValue] = {}
        self.newest_window_ms: int | None = None
        self.version = 0  # grows with every change, so readers can cache what they derive

    def __len__(self) -> int:
        return len(self._values)

    def get(self, key: str) -> MetricValue | None:
        return self._values.get(key)

    def values(self) -> list[MetricValue]:
        return list(self._values.values())

    def _oldest_kept(self) -> int | None:
        return None if self.newest_window_ms is None else self.newest_window_ms - self.window_ms

    def offer(self, key: str, value: MetricValue) -> bool:
        """Store `value` under `key` if it is the latest; whether it was stored."""
        oldest = self._oldest_kept()
        if oldest is not None and value.window_start_ms < oldest:
            return False
        current = self._values.get(key)
        if current is not None and current.version > value.version:
            return False
        self._values[key] = value
        if self.newest_window_ms is None or value.window_start_ms > self.newest_window_ms:
            self.newest_window_ms = value.window_start_ms
            self._prune()
        self.version += 1
        return True

    def remove(self, key: str) -> None:
        """A tombstone: the key is deleted."""
        if self._values.pop(key, None) is not None:
            self.version += 1

    def _prune(self) -> None:
        oldest = self._oldest_kept()
        if oldest is None:
            return
        for key in [k for k, v in self._values.items() if v.window_start_ms < oldest]:
            del self._values[key]


class MetricsFeed:
    """Reads the metrics topic into a `LatestValues` until cancelled; never raises."""

    def __init__(
        self,
        consumer_factory: Callable[[], AIOKafkaConsumer],
        partitions: Callable[[], Sequence[int] | None],
        registry: SchemaRegistry,
        topic: str,
        latest: LatestValues,
        *,
        retry_interval: float = 2.0,
    ) -> None:
        """`partitions()` gives the topic's partitions as last seen, None while it does not exist
        (the poller's observation: the feed needs no metadata round trips of its own)."""
        self._consumer_factory = consumer_factory
        self._partitions = partitions
        self._deserializer = AvroDeserializer(registry)
        self.topic = topic
        self.latest = latest
        self.retry_interval = retry_interval
        self.topic_found = False
        self.records_read = 0
        self.undecodable = 0
        self.last_undecodable: str | None = None
        self.error: str | None = None
        self._stop = asyncio.Event()

    def status(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "topic_found": self.topic_found,
            "records_read": self.records_read,
            "undecodable": self.undecodable,
            "last_undecodable": self.last_undecodable,
            "error": self.error,
        }

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Read until `stop` is set (or cancelled); between reads of the topic, not in the middle
        of a consumer's start (see `Poller.run`)."""
        self._stop = stop if stop is not None else asyncio.Event()
        while not self._stop.is_set():
            try:
                await self._consume()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # broker gone at start-up, ...: report, wait, start over
                self.error = f"{type(e).__name__}: {e}"[:300]
                log.warning("analytics feed failed; retrying", error=self.error)
            await wait_or_stop(self._stop, self.retry_interval)

    async def _consume(self) -> None:
        partitions = await self._wait_for_topic()
        if self._stop.is_set():
            return
        consumer = self._consumer_factory()
        try:  # a start that fails half-way (or is cancelled) has connections to close too
            await consumer.start()
            consumer.assign(partitions)
            await consumer.seek_to_beginning(*partitions)
            self.error = None
            while not self._stop.is_set():
                batches = await consumer.getmany(timeout_ms=500, max_records=500)
                for records in batches.values():
                    for record in records:
                        await self._take(record)
                if set(self._topic_partitions()) - set(partitions):
                    return  # partitions were added: read them all again from the start
        finally:
            with contextlib.suppress(Exception):
                await consumer.stop()

    def _topic_partitions(self) -> list[TopicPartition]:
        return [TopicPartition(self.topic, p) for p in sorted(self._partitions() or ())]

    async def _wait_for_topic(self) -> list[TopicPartition]:
        while True:
            partitions = self._topic_partitions()
            self.topic_found = bool(partitions)
            if partitions or self._stop.is_set():
                return partitions
            await wait_or_stop(self._stop, self.retry_interval)

    async def _take(self, record: ConsumerRecord[bytes, bytes]) -> None:
        self.records_read += 1
        key = record.key.decode("utf-8", "replace") if record.key is not None else None
        if record.value is None:
            if key is not None:
                self.latest.remove(key)
            return
        while True:
            try:
                decoded = await self._deserializer.deserialize(record.value)
                if decoded.record_name != RECORD_NAME:
                    raise TypeError(f"a {decoded.record_name}, not an AnalyticsMetric")
                value = metric_value(decoded.value)
            except RegistryError as e:
                # Unreachable registry: not the record's fault; wait and decode it again.
                self.error = f"schema registry: {e}"[:300]
                await asyncio.sleep(self.retry_interval)
                continue
            except (SerdeError, KeyError, TypeError, ValueError) as e:
                self.undecodable += 1
                self.last_undecodable = f"{record.partition}@{record.offset}: {e}"[:300]
                log.warning(
                    "undecodable metric skipped", partition=record.partition, offset=record.offset, error=str(e)
                )
                return
            break
        self.error = None
        self.latest.offer(key if key is not None else value.window_key(), value)


def _label(dimensions: tuple[tuple[str, str], ...]) -> str:
    if not dimensions:
        return "total"
    if len(dimensions) == 1:
        return dimensions[0][1]
    return ",".join(f"{k}={v}" for k, v in dimensions)


def analytics_json(latest: LatestValues, status: Mapping[str, Any]) -> dict[str, Any]:
    """The page's analytics section: per metric, one series per dimension value
    (``{"orders.revenue": {"EUR": [[window_start_ms, value], ...]}}``), and the status funnel
    summed over the windows kept."""
    series: dict[str, dict[str, list[list[float]]]] = defaultdict(lambda: defaultdict(list))
    funnel: dict[str, int] = defaultdict(int)
    values = sorted(latest.values(), key=lambda v: (v.metric, v.window_start_ms))
    errors_seen: set[tuple[str, int]] = set()
    logged: set[tuple[str, int]] = set()
    for v in values:
        series[v.metric][_label(v.dimensions)].append([v.window_start_ms, v.value])
        if v.metric == "orders.status":
            funnel[dict(v.dimensions).get("status", "unknown")] += round(v.value)
        elif v.metric == "logs.errors":
            errors_seen.add((dict(v.dimensions).get("service", ""), v.window_start_ms))
        elif v.metric == "logs.records":
            logged.add((dict(v.dimensions).get("service", ""), v.window_start_ms))
    # The job publishes logs.errors only for windows with errors: a service that logged in a
    # window without an error had 0 errors there, which the chart should show as 0, not a gap.
    for service, window in sorted(logged - errors_seen):
        series["logs.errors"][service].append([window, 0.0])
    for by_label in series.get("logs.errors", {}).values():
        by_label.sort()
    ordered = [s for s in FUNNEL_ORDER if s in funnel] + sorted(s for s in funnel if s not in FUNNEL_ORDER)
    return {
        **status,
        "state": "ready" if values else "waiting",
        "metrics": len(values),
        "latest_window_ms": latest.newest_window_ms if values else None,
        "window_minutes": latest.window_ms // _MINUTE_MS,
        "series": {metric: dict(by_label) for metric, by_label in series.items()},
        "funnel": [{"status": s, "count": funnel[s]} for s in ordered],
    }
