"""The three Python clients' transactional producers and read_committed consumers behind one
small interface, so each scenario runs unchanged on confluent-kafka, aiokafka and
kafka-python.  aiokafka's coroutines run on the adapter's own event loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import kafka
import kafka.errors
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError as AioKafkaError
from aiokafka.structs import OffsetAndMetadata as AioOffset
from aiokafka.structs import TopicPartition as AioTP
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kafka.structs import OffsetAndMetadata as KpOffset

T = TypeVar("T")
CLIENTS = ("confluent", "aiokafka", "kafka-python")


class TxnProducer(Protocol):
    @property
    def errors(self) -> tuple[type[Exception], ...]:  # what the client raises when fenced or refused
        ...

    def init(self) -> None: ...
    def begin(self) -> None: ...
    def send(self, topic: str, value: bytes, key: bytes | None = None, partition: int = 0) -> None: ...
    def flush(self) -> None: ...
    def commit(self) -> None: ...
    def abort(self) -> None: ...
    def send_offsets(self, offsets: dict[tuple[str, int], int], group_id: str) -> None: ...
    def close(self) -> None: ...


class _Confluent:
    errors = (KafkaException,)

    def __init__(self, bootstrap: str, transactional_id: str, timeout_ms: int) -> None:
        self.p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "transactional.id": transactional_id,
                "transaction.timeout.ms": timeout_ms,
                "linger.ms": 5,
            }
        )
        self.bootstrap = bootstrap

    def init(self) -> None:
        self.p.init_transactions(15)

    def begin(self) -> None:
        self.p.begin_transaction()

    def send(self, topic: str, value: bytes, key: bytes | None = None, partition: int = 0) -> None:
        self.p.produce(topic, value=value, key=key, partition=partition)
        self.p.poll(0)

    def flush(self) -> None:
        assert self.p.flush(15) == 0

    def commit(self) -> None:
        self.p.commit_transaction(15)

    def abort(self) -> None:
        self.p.abort_transaction(15)

    def send_offsets(self, offsets: dict[tuple[str, int], int], group_id: str) -> None:
        # The group's metadata comes from a consumer of the group, as the API requires.
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": group_id})
        try:
            self.p.send_offsets_to_transaction(
                [TopicPartition(t, p, o) for (t, p), o in offsets.items()], consumer.consumer_group_metadata(), 15
            )
        finally:
            consumer.close()

    def close(self) -> None:
        self.p.flush(5)


class _Aio:
    errors = (AioKafkaError,)

    def __init__(self, bootstrap: str, transactional_id: str, timeout_ms: int) -> None:
        self.loop = asyncio.new_event_loop()

        async def make() -> AIOKafkaProducer:  # aiokafka objects belong to a running loop
            return AIOKafkaProducer(
                bootstrap_servers=bootstrap, transactional_id=transactional_id, transaction_timeout_ms=timeout_ms
            )

        self.p = self.loop.run_until_complete(make())
        self.pending: list[asyncio.Future[Any]] = []

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(asyncio.wait_for(coro, 20))

    def init(self) -> None:
        self._run(self.p.start())  # start() initialises the transactional id

    def begin(self) -> None:
        self._run(self.p.begin_transaction())

    def send(self, topic: str, value: bytes, key: bytes | None = None, partition: int = 0) -> None:
        self.pending.append(self._run(self.p.send(topic, value=value, key=key, partition=partition)))

    def flush(self) -> None:
        self._run(self.p.flush())
        self.pending.clear()

    def commit(self) -> None:
        self._run(self.p.commit_transaction())

    def abort(self) -> None:
        self._run(self.p.abort_transaction())

    def send_offsets(self, offsets: dict[tuple[str, int], int], group_id: str) -> None:
        self._run(
            self.p.send_offsets_to_transaction(
                {AioTP(t, p): AioOffset(o, "") for (t, p), o in offsets.items()}, group_id
            )
        )

    def close(self) -> None:
        try:
            self._run(self.p.stop())
        finally:
            self.loop.close()


class _KafkaPython:
    errors = (kafka.errors.KafkaError,)

    def __init__(self, bootstrap: str, transactional_id: str, timeout_ms: int) -> None:
        self.p = kafka.KafkaProducer(
            bootstrap_servers=bootstrap,
            transactional_id=transactional_id,
            transaction_timeout_ms=timeout_ms,
            linger_ms=5,
        )

    def init(self) -> None:
        self.p.init_transactions()

    def begin(self) -> None:
        self.p.begin_transaction()

    def send(self, topic: str, value: bytes, key: bytes | None = None, partition: int = 0) -> None:
        self.p.send(topic, value=value, key=key, partition=partition)

    def flush(self) -> None:
        self.p.flush(15)

    def commit(self) -> None:
        self.p.commit_transaction()

    def abort(self) -> None:
        self.p.abort_transaction()

    def send_offsets(self, offsets: dict[tuple[str, int], int], group_id: str) -> None:
        self.p.send_offsets_to_transaction(
            {kafka.TopicPartition(t, p): KpOffset(o, "", -1) for (t, p), o in offsets.items()}, group_id
        )

    def close(self) -> None:
        self.p.close(5)


def producer(client: str, bootstrap: str, transactional_id: str, timeout_ms: int = 60_000) -> TxnProducer:
    if client == "confluent":
        return _Confluent(bootstrap, transactional_id, timeout_ms)
    if client == "aiokafka":
        return _Aio(bootstrap, transactional_id, timeout_ms)
    return _KafkaPython(bootstrap, transactional_id, timeout_ms)


@dataclass(frozen=True)
class _Read:
    bootstrap: str
    topic: str
    isolation: str
    until: frozenset[bytes]
    partitions: int
    deadline: float

    def more(self, values: list[bytes]) -> bool:
        return not self.until <= set(values) and time.monotonic() < self.deadline


def read_values(
    client: str, bootstrap: str, topic: str, *, committed: bool, until: bytes, partitions: int = 1, timeout: float = 20
) -> list[bytes]:
    """Every value of `topic` from the start, read by `client`'s consumer (assigned, no group)
    at read_committed or read_uncommitted, until every partition's `until` record (the value
    `until`, or on partition p of several `until + b"-p"`) has arrived or `timeout` passed."""
    last = {until + b"-%d" % p for p in range(partitions)} if partitions > 1 else {until}
    read = _Read(
        bootstrap,
        topic,
        "read_committed" if committed else "read_uncommitted",
        frozenset(last),
        partitions,
        time.monotonic() + timeout,
    )
    if client == "confluent":
        return _confluent_read(read)
    if client == "aiokafka":
        return asyncio.run(_aio_read(read))
    return _kafka_python_read(read)


def _confluent_read(read: _Read) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": read.bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "isolation.level": read.isolation,
        }
    )
    consumer.assign([TopicPartition(read.topic, p, 0) for p in range(read.partitions)])
    values: list[bytes] = []
    try:
        while read.more(values):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                values.append(msg.value() or b"")
    finally:
        consumer.close()
    return values


async def _aio_read(read: _Read) -> list[bytes]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=read.bootstrap, isolation_level=read.isolation, enable_auto_commit=False
    )
    await consumer.start()
    values: list[bytes] = []
    try:
        consumer.assign([AioTP(read.topic, p) for p in range(read.partitions)])
        await consumer.seek_to_beginning()
        while read.more(values):
            batches = await consumer.getmany(timeout_ms=200)
            for records in batches.values():
                values.extend(r.value or b"" for r in records)
    finally:
        await consumer.stop()
    return values


def _kafka_python_read(read: _Read) -> list[bytes]:
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=read.bootstrap, isolation_level=read.isolation, enable_auto_commit=False
    )
    values: list[bytes] = []
    try:
        consumer.assign([kafka.TopicPartition(read.topic, p) for p in range(read.partitions)])
        consumer.seek_to_beginning()
        while read.more(values):
            for records in consumer.poll(timeout_ms=200).values():
                values.extend(r.value or b"" for r in records)
    finally:
        consumer.close()
    return values


def committed_offset(
    bootstrap: str, group_id: str, topic: str, partition: int = 0, *, isolation: str = "read_uncommitted"
) -> int:
    """The group's committed offset (OffsetFetch), or -1.  At read_committed librdkafka asks for
    stable offsets only (require_stable) and waits while a transaction holds one."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group_id,
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    try:
        [tp] = consumer.committed([TopicPartition(topic, partition)], timeout=10)
        return tp.offset if tp.offset >= 0 else -1
    finally:
        consumer.close()
