"""`create_base_app`: the aiohttp application every service starts from.

    app = create_base_app(config, checks=default_checks(config), shipper=shipper)
    app.router.add_post("/orders", create_order)

It has ``/healthz`` (the process is alive), ``/readyz`` (every readiness check passes, else 503
with each check's result), ``/metrics`` (Prometheus text from the app's own registry, with
request count and latency by route and status), the request-context and error middlewares
(services.common.middleware), and the request size limit from `config.client_max_size`.
Handlers read bodies with `read_json` and validate them with services.common.validation.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from schemas import bounded_json
from services.common.auth import ApiKeys, api_key_middleware
from services.common.config import ServiceConfig
from services.common.errors import InvalidJSON, UnsupportedMediaType
from services.common.health import Check, broker_check, http_check, run_checks, sqlite_check
from services.common.metrics import HttpMetrics, LogShipperCollector, ShipperStats
from services.common.middleware import (
    echo_request_id,
    error_body,
    error_middleware,
    request_context_middleware,
)

__all__ = [
    "CHECKS_KEY",
    "CONFIG_KEY",
    "HTTP_METRICS_KEY",
    "METRICS_REGISTRY_KEY",
    "create_base_app",
    "default_checks",
    "read_json",
]

CONFIG_KEY = web.AppKey("config", ServiceConfig)
METRICS_REGISTRY_KEY = web.AppKey("metrics_registry", CollectorRegistry)
HTTP_METRICS_KEY = web.AppKey("http_metrics", HttpMetrics)
CHECKS_KEY: web.AppKey[dict[str, Check]] = web.AppKey("readiness_checks")


def default_checks(config: ServiceConfig) -> dict[str, Check]:
    """Broker, registry and database reachable: what every service needs to serve traffic."""
    options = config.registry_options()
    return {
        "broker": broker_check(config.bootstrap_servers),
        "registry": http_check(config.registry_url.rstrip("/") + "/subjects", options["auth"], options["ssl_context"]),
        "database": sqlite_check(config.database_path),
    }


def create_base_app(
    config: ServiceConfig,
    *,
    checks: Mapping[str, Check] | None = None,
    shipper: ShipperStats | None = None,
    registry: CollectorRegistry | None = None,
    middlewares: Iterable[Middleware] = (),
    check_timeout: float = 2.0,
    quiet_paths: Iterable[str] = (),
) -> web.Application:
    """The base app; `checks` default to none (a service passes `default_checks(config)` plus
    its own), `shipper` adds the log shipper's counters to ``/metrics``, `middlewares` run
    inside the request-context and error middlewares; successful requests to `quiet_paths`
    (polled by a page, say) are access-logged at debug, as the probes are."""
    registry = registry if registry is not None else CollectorRegistry()
    metrics = HttpMetrics(registry)
    if shipper is not None:
        registry.register(LogShipperCollector(shipper))
    auth = [api_key_middleware(ApiKeys.load(config.api_keys_file))] if config.api_keys_file else []
    app = web.Application(
        client_max_size=config.client_max_size,
        middlewares=[
            request_context_middleware(metrics, quiet_paths),
            error_middleware(config.client_max_size),
            *auth,
            *middlewares,
        ],
    )
    app[CONFIG_KEY] = config
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

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_handler)
    return app


async def read_json(request: web.Request) -> Any:
    """The request's JSON body: 415 unless the body is declared JSON, 400 when it does not
    parse, 413 (via the error middleware) when larger than client_max_size."""
    ctype = request.content_type
    if ctype != "application/json" and not ctype.endswith("+json"):
        raise UnsupportedMediaType(details={"content_type": ctype})
    raw = await request.read()
    if not raw.strip():
        raise InvalidJSON("request body is empty")
    try:
        return bounded_json.loads(raw)
    except UnicodeDecodeError:
        raise InvalidJSON("request body is not UTF-8") from None
    except json.JSONDecodeError as e:
        raise InvalidJSON(details={"line": e.lineno, "column": e.colno, "problem": e.msg}) from e
    except bounded_json.JSONLimitError as e:  # depth, number length, lone surrogates
        raise InvalidJSON(str(e)) from e
