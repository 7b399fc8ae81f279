"""What became of the spans this process made: exported, failed, or dropped because the export
queue was full, counted process-wide and shown on every app's ``/metrics``.

The SDK's `BatchSpanProcessor` drops a span when its queue is full with nothing but a log line,
and its queue's length is a private attribute.  Its own counters (``otel.sdk.processor.span
.processed``) need the experimental ``OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED`` and a metrics
SDK pipeline beside Prometheus's client.  So the kit counts with public interfaces alone:

- `QueueGate`, a span processor in front of the batch processor, admits a sampled span only while
  fewer than the queue's capacity are waiting, and counts the others as dropped.  The batch
  processor's queue then never overflows: its length is at most what the gate counts as waiting
  (spans leave the count when handed to the exporter, a moment after leaving the queue).
- `CountingExporter` wraps the real exporter: what it is handed leaves the waiting count, and
  what it returns as success or failure (or raises on) is counted as exported or failed.

Metrics (`SpanExportCollector`): ``otel_spans_exported_total``, ``otel_span_export_failures_total``,
``otel_spans_dropped_total`` and the gauge ``otel_spans_queued``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["PROCESS", "CountingExporter", "QueueGate", "SpanCounts", "SpanExportCollector", "SpanTally"]


@dataclass(frozen=True, slots=True)
class SpanTally:
    """The counts at one moment."""

    queued: int = 0
    exported: int = 0
    failed: int = 0
    dropped: int = 0


class SpanCounts:
    """Counters shared by a gate and its exporter; spans end on any thread, hence the lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queued = self._exported = self._failed = self._dropped = 0

    def admit(self, capacity: int) -> bool:
        """One more span waiting, unless `capacity` are: then it is counted as dropped."""
        with self._lock:
            if self._queued >= capacity:
                self._dropped += 1
                return False
            self._queued += 1
            return True

    def handed(self, count: int) -> None:
        with self._lock:
            self._queued = max(0, self._queued - count)

    def done(self, count: int, *, ok: bool) -> None:
        with self._lock:
            if ok:
                self._exported += count
            else:
                self._failed += count

    def tally(self) -> SpanTally:
        with self._lock:
            return SpanTally(self._queued, self._exported, self._failed, self._dropped)


PROCESS = SpanCounts()  # the process's one tracer provider counts here (kit.telemetry)


class CountingExporter(SpanExporter):
    """`inner`, counting in `counts` what it was handed and how each export ended."""

    def __init__(self, inner: SpanExporter, counts: SpanCounts) -> None:
        self._inner = inner
        self._counts = counts

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self._counts.handed(len(spans))
        try:
            result = self._inner.export(spans)
        except Exception:
            self._counts.done(len(spans), ok=False)
            raise  # the batch processor logs it
        self._counts.done(len(spans), ok=result is SpanExportResult.SUCCESS)
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class QueueGate(SpanProcessor):
    """`inner` (a batch processor over a `CountingExporter` sharing `counts`, whose queue holds
    `capacity` spans) given only the spans it has room for: the rest are counted as dropped."""

    def __init__(self, inner: SpanProcessor, capacity: int, counts: SpanCounts) -> None:
        self._inner = inner
        self._capacity = capacity
        self._counts = counts
        self._stopped = False

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self._inner.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        if self._stopped or not (span.context and span.context.trace_flags.sampled):
            return  # as the batch processor: an unsampled span is never exported
        if self._counts.admit(self._capacity):
            self._inner.on_end(span)

    def shutdown(self) -> None:
        if self._stopped:  # the provider's exit hook, after a shutdown given up on: no second wait
            return
        self._stopped = True
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class SpanExportCollector(Collector):
    """The counts as Prometheus metrics, read at each scrape (one per app's registry: the counts
    are the process's)."""

    def __init__(self, counts: SpanCounts = PROCESS) -> None:
        self._counts = counts

    def collect(self) -> Iterator[Metric]:
        tally = self._counts.tally()
        yield CounterMetricFamily("otel_spans_exported", "Spans the exporter accepted", value=tally.exported)
        yield CounterMetricFamily(
            "otel_span_export_failures", "Spans in exports that failed (backend down or slow)", value=tally.failed
        )
        yield CounterMetricFamily(
            "otel_spans_dropped", "Spans dropped unexported: the export queue was full", value=tally.dropped
        )
        yield GaugeMetricFamily("otel_spans_queued", "Spans waiting to be exported", value=tally.queued)
