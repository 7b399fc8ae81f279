"""Small helpers around the two real clients the integration tests drive: confluent-kafka
(librdkafka) and aiokafka.  Every helper closes what it opens and waits with a deadline."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import ConsumerRecord
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


@dataclass(frozen=True)
class Got:
    """One consumed record, the same shape whichever client read it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    log_append_time: bool
    headers: tuple[tuple[str, bytes | None], ...] = field(default=())


def from_confluent(msg: Message) -> Got:
    ts_type, ts = msg.timestamp()
    return Got(
        topic=msg.topic() or "",
        partition=msg.partition() or 0,
        offset=msg.offset() or 0,
        key=msg.key(),
        value=msg.value(),
        timestamp=ts,
        log_append_time=ts_type == 2,  # confluent_kafka.TIMESTAMP_LOG_APPEND_TIME
        headers=tuple(msg.headers() or ()),  # type: ignore[arg-type]  # a list of pairs when set
    )


def from_aiokafka(rec: ConsumerRecord[bytes, bytes]) -> Got:
    return Got(
        topic=rec.topic,
        partition=rec.partition,
        offset=rec.offset,
        key=rec.key,
        value=rec.value,
        timestamp=rec.timestamp,
        log_append_time=rec.timestamp_type == 1,
        headers=tuple(rec.headers),
    )


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: Mapping[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=dict(config or {}))], operation_timeout=10)
    futures[name].result(15)


def confluent_produce(
    bootstrap: str,
    topic: str,
    records: Iterable[Mapping[str, Any]],
    conf: Mapping[str, Any] | None = None,
    *,
    flush_each: bool = False,
) -> list[Message]:
    """Produce `records` (kwargs of Producer.produce: key, value, partition, headers,
    timestamp) and return their delivery reports, in delivery order; raises if any failed.
    `flush_each` sends every record in its own batch."""
    delivered: list[Message] = []
    errors: list[Any] = []

    def report(err: Any, msg: Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append(msg)

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **(conf or {})})
    count = 0
    for record in records:
        producer.produce(topic, on_delivery=report, **record)
        count += 1
        if flush_each:
            producer.flush(10)
    remaining = producer.flush(15)
    assert remaining == 0, f"{remaining} records not delivered"
    if errors:
        raise KafkaException(errors[0])
    assert len(delivered) == count
    return delivered


async def aiokafka_produce(
    bootstrap: str,
    topic: str,
    records: Iterable[Mapping[str, Any]],
    *,
    flush_each: bool = False,
    **producer_kwargs: Any,
) -> list[Any]:
    """Produce with AIOKafkaProducer.send (kwargs: key, value, partition, headers,
    timestamp_ms); returns the RecordMetadata of each record, in order."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **producer_kwargs)
    await producer.start()
    try:
        futures = []
        for record in records:
            futures.append(await producer.send(topic, **record))
            if flush_each:
                await producer.flush()
        return list(await asyncio.gather(*futures))
    finally:
        await producer.stop()


def confluent_consume(
    bootstrap: str,
    assignments: list[TopicPartition],
    count: int,
    conf: Mapping[str, Any] | None = None,
    timeout: float = 15,
) -> list[Got]:
    """Read from explicit assignments (offsets set on each TopicPartition) until `count`
    records arrived or the deadline passed; consumer errors raise."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tests-unused",
            "enable.auto.commit": False,
            "check.crcs": True,
            **(conf or {}),
        }
    )
    got: list[Got] = []
    try:
        consumer.assign(assignments)
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is None:
                continue
            if msg.error() is not None:
                raise KafkaException(msg.error())
            got.append(from_confluent(msg))
    finally:
        consumer.close()
    return got


async def aiokafka_consume(
    bootstrap: str,
    assignments: Mapping[tuple[str, int], int | None],
    count: int,
    within: float = 15,
    **consumer_kwargs: Any,
) -> list[Got]:
    """Read from explicit assignments {(topic, partition): offset or None (reset policy)}
    until `count` records arrived or `within` seconds passed."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **consumer_kwargs)
    await consumer.start()
    got: list[Got] = []
    try:
        tps = [AioTopicPartition(t, p) for t, p in assignments]
        consumer.assign(tps)
        for tp in tps:
            offset = assignments[(tp.topic, tp.partition)]
            if offset is not None:
                consumer.seek(tp, offset)
        deadline = time.monotonic() + within
        while len(got) < count and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=100)
            for records in batches.values():
                got.extend(from_aiokafka(r) for r in records)
    finally:
        await consumer.stop()
    return got


def by_partition(records: Iterable[Got]) -> dict[int, list[Got]]:
    out: dict[int, list[Got]] = {}
    for rec in records:
        out.setdefault(rec.partition, []).append(rec)
    return out


# What a group read may meet while a cluster moves its group coordinator (a broker killed by
# an earlier test): the client is told to ask again, and librdkafka does not mark all of these
# retriable at the application's level. A local timeout (the coordinator still loading its
# offsets on a loaded host) says the same to a caller that polls until a deadline.
_COORDINATOR_MOVING = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError._TIMED_OUT,
    }
)


def coordinator_moving(error: KafkaException) -> bool:
    """Whether `error` (from `Consumer.committed` and the like) only says: ask again shortly."""
    cause = error.args[0] if error.args else None
    return isinstance(cause, KafkaError) and (cause.retriable() or cause.code() in _COORDINATOR_MOVING)
