"""The logs service on a real broker, schema registry, SQLite file and HTTP server (127.0.0.1,
OS port): log lines shipped to logs.* (JSON by a real `LogShipper` over aiokafka, and Avro
`LogRecord` through the registry serde) are indexed by the ``log-indexer`` group and searchable
by service, level and text, newest first; bad query parameters are 422 with one message per
field; a redelivered line is indexed once; poison records go to the DLQ without stopping the
indexer; retention keeps the newest `max_records`."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import socket
import struct
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import structlog
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition

from kit.logging import configure_logging
from schemas.catalog import default_catalog
from schemas.client import RegistryClient
from schemas.serde import AvroSerializer
from services.common.db_sqlite import SqliteDatabase
from services.common.kafka import EventProducer
from services.common.log_shipper import ACCESS_LOGGER, LogShipper, SendRawAdapter, avro_log_encoder
from services.logs.app import INDEXER_KEY, RUNNER_KEY, create_app
from services.logs.config import LOG_TOPICS, LogsConfig
from streamshop.cli import build_parser
from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import aiokafka_consume, create_topic
from tests.support.kit_processes import consume_all
from tests.support.registry import ThreadRegistry
from tests.support.services import serve_app
from tests.support.sse import read_sse

Client = TestClient[web.Request, web.Application]


class AiokafkaLogProducer:
    """The shipper's producer protocol over a plain aiokafka producer."""

    def __init__(self, producer: AIOKafkaProducer) -> None:
        self.producer = producer

    async def send(self, topic: str, key: bytes | None, value: bytes, headers: Sequence[tuple[str, bytes]]) -> Any:
        return await self.producer.send(topic, value=value, key=key, headers=list(headers))


@pytest.fixture
async def producer(broker: ThreadBroker) -> AsyncIterator[AIOKafkaProducer]:
    for topic in LOG_TOPICS:
        create_topic(broker.bootstrap, topic, 2)
    p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", enable_idempotence=True)
    await p.start()
    yield p
    await p.stop()


@pytest.fixture
async def start_logs(
    tmp_path: Path, broker: ThreadBroker, shared_registry: ThreadRegistry
) -> AsyncIterator[Callable[..., Any]]:
    """Start the logs service (`start_logs(max_records=...)`) on a real HTTP server."""
    clients: list[Client] = []

    async def start(**overrides: Any) -> Client:
        config = LogsConfig(
            bootstrap_servers=broker.bootstrap,
            registry_url=shared_registry.url,
            database_path=tmp_path / "logs.db",
            log_shipping=False,
            commit_interval_ms=100,
            **overrides,
        )
        client: Client = TestClient(TestServer(create_app(config), host="127.0.0.1", port=0))
        await client.start_server()
        clients.append(client)
        return client

    yield start
    for c in clients:
        await c.close()


async def ship(
    producer: AIOKafkaProducer, service: str, lines: Sequence[dict[str, Any]], instance: str | None = None, **kw: Any
) -> None:
    """Log `lines` (structlog event dicts) through a real shipper and wait until they are acknowledged."""
    shipper = LogShipper(service=service, instance=instance or f"{service}-1", level="debug", **kw)
    await shipper.start(AiokafkaLogProducer(producer))
    for line in lines:
        shipper(None, str(line.get("level", "info")), {"level": "info", **line})
    await shipper.stop()
    assert (shipper.shipped, shipper.failed, shipper.dropped) == (len(lines), 0, 0)


async def get_json(client: Client, path: str, status: int = 200) -> Any:
    response = await client.get(path)
    assert response.status == status, await response.text()
    return await response.json()


