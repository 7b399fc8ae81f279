"""The registry against confluent-kafka's own Schema Registry client and Avro serde: what
Confluent's client library does must work unchanged, records included (Confluent's
serializer -> the bundled broker -> Confluent's deserializer)."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import (
    ConfigCompatibilityLevel,
    Schema,
    SchemaRegistryClient,
    SchemaRegistryError,
    ServerConfig,
)
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import create_topic
from tests.support.registry import ThreadRegistry

PAYMENT_V1: dict[str, Any] = {
    "type": "record",
    "name": "Payment",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "string"}, {"name": "amount", "type": "double"}],
}
# Adds a field with a default: readers of V2 fill it in for V1 data.
PAYMENT_V2: dict[str, Any] = {
    **PAYMENT_V1,
    "fields": [*PAYMENT_V1["fields"], {"name": "currency", "type": "string", "default": "EUR"}],
}
# Changes a field's type in a way no reader can resolve.
PAYMENT_BROKEN: dict[str, Any] = {
    **PAYMENT_V1,
    "fields": [{"name": "id", "type": "string"}, {"name": "amount", "type": "boolean"}],
}


def avro(schema: dict[str, Any]) -> Schema:
    return Schema(json.dumps(schema), "AVRO")


@pytest.fixture
def registry_url(broker: ThreadBroker) -> Iterator[str]:
    running = ThreadRegistry(broker.bootstrap)
    yield running.url
    running.close()


@pytest.fixture
def client(registry_url: str) -> Iterator[SchemaRegistryClient]:
    sr = SchemaRegistryClient({"url": registry_url})
    yield sr
    sr.close()


def fresh_client(url: str) -> SchemaRegistryClient:
    """A client with empty caches, so every answer comes from the registry."""
    return SchemaRegistryClient({"url": url})


def test_register_get_by_id_latest_versions_and_lookup(client: SchemaRegistryClient, registry_url: str) -> None:
    v1_id = client.register_schema("payments-value", avro(PAYMENT_V1))
    v2_id = client.register_schema("payments-value", avro(PAYMENT_V2))
    assert v1_id != v2_id
    assert client.register_schema("payments-value", avro(PAYMENT_V2)) == v2_id
    other = fresh_client(registry_url)
    try:
        assert json.loads(other.get_schema(v1_id).schema_str or "") == PAYMENT_V1
        latest = other.get_latest_version("payments-value")
        assert (latest.schema_id, latest.version, latest.subject) == (v2_id, 2, "payments-value")
        assert json.loads(latest.schema.schema_str or "") == PAYMENT_V2
        assert other.get_versions("payments-value") == [1, 2]
        assert other.get_version("payments-value", 1).schema_id == v1_id
        found = other.lookup_schema("payments-value", avro(PAYMENT_V1))
        assert (found.schema_id, found.version) == (v1_id, 1)
        assert other.get_subjects() == ["payments-value"]
        assert other.get_subjects_by_schema_id(v2_id) == ["payments-value"]
        assert [(v.subject, v.version) for v in other.get_schema_versions(v2_id)] == [("payments-value", 2)]
        assert other.get_schema_types() == ["AVRO"]
    finally:
        other.close()


def test_errors_reach_the_client_with_confluents_codes(client: SchemaRegistryClient) -> None:
    client.register_schema("payments-value", avro(PAYMENT_V1))
    cases: list[tuple[Callable[[], object], int, int]] = [
        (lambda: client.get_latest_version("nobody"), 404, 40401),
        (lambda: client.get_version("payments-value", 5), 404, 40402),
        (lambda: client.get_schema(999), 404, 40403),
        (lambda: client.lookup_schema("payments-value", avro(PAYMENT_V2)), 404, 40403),
        (lambda: client.register_schema("payments-value", Schema('{"type": "nope"}', "AVRO")), 422, 42201),
        (lambda: client.register_schema("payments-value", avro(PAYMENT_BROKEN)), 409, 409),
        (lambda: client.get_compatibility("payments-value"), 404, 40408),
    ]
    for call, status, code in cases:
        with pytest.raises(SchemaRegistryError) as caught:
            call()
        assert (caught.value.http_status_code, caught.value.error_code) == (status, code)


def test_compatibility_checks_and_config_through_the_client(client: SchemaRegistryClient) -> None:
    client.register_schema("payments-value", avro(PAYMENT_V1))
    assert client.test_compatibility("payments-value", avro(PAYMENT_V2)) is True
    assert client.test_compatibility("payments-value", avro(PAYMENT_BROKEN)) is False
    assert client.test_compatibility("payments-value", avro(PAYMENT_V2), version=1) is True
    assert client.test_compatibility_all_versions("payments-value", avro(PAYMENT_BROKEN)) is False
    assert client.get_compatibility() == "BACKWARD"
    client.set_compatibility("payments-value", "NONE")
    assert client.get_compatibility("payments-value") == "NONE"
    assert client.test_compatibility("payments-value", avro(PAYMENT_BROKEN)) is True
    client.set_config(config=ServerConfig(compatibility=ConfigCompatibilityLevel.FULL))
    assert client.get_config().compatibility_level == ConfigCompatibilityLevel.FULL
    assert client.delete_config("payments-value").compatibility_level == ConfigCompatibilityLevel.NONE
    assert client.test_compatibility("payments-value", avro(PAYMENT_BROKEN)) is False


def test_deletes_and_modes_through_the_client(client: SchemaRegistryClient) -> None:
    client.register_schema("payments-value", avro(PAYMENT_V1))
    client.register_schema("payments-value", avro(PAYMENT_V2))
    assert client.delete_version("payments-value", 2) == 2
    assert client.delete_version("payments-value", 2, permanent=True) == 2
    assert client.get_versions("payments-value") == [1]
    assert client.delete_subject("payments-value") == [1]
    assert client.get_subjects() == []
    assert client.delete_subject("payments-value", permanent=True) == [1]
    assert client.get_subjects(deleted=True) == []
    client.update_global_mode("READONLY")
    assert client.get_global_mode() == "READONLY"
    with pytest.raises(SchemaRegistryError) as caught:
        client.register_schema("payments-value", avro(PAYMENT_V1))
    assert caught.value.error_code == 42205
    client.update_global_mode("READWRITE")
    client.update_mode("payments-value", "READONLY")
    assert client.get_mode("payments-value") == "READONLY"
    with pytest.raises(SchemaRegistryError):
        client.register_schema("payments-value", avro(PAYMENT_V1))
    assert client.delete_mode("payments-value") == "READONLY"
    assert client.register_schema("payments-value", avro(PAYMENT_V1)) > 0


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(15) == 0


def consume(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"registry-test-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        out: list[bytes] = []
        for _ in range(300):
            msg = consumer.poll(0.1)
            if msg is None:
                if len(out) >= count:
                    break
                continue
            assert msg.error() is None, msg.error()
            value = msg.value()
            assert value is not None
            out.append(value)
        return out
    finally:
        consumer.close()


def test_confluents_avro_serde_round_trips_records_through_the_broker(
    broker: ThreadBroker, client: SchemaRegistryClient
) -> None:
    """AvroSerializer registers under `<topic>-value` (TopicNameStrategy) and frames each
    record as magic 0 + the registry's id; AvroDeserializer resolves that id and decodes."""
    create_topic(broker.bootstrap, "payments")
    ctx = SerializationContext("payments", MessageField.VALUE)
    serialize = AvroSerializer(client, json.dumps(PAYMENT_V1))
    records = [{"id": f"p{i}", "amount": i * 1.5} for i in range(20)]
    produce(broker.bootstrap, "payments", [serialize(r, ctx) for r in records])

    registered = client.get_latest_version("payments-value")
    values = consume(broker.bootstrap, "payments", len(records))
    assert {struct.unpack(">bI", v[:5]) for v in values} == {(0, registered.schema_id)}
    deserialize = AvroDeserializer(client)
    assert [deserialize(v, ctx) for v in values] == records


