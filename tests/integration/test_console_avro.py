"""`streamshop produce|consume` with Avro through a real schema registry on a real broker: JSON
lines in, Confluent-framed Avro on the topic, decoded JSON out; records that fit no format are
reported and skipped, never fatal."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from schemas.catalog import load_catalog
from tests.integration.test_cli import cli, topics
from tests.support.harness import REPO, ThreadBroker
from tests.support.registry import ThreadRegistry

CATALOG = load_catalog()
TOPIC = "orders"
SUBJECT = f"{TOPIC}-value"


@pytest.fixture
def registry(broker: ThreadBroker) -> Iterator[ThreadRegistry]:
    with ThreadRegistry(broker.bootstrap) as running:
        yield running


def register(registry: ThreadRegistry, subject: str, name: str) -> int:
    client = SchemaRegistryClient({"url": registry.url})
    try:
        return int(client.register_schema(subject, Schema(CATALOG.schema(name).text, "AVRO")))
    finally:
        client.close()


def order(i: int) -> dict[str, Any]:
    example = json.loads(CATALOG.example_path("OrderCreated").read_text())
    example["order_id"] = f"0b8c9e44-3b0e-4c5e-9a0e-{i:012d}"
    example["customer_id"] = f"cust-{i}"
    example["items"][0]["unit_price"] = f"{i}.25"
    return dict(example)


def produce(broker: ThreadBroker, registry: ThreadRegistry, lines: list[str], *extra: str) -> Any:
    return cli(
        "produce",
        "--bootstrap",
        broker.bootstrap,
        "--registry",
        registry.url,
        "--topic",
        TOPIC,
        *extra,
        stdin="".join(line + "\n" for line in lines),
    )


def consume(broker: ThreadBroker, registry_url: str, count: int, *extra: str, raw: bool = False) -> Any:
    run = cli_bytes if raw else cli
    return run(
        "consume",
        "--bootstrap",
        broker.bootstrap,
        "--registry",
        registry_url,
        "--topic",
        TOPIC,
        "--from-beginning",
        "--max-messages",
        str(count),
        "--timeout",
        "10",
        *extra,
    )


def cli_bytes(*args: str) -> subprocess.CompletedProcess[bytes]:
    """The tool with its output as bytes: raw Avro is not text."""
    return subprocess.run(
        [sys.executable, "-m", "streamshop.cli", *args], capture_output=True, timeout=60, cwd=REPO, check=False
    )


def test_json_lines_produced_as_avro_are_read_by_confluents_deserializer_and_consumed_back_as_the_same_json(
    broker: ThreadBroker, registry: ThreadRegistry
) -> None:
    assert topics(broker, "create", TOPIC, "--partitions", "2").returncode == 0
    schema_id = register(registry, SUBJECT, "OrderCreated")
    sent = [order(i) for i in range(6)]
    lines = [f"{o['order_id']}|{json.dumps(o)}" for o in sent]
    produced = produce(broker, registry, lines, "--value-format", "avro", "--key-separator", "|", "--header", "a=b")
    assert produced.returncode == 0, produced.stderr
    assert "6 records sent to orders" in produced.stderr

    # Confluent's own deserializer reads what the console wrote.
    client = SchemaRegistryClient({"url": registry.url})
    deserializer = AvroDeserializer(client)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "check", "enable.auto.commit": False})
    decoded: dict[str, dict[str, Any]] = {}
    try:
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(2)])
        for _ in range(200):
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                value = deserializer(message.value(), SerializationContext(TOPIC, MessageField.VALUE))
                decoded[message.key().decode()] = value
            if len(decoded) == len(sent):
                break
    finally:
        consumer.close()
        client.close()
    assert set(decoded) == {o["order_id"] for o in sent}
    assert decoded[sent[3]["order_id"]]["items"][0]["unit_price"] == Decimal("3.2500")

    consumed = consume(broker, registry.url, 6, "--print-key", "--print-offset", "--print-headers", "--print-schema-id")
    assert consumed.returncode == 0, consumed.stderr
    rows = [line.split("\t") for line in consumed.stdout.splitlines()]
    assert len(rows) == 6
    by_key = {key: (headers, int(sid), json.loads(value)) for _, headers, key, sid, value in rows}
    for o in sent:
        headers, sid, value = by_key[o["order_id"]]
        assert headers == "a:b"
        assert sid == schema_id
        assert value["customer_id"] == o["customer_id"]
        assert Decimal(value["items"][0]["unit_price"]) == Decimal(o["items"][0]["unit_price"])
        assert Decimal(value["total"]) == Decimal(o["total"])
        assert value["created_at"].startswith("2025-03-14T09:26:53.589")
        assert value["envelope"]["producer"] == o["envelope"]["producer"]


def test_produce_avro_skips_lines_that_are_not_json_or_break_the_schema_and_names_the_field(
    broker: ThreadBroker, registry: ThreadRegistry
) -> None:
    assert topics(broker, "create", TOPIC).returncode == 0
    register(registry, SUBJECT, "OrderCreated")
    wrong_quantity = order(2)
    wrong_quantity["items"][0]["quantity"] = "two"
    float_price = json.dumps(order(3)).replace('"3.25"', "3.25")
    lines = [json.dumps(order(1)), "{not json", json.dumps(wrong_quantity), float_price, json.dumps(order(4))]
    produced = produce(broker, registry, lines, "--value-format", "avro")
    assert produced.returncode == 1
    assert "2 records sent to orders" in produced.stderr
    assert "3 lines skipped" in produced.stderr
    assert "line 2: not JSON" in produced.stderr
    assert "line 3:" in produced.stderr
    assert "quantity" in produced.stderr
    assert "line 4:" in produced.stderr
    assert "decimals as strings" in produced.stderr


def test_produce_avro_without_a_schema_for_the_subject_or_a_registry_exits_1_and_sends_nothing(
    broker: ThreadBroker, registry: ThreadRegistry
) -> None:
    assert topics(broker, "create", TOPIC).returncode == 0
    missing = produce(broker, registry, [json.dumps(order(1))], "--value-format", "avro")
    assert missing.returncode == 1
    assert "orders-value" in missing.stderr
    assert "no schema" in missing.stderr
    unreachable = cli(
        "produce",
        "--bootstrap",
        broker.bootstrap,
        "--registry",
        "http://127.0.0.1:9",
        "--topic",
        TOPIC,
        "--value-format",
        "avro",
        stdin=json.dumps(order(1)) + "\n",
    )
    assert unreachable.returncode == 1
    assert "schema registry at http://127.0.0.1:9 unreachable" in unreachable.stderr
    assert "records sent" not in unreachable.stderr


@pytest.mark.slow
def test_consume_auto_decodes_avro_prints_other_values_as_stored_and_explicit_formats_report_misfits(
    broker: ThreadBroker, registry: ThreadRegistry
) -> None:
    assert topics(broker, "create", TOPIC, "--partitions", "1").returncode == 0
    register(registry, SUBJECT, "OrderCreated")
    assert produce(broker, registry, [json.dumps(order(1))], "--value-format", "avro").returncode == 0
    deep = "[" * 50_000 + "]" * 50_000  # valid JSON that plain json.loads recurses out on
    assert produce(broker, registry, ['{"plain": "json"}', "just text", deep]).returncode == 0

    auto = consume(broker, registry.url, 4, "--print-schema-id")
    assert auto.returncode == 0, auto.stderr
    rows = [line.split("\t") for line in auto.stdout.splitlines()]
    assert json.loads(rows[0][1])["customer_id"] == "cust-1"
    assert rows[1:] == [["-", '{"plain": "json"}'], ["-", "just text"], ["-", deep]]

    as_json = consume(broker, registry.url, 4, "--value-format", "json")
    assert as_json.returncode == 1
    assert as_json.stdout.splitlines() == ['{"plain":"json"}']
    assert "orders 0:0: not JSON" in as_json.stderr
    assert "orders 0:2: not JSON" in as_json.stderr
    assert "orders 0:3: not JSON: nested deeper than" in as_json.stderr
    assert "Traceback" not in as_json.stderr
    assert "3 could not be shown as json" in as_json.stderr

    as_avro = consume(broker, registry.url, 3, "--value-format", "avro")
    assert as_avro.returncode == 1
    assert len(as_avro.stdout.splitlines()) == 1
    assert "orders 0:1: not Confluent-framed Avro (starts with byte 0x7b" in as_avro.stderr

    raw = consume(broker, registry.url, 1, "--value-format", "bytes", raw=True)
    assert raw.returncode == 0
    assert raw.stdout.startswith(b"\x00\x00\x00\x00")


def test_consume_auto_without_a_reachable_registry_warns_once_and_prints_what_is_stored(
    broker: ThreadBroker, registry: ThreadRegistry
) -> None:
    assert topics(broker, "create", TOPIC).returncode == 0
    register(registry, SUBJECT, "OrderCreated")
    lines = [json.dumps(order(i)) for i in range(3)]
    assert produce(broker, registry, lines, "--value-format", "avro").returncode == 0
    consumed = consume(broker, "http://127.0.0.1:9", 3, raw=True)
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stderr.count(b"schema registry at http://127.0.0.1:9 unreachable") == 1
    assert consumed.stdout.count(b"\x00\x00\x00\x00") == 3  # Confluent-framed, as stored
    assert consumed.stdout.count(b"cust-") == 3
    failed = consume(broker, "http://127.0.0.1:9", 3, "--value-format", "avro")
    assert failed.returncode == 1
    assert failed.stderr.count("unreachable") == 3