async def wait_for_total(client: Client, total: int, within: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while True:
        stats: dict[str, Any] = await get_json(client, "/logs/stats")
        if stats["total"] >= total:
            assert stats["total"] == total
            return stats
        if time.monotonic() > deadline:
            raise AssertionError(f"only {stats['total']} of {total} log records indexed")
        await asyncio.sleep(0.05)


def events(body: dict[str, Any]) -> list[str]:
    return [item["event"] for item in body["items"]]


async def test_json_and_avro_log_lines_are_indexed_and_searchable_by_service_level_and_text(
    producer: AIOKafkaProducer, shared_registry: ThreadRegistry, start_logs: Callable[..., Any]
) -> None:
    """Lines of `orders` shipped as JSON (to logs.app, logs.ingress and logs.db by logger) and of
    `otp` shipped as Avro LogRecord are all indexed; service, level and q filter them, q matches
    words of the message and of the structured fields, and /logs/stats counts them."""
    client: Client = await start_logs()
    await ship(
        producer,
        "orders",
        [
            {"event": "order created", "logger": "services.orders.api", "order_id": "o-17", "total": "25.00"},
            {"event": "payment slow", "level": "warning", "logger": "services.orders.api", "ms": 812},
            {"event": "payment declined", "level": "error", "logger": "services.orders.api", "order_id": "o-18"},
            {"event": "request", "logger": ACCESS_LOGGER, "path": "/orders", "status": 201},
            {"event": "statement", "level": "debug", "logger": "services.orders.db", "sql": "INSERT INTO orders"},
        ],
    )
    async with RegistryClient(shared_registry.url) as registry:
        serializer = AvroSerializer(registry, topic_strategies=default_catalog().topic_strategies())
        await ship(
            producer,
            "otp",
            [
                {"event": "otp requested", "logger": "services.otp.api", "user_id": "u-1"},
                {"event": "sms provider down", "level": "critical", "logger": "services.otp.api", "attempt": 3},
            ],
            encoder=avro_log_encoder(serializer),
        )

    stats = await wait_for_total(client, 7)
    assert stats["services"]["orders"] == {"total": 5, "info": 2, "warning": 1, "error": 1, "debug": 1}
    assert stats["services"]["otp"] == {"total": 2, "info": 1, "critical": 1}
    assert stats["levels"] == {"info": 3, "warning": 1, "error": 1, "debug": 1, "critical": 1}

    orders = await get_json(client, "/logs?service=orders")
    assert sorted(events(orders)) == ["order created", "payment declined", "payment slow", "request", "statement"]
    by_event = {item["event"]: item for item in orders["items"]}
    assert by_event["request"]["stream"] == "ingress"
    assert by_event["request"]["topic"] == "logs.ingress"
    assert by_event["statement"]["stream"] == "db"
    assert by_event["order created"]["fields"]["order_id"] == "o-17"
    assert by_event["order created"]["instance"] == "orders-1"
    assert by_event["order created"]["timestamp"].endswith("Z")

    assert events(await get_json(client, "/logs?level=error")) == ["payment declined"]
    assert events(await get_json(client, "/logs?service=otp&level=critical")) == ["sms provider down"]
    assert sorted(events(await get_json(client, "/logs?q=payment"))) == ["payment declined", "payment slow"]
    assert events(await get_json(client, "/logs?q=o-18")) == ["payment declined"]  # a field value
    assert events(await get_json(client, "/logs?q=provider&service=otp")) == ["sms provider down"]  # Avro line
    assert events(await get_json(client, "/logs?q=provider&service=orders")) == []
    assert events(await get_json(client, '/logs?q="AND (NEAR')) == []  # FTS syntax in q is plain text


async def test_results_are_newest_first_and_limited(producer: AIOKafkaProducer, start_logs: Callable[..., Any]) -> None:
    """Lines come back newest first, and `limit` keeps the newest N of them."""
    client: Client = await start_logs()
    await ship(producer, "orders", [{"event": f"step {i}", "logger": "services.orders.api"} for i in range(6)])
    await wait_for_total(client, 6)
    assert events(await get_json(client, "/logs")) == [f"step {i}" for i in (5, 4, 3, 2, 1, 0)]
    assert events(await get_json(client, "/logs?service=orders&limit=2")) == ["step 5", "step 4"]
    assert events(await get_json(client, "/logs?q=step&limit=1")) == ["step 5"]


async def test_invalid_query_parameters_are_422_with_a_message_per_field_and_readiness_needs_its_dependencies(
    start_logs: Callable[..., Any],
) -> None:
    """level outside debug..critical, limit outside 1..500 or not a number, a bad `since` and an
    unknown parameter are each named in details.fields; /readyz checks broker, database and the consumer."""
    client: Client = await start_logs()
    body = await get_json(client, "/logs?level=verbose&limit=0&since=yesterday&colour=red", 422)
    assert body["error"] == "validation_failed"
    fields = body["details"]["fields"]
    assert fields["level"] == "must be one of debug, info, warning, error, critical"
    assert fields["limit"] == "must be between 1 and 500"
    assert "ISO 8601" in fields["since"]
    assert fields["colour"].startswith("is not an allowed parameter")
    assert (await get_json(client, "/logs?limit=501", 422))["details"]["fields"] == {
        "limit": "must be between 1 and 500"
    }
    assert (await get_json(client, "/logs?limit=ten", 422))["details"]["fields"] == {"limit": "must be an integer"}
    assert (await get_json(client, "/logs?level=info&level=error", 422))["details"]["fields"] == {
        "level": "must be given at most once"
    }
    assert (await get_json(client, "/logs?limit=500&level=critical&since=2026-01-01T00:00:00Z"))["items"] == []
    for beyond in ("99999999999999999999", "9" * 5_000, "253402300800000"):  # past SQLite's INTEGER, past 9999
        assert "since" in (await get_json(client, f"/logs?since={beyond}", 422))["details"]["fields"]
    assert (await get_json(client, "/logs?since=253402300799999"))["items"] == []
    ready = await get_json(client, "/readyz")
    assert set(ready["checks"]) == {"broker", "database", "consumer"}


async def test_instances_lists_each_instance_of_each_service_with_its_requests_errors_and_newest_line(
    producer: AIOKafkaProducer, start_logs: Callable[..., Any]
) -> None:
    """Two instances of `orders` are two rows: requests are access-log lines, errors are error and
    critical lines; `since` bounds the window and is checked like the search's."""
    client: Client = await start_logs()
    request = {"event": "http request", "logger": ACCESS_LOGGER, "path": "/orders", "status": 201}
    await ship(producer, "orders", [request, request, {"event": "boom", "level": "error", "logger": "orders.api"}])
    await ship(
        producer, "orders", [request, {"event": "down", "level": "critical", "logger": "orders.api"}], "orders-2"
    )
    await ship(producer, "otp", [{"event": "otp requested", "logger": "services.otp.api"}])
    await wait_for_total(client, 6)

    body = await get_json(client, "/logs/instances")
    assert [(i["service"], i["instance"], i["requests"], i["errors"], i["lines"]) for i in body["items"]] == [
        ("orders", "orders-1", 2, 1, 3),
        ("orders", "orders-2", 1, 1, 2),
        ("otp", "otp-1", 0, 0, 1),
    ]
    newest = {i["instance"]: i["last_seen"] for i in body["items"]}
    latest = {item["instance"]: item["timestamp"] for item in reversed((await get_json(client, "/logs"))["items"])}
    assert newest == latest
    assert body["since"] < min(newest.values())

    assert (await get_json(client, "/logs/instances?since=2999-01-01T00:00:00Z"))["items"] == []
    fields = (await get_json(client, "/logs/instances?since=yesterday&service=orders", 422))["details"]["fields"]
    assert set(fields) == {"since", "service"}
    assert fields["service"] == "is not an allowed parameter (allowed: since)"


async def test_a_redelivered_log_line_is_indexed_once(
    broker: ThreadBroker, producer: AIOKafkaProducer, start_logs: Callable[..., Any]
) -> None:
    """The same line twice in the topic (same envelope event id), and then every line delivered
    again after the group's offsets are rewound to 0 and the service restarted, leave one row
    per line: duplicates are skipped by event id."""
    record = {
        "envelope": {"event_id": "4a4bd2f6-0000-4000-8000-000000000001", "occurred_at": "2026-01-01T00:00:00Z"},
        "service": "orders",
        "instance": "orders-1",
        "level": "info",
        "event": "order paid",
        "logger": "services.orders.api",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "fields": {},
    }
    value = json.dumps(record).encode()
    for _ in range(2):
        await (await producer.send("logs.app", value=value, key=b"orders-1"))
    await ship(producer, "orders", [{"event": "order shipped", "logger": "services.orders.api"}])
    client: Client = await start_logs()
    await wait_for_total(client, 2)
    assert client.app is not None
    first = client.app[INDEXER_KEY]
    deadline = time.monotonic() + 20
    while first.duplicates < 1:  # the second copy is processed (skipped) too
        assert time.monotonic() < deadline, "the second copy was never delivered"
        await asyncio.sleep(0.05)
    assert (await get_json(client, "/logs/stats"))["total"] == 2
    await client.close()

    rewind = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="log-indexer", enable_auto_commit=False)
    await rewind.start()
    try:
        partitions = [TopicPartition(t, p) for t in LOG_TOPICS for p in range(2)]
        rewind.assign(partitions)
        await rewind.commit(dict.fromkeys(partitions, 0))
    finally:
        await rewind.stop()

    again: Client = await start_logs()
    assert again.app is not None
    indexer = again.app[INDEXER_KEY]
    deadline = time.monotonic() + 20
    while indexer.duplicates < 3:
        assert time.monotonic() < deadline, f"only {indexer.duplicates} redeliveries seen"
        await asyncio.sleep(0.05)
    assert indexer.indexed == 0
    assert sorted(events(await get_json(again, "/logs"))) == ["order paid", "order shipped"]


