"""The two middlewares of every service: request context (outermost) and errors.

`request_context_middleware` makes the request's id current (bound into every log line and into
`tracing.kafka_headers()`, beside the server span OpenTelemetry's aiohttp instrumentation made
current around it), records the request's metrics and writes the access log line (logger
``services.common.access`` -> topic ``logs.ingress``).  Because it is outside the error
middleware it sees the status that one chose.

`error_middleware` is the one place that turns failures into the JSON shape
``{"error": code, "message": ..., "details": ...}``: domain errors (`errors.ServiceError`),
aiohttp's own HTTP errors (unknown route 404, wrong method 405, body over `client_max_size` 413),
invalid JSON 400, and anything unexpected as a 500 that shows nothing of the internals (the
traceback goes to the log, with the request id the client also got in ``X-Request-ID``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterable
from typing import Any

import structlog
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from opentelemetry.trace import Span

from kit import http_tracing
from kit.errors import InvalidJSON, ServiceError, ValidationError
from kit.logging import ACCESS_LOGGER
from kit.metrics import HttpMetrics
from kit.tracing import current_context, request_id_for, request_scope
from kit.validation import NUL_MESSAGE, nul_problems

__all__ = [
    "echo_request_id",
    "error_body",
    "error_middleware",
    "json_error",
    "request_context_middleware",
    "text_input_middleware",
]


log = structlog.get_logger(__name__)
access_log = structlog.get_logger(ACCESS_LOGGER)
_WARN_STATUSES = frozenset({401, 403, 413, 429})  # logged as warnings; other 4xx as info

# Probes and scrapes arrive every few seconds: log them at debug so they do not bury real traffic.
_QUIET_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    408: "request_timeout",
    409: "conflict",
    411: "length_required",
    413: "payload_too_large",
    414: "uri_too_long",
    415: "unsupported_media_type",
    422: "validation_failed",
    429: "too_many_requests",
    503: "unavailable",
}


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": code, "message": message, "details": details}


def json_error(
    status: int, code: str, message: str, details: dict[str, Any] | None = None, headers: dict[str, str] | None = None
) -> web.Response:
    return web.json_response(error_body(code, message, details), status=status, headers=headers)


def _route(request: web.Request) -> str:
    """The route pattern (``/orders/{id}``); one label for all unmatched paths so random URLs
    cannot blow up the metrics' cardinality."""
    info = request.match_info
    if info.http_exception is not None:
        return "unmatched"
    resource = info.route.resource
    return resource.canonical if resource is not None else "unmatched"


def request_context_middleware(metrics: HttpMetrics, quiet_paths: Iterable[str] = ()) -> Middleware:
    """Request context, metrics and the access log; successful requests to `quiet_paths` (on
    top of the probes) are logged at debug."""
    quiet_set = _QUIET_PATHS | frozenset(quiet_paths)

    @web.middleware
    async def request_context(request: web.Request, handler: Handler) -> web.StreamResponse:
        route = _route(request)
        quiet = request.path in quiet_set
        with contextlib.ExitStack() as scope:
            span = None if quiet else scope.enter_context(http_tracing.server_span(request, route))
            return await _serve(request, handler, route, quiet, span)

    async def _serve(
        request: web.Request, handler: Handler, route: str, quiet: bool, span: Span | None
    ) -> web.StreamResponse:
        request_id = request_id_for(request.headers.get("X-Request-ID"))
        start = time.perf_counter()
        status = 500  # if the handler is cancelled (client gone) this is what gets recorded
        with request_scope(request_id):
            try:
                response = await handler(request)
                status = response.status
                if not response.prepared:  # else echo_request_id already set it
                    response.headers["X-Request-ID"] = request_id
                return response
            except web.HTTPException as e:  # 2xx/3xx raised by handlers pass the error middleware
                status = e.status
                e.headers["X-Request-ID"] = request_id
                raise
            finally:
                seconds = time.perf_counter() - start
                metrics.observe(request.method, route, status, seconds)
                if span is not None:
                    http_tracing.finish(span, status)
                # What needs a look stands out in the log: ours (5xx) as errors, refusals that
                # may be abuse or a misconfigured client (401, 403, 413, 429) as warnings, so
                # `?level=warning` shows them.  A 404, 409 or 422 is an answer the API gives by
                # design (an unknown order, a transition its state forbids, a bad field): info.
                if status >= 500:
                    write = access_log.error
                elif status in _WARN_STATUSES:
                    write = access_log.warning
                else:  # a probe or a polled path at debug, unless it was refused
                    write = access_log.debug if quiet and status < 400 else access_log.info
                write(
                    "http request",
                    method=request.method,
                    path=request.path,
                    status=status,
                    duration_ms=round(seconds * 1000, 3),
                    remote=request.remote,
                    user_agent=request.headers.get("User-Agent"),
                )

    return request_context


async def echo_request_id(request: web.Request, response: web.StreamResponse) -> None:
    """on_response_prepare, for responses a handler prepares itself (streams, SSE): their headers
    go out inside the handler, before the middleware could add the request id."""
    ctx = current_context()
    if ctx is not None:
        response.headers["X-Request-ID"] = ctx.request_id


def error_middleware(client_max_size: int) -> Middleware:
    @web.middleware
    async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except ServiceError as e:
            if e.status >= 500:
                # Raised on purpose: no traceback; str(e) may say more than the client is told.
                log.warning("service error", code=e.code, error=str(e))
            return web.json_response(e.body(), status=e.status, headers=e.headers())
        except web.HTTPException as e:
            if e.status < 400:
                raise  # redirects and "raise HTTPNoContent" style successes are not errors
            return _from_http_exception(request, e, client_max_size)
        except json.JSONDecodeError as e:
            # A handler calling request.json() directly on a malformed body.
            err = InvalidJSON(details={"line": e.lineno, "column": e.colno, "problem": e.msg})
            return web.json_response(err.body(), status=err.status)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("unhandled error", method=request.method, path=request.path)
            return json_error(500, "internal_error", "internal server error")

    return errors


def _from_http_exception(request: web.Request, e: web.HTTPException, client_max_size: int) -> web.Response:
    code = _CODES.get(e.status, "internal_error" if e.status >= 500 else f"http_{e.status}")
    headers: dict[str, str] = {}
    details: dict[str, Any] | None = None
    if isinstance(e, web.HTTPMethodNotAllowed):
        allowed = sorted(e.allowed_methods)
        headers["Allow"] = ",".join(allowed)
        message = f"method {request.method} not allowed on {request.path}"
        details = {"allowed": allowed}
    elif isinstance(e, web.HTTPRequestEntityTooLarge):
        message = f"request body larger than {client_max_size} bytes"
        details = {"max_bytes": client_max_size}
    elif isinstance(e, web.HTTPNotFound) and request.match_info.http_exception is not None:
        message = f"no route for {request.method} {request.path}"
    else:
        message = e.reason.lower() if e.status < 500 else "internal server error"
        if e.status >= 500:
            log.error("http error", status=e.status, reason=e.reason)
    return json_error(e.status, code, message, details, headers)


@web.middleware
async def text_input_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """422 for U+0000 in the path or the query string (decoded from %00), before any handler or
    database sees it: the same rule as JSON bodies (`kit.app.read_json`)."""
    problems: dict[str, str] = {}
    if "\x00" in request.path:
        problems["(path)"] = NUL_MESSAGE
    for name, value in request.query.items():
        problems.update(
            nul_problems(value, name) if "\x00" not in name else {"(query)": f"has a name that {NUL_MESSAGE}"}
        )
    if problems:
        raise ValidationError(problems)
    return await handler(request)
