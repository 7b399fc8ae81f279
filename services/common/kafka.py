"""The services' Kafka producer: aiokafka with `acks=all` and idempotence, keyed Avro events.

    producer = EventProducer("127.0.0.1:9092", AvroSerializer(registry, topic_strategies=...))
    await producer.start()
    await producer.publish("orders", order_id, catalog.schema("OrderCreated"), record, {"traceparent": tp})
    await producer.stop()

`publish` returns once the broker acknowledged the record (`acks=all`: written by every in-sync
replica); idempotence makes the producer's own retries duplicate-free and keeps each partition in
send order.  Keys are plain UTF-8 strings (schemas/README.md: the same key always lands on the
same partition); values are Confluent-framed Avro.  Security settings (`security_protocol`,
`sasl_mechanism`, `sasl_plain_username`, `sasl_plain_password`, `ssl_context`, ...) pass through
to aiokafka unchanged, so the same code runs against a secured Apache Kafka cluster.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

from aiokafka import AIOKafkaProducer
from aiokafka.structs import RecordMetadata
from opentelemetry.trace import Span

from kit import tracing
from schemas.serde import AvroSchema, AvroSerializer

__all__ = ["EventProducer", "Headers", "encode_headers"]

Headers = Mapping[str, str | bytes] | Iterable[tuple[str, bytes]]
"""Header values: str (sent as UTF-8) or bytes; a list of pairs keeps repeated names."""

# Settings the wrapper owns: the delivery guarantees are not configurable by accident.
_FIXED = {"acks": "all", "enable_idempotence": True}


def encode_headers(headers: Headers | None) -> list[tuple[str, bytes]]:
    if headers is None:
        return []
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return [(name, value.encode() if isinstance(value, str) else bytes(value)) for name, value in pairs]


class EventProducer:
    """A started-once, stopped-once producer of keyed Avro events (also an async context manager).

    `config` is passed to `AIOKafkaProducer` (security, `linger_ms`, `request_timeout_ms`,
    `compression_type`...); `acks` and `enable_idempotence` cannot be overridden.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        serializer: AvroSerializer,
        *,
        client_id: str | None = None,
        linger_ms: int = 5,
        **config: Any,
    ) -> None:
        clash = set(config) & set(_FIXED)
        if clash:
            raise ValueError(f"{', '.join(sorted(clash))}: fixed by EventProducer (acks=all, idempotence on)")
        self.serializer = serializer
        self._config: dict[str, Any] = {
            "bootstrap_servers": bootstrap_servers,
            "linger_ms": linger_ms,
            **config,
            **_FIXED,
        }
        if client_id is not None:
            self._config["client_id"] = client_id
        self._producer: AIOKafkaProducer | None = None
        self._lock = asyncio.Lock()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        """Connect (bootstrap metadata); raises if the cluster cannot be reached."""
        async with self._lock:
            if self._producer is not None:
                return
            producer = AIOKafkaProducer(**self._config)
            try:
                await producer.start()
            except BaseException:
                await producer.stop()
                raise
            self._producer = producer

    async def stop(self) -> None:
        """Deliver what was sent (flush), then close the connections."""
        async with self._lock:
            producer, self._producer = self._producer, None
            if producer is not None:
                await producer.stop()

    @property
    def started(self) -> bool:
        return self._producer is not None

    def _started(self) -> AIOKafkaProducer:
        if self._producer is None:
            raise RuntimeError("EventProducer is not started")
        return self._producer

    async def publish(
        self,
        topic: str,
        key: str | None,
        schema: AvroSchema,
        record: Any,
        headers: Headers | None = None,
    ) -> RecordMetadata:
        """Serialize `record` with `schema` and wait for the broker's acknowledgement."""
        value = await self.serializer.serialize(topic, schema, record)
        future = await self.send_raw(topic, key, value, headers)
        return await future

    async def send_raw(
        self,
        topic: str,
        key: str | bytes | None,
        value: bytes | None,
        headers: Headers | None = None,
        *,
        partition: int | None = None,
        traced: bool = True,
        keep_trace: bool = False,
    ) -> asyncio.Future[RecordMetadata]:
        """Queue already encoded bytes; the returned future resolves when the broker acknowledged.

        Awaiting this call waits only for buffer space: send many, then gather the futures (the
        outbox relay and the dead-letter path do).  Records of one partition are acknowledged in
        send order.

        Each record gets a ``send {topic}`` span, ended by the broker's answer: a child of the
        ``traceparent`` in `headers` (an outbox row's request, a dead letter's first producer),
        else of the current span; the record carries the span's own ``traceparent``.  With
        `keep_trace` (a dead letter), the span is the current one's child and the record keeps
        the ``traceparent`` it came with.  With `traced` false (the log shipper: a span per log
        line would log and trace itself), there is no span.
        """
        raw_key = key.encode() if isinstance(key, str) else key
        encoded = encode_headers(headers)
        if not traced:
            plain: asyncio.Future[RecordMetadata] = await self._started().send(
                topic, value=value, key=raw_key, headers=encoded, partition=partition
            )
            return plain
        text_key = raw_key.decode("utf-8", "replace") if raw_key is not None else None
        span, encoded = tracing.send_span(topic, text_key, encoded, keep=keep_trace)
        try:
            future: asyncio.Future[RecordMetadata] = await self._started().send(
                topic, value=value, key=raw_key, headers=encoded, partition=partition
            )
        except BaseException as e:
            tracing.sent(span, error=e)
            raise
        future.add_done_callback(lambda done: _end_send(span, done))
        return future

    async def send_batch_raw(self, topic: str, key: bytes | None, values: Sequence[bytes]) -> list[asyncio.Future[Any]]:
        """Queue `values`, all under `key`, as whole record batches to the key's partition (the one
        `send_raw` picks), without per-record futures: much cheaper for many small records such
        as shipped log lines.  One future per batch, resolved when the broker acknowledged it."""
        producer = self._started()
        partitions = sorted(await producer.partitions_for(topic))
        partition = producer._partitioner(key, partitions, partitions)  # the producer's own choice, as send_raw
        futures: list[asyncio.Future[Any]] = []
        batch = producer.create_batch()
        for value in values:
            if batch.append(key=key, value=value, timestamp=None) is None:  # full: send it, start another
                futures.append(await producer.send_batch(batch, topic, partition=partition))
                batch = producer.create_batch()
                batch.append(key=key, value=value, timestamp=None)
        if batch.record_count():
            futures.append(await producer.send_batch(batch, topic, partition=partition))
        return futures

    async def flush(self) -> None:
        await self._started().flush()

    async def partitions_for(self, topic: str) -> set[int]:
        """The topic's partitions (fetches metadata; auto-creates where the broker allows)."""
        partitions: set[int] = await self._started().partitions_for(topic)
        return partitions


def _end_send(span: Span, done: asyncio.Future[RecordMetadata]) -> None:
    if done.cancelled():
        tracing.sent(span, error=asyncio.CancelledError())
    elif (error := done.exception()) is not None:
        tracing.sent(span, error=error)
    else:
        metadata = done.result()
        tracing.sent(span, metadata.partition, metadata.offset)