async def test_poison_records_go_to_the_dlq_and_indexing_continues(
    broker: ThreadBroker, producer: AIOKafkaProducer, start_logs: Callable[..., Any]
) -> None:
    """Garbage bytes, broken JSON, Avro with an unknown schema id and a JSON object without a
    service are dead-lettered to logs.app.dlq with the failure in headers; the good line
    behind them on the same partition is indexed."""
    poison = [
        b"not a log line",
        b'{"service": "orders", "event": ',
        b"\x00\x00\x00\x03\xe7\x02xx",
        json.dumps({"level": "info", "event": "no service", "timestamp": "2026-01-01T00:00:00Z"}).encode(),
    ]
    for value in poison:
        await (await producer.send("logs.app", value=value, key=b"orders-1", partition=0))
    good = {
        "service": "orders",
        "level": "info",
        "event": "after the poison",
        "timestamp": "2026-01-01T00:00:00Z",
    }  # no envelope: deduplicated by topic/partition/offset
    await (await producer.send("logs.app", value=json.dumps(good).encode(), key=b"orders-1", partition=0))
    client: Client = await start_logs()
    await wait_for_total(client, 1)
    assert events(await get_json(client, "/logs")) == ["after the poison"]

    dlq_partitions = await producer.partitions_for("logs.app.dlq")
    dead = await aiokafka_consume(
        broker.bootstrap, {("logs.app.dlq", p): 0 for p in dlq_partitions}, len(poison), within=20
    )
    dead.sort(key=lambda d: d.offset)  # same key: one partition, in the original order
    assert [d.value for d in dead] == poison
    headers = [{k: (v or b"").decode() for k, v in d.headers} for d in dead]
    assert {h["dlq.original.topic"] for h in headers} == {"logs.app"}
    assert [h["dlq.group"] for h in headers] == ["log-indexer"] * 4
    assert headers[2]["dlq.error.class"] == "schemas.serde.UnknownSchemaIdError"
    assert headers[3]["dlq.error.class"] == "services.common.consumer.PermanentError"
    assert client.app is not None
    assert client.app[RUNNER_KEY].stats.dead_lettered == 4


