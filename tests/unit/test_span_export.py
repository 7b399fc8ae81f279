"""The counts of kit.span_export on a tracer provider of the test's own (the process's is
installed once, by tests/conftest.py): spans dropped when the batch processor's queue is full,
exported, failed; and the Prometheus text they make."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from prometheus_client import CollectorRegistry, generate_latest

from kit import telemetry
from kit.settings import ConfigError
from kit.span_export import CountingExporter, QueueGate, SpanCounts, SpanExportCollector, SpanTally


class Held(SpanExporter):
    """An exporter that blocks until released (a backend that does not answer), then answers
    `result`, or raises when `result` is None."""

    def __init__(self, result: SpanExportResult | None = SpanExportResult.SUCCESS) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.result = result
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.entered.set()
        self.release.wait(30)
        self.spans += len(spans)
        if self.result is None:
            raise ConnectionError("backend down")
        return self.result


@contextmanager
def provider(exporter: SpanExporter, capacity: int) -> Iterator[tuple[TracerProvider, SpanCounts]]:
    counts = SpanCounts()
    batches = BatchSpanProcessor(
        CountingExporter(exporter, counts), max_queue_size=capacity, max_export_batch_size=capacity
    )
    made = TracerProvider()
    made.add_span_processor(QueueGate(batches, capacity, counts))
    try:
        yield made, counts
    finally:
        made.shutdown()


def end_spans(made: TracerProvider, count: int) -> None:
    tracer = made.get_tracer("test")
    for i in range(count):
        tracer.start_span(f"s{i}").end()


def test_spans_beyond_the_queue_are_dropped_and_counted_while_the_exporter_is_stuck() -> None:
    held = Held()
    with provider(held, capacity=4) as (made, counts):
        end_spans(made, 4)  # a full batch: the worker takes it to the exporter, which blocks
        assert held.entered.wait(30)
        end_spans(made, 20)  # four wait in the queue, sixteen find it full
        assert counts.tally() == SpanTally(queued=4, dropped=16)
        held.release.set()
        assert made.force_flush()
        assert counts.tally() == SpanTally(exported=8, dropped=16)
        assert held.spans == 8  # the batch processor never dropped one itself: the gate did


@pytest.mark.parametrize("result", [SpanExportResult.FAILURE, None], ids=["failure", "exception"])
def test_failed_exports_are_counted(result: SpanExportResult | None) -> None:
    held = Held(result)
    held.release.set()
    with provider(held, capacity=8) as (made, counts):
        end_spans(made, 3)
        made.force_flush()
        assert counts.tally() == SpanTally(failed=3)


class RecordOnly(Sampler):
    """Spans recorded (the processors see them end) but not sampled: never to be exported."""

    def should_sample(self, *args: object, **kwargs: object) -> SamplingResult:
        return SamplingResult(Decision.RECORD_ONLY)

    def get_description(self) -> str:
        return "RecordOnly"


def test_recorded_but_unsampled_spans_are_neither_queued_nor_dropped() -> None:
    counts = SpanCounts()
    gate = QueueGate(
        BatchSpanProcessor(CountingExporter(Held(), counts), max_queue_size=1, max_export_batch_size=1), 1, counts
    )
    made = TracerProvider(sampler=RecordOnly())
    made.add_span_processor(gate)
    end_spans(made, 5)
    made.shutdown()
    assert counts.tally() == SpanTally()


def test_the_counts_are_prometheus_counters_and_a_gauge() -> None:
    counts = SpanCounts()
    counts.admit(1)
    counts.admit(1)  # full: dropped
    counts.handed(1)
    counts.done(1, ok=True)
    registry = CollectorRegistry()
    registry.register(SpanExportCollector(counts))
    text = generate_latest(registry).decode()
    for line in (
        "otel_spans_exported_total 1.0",
        "otel_span_export_failures_total 0.0",
        "otel_spans_dropped_total 1.0",
        "otel_spans_queued 0.0",
        "# TYPE otel_spans_dropped_total counter",
    ):
        assert line in text.splitlines()


def test_the_queue_size_is_read_as_the_sdk_reads_it() -> None:
    assert telemetry.queue_size({}) == 2048
    assert telemetry.queue_size({"OTEL_BSP_MAX_QUEUE_SIZE": " 16 "}) == 16
    for bad in ("0", "-1", "many", "1.5"):
        with pytest.raises(ConfigError, match="OTEL_BSP_MAX_QUEUE_SIZE"):
            telemetry.queue_size({"OTEL_BSP_MAX_QUEUE_SIZE": bad})


def test_the_resource_names_the_process_and_tells_replicas_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without OTEL_SERVICE_NAME the process's own name; without an instance id in
    OTEL_RESOURCE_ATTRIBUTES the host name and pid (a container's host name is its id); what
    the environment gives wins."""
    for name in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"):
        monkeypatch.delenv(name, raising=False)
    plain = telemetry.resource("orders", {}).attributes
    assert plain["service.name"] == "orders"
    assert plain["service.instance.id"] == f"{socket.gethostname()}:{os.getpid()}"
    given = {"OTEL_SERVICE_NAME": "shop", "OTEL_RESOURCE_ATTRIBUTES": "service.instance.id=orders-2"}
    for name, value in given.items():
        monkeypatch.setenv(name, value)
    chosen = telemetry.resource("orders", given).attributes
    assert (chosen["service.name"], chosen["service.instance.id"]) == ("shop", "orders-2")
