"""`create_base_app`: the aiohttp application every HTTP process starts from.

    app = create_base_app(config, checks={"database": sqlite_check(path)})
    app.router.add_post("/orders", create_order)

It has ``/healthz`` (the process is alive), ``/readyz`` (every readiness check passes, else 503
with each check's result), ``/metrics`` (Prometheus text from the app's own registry, with
request count and latency by route and status, and the process's spans exported, failed and
dropped: kit.span_export), the request-context and error middlewares
(kit.middleware), and the request size limit from `config.client_max_size`.
Handlers read bodies with `read_json` and validate them with kit.validation.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.registry import Collector

from contracts import bounded_json
from kit.api_keys import ApiKeys, api_key_middleware
from kit.errors import InvalidJSON, UnsupportedMediaType, ValidationError
from kit.health import Check, run_checks
from kit.metrics import HttpMetrics
from kit.middleware import (
    echo_request_id,
    error_body,
    error_middleware,
    request_context_middleware,
)
from kit.settings import HttpSettings
from kit.span_export import SpanExportCollector
from kit.validation import nul_problems

__all__ = [
    "API_KEYS_KEY",
    "CHECKS_KEY",
    "CONFIG_KEY",
    "HTTP_METRICS_KEY",
    "METRICS_REGISTRY_KEY",
    "create_base_app",
    "read_json",
]

CONFIG_KEY = web.AppKey("config", HttpSettings)
METRICS_REGISTRY_KEY = web.AppKey("metrics_registry", CollectorRegistry)
HTTP_METRICS_KEY = web.AppKey("http_metrics", HttpMetrics)
CHECKS_KEY: web.AppKey[dict[str, Check]] = web.AppKey("readiness_checks")
# The callers admitted by key, when the app admits only those (its OpenAPI says so).
API_KEYS_KEY: web.AppKey[ApiKeys | None] = web.AppKey("api_keys")


def create_base_app(
    config: HttpSettings,
    *,
    checks: Mapping[str, Check] | None = None,
    collectors: Iterable[Collector] = (),
    api_keys: ApiKeys | None = None,
    errors: Middleware | None = None,
    probes: bool = True,
    registry: CollectorRegistry | None = None,
    middlewares: Iterable[Middleware] = (),
    check_timeout: float = 2.0,
    quiet_paths: Iterable[str] = (),
) -> web.Application:
    """The base app; `checks` default to none (a service passes its dependencies'), `collectors`
    add their metrics to ``/metrics``, `api_keys` admit only callers with a key, `errors`
    replaces the kit's error middleware (a process with an error format of its own), `probes`
    False leaves ``/healthz`` and ``/readyz`` to the process; `middlewares` run
    inside the request-context and error middlewares; successful requests to `quiet_paths`
    (polled by a page, say) are access-logged at debug, as the probes are."""
    registry = registry if registry is not None else CollectorRegistry()
    metrics = HttpMetrics(registry)
    registry.register(SpanExportCollector())
    for collector in collectors:
        registry.register(collector)
    auth = [api_key_middleware(api_keys)] if api_keys is not None else []
    app = web.Application(
        client_max_size=config.client_max_size,
        middlewares=[
            request_context_middleware(metrics, quiet_paths),
            errors if errors is not None else error_middleware(config.client_max_size),
            *auth,
            *middlewares,
        ],
    )
    app[CONFIG_KEY] = config
    app[API_KEYS_KEY] = api_keys
    app[METRICS_REGISTRY_KEY] = registry
    app[HTTP_METRICS_KEY] = metrics
    readiness: dict[str, Check] = dict(checks or {})
    app[CHECKS_KEY] = readiness
    app.on_response_prepare.append(echo_request_id)

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "service": config.service_name, "instance": config.instance_id})

    async def readyz(request: web.Request) -> web.Response:
        current: dict[str, Check] = request.app[CHECKS_KEY]  # services may add checks after creation
        ok, report = await run_checks(current, check_timeout)
        if ok:
            return web.json_response({"status": "ready", "checks": report})
        failed = sorted(name for name, r in report.items() if not r["ok"])
        body = error_body("not_ready", f"not ready: {', '.join(failed)} unreachable", {"checks": report})
        return web.json_response(body, status=503)

    async def metrics_handler(request: web.Request) -> web.Response:
        response = web.Response(body=generate_latest(request.app[METRICS_REGISTRY_KEY]))
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    if probes:
        app.router.add_get("/healthz", healthz)
        app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_handler)
    return app


async def read_json(request: web.Request) -> Any:
    """The request's JSON body: 415 unless the body is declared JSON, 400 when it does not
    parse, 413 (via the error middleware) when larger than client_max_size, 422 when a string
    or a key holds U+0000 (`kit.validation.nul_problems`)."""
    ctype = request.content_type
    if ctype != "application/json" and not ctype.endswith("+json"):
        raise UnsupportedMediaType(details={"content_type": ctype})
    raw = await request.read()
    if not raw.strip():
        raise InvalidJSON("request body is empty")
    try:
        document = bounded_json.loads(raw)
    except UnicodeDecodeError:
        raise InvalidJSON("request body is not UTF-8") from None
    except json.JSONDecodeError as e:
        raise InvalidJSON(details={"line": e.lineno, "column": e.colno, "problem": e.msg}) from e
    except bounded_json.JSONLimitError as e:  # depth, number length, lone surrogates
        raise InvalidJSON(str(e)) from e
    problems = nul_problems(document)
    if problems:
        raise ValidationError(problems)
    return document