async def test_retention_keeps_only_the_newest_max_records(
    producer: AIOKafkaProducer, start_logs: Callable[..., Any]
) -> None:
    """With max_records=3, after 7 lines only the 3 newest remain (in the index and in search)."""
    client: Client = await start_logs(max_records=3)
    await ship(producer, "orders", [{"event": f"line {i}", "logger": "services.orders.api"} for i in range(7)])
    assert client.app is not None
    indexer = client.app[INDEXER_KEY]
    deadline = time.monotonic() + 20
    while indexer.indexed < 7:
        assert time.monotonic() < deadline, f"only {indexer.indexed} of 7 indexed"
        await asyncio.sleep(0.05)
    assert (await get_json(client, "/logs/stats"))["total"] == 3
    assert events(await get_json(client, "/logs")) == ["line 6", "line 5", "line 4"]
    assert events(await get_json(client, "/logs?q=line")) == ["line 6", "line 5", "line 4"]  # FTS rows pruned too


def test_streamshop_logs_command_maps_options_to_the_service_settings() -> None:
    """`streamshop logs --port 9103 --database x.db` parses to the logs service's runner."""
    args = build_parser().parse_args(["logs", "--port", "9103", "--database", "x.db", "--max-records", "10"])
    assert (args.port, args.database, args.max_records) == (9103, Path("x.db"), 10)
    assert callable(args.func)


