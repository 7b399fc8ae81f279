"""Prometheus metrics of one app, in the app's own registry (so two apps in one process, as in
tests, never share or clash on metric names)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["HttpMetrics", "LogShipperCollector", "ShipperStats"]

# Service latencies are milliseconds to a few seconds (design target: p99 under 100 ms).
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class HttpMetrics:
    """Request count and latency by method, route (the route pattern, never the raw path, to
    keep label cardinality bounded) and status."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "http_requests",
            "HTTP requests served",
            ["method", "route", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            "http_request_duration_seconds",
            "HTTP request latency",
            ["method", "route", "status"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route, str(status)).observe(seconds)


class ShipperStats(Protocol):
    @property
    def dropped(self) -> int: ...
    @property
    def shipped(self) -> int: ...
    @property
    def failed(self) -> int: ...
    @property
    def buffered(self) -> int: ...


class LogShipperCollector(Collector):
    """Reads the shipper's counters at scrape time: the shipper's hot path stays a plain
    integer increment instead of a labelled Prometheus counter update."""

    def __init__(self, shipper: ShipperStats) -> None:
        self.shipper = shipper

    def collect(self) -> Iterator[Metric]:
        s = self.shipper
        yield CounterMetricFamily("log_shipper_dropped", "log lines dropped: buffer full", value=s.dropped)
        yield CounterMetricFamily("log_shipper_shipped", "log records sent to logs.* topics", value=s.shipped)
        yield CounterMetricFamily("log_shipper_failed", "log records that failed to encode or send", value=s.failed)
        yield GaugeMetricFamily("log_shipper_buffered", "log records waiting to be sent", value=s.buffered)
