"""Reading the analytics jobs' Parquet output: current metric values and quarantined records.

    from analytics.results import read_metrics, read_quarantine
    for m in read_metrics("data/analytics", metric="orders.revenue"):
        print(m.window_start, m.dimensions, m.value)

Plain pyarrow, no Spark: the dashboard and the tests read results this way.  Spark reads the
same directories with `spark.read.parquet("data/analytics/metrics")` (metric and date become
columns); it then has to keep the newest row per key itself, as `read_metrics` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

__all__ = ["Metric", "QuarantinedRecord", "read_metrics", "read_quarantine"]


@dataclass(frozen=True)
class Metric:
    """The current value of one window key."""

    metric: str
    window_start: datetime
    window_end: datetime
    dimensions: dict[str, str]
    value: Decimal
    count: int
    job: str
    generation: int
    batch_id: int
    computed_at: datetime
    key: str


@dataclass(frozen=True)
class QuarantinedRecord:
    """A record a job could not decode: where it is, why, and its bytes."""

    topic: str
    partition: int
    offset: int
    timestamp: datetime | None
    key: str | None
    error: str
    value: bytes | None


def _dataset(directory: Path, partitions: list[tuple[str, pa.DataType]]) -> ds.Dataset | None:
    if not directory.is_dir():
        return None
    return ds.dataset(directory, format="parquet", partitioning=ds.partitioning(pa.schema(partitions), flavor="hive"))


def read_metrics(data_dir: str | Path, metric: str | None = None) -> list[Metric]:
    """The newest value of every window key (highest generation, then batch), sorted by metric,
    window and key; only `metric`'s when given."""
    dataset = _dataset(Path(data_dir) / "metrics", [("metric", pa.string()), ("date", pa.string())])
    if dataset is None:
        return []
    table = dataset.to_table(filter=None if metric is None else ds.field("metric") == metric)
    newest: dict[str, dict[str, Any]] = {}
    for row in table.to_pylist():
        old = newest.get(row["key"])
        if old is None or (row["generation"], row["batch_id"]) > (old["generation"], old["batch_id"]):
            newest[row["key"]] = row
    metrics = [
        Metric(
            metric=r["metric"],
            window_start=r["window_start"],
            window_end=r["window_end"],
            dimensions=dict(r["dimensions"]),
            value=r["value"],
            count=r["count"],
            job=r["job"],
            generation=r["generation"],
            batch_id=r["batch_id"],
            computed_at=r["computed_at"],
            key=r["key"],
        )
        for r in newest.values()
    ]
    return sorted(metrics, key=lambda m: (m.metric, m.window_start, m.key))


def read_quarantine(data_dir: str | Path) -> list[QuarantinedRecord]:
    """Every quarantined record once (a record read again after a restart is written again),
    in (topic, partition, offset) order."""
    dataset = _dataset(Path(data_dir) / "quarantine", [("topic", pa.string())])
    if dataset is None:
        return []
    seen: dict[tuple[str, int, int], QuarantinedRecord] = {}
    for r in dataset.to_table().to_pylist():
        record = QuarantinedRecord(
            topic=r["topic"],
            partition=r["partition"],
            offset=r["offset"],
            timestamp=r["timestamp"],
            key=r["key"],
            error=r["error"],
            value=r["value"],
        )
        seen[(record.topic, record.partition, record.offset)] = record
    return [seen[k] for k in sorted(seen)]
