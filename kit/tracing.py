"""Request ids and traces with OpenTelemetry's API, across HTTP and Kafka.

One HTTP request has one server span (kit.http_tracing: a child of an incoming
``traceparent``, else a new trace) and one request id (the incoming ``X-Request-ID``
when it is a sane token, else the trace id).  While they are current, every log line carries
``request_id``, ``trace_id`` and ``span_id`` (kit.logging), and `kafka_headers()` gives the
headers to store with the events the request causes.

Kafka is traced here rather than by a contrib instrumentation, which gives a consumer span that
ends before the handler runs: a ``send {topic}`` PRODUCER span per record (`send_span`), whose
context travels in the record's ``traceparent`` header, and a ``process {topic}`` CONSUMER span
per record (`process_span`), a child of the producer's span and current while the handler runs,
so one order's whole story is one trace.  A consumer that handles a batch at once gets a span
linked to (a bounded sample of) its records' producers (`batch_span`).  Attributes follow
OpenTelemetry's messaging conventions.  A missing or malformed ``traceparent`` (from another
tool, or hostile) starts a new trace: never an error.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import structlog
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = [
    "REQUEST_ID_HEADER",
    "TRACEPARENT_HEADER",
    "RequestContext",
    "TraceContext",
    "batch_member",
    "batch_span",
    "current_context",
    "current_trace",
    "db_span",
    "incoming",
    "kafka_headers",
    "new_request_id",
    "outgoing",
    "parent_from_headers",
    "parse_traceparent",
    "process_span",
    "request_id_for",
    "request_scope",
    "send_span",
    "sql_verb",
    "use_context",
]

TRACEPARENT_HEADER = "traceparent"
TRACESTATE_HEADER = "tracestate"
REQUEST_ID_HEADER = "x-request-id"  # Kafka header names are case-sensitive: lower case like traceparent
BATCH_LINKS = 32  # links a batch's span keeps: a sample, so a batch of 10,000 is not 10,000 links

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")
# A client-chosen id ends up in logs and response headers: accept only a short, plain token.
_TRACE_ID = re.compile(r"(?!0{32})[0-9a-f]{32}")
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:/+=@-]{1,128}$")
_MAX_HEADER = 512  # a traceparent is 55 bytes; a longer value is not read at all
_PROPAGATOR = TraceContextTextMapPropagator()
_tracer = trace.get_tracer("streamshop")
_request_id: ContextVar[str | None] = ContextVar("streamshop_request_id", default=None)


@dataclass(frozen=True, slots=True)
class TraceContext:
    """A W3C trace context: span `span_id` in trace `trace_id` (hex)."""

    trace_id: str
    span_id: str
    sampled: bool = True

    @classmethod
    def new(cls) -> TraceContext:
        return cls(secrets.token_hex(16), secrets.token_hex(8))

    @classmethod
    def of(cls, span: SpanContext) -> TraceContext:
        return cls(f"{span.trace_id:032x}", f"{span.span_id:016x}", span.trace_flags.sampled)

    def span_context(self) -> SpanContext:
        flags = TraceFlags(TraceFlags.SAMPLED if self.sampled else TraceFlags.DEFAULT)
        return SpanContext(int(self.trace_id, 16), int(self.span_id, 16), is_remote=True, trace_flags=flags)

    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{'01' if self.sampled else '00'}"


def parse_traceparent(value: str | None) -> TraceContext | None:
    """The trace context of a ``traceparent`` value, or None when absent or invalid (an
    invalid one starts a new trace, as the W3C spec asks, rather than failing anything)."""
    if not value or len(value) > _MAX_HEADER:
        return None
    m = _TRACEPARENT.match(value.strip())
    if m is None:
        return None
    version, trace_id, span_id, flags, rest = m.groups()
    if version == "ff" or (version == "00" and rest):
        return None
    if trace_id == "0" * 32 or span_id == "0" * 16:
        return None
    return TraceContext(trace_id, span_id, bool(int(flags, 16) & 1))


def new_request_id() -> str:
    return secrets.token_hex(16)


@dataclass(frozen=True, slots=True)
class RequestContext:
    """The current request id and span."""

    request_id: str
    trace: TraceContext

    def log_fields(self) -> dict[str, str]:
        return {"request_id": self.request_id, "trace_id": self.trace.trace_id}

    def kafka_headers(self) -> list[tuple[str, bytes]]:
        return [
            (TRACEPARENT_HEADER, self.trace.traceparent().encode()),
            (REQUEST_ID_HEADER, self.request_id.encode()),
        ]


def _current_span_context() -> SpanContext | None:
    found = trace.get_current_span().get_span_context()
    return found if found.is_valid else None


def current_trace() -> TraceContext | None:
    """The current span's trace context (ids and sampled flag); None outside any span."""
    span = _current_span_context()
    return None if span is None else TraceContext.of(span)


