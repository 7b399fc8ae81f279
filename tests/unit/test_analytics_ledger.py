"""The analytics jobs' pure parts: metric derivation, the ledger (totals, generations,
supersession, lateness) and the projected reader schemas -- without Spark or a broker."""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from analytics.avro_columns import EventColumns
from analytics.jobs import JOBS, reader_schema
from analytics.ledger import MAX_CLOCK_SKEW_MS, BatchFacts, Ledger, Span, next_generation
from analytics.metrics import (
    LATE,
    QUARANTINED,
    WINDOW_MS,
    ComponentKey,
    Components,
    MetricValue,
    derive,
    percentile,
    window_key,
)
from analytics.options import JOB_NAMES
from schemas.catalog import default_catalog
from schemas.serde import AvroSchema, encode, frame
from tests.support.examples import examples

CATALOG = default_catalog()
T0 = 1_767_348_000_000  # 2026-01-02T10:00:00Z
HOUR = 3_600_000


def values(metrics: list[MetricValue]) -> dict[tuple[str, str], tuple[Decimal, int]]:
    return {(m.metric, ",".join(f"{k}={v}" for k, v in m.dimensions)): (m.value, m.count) for m in metrics}


# -- metrics -----------------------------------------------------------------------------------


def test_percentiles_are_nearest_rank() -> None:
    one_to_hundred = Counter(range(1, 101))
    assert (percentile(one_to_hundred, 50), percentile(one_to_hundred, 95)) == (50, 95)
    assert percentile(Counter({7: 1}), 50) == percentile(Counter({7: 1}), 95) == 7
    # 10 values: p50 is the 5th, p95 the 10th.
    assert (percentile(Counter({1: 4, 2: 1, 9: 5}), 50), percentile(Counter({1: 4, 2: 1, 9: 5}), 95)) == (2, 9)
    with pytest.raises(ValueError, match="no values"):
        percentile(Counter(), 50)


def test_orders_metrics_per_currency_and_the_status_funnel() -> None:
    w = T0
    components = {
        ComponentKey("orders.created", w, ("EUR",)): Components(3, Decimal("10.0000")),
        ComponentKey("orders.created", w, ("USD",)): Components(1, Decimal("5.5000")),
        ComponentKey("orders.status", w, ("paid",)): Components(2),
        ComponentKey("orders.status", w, ("cancelled",)): Components(1),
    }
    assert values(derive("orders", w, components)) == {
        ("orders.count", "currency=EUR"): (Decimal(3), 3),
        ("orders.count", "currency=USD"): (Decimal(1), 1),
        ("orders.revenue", "currency=EUR"): (Decimal("10.0000"), 3),
        ("orders.revenue", "currency=USD"): (Decimal("5.5000"), 1),
        ("orders.basket_avg", "currency=EUR"): (Decimal("3.3333"), 3),
        ("orders.basket_avg", "currency=USD"): (Decimal("5.5000"), 1),
        ("orders.status", "status=created"): (Decimal(4), 4),
        ("orders.status", "status=paid"): (Decimal(2), 2),
        ("orders.status", "status=cancelled"): (Decimal(1), 1),
    }


def test_otp_success_rate_counts_only_final_outcomes() -> None:
    w = T0
    components = {
        ComponentKey("otp.delivered", w, ("sms",)): Components(3, latencies=Counter({100: 2, 900: 1})),
        ComponentKey("otp.failed", w, ("sms", "retry")): Components(5),
        ComponentKey("otp.failed", w, ("sms", "final")): Components(1),
        ComponentKey("otp.failed", w, ("email", "final")): Components(2),
    }
    assert values(derive("otp", w, components)) == {
        ("otp.delivered", "channel=sms"): (Decimal(3), 3),
        ("otp.latency_p50", "channel=sms"): (Decimal(100), 3),
        ("otp.latency_p95", "channel=sms"): (Decimal(900), 3),
        ("otp.failed", "channel=sms"): (Decimal(6), 6),
        ("otp.failed", "channel=email"): (Decimal(2), 2),
        ("otp.success_rate", "channel=sms"): (Decimal("0.7500"), 4),
        ("otp.success_rate", "channel=email"): (Decimal(0), 2),
    }


