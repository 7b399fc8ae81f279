"""The server span of an HTTP request, by OpenTelemetry's HTTP conventions.

Written here rather than taken from the contrib aiohttp-server instrumentation: that one
subclasses `aiohttp.web.Application` (which aiohttp deprecates, with a warning at every
import) and its middleware reads module state only its `instrument()` sets.  The span is a
child of a valid incoming ``traceparent`` (W3C), else the root of a new trace; a malformed
one is ignored, never an error.  Probes and scrapes get no span.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from aiohttp import web
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = ["finish", "server_span"]

_PROPAGATOR = TraceContextTextMapPropagator()
_tracer = trace.get_tracer("streamshop.http")
_MAX_HEADER = 512


def _incoming(request: web.Request) -> dict[str, str]:
    carrier = {}
    for name in ("traceparent", "tracestate"):
        value = request.headers.get(name)
        if value is not None and len(value) <= _MAX_HEADER:
            carrier[name] = value
    return carrier


@contextmanager
def server_span(request: web.Request, route: str) -> Iterator[Span]:
    """The request's SERVER span, current while it is served; `finish` records the status."""
    attributes: dict[str, str | int] = {
        "http.request.method": request.method,
        "http.route": route,
        "url.path": request.path,
        "url.scheme": request.scheme,
        "network.protocol.version": f"{request.version.major}.{request.version.minor}",
    }
    if request.remote:
        attributes["client.address"] = request.remote
    if agent := request.headers.get("User-Agent"):
        attributes["user_agent.original"] = agent[:256]
    with _tracer.start_as_current_span(
        f"{request.method} {route}",
        context=_PROPAGATOR.extract(_incoming(request)),
        kind=SpanKind.SERVER,
        attributes=attributes,
        record_exception=False,  # the error middleware logs it; the status says it failed
        set_status_on_exception=False,
    ) as span:
        yield span


def finish(span: Span, status: int) -> None:
    """A server span fails on a 5xx only: a 4xx is the client's (OpenTelemetry's HTTP rule)."""
    span.set_attribute("http.response.status_code", status)
    if status >= 500:
        span.set_attribute("error.type", str(status))
        span.set_status(Status(StatusCode.ERROR))
