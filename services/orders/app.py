"""`create_app(config)`: the orders service as an aiohttp application.

Startup opens the SQLite database (migrating it), connects to the schema registry and the
broker, creates the ``orders`` topic (6 partitions) when it is missing, and starts the outbox
relay, which first publishes whatever a previous run left pending.  Cleanup stops the relay
(finishing its batch), the producer, the registry client and the database, in that order.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from kit.logging import get_logger
from kit.openapi import serve_openapi
from schemas.catalog import default_catalog
from services.common.app import create_service_app, default_checks
from services.common.log_shipper import LogShipper
from services.common.outbox_service import RELAY_KEY, ensure_topic, open_outbox_service
from services.orders import handlers
from services.orders.config import OrdersConfig
from services.orders.openapi import ORDERS_OPENAPI
from services.orders.store import OrderStore

__all__ = ["RELAY_KEY", "create_app", "ensure_topic"]

log = get_logger(__name__)


def create_app(config: OrdersConfig, *, shipper: LogShipper | None = None) -> web.Application:
    """The orders app: routes, readiness (broker, registry, database) and its lifecycle; with
    a `shipper`, the service's own logs go to the logs.* topics through its producer."""
    app = create_service_app(config, checks=default_checks(config), shipper=shipper)
    app[handlers.LIST_LIMIT_KEY] = config.list_limit_max
    catalog = default_catalog()

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        log.info("orders starting", **config.as_log_dict())
        async with open_outbox_service(
            config,
            catalog,
            lambda db, outbox: OrderStore(
                db, outbox, topic=config.topic, service=config.service_name, instance=config.instance_id
            ),
            shipper=shipper,
        ) as service:
            app[handlers.STORE_KEY] = service.store
            app[RELAY_KEY] = service.relay
            yield

    app.cleanup_ctx.append(lifecycle)
    app.router.add_post("/orders", handlers.create_order)
    app.router.add_get("/orders", handlers.list_orders)
    app.router.add_get("/orders/{order_id}", handlers.get_order)
    app.router.add_post("/orders/{order_id}/status", handlers.change_status)
    serve_openapi(app, ORDERS_OPENAPI)
    return app
