"""Confluent's Avro serde and streamshop's read each other's records through the real
broker and the real registry, for every event type, in both directions, including a
record written with an older schema version and read with the current one."""

from __future__ import annotations

import asyncio
import copy
import json
import struct
import time
from collections.abc import Iterator

import confluent_kafka.schema_registry as confluent_schema_registry
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer as ConfluentDeserializer
from confluent_kafka.schema_registry.avro import AvroSerializer as ConfluentSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from schemas.catalog import default_catalog
from schemas.client import RegistryClient
from schemas.serde import AvroDeserializer, AvroSchema, AvroSerializer, SubjectNameStrategy
from tests.support.harness import ThreadBroker
from tests.support.registry import ThreadRegistry

CATALOG = default_catalog()
EVENTS = [(name.rsplit(".", 1)[-1], CATALOG.topics_for(name)[0].name) for name in CATALOG.events()]
_CONFLUENT_STRATEGY = {
    SubjectNameStrategy.TOPIC: "topic_subject_name_strategy",
    SubjectNameStrategy.RECORD: "record_subject_name_strategy",
    SubjectNameStrategy.TOPIC_RECORD: "topic_record_subject_name_strategy",
}


@pytest.fixture
def registry(broker: ThreadBroker) -> Iterator[ThreadRegistry]:
    running = ThreadRegistry(broker.bootstrap)
    yield running
    running.close()


@pytest.fixture
def confluent_registry(registry: ThreadRegistry) -> Iterator[SchemaRegistryClient]:
    with SchemaRegistryClient({"url": registry.url}) as client:
        yield client


@pytest.fixture
def confluent_shared(shared_registry: ThreadRegistry) -> Iterator[SchemaRegistryClient]:
    """Confluent's client of the worker's registry (tests/conftest.py), which the round trips of
    the catalog's schemas share: registering them again finds them."""
    with SchemaRegistryClient({"url": shared_registry.url}) as client:
        yield client


def _confluent_serializer(client: SchemaRegistryClient, schema: AvroSchema, topic: str) -> ConfluentSerializer:
    strategy = getattr(confluent_schema_registry, _CONFLUENT_STRATEGY[CATALOG.topics[topic].strategy])
    return ConfluentSerializer(client, schema.text, conf={"subject.name.strategy": strategy})


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for value in values:
        producer.produce(topic, key=b"k", value=value)
    assert producer.flush(15) == 0


def _consume(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "interop", "enable.auto.commit": False})
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    out: list[bytes] = []
    try:
        deadline = time.monotonic() + 20
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                out.append(msg.value())
    finally:
        consumer.close()
    return out


@pytest.mark.parametrize(("event", "topic"), EVENTS)
async def test_streamshop_writes_and_confluent_reads_through_the_broker(
    broker: ThreadBroker,
    shared_registry: ThreadRegistry,
    confluent_shared: SchemaRegistryClient,
    event: str,
    topic: str,
) -> None:
    """streamshop's serializer registers and frames; Confluent's deserializer, after a trip
    through the broker, decodes the same record."""
    record = CATALOG.example(event)
    async with RegistryClient(shared_registry.url) as client:
        serializer = AvroSerializer(client, topic_strategies=CATALOG.topic_strategies())
        data = await serializer.serialize(topic, CATALOG.schema(event), record)
    await asyncio.to_thread(_produce, broker.bootstrap, topic, [data])
    (received,) = await asyncio.to_thread(_consume, broker.bootstrap, topic, 1)
    assert received == data
    ctx = SerializationContext(topic, MessageField.VALUE)
    decoded = await asyncio.to_thread(ConfluentDeserializer(confluent_shared), received, ctx)
    assert decoded == record
    subjects = await asyncio.to_thread(confluent_shared.get_subjects)
    assert CATALOG.subject(topic, event) in subjects
    latest = await asyncio.to_thread(confluent_shared.get_latest_version, CATALOG.subject(topic, event))
    assert latest.schema_id == struct.unpack(">bI", data[:5])[1], "the subject holds the schema the record names"


@pytest.mark.parametrize(("event", "topic"), EVENTS)
async def test_confluent_writes_and_streamshop_reads_through_the_broker(
    broker: ThreadBroker,
    shared_registry: ThreadRegistry,
    confluent_shared: SchemaRegistryClient,
    event: str,
    topic: str,
) -> None:
    """Confluent's serializer registers under the topic's naming strategy; streamshop's
    deserializer fetches the writer schema by id and decodes the same record."""
    record = CATALOG.example(event)
    schema = CATALOG.schema(event)
    serializer = _confluent_serializer(confluent_shared, schema, topic)
    ctx = SerializationContext(topic, MessageField.VALUE)
    data = await asyncio.to_thread(serializer, copy.deepcopy(record), ctx)
    await asyncio.to_thread(_produce, broker.bootstrap, topic, [data])
    (received,) = await asyncio.to_thread(_consume, broker.bootstrap, topic, 1)
    async with RegistryClient(shared_registry.url) as client:
        decoded = await AvroDeserializer(client, reader_schemas=[schema]).deserialize(received)
    assert decoded.record_name == schema.name
    assert decoded.value == record


async def test_a_record_written_with_an_older_version_reads_into_the_current_schema(
    broker: ThreadBroker, registry: ThreadRegistry, confluent_registry: SchemaRegistryClient
) -> None:
    """Evolution across clients: Confluent writes with a version lacking a defaulted field;
    the registry accepts the current schema as BACKWARD compatible; streamshop reads the old
    record into the current shape with the default filled in."""
    current = CATALOG.schema("OrderStatusChanged")
    parsed = json.loads(current.text)
    defaulted = [f for f in parsed["fields"] if "default" in f and f["name"] != "envelope"]
    assert defaulted, "OrderStatusChanged needs a defaulted field for this test"
    dropped = defaulted[-1]
    older = dict(parsed, fields=[f for f in parsed["fields"] if f["name"] != dropped["name"]])
    older_schema = AvroSchema.parse(json.dumps(older))
    record = {k: v for k, v in CATALOG.example("OrderStatusChanged").items() if k != dropped["name"]}

    topic = "orders"
    serializer = _confluent_serializer(confluent_registry, older_schema, topic)
    data = await asyncio.to_thread(serializer, copy.deepcopy(record), SerializationContext(topic, MessageField.VALUE))
    async with RegistryClient(registry.url) as client:
        subject = CATALOG.subject(topic, "OrderStatusChanged")
        new_id = await client.register(subject, current.text)  # BACKWARD check against the older version
        await asyncio.to_thread(_produce, broker.bootstrap, topic, [data])
        (received,) = await asyncio.to_thread(_consume, broker.bootstrap, topic, 1)
        decoded = await AvroDeserializer(client, reader_schemas=[current]).deserialize(received)
    assert decoded.schema_id != new_id  # written with the older version's id
    assert decoded.value[dropped["name"]] == dropped["default"]
    assert {k: v for k, v in decoded.value.items() if k != dropped["name"]} == record
