"""A hostile or broken W3C trace context on an HTTP request (the kit's base app on a real TCP
server): a malformed or absurdly long ``traceparent`` starts a new trace, an absurd
``tracestate`` is not carried on, and the request is answered as any other."""

from __future__ import annotations

from aiohttp import web
from opentelemetry.trace import SpanKind

from kit.app import create_base_app
from kit.settings import HttpSettings
from kit.tracing import kafka_headers
from tests.support.services import serve_app
from tests.support.spans import hex_trace, named, recorder

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"
VALID = f"00-{TRACE_ID}-{SPAN_ID}-01"
# Well formed (32 members, each value under 256 characters) but 8 KB: over the kit's bound.
ABSURD_STATE = ",".join(f"v{i}={'x' * 240}" for i in range(32))

MALFORMED = [
    "00-zz",
    f"00-{TRACE_ID}-{SPAN_ID}",  # no flags
    f"00-{'0' * 32}-{SPAN_ID}-01",  # the all-zero trace id
    f"00-{TRACE_ID}-{'0' * 16}-01",  # the all-zero span id
    f"ff-{TRACE_ID}-{SPAN_ID}-01",  # version ff is forbidden
    f"00-{TRACE_ID.upper()}-{SPAN_ID}-01",  # upper-case hex
    f"00-{TRACE_ID}-{SPAN_ID}-01-extra",  # version 00 has exactly four fields
    f"01-{TRACE_ID}-{SPAN_ID}-01-" + "a" * 7000,  # a future version, absurdly long: not read at all
    "\u00ff" * 3000,  # not ASCII
    "",
]


def app() -> web.Application:
    served = create_base_app(HttpSettings())

    async def item(request: web.Request) -> web.Response:
        return web.json_response({"headers": {k: v.decode() for k, v in kafka_headers()}})

    served.router.add_get("/item", item)
    return served


async def test_a_malformed_or_absurd_traceparent_starts_a_new_trace_and_is_answered() -> None:
    spans = recorder()
    async with serve_app(app()) as (base, session):
        answered = []
        for value in MALFORMED:
            headers = {"traceparent": value, "tracestate": ABSURD_STATE}
            async with session.get(f"{base}/item", headers=headers) as response:
                assert response.status == 200, value
                body = await response.json()
                answered.append((response.headers["X-Request-ID"], body["headers"]["traceparent"]))
    servers = [s for s in named(spans.get_finished_spans(), "GET /item") if s.kind == SpanKind.SERVER]
    assert len(servers) == len(MALFORMED)
    assert all(s.parent is None for s in servers)  # each the root of a trace of its own
    traces = [hex_trace(s) for s in servers]
    assert TRACE_ID not in traces
    assert len(set(traces)) == len(MALFORMED)
    for (request_id, traceparent), trace_id in zip(answered, traces, strict=True):
        assert request_id == trace_id  # without an X-Request-ID, the request's id is its new trace
        assert traceparent.split("-")[1] == trace_id  # and the events it causes carry that trace


async def test_a_valid_traceparent_is_followed_and_an_absurd_tracestate_dropped() -> None:
    spans = recorder()
    async with serve_app(app()) as (base, session):
        for tracestate in (ABSURD_STATE, "congo=t61rcWkgMzE"):
            headers = {"traceparent": VALID, "tracestate": tracestate}
            async with session.get(f"{base}/item", headers=headers) as response:
                assert response.status == 200
                assert response.headers["X-Request-ID"] == TRACE_ID
    long_state, short_state = named(spans.get_finished_spans(), "GET /item")
    for span in (long_state, short_state):
        assert hex_trace(span) == TRACE_ID
        assert span.parent is not None
        assert f"{span.parent.span_id:016x}" == SPAN_ID
    assert long_state.context is not None
    assert short_state.context is not None
    assert dict(long_state.context.trace_state) == {}  # over the bound: not read
    assert dict(short_state.context.trace_state) == {"congo": "t61rcWkgMzE"}