def test_evolution_old_records_read_with_the_new_schema_and_a_breaking_change_is_refused(
    broker: ThreadBroker, client: SchemaRegistryClient
) -> None:
    create_topic(broker.bootstrap, "evolving")
    ctx = SerializationContext("evolving", MessageField.VALUE)
    old = AvroSerializer(client, json.dumps(PAYMENT_V1))
    new = AvroSerializer(client, json.dumps(PAYMENT_V2))
    produce(broker.bootstrap, "evolving", [old({"id": "a", "amount": 1.0}, ctx)])
    produce(broker.bootstrap, "evolving", [new({"id": "b", "amount": 2.0, "currency": "USD"}, ctx)])
    assert client.get_versions("evolving-value") == [1, 2]
    with pytest.raises(SchemaRegistryError) as refused:
        AvroSerializer(client, json.dumps(PAYMENT_BROKEN))({"id": "c", "amount": True}, ctx)
    assert refused.value.error_code == 409
    assert client.get_versions("evolving-value") == [1, 2]

    reader = AvroDeserializer(client, json.dumps(PAYMENT_V2))
    decoded = [reader(v, ctx) for v in consume(broker.bootstrap, "evolving", 2)]
    assert decoded == [
        {"id": "a", "amount": 1.0, "currency": "EUR"},
        {"id": "b", "amount": 2.0, "currency": "USD"},
    ]


def test_a_serializer_that_does_not_auto_register_finds_a_registered_schema_by_lookup(
    broker: ThreadBroker, client: SchemaRegistryClient, registry_url: str
) -> None:
    schema_id = client.register_schema("lookups-value", avro(PAYMENT_V1))
    ctx = SerializationContext("lookups", MessageField.VALUE)
    other = fresh_client(registry_url)
    try:
        serialize = AvroSerializer(other, json.dumps(PAYMENT_V1), conf={"auto.register.schemas": False})
        framed = serialize({"id": "x", "amount": 3.0}, ctx)
        assert framed is not None
        assert struct.unpack(">bI", framed[:5]) == (0, schema_id)
        latest = AvroSerializer(other, conf={"auto.register.schemas": False, "use.latest.version": True})
        again = latest({"id": "y", "amount": 4.0}, ctx)
        assert again is not None
        assert again[:5] == framed[:5]
        unknown = AvroSerializer(other, json.dumps(PAYMENT_V2), conf={"auto.register.schemas": False})
        with pytest.raises(SchemaRegistryError) as missing:
            unknown({"id": "z", "amount": 5.0, "currency": "GBP"}, ctx)
        assert missing.value.error_code == 40403
    finally:
        other.close()