def test_logs_metrics_and_the_meta_metrics() -> None:
    w = T0
    components = {
        ComponentKey("logs.record", w, ("orders", "info", "http request")): Components(7),
        ComponentKey("logs.record", w, ("orders", "error", "db timeout")): Components(2),
        ComponentKey("logs.record", w, ("orders", "critical", "db timeout")): Components(1),
        ComponentKey("logs.record", w, ("otp", "error", "smtp down")): Components(4),
        ComponentKey(LATE, w): Components(3),
        ComponentKey(QUARANTINED, w, ("logs.app",)): Components(2),
    }
    assert values(derive("logs", w, components)) == {
        ("logs.records", "level=info,service=orders"): (Decimal(7), 7),
        ("logs.records", "level=error,service=orders"): (Decimal(2), 2),
        ("logs.records", "level=critical,service=orders"): (Decimal(1), 1),
        ("logs.records", "level=error,service=otp"): (Decimal(4), 4),
        ("logs.errors", "service=orders"): (Decimal(3), 3),
        ("logs.errors", "service=otp"): (Decimal(4), 4),
        ("logs.error_events", "event=db timeout,service=orders"): (Decimal(3), 3),
        ("logs.error_events", "event=smtp down,service=otp"): (Decimal(4), 4),
        ("analytics.late_events", "job=logs"): (Decimal(3), 3),
        ("analytics.quarantined", "topic=logs.app"): (Decimal(2), 2),
    }


def test_window_keys_are_readable_and_unambiguous() -> None:
    assert (
        window_key("orders.revenue", T0, {"currency": "EUR"})
        == 'orders.revenue|2026-01-02T10:00:00Z|{"currency":"EUR"}'
    )
    assert window_key("logs.error_events", T0, {"service": "a", "event": "x|y,z=1"}) == (
        'logs.error_events|2026-01-02T10:00:00Z|{"event":"x|y,z=1","service":"a"}'
    )


def test_the_job_names_agree_everywhere() -> None:
    assert tuple(JOBS) == JOB_NAMES


# -- projected reader schemas ------------------------------------------------------------------


def decode_example(reader: AvroSchema, name: str) -> dict[str, Any]:
    """The catalog example of `name`, written with its full schema, decoded into `reader`'s columns."""
    columns = EventColumns(reader, lambda n: f"event_{n}" if n == "timestamp" else n)
    writer = CATALOG.schema(name)
    errors: list[tuple[int, str]] = []
    columns.decoder(writer)([frame(1, encode(writer, CATALOG.example(name)))], 5, 0, errors)
    assert errors == []
    types = [f.type for f in to_arrow_schema(StructType(columns.fields), timezone="UTC")]
    return {f.name: a.to_pylist()[0] for f, a in zip(columns.fields, columns.finish(types), strict=True)}


@pytest.mark.parametrize("job", list(JOBS))
def test_each_job_decodes_full_events_into_just_the_fields_it_reads(job: str) -> None:
    fields = JOBS[job].fields
    reader = AvroSchema.parse(reader_schema(fields))
    for name, paths in fields:
        example = CATALOG.example(name)
        expected: dict[str, Any] = {}
        for path in paths:
            head, _, rest = path.partition(".")
            if rest:
                expected.setdefault(head, {})[rest] = example[head][rest]
            else:
                expected[head] = example[head]
        decoded = decode_example(reader, name)
        if len(fields) > 1:  # a union reader: one struct column per record
            assert decoded[name] == expected
        else:
            assert decoded == {("event_timestamp" if k == "timestamp" else k): v for k, v in expected.items()}


def test_a_projection_defines_a_named_type_once_even_when_its_definition_was_dropped() -> None:
    # OrderStatus is defined in from_status (dropped) and only referred to by to_status.
    reader = json.loads(reader_schema(JOBS["orders"].fields))
    status_changed = reader[1]
    assert [f["name"] for f in status_changed["fields"]] == ["to_status", "changed_at"]
    assert status_changed["fields"][0]["type"]["type"] == "enum"
    # Envelope is read by both OTP records: defined in the first, named in the second.
    otp = json.loads(reader_schema(JOBS["otp"].fields))
    assert otp[0]["fields"][0]["type"]["type"] == "record"
    assert otp[1]["fields"][0]["type"] == "io.streamshop.events.common.Envelope"


# -- ledger ------------------------------------------------------------------------------------

EUR = ("EUR",)


def facts(coverage: dict[tuple[str, int], tuple[int, int]], **windows: int) -> BatchFacts:
    """A batch with `n` orders of 1.0000 EUR in each window named m<minute>=n."""
    components = {
        ComponentKey("orders.created", T0 + int(name[1:]) * WINDOW_MS, EUR): Components(n, Decimal(n))
        for name, n in windows.items()
    }
    max_event = max((k.window_ms for k in components), default=None)
    return BatchFacts(
        coverage={tp: Span(*span) for tp, span in coverage.items()},
        records=sum(windows.values()),
        components=components,
        max_event_ms=max_event,
    )


