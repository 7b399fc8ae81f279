"""A batch's span (kit.tracing.batch_span): links to its records' producers, read from their
headers or, for records that carry it in their payload (shipped log lines), from `origin`; a
moment's span in each sampled producer's trace; hostile or unsampled contexts cost nothing."""

from __future__ import annotations

from opentelemetry.trace import SpanKind

from kit import tracing
from tests.support.spans import named, recorder

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def _traceparent(span: int, flags: str = "01") -> str:
    return f"00-{TRACE}-{span:016x}-{flags}"


def test_links_and_moment_spans_come_from_headers_else_from_the_payload() -> None:
    spans = recorder()
    headers = [[("traceparent", _traceparent(1).encode())], None, None, None, None]
    payloads = [None, _traceparent(2), "00-garbage", _traceparent(3, flags="00"), None]
    with tracing.batch_span("logs.ingress", group="log-indexer", records=headers, origin=lambda i: payloads[i]):
        pass
    finished = spans.get_finished_spans()
    (batch,) = [s for s in named(finished, "process logs.ingress") if s.parent is None]
    assert batch.kind == SpanKind.CONSUMER
    assert batch.attributes is not None
    assert batch.attributes["messaging.batch.message_count"] == 5
    # Linked: the header's producer, the payload's, and the unsampled one (a link costs no span).
    assert sorted(link.context.span_id for link in batch.links) == [1, 2, 3]
    assert batch.context is not None
    moments = [s for s in named(finished, "process logs.ingress") if s.parent is not None]
    # A moment's span in each sampled producer's trace, linked back to the batch.
    assert sorted(s.parent.span_id for s in moments if s.parent) == [1, 2]
    assert all(s.context is not None and f"{s.context.trace_id:032x}" == TRACE for s in moments)
    assert all([link.context.span_id for link in s.links] == [batch.context.span_id] for s in moments)


def test_at_most_the_bound_of_links_evenly_spread() -> None:
    spans = recorder()
    count = tracing.BATCH_LINKS * 10
    with tracing.batch_span("t", group=None, records=[None] * count, origin=lambda i: _traceparent(i + 1)):
        pass
    (batch,) = [s for s in named(spans.get_finished_spans(), "process t") if s.parent is None]
    linked = [link.context.span_id for link in batch.links]
    assert len(linked) == tracing.BATCH_LINKS
    assert linked == [1 + 10 * k for k in range(tracing.BATCH_LINKS)]
