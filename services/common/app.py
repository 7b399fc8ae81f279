"""The aiohttp application a service starts from: the kit's base app (kit.app) with what every
service needs to be ready (broker, registry, database) and its log shipper's counters.

    app = create_service_app(config, checks=default_checks(config), shipper=shipper)
    app.router.add_post("/orders", create_order)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiohttp import web

from kit.api_keys import ApiKeys
from kit.app import create_base_app
from kit.health import Check, broker_check, http_check, sqlite_check
from kit.middleware import text_input_middleware
from services.common.config import ServiceConfig
from services.common.log_shipper import LogShipper, LogShipperCollector

__all__ = ["create_service_app", "default_checks"]


def default_checks(config: ServiceConfig) -> dict[str, Check]:
    """Broker, registry and database reachable: what every service needs to serve traffic."""
    options = config.registry_options()
    return {
        "broker": broker_check(config.bootstrap_servers),
        "registry": http_check(config.registry_url.rstrip("/") + "/subjects", options["auth"], options["ssl_context"]),
        "database": _database_check(config),
    }


def _database_check(config: ServiceConfig) -> Check:
    if config.database_url is None:
        return sqlite_check(config.database_path)
    from services.common.db_postgres import postgres_check  # asyncpg: only with a PostgreSQL URL

    return postgres_check(config.database_url)


def create_service_app(
    config: ServiceConfig,
    *,
    checks: Mapping[str, Check] | None = None,
    shipper: LogShipper | None = None,
    **options: Any,
) -> web.Application:
    """`kit.app.create_base_app` with the shipper's counters on ``/metrics`` and U+0000 refused
    in paths and query strings (`kit.middleware.text_input_middleware`); `options` as there."""
    collectors = [LogShipperCollector(shipper)] if shipper is not None else []
    api_keys = ApiKeys.load(config.api_keys_file) if config.api_keys_file is not None else None
    options["middlewares"] = [text_input_middleware, *options.get("middlewares", ())]
    return create_base_app(config, checks=checks, collectors=collectors, api_keys=api_keys, **options)