# -- the live tail (GET /logs/tail, Server-Sent Events) ----------------------------------------


async def test_the_live_tail_sends_the_backlog_then_follows_new_matching_records_in_order(
    producer: AIOKafkaProducer, start_logs: Callable[..., Any]
) -> None:
    client = await start_logs()
    await ship(producer, "orders", [{"event": f"old {i}"} for i in range(3)])
    await wait_for_total(client, 3)
    response = await client.get("/logs/tail?service=orders&backlog=2")
    assert response.status == 200
    assert response.headers["Content-Type"] == "text/event-stream"
    backlog = await read_sse(response, 2)
    assert [e["data"]["event"] for e in backlog] == ["old 1", "old 2"]  # newest two, oldest first

    await ship(producer, "otp", [{"event": "other service"}])
    await ship(producer, "orders", [{"event": "new 0"}, {"event": "new 1", "level": "error"}])
    live = await read_sse(response, 2)
    assert [e["data"]["event"] for e in live] == ["new 0", "new 1"]
    assert all(e["data"]["service"] == "orders" for e in live)
    ids = [e["id"] for e in backlog + live]
    assert ids == sorted(ids)
    assert len(set(ids)) == 4
    assert all(e["id"] == e["data"]["id"] for e in live)
    response.close()


async def test_a_reconnecting_tail_resumes_after_its_last_event_id_without_the_backlog(
    producer: AIOKafkaProducer, start_logs: Callable[..., Any]
) -> None:
    client = await start_logs()
    await ship(producer, "orders", [{"event": f"line {i}"} for i in range(5)])
    await wait_for_total(client, 5)
    first = await client.get("/logs/tail?backlog=5")
    seen = await read_sse(first, 5)
    first.close()
    assert [e["data"]["event"] for e in seen] == [f"line {i}" for i in range(5)]

    resumed = await client.get("/logs/tail?backlog=5", headers={"Last-Event-ID": str(seen[1]["id"])})
    rest = await read_sse(resumed, 3)
    assert [e["data"]["event"] for e in rest] == ["line 2", "line 3", "line 4"]
    resumed.close()


async def test_a_backlog_of_lines_indexed_out_of_timestamp_order_is_not_sent_again_live(
    producer: AIOKafkaProducer, start_logs: Callable[..., Any]
) -> None:
    """Lines arrive out of timestamp order (another instance's clock, a shipper that flushed late):
    the backlog holds the newest by timestamp, and the live part must continue after every
    backlog event sent, not after the one with the newest timestamp, or it repeats them."""
    client = await start_logs()

    async def line(event: str, timestamp: str) -> None:
        record = {
            "envelope": {"event_id": str(uuid.uuid4())},
            "service": "orders",
            "instance": "orders-2",
            "level": "info",
            "event": event,
            "timestamp": timestamp,
        }
        await (await producer.send("logs.app", json.dumps(record).encode(), key=b"orders-2"))

    await line("late clock", "2030-01-01T00:00:10+00:00")  # indexed first, newest timestamp
    await wait_for_total(client, 1)
    await line("early clock", "2030-01-01T00:00:05+00:00")  # indexed second, older timestamp
    await wait_for_total(client, 2)
    response = await client.get("/logs/tail?service=orders&backlog=2")
    backlog = await read_sse(response, 2)
    assert sorted(e["data"]["event"] for e in backlog) == ["early clock", "late clock"]

    await line("after the tail opened", "2030-01-01T00:00:20+00:00")
    live = await read_sse(response, 1)
    assert [e["data"]["event"] for e in live] == ["after the tail opened"]
    # The last event id seen is where a reconnect resumes: it must be past the whole backlog.
    assert backlog[-1]["id"] == max(e["id"] for e in backlog)
    response.close()


