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
the records are handled on the event loop.  A consumer that fails for good (a fatal client error,
such as the group at its maximum size, or any error the loop was not written for) is closed and
replaced by a new one after `backoff_max` seconds, as often as it takes.  Meanwhile `running` is
False (readiness goes red with the reason, `failure`): a member that only looks alive would keep
the instance "ready" while it handles nothing.  A replacement counts as running once it has
polled for `settle_s` seconds without failing, or been given records.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Sequence
from typing import Any

from aiokafka.structs import ConsumerRecord, TopicPartition
from confluent_kafka import AcknowledgeType, KafkaError, KafkaException, ShareConsumer
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
SETTLE_S = 3.0  # a replacement consumer polling this long without failing has joined
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
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._halt = threading.Event()  # stop(), seen by the polling thread
        self._failure: str | None = None  # why the consumer is being replaced (set by the polling thread)
        self.replacements = 0  # consumers that failed and were replaced
        self.settle_s = SETTLE_S

    async def start(self) -> None:
        if self._thread is not None:
            return
        await asyncio.get_running_loop().run_in_executor(None, self._start_at_earliest)
        consumer = ShareConsumer(self._share_config)  # the first one here: bad settings fail start()
        consumer.subscribe(self.topics)
        self._loop = asyncio.get_running_loop()
        self._stopping = False
        self._stopped.clear()
        self._halt.clear()
        self._failure = None
        self._thread = threading.Thread(target=self._member, args=(consumer,), name=f"share-{self.group_id}")
        self._thread.start()

    async def stop(self, grace: float = 30) -> None:
        """Stop fetching, finish the records in flight, acknowledge and leave the group."""
        self._stopping = True
        self._stopped.set()
        self._halt.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, thread.join, grace + 10)

    @property
    def running(self) -> bool:
        """The polling thread is alive and its consumer has not failed (or was replaced since)."""
        return self._thread is not None and self._thread.is_alive() and self._failure is None

    @property
    def failure(self) -> str | None:
        if self._thread is None:
            return "not started"
        if not self._thread.is_alive():
            return "the polling thread has ended"
        return self._failure

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

    def _member(self, first: ShareConsumer) -> None:
        """Poll with a consumer until stopped; when it fails, close it and poll with a new one."""
        consumer: ShareConsumer | None = first
        while True:
            try:
                if consumer is None:
                    consumer = ShareConsumer(self._share_config)
                    consumer.subscribe(self.topics)
                self._poll_loop(consumer)
            except Exception as e:  # fatal for this consumer, not for the member
                failure = f"{type(e).__name__}: {e}"[:300]
                if failure != self._failure:  # once per cause, not every back-off while it lasts
                    log.exception(
                        "share consumer failed; replacing it", group=self.group_id, retry_in_s=self.backoff_max
                    )
                self._failure = failure
                self.replacements += 1
            finally:
                if consumer is not None:
                    with contextlib.suppress(Exception):
                        consumer.close()  # sends what is acknowledged, releases the rest, leaves the group
                consumer = None
            if self._halt.wait(self.backoff_max):
                return

    def _poll_loop(self, consumer: ShareConsumer) -> None:
        loop = self._loop
        assert loop is not None
        began = time.monotonic()
        while not self._halt.is_set():
            try:
                polled = list(consumer.poll(POLL_TIMEOUT_S))
            except KafkaException as e:
                if _fatal(e.args[0] if e.args else None):
                    raise  # the client gave up: only a new consumer can go on
                log.warning("share fetch failed", group=self.group_id, error=str(e))
                self._halt.wait(self.backoff_max)
                began = time.monotonic()  # a replacement must poll `settle_s` without failing
                continue
            records = [m for m in polled if m.error() is None]
            for m in polled:
                error = m.error()
                if error is not None:
                    if _fatal(error):
                        raise KafkaException(error)
                    log.warning("share consumer error", group=self.group_id, error=str(error))
            if self._failure is not None and (records or time.monotonic() - began >= self.settle_s):
                log.info("share consumer replaced", group=self.group_id, after=self._failure)
                self._failure = None
            if not records:
                continue
            outcomes = asyncio.run_coroutine_threadsafe(self._handle(records), loop).result()
            for message, outcome in zip(records, outcomes, strict=True):
                consumer.acknowledge(message, outcome)

    async def _handle(self, messages: list[KafkaMessage]) -> list[AcknowledgeType]:
        outcomes = []
        for message in messages:
            if self._stopping:
                outcomes.append(AcknowledgeType.RELEASE)  # for another instance, now
                continue
            try:
                await self._process(_as_record(message), _delivery_count(message))
                outcomes.append(AcknowledgeType.ACCEPT)
            except _Stopping:
                outcomes.append(AcknowledgeType.RELEASE)
        return outcomes


def _delivery_count(message: KafkaMessage) -> int | None:
    """How many times the group has handed this record out, this time included (KIP-932)."""
    count = message.delivery_count()
    return count if isinstance(count, int) and count > 0 else None


def _fatal(error: object) -> bool:
    return isinstance(error, KafkaError) and error.fatal()


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
