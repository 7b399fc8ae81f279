"""`create_app(config)`: the orders service as an aiohttp application.

Startup opens the SQLite database (migrating it), connects to the schema registry and the
broker, creates the ``orders`` topic (6 partitions) when it is missing, and starts the outbox
relay, which first publishes whatever a previous run left pending.  Cleanup stops the relay
(finishing its batch), the producer, the registry client and the database, in that order.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from schemas.catalog import default_catalog
from schemas.client import RegistryClient
from schemas.serde import AvroSerializer
from services.common.app import create_base_app, default_checks
from services.common.db import Database
from services.common.kafka import EventProducer
from services.common.log_shipper import LogShipper, SendRawAdapter
from services.common.logging import get_logger
from services.common.outbox import Outbox, OutboxRelay
from services.orders import handlers
from services.orders.config import OrdersConfig
from services.orders.store import OrderStore

__all__ = ["RELAY_KEY", "create_app", "ensure_topic"]

RELAY_KEY = web.AppKey("outbox_relay", OutboxRelay)
log = get_logger(__name__)


async def ensure_topic(config: OrdersConfig) -> None:
    """Create `config.topic` with `config.topic_partitions` partitions unless it exists."""
    admin = AIOKafkaAdminClient(**config.kafka_client_kwargs(), client_id=f"orders-admin-{config.instance_id}")
    await admin.start()
    try:
        if config.topic in await admin.list_topics():
            return
        try:
            await admin.create_topics(
                [NewTopic(config.topic, config.topic_partitions, config.topic_replication_factor)]
            )
        except TopicAlreadyExistsError:  # another instance won the race
            return
        log.info("topic created", topic=config.topic, partitions=config.topic_partitions)
    finally:
        await admin.close()


def create_app(config: OrdersConfig, *, shipper: LogShipper | None = None) -> web.Application:
    """The orders app: routes, readiness (broker, registry, database) and its lifecycle; with
    a `shipper`, the service's own logs go to the logs.* topics through its producer."""
    app = create_base_app(config, checks=default_checks(config), shipper=shipper)
    app[handlers.LIST_LIMIT_KEY] = config.list_limit_max
    catalog = default_catalog()

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        log.info("orders starting", **config.as_log_dict())
        db = await Database(config.database_path).open()
        try:
            outbox = Outbox(db, catalog.schema)
            store = OrderStore(db, outbox, topic=config.topic, service=config.service_name, instance=config.instance_id)
            await store.setup()
            auth = (
                aiohttp.BasicAuth(config.registry_username, config.registry_password or "")
                if config.registry_username
                else None
            )
            async with RegistryClient(config.registry_url, auth=auth) as registry:
                serializer = AvroSerializer(registry, topic_strategies=catalog.topic_strategies())
                await ensure_topic(config)
                producer = EventProducer(
                    serializer=serializer, client_id=f"orders-{config.instance_id}", **config.kafka_client_kwargs()
                )
                await producer.start()
                if shipper is not None:
                    await shipper.start(SendRawAdapter(producer))
                relay = OutboxRelay(outbox, producer, poll_interval=config.relay_poll_interval)
                try:
                    relay.start()
                    app[handlers.STORE_KEY] = store
                    app[RELAY_KEY] = relay
                    yield
                finally:
                    await relay.stop()
                    if shipper is not None:
                        await shipper.stop()
                    await producer.stop()
        finally:
            await db.close()

    app.cleanup_ctx.append(lifecycle)
    app.router.add_post("/orders", handlers.create_order)
    app.router.add_get("/orders", handlers.list_orders)
    app.router.add_get("/orders/{order_id}", handlers.get_order)
    app.router.add_post("/orders/{order_id}/status", handlers.change_status)
    return app