async def test_the_tail_rejects_bad_parameters_limits_open_streams_and_keeps_idle_streams_alive(
    start_logs: Callable[..., Any],
) -> None:
    client = await start_logs(max_tail_clients=1, tail_keepalive_s=0.1)
    for path, headers, field in (
        ("/logs/tail?backlog=-1", {}, "backlog"),
        ("/logs/tail?backlog=501", {}, "backlog"),
        ("/logs/tail?limit=5", {}, "limit"),
        ("/logs/tail?level=loud", {}, "level"),
        ("/logs/tail", {"Last-Event-ID": "abc"}, "Last-Event-ID"),
        ("/logs/tail", {"Last-Event-ID": "\u00b2"}, "Last-Event-ID"),  # a digit to isdigit(), not to int()
        ("/logs/tail?since=\u00b2", {}, "since"),
    ):
        response = await client.get(path, headers=headers)
        assert response.status == 422, path
        body = await response.json()
        assert body["error"] == "validation_failed"
        assert field in body["details"]["fields"], body

    idle = await client.get("/logs/tail?backlog=0")
    assert idle.status == 200
    async with asyncio.timeout(5):
        lines = [(await idle.content.readline()).decode() for _ in range(4)]
    assert ": keepalive\n" in lines  # an idle stream gets comment lines, not silence
    second = await client.get("/logs/tail")
    assert second.status == 503
    assert (await second.json())["error"] == "unavailable"
    async with asyncio.timeout(5):
        await client.close()  # shutdown ends the open tail instead of waiting for it


@asynccontextmanager
async def services_shipper(
    broker: ThreadBroker, registry_url: str, **settings: Any
) -> AsyncIterator[tuple[LogShipper, EventProducer]]:
    """A shipper on the services' own producer (`SendRawAdapter` over `EventProducer`), as
    instance orders-7; stopped (its buffer flushed) when the block ends."""
    async with RegistryClient(registry_url) as registry:
        producer = EventProducer(broker.bootstrap, AvroSerializer(registry))
        async with producer:
            shipper = LogShipper(service="orders", instance="orders-7", **settings)
            await shipper.start(SendRawAdapter(producer))
            yield shipper, producer
            await shipper.stop()


async def test_the_services_shipper_sends_whole_batches_to_the_instances_partition_in_order(
    broker: ThreadBroker, shared_registry: ThreadRegistry
) -> None:
    """Through the services' own producer (`SendRawAdapter` over `EventProducer.send_batch_raw`),
    a burst of lines lands on one partition of logs.app — the one the instance key maps to — in
    the order logged, each once."""
    create_topic(broker.bootstrap, "logs.app", 3)
    async with services_shipper(broker, shared_registry.url, level="debug", batch_size=64) as (shipper, producer):
        for i in range(500):
            shipper(None, "info", {"level": "info", "event": f"line {i}"})
        partition = producer._started()._partitioner(b"orders-7", [0, 1, 2], [0, 1, 2])
    assert (shipper.shipped, shipper.failed, shipper.dropped) == (500, 0, 0)
    records = await consume_all(broker.bootstrap, "logs.app", 500, partitions=3)
    assert {r.partition for r in records} == {partition}
    assert {r.key for r in records} == {b"orders-7"}
    assert [json.loads(r.value or b"")["event"] for r in records] == [f"line {i}" for i in range(500)]


