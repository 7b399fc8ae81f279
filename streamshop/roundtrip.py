"""`streamshop roundtrip`: a broker and a schema registry in child processes; 1,000 keyed records
produced with acks=all and consumed back with confluent-kafka; 100 OrderCreated events
published as Confluent-framed Avro through the registry and decoded back; a short report.
Then both keep running until Ctrl-C (or stop at once with --exit).

Layout under --data-dir DIR: DIR/broker (the broker's log directory), DIR/broker.log and
DIR/registry.log (their structlog output)."""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from contracts.ports import DEFAULT_PORTS
from kit.settings import parse_host_port
from streamshop.broker_process import (
    ReadyLine,
    broker_command,
    parse_ready_line,
    parse_registry_ready_line,
    registry_command,
)
from streamshop.children import ChildProcess
from streamshop.clients import CLIENT_ID, CommandError, StopSignal, client_config, error_text

TOPIC = "demo.events"
AVRO_TOPIC = "orders"
AVRO_EVENTS = 100
PARTITIONS = 6
RECORDS = 1000
KEYS = 50


@dataclass
class ChildBroker:
    """`streamshop broker` as a child process, and what its ready line said."""

    child: ChildProcess[ReadyLine]
    bootstrap: str
    admin_url: str | None

    @classmethod
    def start(cls, data_dir: Path, listen: str, admin_listen: str, timeout: float = 60) -> ChildBroker:
        cmd = broker_command(data_dir / "broker", listen, admin_listen)
        child, ready = ChildProcess.start("broker", cmd, data_dir / "broker.log", parse_ready_line, timeout)
        return cls(child, ready.bootstrap, ready.admin_url)

    @property
    def proc(self) -> subprocess.Popen[str]:
        return self.child.proc

    @property
    def log_path(self) -> Path:
        return self.child.log_path

    def stop(self, timeout: float = 30) -> int:
        return self.child.stop(timeout)


def _produce(bootstrap: str) -> tuple[float, int]:
    """Produce RECORDS keyed records with acks=all; (seconds, failures)."""
    failures = 0

    def delivered(error: Any, _message: Any) -> None:
        nonlocal failures
        if error is not None:
            failures += 1

    producer = Producer(client_config(bootstrap, (), {"acks": "all", "linger.ms": 5, "message.timeout.ms": 30000}))
    started = time.perf_counter()
    for i in range(RECORDS):
        key = f"user-{i % KEYS}"
        value = json.dumps({"seq": i, "user": key, "event": "page_view", "ts_ms": int(time.time() * 1000)})
        producer.produce(TOPIC, value.encode(), key.encode(), on_delivery=delivered)
        producer.poll(0)
    failures += producer.flush(30)
    return time.perf_counter() - started, failures


def _consume(bootstrap: str, starts: dict[int, int]) -> tuple[float, Counter[int], bool]:
    """Read back what _produce wrote; (seconds, records per partition, every key in one partition)."""
    consumer = Consumer(client_config(bootstrap, (), {"group.id": CLIENT_ID, "enable.auto.commit": False}))
    counts: Counter[int] = Counter()
    key_partitions: dict[bytes, set[int]] = {}
    started = time.perf_counter()
    try:
        consumer.assign([TopicPartition(TOPIC, p, offset) for p, offset in starts.items()])
        deadline = time.monotonic() + 30
        while sum(counts.values()) < RECORDS and time.monotonic() < deadline:
            for message in consumer.consume(RECORDS, 0.2):
                partition = message.partition()
                if message.error() is None and partition is not None:
                    counts[partition] += 1
                    key_partitions.setdefault(message.key() or b"", set()).add(partition)
        elapsed = time.perf_counter() - started
    finally:
        consumer.close()
    return elapsed, counts, all(len(parts) == 1 for parts in key_partitions.values())


def _prepare_topic(bootstrap: str) -> dict[int, int]:
    """Create the topic unless a previous run did; the end offset of every partition."""
    admin = AdminClient(client_config(bootstrap))
    try:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS)], request_timeout=15)[TOPIC].result(20)
    except KafkaException as e:
        if e.args[0].name() != "TOPIC_ALREADY_EXISTS":
            raise CommandError(f"creating {TOPIC}: {error_text(e)}") from None
    metadata = admin.list_topics(TOPIC, timeout=15)
    consumer = Consumer(client_config(bootstrap, (), {"group.id": CLIENT_ID}))
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=15, cached=False)[1]
            for p in sorted(metadata.topics[TOPIC].partitions)
        }
    finally:
        consumer.close()


async def _avro_round_trip(bootstrap: str, registry_url: str) -> tuple[int, int, int]:
    """Publish AVRO_EVENTS OrderCreated events with streamshop's serde through the registry,
    read them back and decode them; (schema id, produced, decoded equal to what was sent)."""
    from schemas.catalog import default_catalog
    from schemas.client import RegistryClient
    from schemas.serde import AvroDeserializer, AvroSerializer

    catalog = default_catalog()
    schema = catalog.schema("OrderCreated")
    sent: dict[bytes, Any] = {}
    async with RegistryClient(registry_url) as registry:
        serializer = AvroSerializer(registry, topic_strategies=catalog.topic_strategies())
        values = []
        for _ in range(AVRO_EVENTS):
            record = copy.deepcopy(catalog.example("OrderCreated"))
            record["order_id"] = uuid.uuid4()
            record["envelope"]["event_id"] = uuid.uuid4()
            key = str(record["order_id"]).encode()
            sent[key] = record
            values.append((key, await serializer.serialize(AVRO_TOPIC, schema, record)))
        schema_id = await serializer.schema_id(AVRO_TOPIC, schema)
        await asyncio.to_thread(_produce_bytes, bootstrap, values)
        received = await asyncio.to_thread(_consume_bytes, bootstrap, set(sent))
        deserializer = AvroDeserializer(registry, reader_schemas=[schema])
        same = 0
        for key, value in received:
            decoded = await deserializer.deserialize(value)
            same += decoded.value == sent.get(key)
    return schema_id, len(values), same


