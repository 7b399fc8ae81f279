"""Share-group runner: the instances of a service drain a topic as a queue (KIP-932).

    runner = ShareRunner(config.librdkafka_config(), "email-sender", ["otp.requests"], handler,
                         deserializer=deserializer, producer=producer)
    await runner.start()
    ...
    await runner.stop()      # finish the records in flight, acknowledge them, leave the group

Where a consumer group gives each partition to one instance, a share group hands each record to
one instance under a lock: any number of instances share the partitions, one slow or stuck
record holds up only itself, and an instance that dies lets its records go to the others when
its locks run out.  Processing is the consumer runner's (services.common.consumer): the same
handler, retries, dead-letter topic and idempotence.  Each record is then acknowledged:

- **ACCEPT** once handled, or once dead-lettered (the DLQ write acknowledged);
- **RELEASE** when the runner stops before handling it, or while it waits for the registry or
  the DLQ (not the record's fault): another instance, or this one later, gets it again, with its
  delivery count raised.  Past the broker's delivery limit it is archived, never delivered again.

Acknowledgements go with the next fetch and at `stop()`.  At-least-once, as with the consumer
runner: a crash before the acknowledgement delivers the record again when its lock runs out,
and `IdempotentHandler` makes the second delivery a no-op.

confluent-kafka's ShareConsumer is synchronous and not thread-safe: one thread owns it and polls;
the records are handled on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Sequence
from typing import Any

from aiokafka.structs import ConsumerRecord, TopicPartition
from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer
from confluent_kafka import Message as KafkaMessage
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from kit.logging import get_logger
from schemas.serde import AvroDeserializer
from services.common.config import ServiceConfig
from services.common.consumer import ConsumerRunner, Handler, _Stopping
from services.common.kafka import EventProducer

__all__ = ["ShareRunner", "share_runner_for_service"]

log = get_logger(__name__)

POLL_TIMEOUT_S = 0.5
RESET = "share.auto.offset.reset"


class ShareRunner(ConsumerRunner):
    """A share-group member that runs `handler` on every record it is given of `topics`."""

    def __init__(
        self,
        client_config: dict[str, str],
        group_id: str,
        topics: Sequence[str],
        handler: Handler,
        *,
        deserializer: AvroDeserializer,
        producer: EventProducer,
        max_records: int = 100,
        **options: Any,
    ) -> None:
        super().__init__(
            client_config["bootstrap.servers"],
            group_id,
            topics,
            handler,
            deserializer=deserializer,
            producer=producer,
            max_records=max_records,
            **options,
        )
        self._client_config: dict[str, str | int | float | bool] = dict(client_config)
        self._share_config = {
            **client_config,
            "group.id": group_id,
            "share.acknowledgement.mode": "explicit",
            "max.poll.records": str(max_records),
        }
        self._share: ShareConsumer | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._halt = threading.Event()  # stop(), seen by the polling thread

    async def start(self) -> None:
        if self._share is not None:
            return
        await asyncio.get_running_loop().run_in_executor(None, self._start_at_earliest)
        consumer = ShareConsumer(self._share_config)
        consumer.subscribe(self.topics)
        self._share, self._loop = consumer, asyncio.get_running_loop()
        self._stopping = False
        self._stopped.clear()
        self._halt.clear()
        self._thread = threading.Thread(target=self._poll_loop, args=(consumer,), name=f"share-{self.group_id}")
        self._thread.start()

    async def stop(self, grace: float = 30) -> None:
        """Stop fetching, finish the records in flight, acknowledge and leave the group."""
        self._stopping = True
        self._stopped.set()
        self._halt.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, thread.join, grace + 10)
        self._share = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def assignment(self) -> set[TopicPartition]:
        return set()  # a share group's partitions are shared: no instance owns any

    async def lag(self) -> dict[TopicPartition, int]:
        return {}  # a share group's backlog is the group's, not an instance's (see /api/groups)

    def _start_at_earliest(self) -> None:
        """A share group starts reading new partitions at their end (`share.auto.offset.reset`
        is latest by default): records written before the group's first fetch would never be
        handled.  Like the consumer runner's auto_offset_reset=earliest, the group starts at
        the beginning instead, unless an operator gave it a value of its own.  Needs
        DESCRIBE_CONFIGS and ALTER_CONFIGS on the group; without them the group keeps its
        configs (logged)."""
        admin = AdminClient(self._client_config)
        resource = ConfigResource(ResourceType.GROUP, self.group_id)
        try:
            described = admin.describe_configs([resource])[resource].result(30)
            entry = described.get(RESET)
            if entry is not None and not entry.is_default:
                return  # the group's own choice
            change = ConfigEntry(RESET, "earliest", incremental_operation=AlterConfigOpType.SET)
            altered = ConfigResource(ResourceType.GROUP, self.group_id, incremental_configs=[change])
            admin.incremental_alter_configs([altered])[altered].result(30)
            log.info("share group starts at the earliest records", group=self.group_id)
        except KafkaException as e:
            log.warning("share group configs left as they are", group=self.group_id, error=str(e))

    # -- the polling thread ---------------------------------------------------------------------

    def _poll_loop(self, consumer: ShareConsumer) -> None:
        loop = self._loop
        assert loop is not None
        try:
            while not self._halt.is_set():
                try:
                    polled = list(consumer.poll(POLL_TIMEOUT_S))
                except KafkaException as e:
                    log.warning("share fetch failed", group=self.group_id, error=str(e))
                    self._halt.wait(self.backoff_max)
                    continue
                records = [m for m in polled if m.error() is None]
                for m in polled:
                    if m.error() is not None:
                        log.warning("share consumer error", group=self.group_id, error=str(m.error()))
                if not records:
                    continue
                outcomes = asyncio.run_coroutine_threadsafe(self._handle(records), loop).result()
                for message, outcome in zip(records, outcomes, strict=True):
                    consumer.acknowledge(message, outcome)
        except Exception:
            log.exception("share runner stopped on an error", group=self.group_id)
        finally:
            with contextlib.suppress(Exception):
                consumer.close()  # sends what is acknowledged, releases the rest, leaves the group

    async def _handle(self, messages: list[KafkaMessage]) -> list[AcknowledgeType]:
        outcomes = []
        for message in messages:
            if self._stopping:
                outcomes.append(AcknowledgeType.RELEASE)  # for another instance, now
                continue
            try:
                await self._process(_as_record(message))
                outcomes.append(AcknowledgeType.ACCEPT)
            except _Stopping:
                outcomes.append(AcknowledgeType.RELEASE)
        return outcomes


def _as_record(message: KafkaMessage) -> ConsumerRecord[bytes, bytes]:
    key, value = message.key(), message.value()
    timestamp_type, timestamp = message.timestamp()
    return ConsumerRecord(
        topic=message.topic() or "",
        partition=message.partition() or 0,
        offset=message.offset() or 0,
        timestamp=timestamp,
        timestamp_type=timestamp_type,
        key=key if isinstance(key, bytes) else None,
        value=value if isinstance(value, bytes) else None,
        checksum=None,
        serialized_key_size=len(key) if isinstance(key, bytes) else -1,
        serialized_value_size=len(value) if isinstance(value, bytes) else -1,
        headers=_headers(message),
    )


def _headers(message: KafkaMessage) -> tuple[tuple[str, bytes], ...]:
    out = []
    for header in message.headers() or ():
        name, value = header[0], header[1]
        out.append((str(name), value if isinstance(value, bytes) else b""))
    return tuple(out)


def share_runner_for_service(
    config: ServiceConfig,
    group_id: str,
    topics: Sequence[str],
    handler: Handler,
    *,
    deserializer: AvroDeserializer,
    producer: EventProducer,
    **options: Any,
) -> ShareRunner:
    """A share runner with the service's Kafka settings (bootstrap servers, security) and a
    client id naming the group and the instance."""
    client_config = {**config.librdkafka_config(), "client.id": f"{group_id}-{config.instance_id}"}
    return ShareRunner(
        client_config, group_id, topics, handler, deserializer=deserializer, producer=producer, **options
    )
