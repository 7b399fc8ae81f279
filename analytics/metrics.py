"""What the analytics jobs compute, as pure functions: components, and metrics derived from them.

A micro-batch turns events into *components*: additive partial aggregates keyed by
(kind, window, dimensions), e.g. ("orders.created", 10:04, ("EUR",)) -> 12 orders, 431.20 total.
Components of the same key add up whatever the batches they come from, so the ledger
(`analytics.ledger`) can keep running totals, and withdraw the contribution of a batch that a
restarted job reads again.  *Metrics* are derived from the totals of one window at a time:
counts, sums, averages, rates and percentiles (percentiles are exact: the components keep
every latency value with its count).

No Spark here: everything is unit-tested on plain values.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

__all__ = [
    "LATE",
    "QUARANTINED",
    "WINDOW_MS",
    "ComponentKey",
    "Components",
    "MetricValue",
    "derive",
    "instant",
    "percentile",
    "window_key",
    "window_of",
]

WINDOW_MS = 60_000  # tumbling one-minute event-time windows
_PLACES = Decimal("0.0001")  # decimal(18,4), as AnalyticsMetric.value
_ERROR_LEVELS = frozenset({"error", "critical"})

# Component kinds every job may produce besides its own: records whose window had already
# closed, and records that could not be decoded (windowed by their Kafka timestamp).
LATE = "late"
QUARANTINED = "quarantined"


@dataclass(frozen=True, slots=True, order=True)
class ComponentKey:
    """What a component adds up: a fact kind, its window (start, epoch ms) and dimensions."""

    kind: str
    window_ms: int
    dims: tuple[str, ...] = ()


@dataclass(slots=True)
class Components:
    """Additive aggregates of some events of one key."""

    n: int = 0
    amount: Decimal = Decimal(0)
    latencies: Counter[int] = field(default_factory=Counter)

    def add(self, other: Components) -> None:
        self.n += other.n
        self.amount += other.amount
        self.latencies.update(other.latencies)

    def subtract(self, other: Components) -> None:
        self.n -= other.n
        self.amount -= other.amount
        self.latencies.subtract(other.latencies)
        # Counter.subtract keeps zero counts; a value seen zero times is not there.
        for value in [v for v, c in self.latencies.items() if c <= 0]:
            del self.latencies[value]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"n": self.n}
        if self.amount:
            out["amount"] = str(self.amount)
        if self.latencies:
            out["latencies"] = sorted(self.latencies.items())
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Components:
        return cls(
            n=int(raw["n"]),
            amount=Decimal(raw.get("amount", "0")),
            latencies=Counter({int(v): int(c) for v, c in raw.get("latencies", ())}),
        )


@dataclass(frozen=True, slots=True)
class MetricValue:
    """One metric of one window: what the sinks write and publish."""

    metric: str
    window_ms: int
    dimensions: tuple[tuple[str, str], ...]  # sorted by name
    value: Decimal
    count: int

    @property
    def key(self) -> str:
        return window_key(self.metric, self.window_ms, dict(self.dimensions))

    @property
    def window_start(self) -> datetime:
        return instant(self.window_ms)

    @property
    def window_end(self) -> datetime:
        return instant(self.window_ms + WINDOW_MS)


def window_of(epoch_ms: int) -> int:
    """The start (epoch ms) of the window holding an instant."""
    return epoch_ms - epoch_ms % WINDOW_MS


def instant(epoch_ms: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=epoch_ms)


def window_key(metric: str, window_ms: int, dimensions: Mapping[str, str]) -> str:
    """The key a metric value is stored and published under: newest value per key wins.

    `orders.revenue|2026-01-02T03:04:00Z|{"currency":"EUR"}`: plain UTF-8 (as every streamshop
    key), readable, and unambiguous whatever the dimension values contain (they are JSON).
    """
    start = instant(window_ms).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{metric}|{start}|{json.dumps(dict(sorted(dimensions.items())), separators=(',', ':'))}"


def percentile(latencies: Counter[int], percent: int) -> int:
    """Nearest-rank percentile: the smallest value with at least `percent`% of values <= it."""
    total = sum(latencies.values())
    if total <= 0:
        raise ValueError("no values")
    rank = max(1, -(-percent * total // 100))  # ceil(percent / 100 * total), exactly
    seen = 0
    for value in sorted(latencies):
        seen += latencies[value]
        if seen >= rank:
            return value
    raise AssertionError("unreachable: rank <= total")


def _ratio(numerator: Decimal | int, denominator: int) -> Decimal:
    return (Decimal(numerator) / Decimal(denominator)).quantize(_PLACES, ROUND_HALF_EVEN)


class _Out:
    """Collects metric values of one window, adding up values of the same metric and dimensions."""

    def __init__(self, window_ms: int) -> None:
        self.window_ms = window_ms
        self.values: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[Decimal, int]] = {}

    def add(self, metric: str, dims: Mapping[str, str], value: Decimal | int, count: int) -> None:
        key = (metric, tuple(sorted(dims.items())))
        old_value, old_count = self.values.get(key, (Decimal(0), 0))
        self.values[key] = (old_value + value, old_count + count)

    def set(self, metric: str, dims: Mapping[str, str], value: Decimal | int, count: int) -> None:
        self.values[(metric, tuple(sorted(dims.items())))] = (Decimal(value), count)

    def result(self) -> list[MetricValue]:
        return [
            MetricValue(metric, self.window_ms, dims, value.quantize(_PLACES, ROUND_HALF_EVEN), count)
            for (metric, dims), (value, count) in sorted(self.values.items())
        ]


def _orders(out: _Out, components: Mapping[ComponentKey, Components]) -> None:
    for key, c in components.items():
        if key.kind == "orders.created" and c.n:
            currency = {"currency": key.dims[0]}
            out.set("orders.count", currency, c.n, c.n)
            out.set("orders.revenue", currency, c.amount, c.n)
            out.set("orders.basket_avg", currency, _ratio(c.amount, c.n), c.n)
            # The funnel's first step: every order is created once.
            out.add("orders.status", {"status": "created"}, c.n, c.n)
        elif key.kind == "orders.status" and c.n:
            out.add("orders.status", {"status": key.dims[0]}, c.n, c.n)


def _otp(out: _Out, components: Mapping[ComponentKey, Components]) -> None:
    delivered: dict[str, Components] = {}
    failed: Counter[str] = Counter()
    final_failures: Counter[str] = Counter()
    for key, c in components.items():
        if key.kind == "otp.delivered" and c.n:
            delivered[key.dims[0]] = c
        elif key.kind == "otp.failed" and c.n:
            channel, outcome = key.dims
            failed[channel] += c.n
            if outcome == "final":
                final_failures[channel] += c.n
    for channel, c in delivered.items():
        dims = {"channel": channel}
        out.set("otp.delivered", dims, c.n, c.n)
        out.set("otp.latency_p50", dims, percentile(c.latencies, 50), c.n)
        out.set("otp.latency_p95", dims, percentile(c.latencies, 95), c.n)
    for channel, n in failed.items():
        out.set("otp.failed", {"channel": channel}, n, n)
    # A delivery attempt is an outcome once it succeeded or failed for good; failures that will
    # be retried are not outcomes yet.
    for channel in delivered.keys() | final_failures.keys():
        ok = delivered[channel].n if channel in delivered else 0
        outcomes = ok + final_failures[channel]
        out.set("otp.success_rate", {"channel": channel}, _ratio(ok, outcomes), outcomes)


def _logs(out: _Out, components: Mapping[ComponentKey, Components]) -> None:
    for key, c in components.items():
        if key.kind != "logs.record" or not c.n:
            continue
        service, level, event = key.dims
        out.add("logs.records", {"service": service, "level": level}, c.n, c.n)
        if level in _ERROR_LEVELS:
            out.add("logs.errors", {"service": service}, c.n, c.n)
            out.add("logs.error_events", {"service": service, "event": event}, c.n, c.n)


def _meta(job: str) -> Callable[[_Out, Mapping[ComponentKey, Components]], None]:
    def derive_meta(out: _Out, components: Mapping[ComponentKey, Components]) -> None:
        for key, c in components.items():
            if key.kind == LATE and c.n:
                out.add("analytics.late_events", {"job": job}, c.n, c.n)
            elif key.kind == QUARANTINED and c.n:
                out.add("analytics.quarantined", {"topic": key.dims[0]}, c.n, c.n)

    return derive_meta


_FAMILIES: dict[str, Callable[[_Out, Mapping[ComponentKey, Components]], None]] = {
    "orders": _orders,
    "otp": _otp,
    "logs": _logs,
}


def derive(job: str, window_ms: int, components: Mapping[ComponentKey, Components]) -> list[MetricValue]:
    """Every metric of one window of a job, from the window's component totals."""
    out = _Out(window_ms)
    _FAMILIES[job](out, components)
    _meta(job)(out, components)
    return out.result()