def counts(ledger: Ledger) -> dict[int, int]:
    return {(k.window_ms - T0) // WINDOW_MS: c.n for k, c in ledger.totals().items() if k.kind == "orders.created"}


def open_ledger(root: Path, lateness_ms: int = HOUR) -> Ledger:
    ledger = Ledger(root, "orders", next_generation(root), lateness_ms)
    ledger.start()
    return ledger


def test_totals_survive_a_restart_and_a_rerun_batch_replaces_its_first_attempt(tmp_path: Path) -> None:
    first = open_ledger(tmp_path)
    first.apply(0, facts({("orders", 0): (0, 9)}, m0=10))
    first.apply(1, facts({("orders", 0): (10, 14)}, m0=2, m1=3))  # in flight when the job stops

    second = open_ledger(tmp_path)
    assert second.generation == 2
    assert counts(second) == {0: 12, 1: 3}
    applied = second.apply(1, facts({("orders", 0): (10, 14)}, m0=2, m1=3))  # Spark runs batch 1 again

    assert applied.superseded == [(1, 1)]
    assert counts(second) == {0: 12, 1: 3}
    assert values(applied.values)[("orders.count", "currency=EUR")] == (Decimal(3), 3)  # the last window
    assert counts(open_ledger(tmp_path)) == {0: 12, 1: 3}


def test_a_fresh_checkpoint_from_the_group_reads_the_in_flight_batch_again_without_counting_it_twice(
    tmp_path: Path,
) -> None:
    first = open_ledger(tmp_path)
    first.apply(0, facts({("orders", 0): (0, 9), ("orders", 1): (0, 4)}, m0=15))
    first.apply(1, facts({("orders", 0): (10, 19)}, m1=10))  # written, never committed to the group

    # The group is at the end of batch 0: the new query reads 10.. (and newer records) in one batch.
    second = open_ledger(tmp_path)
    applied = second.apply(0, facts({("orders", 0): (10, 24), ("orders", 1): (5, 6)}, m1=15, m2=2))

    assert applied.superseded == [(1, 1)]
    assert counts(second) == {0: 15, 1: 15, 2: 2}


def test_a_withdrawn_metric_is_published_as_zero_until_it_is_read_again(tmp_path: Path) -> None:
    first = open_ledger(tmp_path)
    first.apply(0, facts({("orders", 0): (0, 4)}, m0=5))
    first.apply(1, facts({("orders", 0): (5, 9)}, m3=5))

    second = open_ledger(tmp_path)  # limited by maxRecordsPerTrigger: reads 5..6 first
    applied = second.apply(0, facts({("orders", 0): (5, 6)}, m1=2))

    by_window = {
        (v.window_ms - T0) // WINDOW_MS: (v.value, v.count) for v in applied.values if v.metric == "orders.count"
    }
    assert by_window == {1: (Decimal(2), 2), 3: (Decimal(0), 0)}
    second.apply(1, facts({("orders", 0): (7, 9)}, m3=3))
    assert counts(second) == {0: 5, 1: 2, 3: 3}


def test_late_events_are_counted_apart_and_the_window_stays_final(tmp_path: Path) -> None:
    ledger = open_ledger(tmp_path, lateness_ms=2 * WINDOW_MS)
    ledger.apply(0, facts({("orders", 0): (0, 9)}, m0=5, m5=5))  # watermark after: m5 - 2 min = m3
    applied = ledger.apply(1, facts({("orders", 0): (10, 12)}, m2=1, m3=2))

    assert applied.watermark_ms == T0 + 3 * WINDOW_MS
    assert applied.late == 1  # m2 ended at m3: final; m3 ends at m4, still open
    assert counts(ledger) == {0: 5, 3: 2, 5: 5}
    late = {(k.window_ms - T0) // WINDOW_MS: c.n for k, c in ledger.totals().items() if k.kind == LATE}
    assert late == {2: 1}
    assert values(applied.values)[("analytics.late_events", "job=orders")] == (Decimal(1), 1)


def test_a_superseded_batch_no_longer_moves_the_watermark(tmp_path: Path) -> None:
    first = open_ledger(tmp_path, lateness_ms=2 * WINDOW_MS)
    first.apply(0, facts({("orders", 0): (0, 4)}, m0=5))
    first.apply(1, facts({("orders", 0): (5, 9)}, m9=5))  # in flight; its events are far ahead

    second = open_ledger(tmp_path, lateness_ms=2 * WINDOW_MS)
    applied = second.apply(1, facts({("orders", 0): (5, 9)}, m9=5))

    # The re-run is judged on the history before it (watermark m0 - 2 min), as the first attempt.
    assert applied.watermark_ms == T0 - 2 * WINDOW_MS
    assert applied.late == 0
    assert counts(second) == {0: 5, 9: 5}


def test_a_job_refuses_state_from_a_generation_that_is_not_older(tmp_path: Path) -> None:
    open_ledger(tmp_path).apply(0, facts({("orders", 0): (0, 0)}, m0=1))
    with pytest.raises(RuntimeError, match="generation 1, not older"):
        Ledger(tmp_path, "orders", 1, HOUR).start()


# -- the ledger under crashes, restarts and lost checkpoints, against a plain count ---------------

ENDINGS = ("crash-before-sink", "crash-after-sink", "lost-checkpoint")


@dataclass
class Checkpoint:
    """What Spark's checkpoint remembers: the next batch, and a planned one not yet committed."""

    next_id: int
    position: list[int]
    planned: tuple[int, list[int], list[int]] | None = None


@settings(max_examples=examples(60), deadline=None)
@given(
    logs=st.lists(st.lists(st.integers(0, 5), max_size=30), min_size=2, max_size=2),
    runs=st.lists(st.tuples(st.integers(1, 4), st.integers(1, 12), st.sampled_from(ENDINGS)), max_size=4),
)
def test_totals_equal_the_events_whatever_the_crashes_and_restarts(
    logs: list[list[int]], runs: list[tuple[int, int, str]]
) -> None:
    """Each run is a new process (a new generation): it runs `batches` batches of `size` records
    per partition and dies during the last one -- before or after the sink wrote it -- keeping
    its checkpoint or losing it (then the next run starts from the group's offsets).  A last run
    reads everything.  The totals must count every event once."""
    ends = [len(log) for log in logs]

    def between(start: list[int], end: list[int]) -> BatchFacts:
        f = BatchFacts(records=sum(e - s for s, e in zip(start, end, strict=True)))
        for p, (s, e) in enumerate(zip(start, end, strict=True)):
            if e > s:
                f.coverage[("orders", p)] = Span(s, e - 1)
            for minute in logs[p][s:e]:
                key = ComponentKey("orders.created", T0 + minute * WINDOW_MS, EUR)
                f.components.setdefault(key, Components()).add(Components(1, Decimal(1)))
                f.max_event_ms = max(f.max_event_ms or 0, key.window_ms)
        return f

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        checkpoint: Checkpoint | None = None
        group = [0, 0]
        for batches, size, ending in [*runs, (100, 100, "completed")]:
            ledger = open_ledger(root, lateness_ms=100 * HOUR)  # nothing is late here
            if checkpoint is None:  # a fresh query, startingOffsets=group
                checkpoint = Checkpoint(0, list(group))
            if checkpoint.planned is not None:  # Spark runs the uncommitted batch again
                batch_id, start, end = checkpoint.planned
                ledger.apply(batch_id, between(start, end))
                checkpoint = Checkpoint(batch_id + 1, end)
            for i in range(batches):
                start = checkpoint.position
                end = [min(s + size, e) for s, e in zip(start, ends, strict=True)]
                if end == start:
                    break
                group = list(start)  # planning a batch commits the end of the previous one
                if i == batches - 1 and ending != "completed":
                    checkpoint.planned = (checkpoint.next_id, start, end)
                    if ending != "crash-before-sink":
                        ledger.apply(checkpoint.next_id, between(start, end))
                    break
                ledger.apply(checkpoint.next_id, between(start, end))
                checkpoint = Checkpoint(checkpoint.next_id + 1, end)
            if ending == "lost-checkpoint":
                checkpoint = None
        assert checkpoint is not None
        assert checkpoint.position == ends
        expected = Counter(minute for log in logs for minute in log)
        assert counts(open_ledger(root)) == dict(expected)


def test_an_event_time_from_the_future_does_not_make_every_later_event_late(tmp_path: Path) -> None:
    now = T0 + 10 * WINDOW_MS
    ledger = Ledger(tmp_path, "orders", 1, lateness_ms=10 * WINDOW_MS, clock_ms=lambda: now)
    ledger.start()
    ledger.apply(0, facts({("orders", 0): (0, 0)}, m10=1, m600000=1))  # one record stamped a year ahead
    assert ledger.watermark() == now + MAX_CLOCK_SKEW_MS - 10 * WINDOW_MS

    applied = ledger.apply(1, facts({("orders", 0): (1, 1)}, m9=1))  # on time by the driver's clock
    assert applied.late == 0
    assert counts(ledger) == {10: 1, 600000: 1, 9: 1}
    reopened = Ledger(tmp_path, "orders", 2, lateness_ms=10 * WINDOW_MS, clock_ms=lambda: now)
    reopened.start()
    assert reopened.watermark() == ledger.watermark()  # what was persisted is the bounded time