def current_context() -> RequestContext | None:
    """The request id and span in effect; None outside any request, record or span."""
    span = _current_span_context()
    request_id = _request_id.get()
    if span is None:
        return None if request_id is None else RequestContext(request_id, TraceContext.new())
    trace_context = TraceContext.of(span)
    return RequestContext(request_id or trace_context.trace_id, trace_context)


def request_id_for(asked: str | None) -> str:
    """The request id of a request that asked for `asked` (``X-Request-ID``): that when it is a
    sane token, else the current trace's id, else a new one."""
    if asked is not None and _REQUEST_ID.match(asked):
        return asked
    span = _current_span_context()
    return f"{span.trace_id:032x}" if span is not None else new_request_id()


@contextmanager
def request_scope(request_id: str) -> Iterator[str]:
    """Make `request_id` current: log lines and `kafka_headers()` carry it."""
    token = _request_id.set(request_id)
    try:
        with structlog.contextvars.bound_contextvars(request_id=request_id):
            yield request_id
    finally:
        _request_id.reset(token)


@contextmanager
def use_context(ctx: RequestContext) -> Iterator[RequestContext]:
    """Make `ctx` current, its trace as a remote parent (for code handed a context that no span
    of this process started)."""
    parent = trace.set_span_in_context(NonRecordingSpan(ctx.trace.span_context()))
    token = otel_context.attach(parent)
    try:
        with request_scope(ctx.request_id):
            yield ctx
    finally:
        otel_context.detach(token)


