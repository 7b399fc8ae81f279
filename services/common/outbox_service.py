"""The lifecycle shared by services that publish through an outbox (orders, otp).

`open_outbox_service(config, catalog, make_store, shipper=...)` opens the SQLite database
(migrating it through the store's `setup()`), connects to the schema registry and the broker,
creates the service's topic when it is missing, starts the producer (and the log shipper on it,
when given) and the outbox relay, which first publishes whatever a previous run left pending.
On exit it stops the relay (finishing its batch), the shipper, the producer, the registry
client and the database, in that order.

`open_publishing_service(config, catalog, make_store, topics={...})` is the same lifecycle for a
service whose settings are not an `OutboxServiceConfig` or that needs several topics (the OTP
senders consume one topic and publish to another, and need the dead-letter topic too).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from aiohttp import web
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaConnectionError, KafkaError, TopicAlreadyExistsError
from aiokafka.protocol.metadata import MetadataRequest

from kit.logging import get_logger
from kit.process import StartupError
from schemas.catalog import Catalog
from schemas.client import RegistryClient
from schemas.serde import AvroSerializer
from services.common.config import OutboxServiceConfig, ServiceConfig
from services.common.db import Database, open_for_service
from services.common.kafka import EventProducer
from services.common.log_shipper import LogShipper, SendRawAdapter, avro_log_encoder
from services.common.outbox import Outbox, OutboxRelay

__all__ = [
    "RELAY_KEY",
    "OutboxService",
    "OutboxServiceConfig",
    "ensure_topic",
    "ensure_topics",
    "open_outbox_service",
    "open_publishing_service",
]

RELAY_KEY = web.AppKey("outbox_relay", OutboxRelay)
log = get_logger(__name__)


class SupportsSetup(Protocol):
    async def setup(self) -> None: ...


S = TypeVar("S", bound=SupportsSetup)


@dataclass(frozen=True)
class OutboxService(Generic[S]):
    """What `open_outbox_service` yields: the opened database, the service's store, its
    producer, the running relay and the registry client (for a consumer's deserializer)."""

    db: Database
    store: S
    producer: EventProducer
    relay: OutboxRelay
    registry: RegistryClient


async def ensure_topic(config: OutboxServiceConfig) -> None:
    """Create `config.topic` with `config.topic_partitions` partitions unless it exists."""
    await ensure_topics(config, {config.topic: config.topic_partitions}, config.topic_replication_factor)


async def ensure_topics(config: ServiceConfig, topics: Mapping[str, int], replication_factor: int = 3) -> None:
    """Create each topic of `topics` (name -> partitions) that does not exist yet, with
    `replication_factor` replicas or one per broker when the cluster has fewer (as the schema
    registry does): three on a Kafka cluster, one on the bundled broker, no setting to change."""
    admin = AIOKafkaAdminClient(
        **config.kafka_client_kwargs(), client_id=f"{config.service_name}-admin-{config.instance_id}"
    )
    try:
        await admin.start()
    except KafkaConnectionError:
        await admin.close()
        # One line naming the servers and the setting (kit.process.main), not aiokafka's traceback.
        raise StartupError(
            f"cannot reach the Kafka brokers at {config.bootstrap_servers} "
            f"(set {config.env_name('bootstrap_servers')} to where they listen)"
        ) from None
    try:
        existing = set(await admin.list_topics())
        brokers = len((await admin.describe_cluster())["brokers"]) if set(topics) - existing else 1
        replicas = max(1, min(replication_factor, brokers))
        for name, partitions in topics.items():
            if name in existing:
                continue
            try:
                await admin.create_topics([NewTopic(name, partitions, replicas)])
            except TopicAlreadyExistsError:  # another instance won the race
                continue
            log.info("topic created", topic=name, partitions=partitions, replicas=replicas)
        if set(topics) - existing:
            await _wait_visible(admin, sorted(topics))
    finally:
        await admin.close()


_VISIBLE_WITHIN_S = 30.0


async def _wait_visible(admin: AIOKafkaAdminClient, names: list[str]) -> None:
    """Until every broker's metadata has `names` with a leader for each partition.  A cluster
    acknowledges a creation once its controller has it; brokers learn of it a moment later, and a
    consumer group joined in between is assigned nothing of the topic until its next metadata
    refresh, minutes later."""
    deadline = time.monotonic() + _VISIBLE_WITHIN_S
    nodes = [b.nodeId for b in admin._client.cluster.brokers()]
    while nodes and time.monotonic() < deadline:
        lagging = []
        for node in nodes:
            try:
                answer = (await admin._send_request(MetadataRequest(names, False), node)).to_object()
            except KafkaError:
                lagging.append(node)
                continue
            ready = {
                t["topic"]
                for t in answer["topics"]
                if t["error_code"] == 0 and t["partitions"] and all(p["leader"] >= 0 for p in t["partitions"])
            }
            if not set(names) <= ready:
                lagging.append(node)
        nodes = lagging
        if nodes:
            await asyncio.sleep(0.1)
    if nodes:
        log.warning("topics not yet visible on every broker", topics=names, brokers=nodes)


@asynccontextmanager
async def shipping_logs(config: ServiceConfig, shipper: LogShipper | None) -> AsyncIterator[None]:
    """For a service that publishes no events of its own (the catcher, the dashboard): its log
    lines shipped as Avro LogRecords through a producer of their own, as every other service's
    are.  Nothing when `shipper` is None (log shipping off)."""
    if shipper is None:
        yield
        return
    async with RegistryClient(config.registry_url, **config.registry_options()) as registry:
        serializer = AvroSerializer(registry)
        producer = EventProducer(
            serializer=serializer,
            client_id=f"{config.service_name}-{config.instance_id}",
            **config.kafka_client_kwargs(),
        )
        await producer.start()
        try:
            await shipper.start(SendRawAdapter(producer), avro_log_encoder(serializer))
            try:
                yield
            finally:
                await shipper.stop()
        finally:
            await producer.stop()


@asynccontextmanager
async def open_outbox_service(
    config: OutboxServiceConfig,
    catalog: Catalog,
    make_store: Callable[[Database, Outbox], S],
    *,
    shipper: LogShipper | None = None,
) -> AsyncIterator[OutboxService[S]]:
    """Open everything the service needs (see the module docstring) and close it on exit."""
    async with open_publishing_service(
        config,
        catalog,
        make_store,
        topics={config.topic: config.topic_partitions},
        replication_factor=config.topic_replication_factor,
        relay_poll_interval=config.relay_poll_interval,
        shipper=shipper,
    ) as service:
        yield service


@asynccontextmanager
async def open_publishing_service(
    config: ServiceConfig,
    catalog: Catalog,
    make_store: Callable[[Database, Outbox], S],
    *,
    topics: Mapping[str, int],
    replication_factor: int = 3,
    relay_poll_interval: float = 1.0,
    shipper: LogShipper | None = None,
) -> AsyncIterator[OutboxService[S]]:
    """`open_outbox_service` with the topics to create (name -> partitions) given explicitly."""
    db = config.open_database()
    outbox = Outbox(db, catalog.schema)
    store = make_store(db, outbox)
    await open_for_service(db, store.setup)
    try:
        async with RegistryClient(config.registry_url, **config.registry_options()) as registry:
            serializer = AvroSerializer(registry, topic_strategies=catalog.topic_strategies())
            await ensure_topics(config, topics, replication_factor)
            producer = EventProducer(
                serializer=serializer,
                client_id=f"{config.service_name}-{config.instance_id}",
                **config.kafka_client_kwargs(),
            )
            await producer.start()
            if shipper is not None:
                # LogRecord in Avro, as every other event: the analytics job reads the logs too.
                await shipper.start(SendRawAdapter(producer), avro_log_encoder(serializer))
            relay = OutboxRelay(outbox, producer, poll_interval=relay_poll_interval)
            try:
                relay.start()
                yield OutboxService(db, store, producer, relay, registry)
            finally:
                await relay.stop()
                if shipper is not None:
                    await shipper.stop()
                await producer.stop()
    finally:
        await db.close()