async def test_access_log_lines_spread_over_every_partition_of_logs_ingress_batch_by_batch(
    broker: ThreadBroker, shared_registry: ThreadRegistry
) -> None:
    """One instance's access log (one line per request, each independent) is not held to the
    instance's partition: unkeyed, each batch goes to a partition of the producer's choosing."""
    create_topic(broker.bootstrap, "logs.ingress", 3)
    async with services_shipper(broker, shared_registry.url, level="debug", batch_size=1) as (shipper, _):
        for i in range(60):
            shipper(None, "info", {"level": "info", "event": "http request", "logger": ACCESS_LOGGER, "n": i})
            await shipper.flush()
    assert (shipper.shipped, shipper.failed, shipper.dropped) == (60, 0, 0)
    records = await consume_all(broker.bootstrap, "logs.ingress", 60, partitions=3)
    assert {r.partition for r in records} == {0, 1, 2}  # each missed with chance (2/3)^60
    assert {r.key for r in records} == {None}
    assert sorted(json.loads(r.value or b"")["fields"]["n"] for r in records) == list(range(60))


async def test_the_database_work_of_a_service_goes_to_logs_db(
    tmp_path: Path, broker: ThreadBroker, shared_registry: ThreadRegistry
) -> None:
    """Opening, migrating, a transaction that held the write lock too long and closing a
    service's database are logged under services.common.db, which the shipper sends to logs.db."""
    create_topic(broker.bootstrap, "logs.db", 3)
    try:
        async with services_shipper(broker, shared_registry.url, level="info", batch_size=64) as (shipper, _):
            configure_logging(stream=io.StringIO(), fmt="json", tap=shipper)
            async with SqliteDatabase(tmp_path / "work.db", slow_ms=1.0) as db:
                await db.migrate("work", ["CREATE TABLE t (x INTEGER)"])
                async with db.transaction() as tx:
                    await tx.execute("INSERT INTO t VALUES (1)")
                    await asyncio.sleep(0.01)  # holds the write lock 10 ms, beyond slow_ms
    finally:
        root = logging.getLogger()
        for h in [h for h in root.handlers if getattr(h, "_streamshop_handler", False)]:
            root.removeHandler(h)
        structlog.reset_defaults()
    records = await consume_all(broker.bootstrap, "logs.db", 4, partitions=3)
    lines = [json.loads(r.value or b"") for r in records]
    assert [line["event"] for line in lines] == [
        "database opened",
        "database migrated",
        "slow transaction",
        "database closed",
    ]
    assert {line["logger"] for line in lines} == {"services.common.db"}
    assert lines[1]["fields"]["component"] == "work"
    assert lines[2]["level"] == "warning"
    assert lines[2]["fields"]["held_ms"] >= 10


@pytest.mark.parametrize("leaves", ["close", "reset"])
async def test_a_tail_whose_client_left_ends_within_one_keepalive_interval(
    tmp_path: Path, broker: ThreadBroker, shared_registry: ThreadRegistry, leaves: str
) -> None:
    """A quiet tail (no matching records) notices its client left: its slot is free again within
    one keepalive interval, whether the client closed cleanly or its connection was reset.  Served
    as `kit.process` serves it (aiohttp does not cancel a handler whose client left)."""
    keepalive = 0.5
    config = LogsConfig(
        bootstrap_servers=broker.bootstrap,
        registry_url=shared_registry.url,
        database_path=tmp_path / "logs.db",
        log_shipping=False,
        max_tail_clients=1,
        tail_keepalive_s=keepalive,
    )
    async with serve_app(create_app(config)) as (url, session):  # an AppRunner, as the services run
        host, port = url.removeprefix("http://").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(f"GET /logs/tail?q=nothing-matches HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        await writer.drain()
        async with asyncio.timeout(10):
            assert (await reader.readline()).startswith(b"HTTP/1.1 200")
            while await reader.readline() != b"\r\n":
                pass
        async with session.get(f"{url}/logs/tail") as refused:
            assert refused.status == 503  # the one slot is taken
        if leaves == "reset":
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.close()
        left = time.monotonic()
        while True:
            async with session.get(f"{url}/logs/tail?backlog=0") as response:
                if response.status == 200:
                    break
            assert time.monotonic() - left < keepalive + 0.5, "the tail outlived its client"
            await asyncio.sleep(0.05)