def kafka_headers() -> list[tuple[str, bytes]]:
    """Headers for an event the current request or record causes (``traceparent``,
    ``x-request-id``), to store with it (an outbox row) or send; empty outside any."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    headers = [(k, v.encode()) for k, v in carrier.items()]
    request_id = _request_id.get()
    if request_id is not None:
        headers.append((REQUEST_ID_HEADER, request_id.encode()))
    return headers


# -- Kafka -----------------------------------------------------------------------------------------

Headers = Iterable[tuple[str, bytes | None]]


def _last(headers: Headers | None, name: str) -> str | None:
    found = None
    for key, value in headers or ():
        if key == name and value is not None and len(value) <= _MAX_HEADER:
            found = value.decode("utf-8", "replace")
    return found


def parent_from_headers(headers: Headers | None, fallback_trace_id: str | None = None) -> Context:
    """The context a record's producer left in its headers; without a valid ``traceparent``,
    a span in `fallback_trace_id` (a trace id the event itself carries), else none (a new trace)."""
    parent = parse_traceparent(_last(headers, TRACEPARENT_HEADER))
    if parent is None and fallback_trace_id is not None and _TRACE_ID.fullmatch(fallback_trace_id):
        parent = TraceContext(fallback_trace_id, secrets.token_hex(8))
    return _context_of(parent)


def _context_of(parent: TraceContext | None) -> Context:
    """A context whose current span is `parent` (remote), or an empty one: a new trace."""
    if parent is None:
        return Context()
    return trace.set_span_in_context(NonRecordingSpan(parent.span_context()), Context())


def _messaging(topic: str, operation: str, **more: Any) -> dict[str, Any]:
    attributes = {
        "messaging.system": "kafka",
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
        "messaging.destination.name": topic,
    }
    attributes.update({k: v for k, v in more.items() if v is not None})
    return attributes


def send_span(
    topic: str, key: str | None, stored: Headers | None = None, *, keep: bool = False
) -> tuple[Span, list[tuple[str, bytes]]]:
    """A started ``send {topic}`` span and the headers to send the record with: `stored` (the
    headers kept with an outbox row) with the span's ``traceparent`` in place of the one there.
    The span's parent is the context in `stored`, else the current one; end it with `sent`.
    With `keep` (a dead letter: the record as it first was), the span is the current one's
    child and `stored` goes unchanged, its producer's context with it."""
    has_parent = not keep and _last(stored, TRACEPARENT_HEADER) is not None
    parent = parent_from_headers(stored) if has_parent else None
    span = _tracer.start_span(
        f"send {topic}",
        context=parent,
        kind=SpanKind.PRODUCER,
        attributes=_messaging(topic, "send", **{"messaging.kafka.message.key": key}),
    )
    if keep:
        return span, [(k, v) for k, v in stored or () if v is not None]
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    kept = [(k, v) for k, v in stored or () if k not in (TRACEPARENT_HEADER, TRACESTATE_HEADER) and v is not None]
    if _last(kept, REQUEST_ID_HEADER) is None and (request_id := _request_id.get()) is not None:
        kept.append((REQUEST_ID_HEADER, request_id.encode()))
    return span, [*kept, *((k, v.encode()) for k, v in carrier.items())]


def sent(
    span: Span, partition: int | None = None, offset: int | None = None, error: BaseException | None = None
) -> None:
    """End a `send_span`: where the record went, or why it did not."""
    if partition is not None:
        span.set_attribute("messaging.destination.partition.id", str(partition))
    if offset is not None:
        span.set_attribute("messaging.kafka.offset", offset)
    if error is not None:
        span.record_exception(error)
        span.set_status(trace.Status(trace.StatusCode.ERROR, type(error).__name__))
        span.set_attribute("error.type", type(error).__name__)
    span.end()


@contextmanager
def process_span(
    topic: str,
    *,
    group: str | None,
    headers: Headers | None,
    partition: int | None = None,
    offset: int | None = None,
    key: str | None = None,
    delivery_count: int | None = None,
    fallback_trace_id: str | None = None,
) -> Iterator[Span]:
    """A ``process {topic}`` span for one record, current (with the record's request id) while
    the handler runs; its parent is the record's producer.  An exception marks it failed."""
    attributes = _messaging(
        topic,
        "process",
        **{
            "messaging.consumer.group.name": group,
            "messaging.destination.partition.id": None if partition is None else str(partition),
            "messaging.kafka.offset": offset,
            "messaging.kafka.message.key": key,
            "messaging.kafka.message.delivery_count": delivery_count,
        },
    )
    parent = parent_from_headers(headers, fallback_trace_id)
    with (
        _tracer.start_as_current_span(
            f"process {topic}", context=parent, kind=SpanKind.CONSUMER, attributes=attributes
        ) as span,
        request_scope(_last(headers, REQUEST_ID_HEADER) or request_id_for(None)),
    ):
        yield span


