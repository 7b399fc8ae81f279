"""Request ids and W3C trace context, carried in contextvars and in Kafka headers.

One HTTP request gets one `RequestContext`: its request id (the incoming ``X-Request-ID`` when
it is a sane token, else the trace id of an incoming ``traceparent``, else a new id) and its
trace (a child span of an incoming ``traceparent``, else a new trace).  While it is current,
every log line carries ``request_id`` / ``trace_id`` and `kafka_headers()` gives the headers
to put on every event the request causes; a consumer restores the context from those headers
with `context_from_headers` and `use_context`, so the trace continues across the topic.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import structlog

__all__ = [
    "REQUEST_ID_HEADER",
    "TRACEPARENT_HEADER",
    "RequestContext",
    "TraceContext",
    "context_from_headers",
    "context_from_http",
    "current_context",
    "kafka_headers",
    "new_request_id",
    "parse_traceparent",
    "use_context",
]

TRACEPARENT_HEADER = "traceparent"
REQUEST_ID_HEADER = "x-request-id"  # Kafka header names are case-sensitive: lower case like traceparent

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")
# A client-chosen id ends up in logs and response headers: accept only a short, plain token.
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:/+=@-]{1,128}$")


@dataclass(frozen=True, slots=True)
class TraceContext:
    """A W3C trace context: our span `span_id` in trace `trace_id`."""

    trace_id: str
    span_id: str
    sampled: bool = True

    @classmethod
    def new(cls) -> TraceContext:
        return cls(secrets.token_hex(16), secrets.token_hex(8))

    def child(self) -> TraceContext:
        """A new span in the same trace (our span when the incoming one is the parent)."""
        return TraceContext(self.trace_id, secrets.token_hex(8), self.sampled)

    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{'01' if self.sampled else '00'}"


def parse_traceparent(value: str | None) -> TraceContext | None:
    """The trace context of a ``traceparent`` header, or None when absent or invalid (an
    invalid header starts a new trace, as the W3C spec asks, rather than failing the request)."""
    if not value:
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
    request_id: str
    trace: TraceContext

    def log_fields(self) -> dict[str, str]:
        return {"request_id": self.request_id, "trace_id": self.trace.trace_id}

    def kafka_headers(self) -> list[tuple[str, bytes]]:
        return [
            (TRACEPARENT_HEADER, self.trace.traceparent().encode()),
            (REQUEST_ID_HEADER, self.request_id.encode()),
        ]


_current: ContextVar[RequestContext | None] = ContextVar("streamshop_request_context", default=None)


def current_context() -> RequestContext | None:
    return _current.get()


def _from(request_id: str | None, traceparent: str | None) -> RequestContext:
    parent = parse_traceparent(traceparent)
    trace = parent.child() if parent is not None else TraceContext.new()
    if request_id is None or not _REQUEST_ID.match(request_id):
        request_id = parent.trace_id if parent is not None else new_request_id()
    return RequestContext(request_id, trace)


def context_from_http(headers: Mapping[str, str]) -> RequestContext:
    """The context of an incoming HTTP request (headers looked up case-insensitively by aiohttp)."""
    return _from(headers.get("X-Request-ID"), headers.get(TRACEPARENT_HEADER))


def context_from_headers(headers: Iterable[tuple[str, bytes | None]] | None) -> RequestContext:
    """The context of a consumed Kafka record: its trace continues in a child span; a record
    without headers (e.g. written by another tool) starts a new trace."""
    found: dict[str, str] = {}
    for key, value in headers or ():
        if key in (TRACEPARENT_HEADER, REQUEST_ID_HEADER) and value is not None:
            found[key] = value.decode("utf-8", "replace")
    return _from(found.get(REQUEST_ID_HEADER), found.get(TRACEPARENT_HEADER))


@contextmanager
def use_context(ctx: RequestContext) -> Iterator[RequestContext]:
    """Make `ctx` current: `kafka_headers()` uses it and log lines carry its ids."""
    token = _current.set(ctx)
    try:
        with structlog.contextvars.bound_contextvars(**ctx.log_fields()):
            yield ctx
    finally:
        _current.reset(token)


def kafka_headers() -> list[tuple[str, bytes]]:
    """Headers for an event caused by the current request or consumed record (`traceparent`,
    `x-request-id`); empty outside any context, so background jobs publish plain events."""
    ctx = _current.get()
    return ctx.kafka_headers() if ctx is not None else []
