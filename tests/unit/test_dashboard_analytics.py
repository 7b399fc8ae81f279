"""The dashboard's analytics feed, without a broker: the latest value per key wins by
(generation, batch_id), old windows are dropped, records decode from real Avro bytes, and the
page's series and funnel are derived from what is kept."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from analytics.metrics import window_key
from schemas.catalog import default_catalog
from schemas.serde import decode, encode
from services.dashboard.analytics_feed import LatestValues, MetricValue, analytics_json, metric_value

MINUTE = 60_000
T0 = 1_767_348_240_000  # 2026-01-02T10:04:00Z


def value(
    metric: str = "orders.revenue",
    window: int = T0,
    v: float = 1.0,
    generation: int = 1,
    batch_id: int = 0,
    **dims: str,
) -> MetricValue:
    return MetricValue(metric, window, tuple(sorted(dims.items())), v, int(v), generation, batch_id, window + MINUTE)


def test_the_highest_generation_then_batch_id_wins_and_an_older_value_read_later_is_ignored() -> None:
    latest = LatestValues(60)
    assert latest.offer("k", value(v=1, generation=1, batch_id=7))
    assert latest.offer("k", value(v=2, generation=1, batch_id=8))
    assert not latest.offer("k", value(v=3, generation=1, batch_id=5))  # a late copy of an older batch
    assert latest.offer("k", value(v=4, generation=2, batch_id=0))  # a new generation restarts batch ids
    assert not latest.offer("k", value(v=5, generation=1, batch_id=99))
    assert latest.offer("k", value(v=6, generation=2, batch_id=0))  # the same batch published again
    current = latest.get("k")
    assert current is not None
    assert current.value == 6
    assert len(latest) == 1


def test_windows_older_than_the_kept_minutes_are_dropped_and_refused() -> None:
    latest = LatestValues(10)
    latest.offer("old", value(window=T0))
    latest.offer("mid", value(window=T0 + 5 * MINUTE))
    assert len(latest) == 2
    latest.offer("new", value(window=T0 + 12 * MINUTE))  # keeps windows from T0 + 2 min on
    assert {v.window_start_ms for v in latest.values()} == {T0 + 5 * MINUTE, T0 + 12 * MINUTE}
    assert not latest.offer("late", value(window=T0 + MINUTE))
    assert latest.newest_window_ms == T0 + 12 * MINUTE


def test_a_tombstone_removes_its_key() -> None:
    latest = LatestValues(60)
    latest.offer("k", value())
    version = latest.version
    latest.remove("k")
    latest.remove("never-there")
    assert latest.get("k") is None
    assert latest.version == version + 1


def test_a_real_analytics_metric_record_decodes_to_a_metric_value_with_the_jobs_window_key() -> None:
    schema = default_catalog().schema("AnalyticsMetric")
    start = datetime.fromtimestamp(T0 / 1000, UTC)
    record: dict[str, Any] = {
        "envelope": {
            "event_id": "5f0b8a4e-7a57-4a3c-9d0e-2d8d0b6f2f10",
            "occurred_at": start,
            "producer": {"service": "analytics", "instance": "test"},
            "trace_id": None,
        },
        "metric": "orders.revenue",
        "window_start": start,
        "window_end": datetime.fromtimestamp((T0 + MINUTE) / 1000, UTC),
        "dimensions": {"currency": "EUR"},
        "value": Decimal("1234.5600"),
        "count": 3,
        "job": "orders",
        "generation": 2,
        "batch_id": 41,
        "computed_at": datetime.fromtimestamp((T0 + 90_000) / 1000, UTC),
    }
    got = metric_value(decode(encode(schema, record), schema))
    assert got == MetricValue("orders.revenue", T0, (("currency", "EUR"),), 1234.56, 3, 2, 41, T0 + 90_000)
    assert got.window_key() == window_key("orders.revenue", T0, {"currency": "EUR"})


def test_a_record_that_is_not_an_analytics_metric_is_refused() -> None:
    for bad in ({}, {"metric": "x", "dimensions": "nope"}, {"dimensions": {}, "value": "12"}):
        try:
            metric_value(bad)
        except (KeyError, TypeError, ValueError):
            continue
        raise AssertionError(f"{bad} was accepted")


def test_the_page_gets_one_series_per_dimension_value_the_funnel_in_lifecycle_order_and_zero_errors() -> None:
    latest = LatestValues(60)
    status = {"topic": "analytics.metrics", "topic_found": True, "records_read": 0, "undecodable": 0}
    waiting = analytics_json(latest, status)
    assert (waiting["state"], waiting["metrics"], waiting["latest_window_ms"]) == ("waiting", 0, None)
    for i, (key, v) in enumerate(
        [
            ("r1", value(window=T0 + MINUTE, v=20, currency="EUR")),
            ("r0", value(window=T0, v=10, currency="EUR")),
            ("r2", value(window=T0, v=7, currency="USD")),
            ("s1", value("orders.status", T0, 3, status="paid")),
            ("s2", value("orders.status", T0 + MINUTE, 2, status="paid")),
            ("s3", value("orders.status", T0, 9, status="created")),
            ("s4", value("orders.status", T0, 1, status="cancelled")),
            ("l", value("otp.latency_p95", T0, 850, channel="sms")),
            ("e", value("logs.records", T0, 4, service="orders", level="error")),
            ("f", value("logs.errors", T0, 4, service="orders")),
            ("g", value("logs.records", T0 + MINUTE, 7, service="orders", level="info")),
            ("h", value("logs.records", T0, 2, service="otp", level="info")),
        ]
    ):
        assert latest.offer(key, v), i
    body = analytics_json(latest, status)
    assert body["state"] == "ready"
    assert body["metrics"] == 12
    assert body["latest_window_ms"] == T0 + MINUTE
    assert body["series"]["orders.revenue"] == {"EUR": [[T0, 10.0], [T0 + MINUTE, 20.0]], "USD": [[T0, 7.0]]}
    assert body["series"]["otp.latency_p95"] == {"sms": [[T0, 850.0]]}
    assert body["series"]["logs.records"]["level=error,service=orders"] == [[T0, 4.0]]
    # logs.errors is published for windows with errors only: a window a service logged in without
    # one counts 0 errors.
    assert body["series"]["logs.errors"] == {"orders": [[T0, 4.0], [T0 + MINUTE, 0.0]], "otp": [[T0, 0.0]]}
    assert body["funnel"] == [
        {"status": "created", "count": 9},
        {"status": "paid", "count": 5},
        {"status": "cancelled", "count": 1},
    ]
    assert body["topic"] == "analytics.metrics"  # the feed's status travels along
