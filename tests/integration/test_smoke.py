"""The broker serves both real clients end to end."""

from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support.harness import ThreadBroker


def test_confluent_kafka_produces_and_consumes_every_record(broker: ThreadBroker) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(500):
        producer.produce("smoke", key=str(i % 7), value=f"v{i}".encode())
    assert producer.flush(15) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition("smoke", p, 0) for p in range(3)])
    values = set()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                values.add(msg.value())
            if len(values) == 500:
                break
    finally:
        consumer.close()
    assert values == {f"v{i}".encode() for i in range(500)}


async def test_aiokafka_produces_and_consumes_every_record(broker: ThreadBroker) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True)
    await producer.start()
    try:
        for i in range(200):
            await producer.send("smoke-aio", key=b"k", value=f"v{i}".encode())
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer("smoke-aio", bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    got = []
    try:
        async with asyncio.timeout(20):
            async for msg in consumer:
                got.append(msg.value)
                if len(got) == 200:
                    break
    finally:
        await consumer.stop()
    assert got == [f"v{i}".encode() for i in range(200)]  # one key: one partition, in order