def _produce_bytes(bootstrap: str, values: list[tuple[bytes, bytes]]) -> None:
    admin = AdminClient(client_config(bootstrap))
    try:
        admin.create_topics([NewTopic(AVRO_TOPIC, PARTITIONS)], request_timeout=15)[AVRO_TOPIC].result(20)
    except KafkaException as e:
        if e.args[0].name() != "TOPIC_ALREADY_EXISTS":
            raise CommandError(f"creating {AVRO_TOPIC}: {error_text(e)}") from None
    producer = Producer(client_config(bootstrap, (), {"acks": "all", "enable.idempotence": True}))
    for key, value in values:
        producer.produce(AVRO_TOPIC, value, key)
    if producer.flush(30):
        raise CommandError("Avro events were not all acknowledged")


def _consume_bytes(bootstrap: str, keys: set[bytes]) -> list[tuple[bytes, bytes]]:
    """The records of AVRO_TOPIC with these keys (this run's; earlier runs left others)."""
    consumer = Consumer(client_config(bootstrap, (), {"group.id": CLIENT_ID, "enable.auto.commit": False}))
    out: list[tuple[bytes, bytes]] = []
    try:
        partitions = consumer.list_topics(AVRO_TOPIC, timeout=15).topics[AVRO_TOPIC].partitions
        consumer.assign([TopicPartition(AVRO_TOPIC, p, 0) for p in partitions])
        deadline = time.monotonic() + 30
        while len(out) < len(keys) and time.monotonic() < deadline:
            batch = consumer.consume(1000, 0.3)
            out += [(m.key() or b"", m.value() or b"") for m in batch if m.error() is None and m.key() in keys]
    finally:
        consumer.close()
    return out


def _rate(count: int, seconds: float) -> str:
    return f"{count / seconds:,.0f} records/s" if seconds > 0 else "n/a"


def _report(broker: ChildBroker, registry_url: str) -> bool:
    starts = _prepare_topic(broker.bootstrap)
    produce_s, failures = _produce(broker.bootstrap)
    consume_s, counts, keys_ok = _consume(broker.bootstrap, starts)
    consumed = sum(counts.values())
    print(f"streamshop roundtrip: broker {broker.bootstrap} (pid {broker.proc.pid}, log {broker.log_path})")
    print(f"  topic        {TOPIC} ({len(starts)} partitions)")
    print(
        f"  produced     {RECORDS - failures} records in {produce_s:.2f} s ({_rate(RECORDS - failures, produce_s)}, "
        f"acks=all, {failures} failed)"
    )
    print(f"  consumed     {consumed} records in {consume_s:.2f} s ({_rate(consumed, consume_s)})")
    print("  partitions   " + " ".join(f"{p}:{counts.get(p, 0)}" for p in sorted(starts)))
    print(f"  keys         {KEYS} keys, each in exactly one partition: {'yes' if keys_ok else 'NO'}")
    schema_id, avro_sent, avro_same = asyncio.run(_avro_round_trip(broker.bootstrap, registry_url))
    print(
        f"  avro         {avro_sent} OrderCreated events to {AVRO_TOPIC} (schema id {schema_id} in the registry), "
        f"{avro_same} decoded back identical"
    )
    print(f"  registry     {registry_url}/subjects")
    if broker.admin_url:
        print(f"  admin API    {broker.admin_url}/api/topics  (metrics: {broker.admin_url}/metrics)")
    sys.stdout.flush()
    return failures == 0 and consumed == RECORDS and keys_ok and avro_same == avro_sent


def roundtrip(args: argparse.Namespace) -> int:
    try:
        listen = parse_host_port(args.listen, default_host="127.0.0.1")
    except ValueError as e:
        raise CommandError(f"--listen: {e}") from None
    admin_listen = args.admin_listen or f"{listen.host}:{0 if listen.port == 0 else DEFAULT_PORTS['broker-admin']}"
    registry_listen = args.registry_listen or f"{listen.host}:{0 if listen.port == 0 else DEFAULT_PORTS['registry']}"
    data_dir = Path(args.data_dir)
    broker = ChildBroker.start(data_dir, args.listen, admin_listen)
    registry: ChildProcess[str] | None = None
    try:
        registry, registry_url = ChildProcess.start(
            "registry",
            registry_command(broker.bootstrap, registry_listen),
            data_dir / "registry.log",
            parse_registry_ready_line,
        )
        ok = _report(broker, registry_url)
        if not args.exit:
            print("broker and registry running; press Ctrl-C to stop", flush=True)
            with StopSignal() as stop:
                while not stop and broker.proc.poll() is None and registry.running:
                    stop.event.wait(0.5)
            if broker.proc.poll() not in (None, 0):
                raise CommandError(f"the broker exited with status {broker.proc.returncode}; see {broker.log_path}")
    finally:
        if registry is not None:
            registry.stop()
        status = broker.stop()
    if status != 0:
        raise CommandError(f"the broker stopped with status {status}; see {broker.log_path}")
    print(f"broker stopped cleanly (data in {data_dir / 'broker'})", flush=True)
    return 0 if ok else 1