@contextmanager
def batch_span(
    topic: str,
    *,
    group: str | None,
    records: Sequence[Headers | None],
    origin: Callable[[int], str | None] | None = None,
    **attributes: Any,
) -> Iterator[Span]:
    """A ``process {topic}`` span for a batch handled at once, a new trace linked to the
    producers of up to `BATCH_LINKS` of its records (evenly spread): a record's producer is the
    ``traceparent`` in its headers, else the one `origin(index)` finds in its payload (a shipped
    log line's).  Each of those records also gets a moment's ``process {topic}`` span in its
    producer's trace, linked back to the batch: a viewer without links (Zipkin) shows the batch
    in each of those traces."""
    step = max(1, len(records) // BATCH_LINKS)
    producers: list[SpanContext] = []
    for index in range(0, len(records), step)[:BATCH_LINKS]:
        producer = trace.get_current_span(parent_from_headers(records[index])).get_span_context()
        if not producer.is_valid and origin is not None and (found := parse_traceparent(origin(index))):
            producer = found.span_context()
        if producer.is_valid:
            producers.append(producer)
    more = {"messaging.consumer.group.name": group, "messaging.batch.message_count": len(records), **attributes}
    with _tracer.start_as_current_span(
        f"process {topic}",
        context=Context(),
        kind=SpanKind.CONSUMER,
        links=[Link(p) for p in producers],
        attributes=_messaging(topic, "process", **more),
    ) as span:
        if span.is_recording():
            for producer in producers:
                batch_member(topic, producer, span.get_span_context(), **{"messaging.consumer.group.name": group})
        yield span


def batch_member(topic: str, producer: SpanContext, batch: SpanContext, **attributes: Any) -> None:
    """A moment's ``process {topic}`` span in the trace of a record a batch handled (`producer`,
    its producer's span), linked back to the batch: a viewer without links (Zipkin) shows the
    batch in that trace too."""
    _tracer.start_span(
        f"process {topic}",
        context=trace.set_span_in_context(NonRecordingSpan(producer), Context()),
        kind=SpanKind.CONSUMER,
        links=[Link(batch)],
        attributes=_messaging(topic, "process", **attributes),
    ).end()


@contextmanager
def db_span(system: str, namespace: str, operation: str) -> Iterator[Span]:
    """A CLIENT span for one call of a database's, named and attributed by OpenTelemetry's
    database conventions.  `operation` is a statement's verb, or ``write`` / ``read`` /
    ``transaction`` for a whole transaction: one span, its wait for a group commit included,
    rather than a span per statement (group commits run many requests' statements in one
    transaction, on a task that is none of theirs).

    Made only inside a recorded trace: work outside any request (a relay's poll) starts no trace
    of its own, and an unsampled request's calls cost no span.  Not made current: what a
    transaction's body causes (an outbox row's context) stays the request's child."""
    if not trace.get_current_span().is_recording():
        yield trace.INVALID_SPAN
        return
    span = _tracer.start_span(
        f"{operation} {namespace}",
        kind=SpanKind.CLIENT,
        attributes={"db.system.name": system, "db.namespace": namespace, "db.operation.name": operation},
    )
    try:
        yield span
    except Exception as e:
        span.record_exception(e)
        span.set_status(trace.Status(trace.StatusCode.ERROR, type(e).__name__))
        span.set_attribute("error.type", type(e).__name__)
        raise
    finally:
        span.end()


def sql_verb(sql: str) -> str:
    """A statement's first word, upper case: its ``db.operation.name``."""
    head = sql.lstrip()[:16].split(None, 1)
    return head[0].upper() if head else "SQL"


# -- other protocols (SMTP) ---------------------------------------------------------------------------


@contextmanager
def outgoing(name: str, **attributes: Any) -> Iterator[dict[str, str]]:
    """A CLIENT span, current while the call runs, and the W3C headers that carry it (for a
    protocol no instrumentation covers: a mail's ``Traceparent`` header, say)."""
    with _tracer.start_as_current_span(name, kind=SpanKind.CLIENT, attributes=attributes):
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier)
        yield carrier


@contextmanager
def incoming(name: str, traceparent: str | None, **attributes: Any) -> Iterator[Span]:
    """A SERVER span, child of `traceparent` when it is valid (else a new trace), current
    while the call is served."""
    context = _context_of(parse_traceparent(traceparent))
    with _tracer.start_as_current_span(name, context=context, kind=SpanKind.SERVER, attributes=attributes) as span:
        yield span
