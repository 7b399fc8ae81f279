"""The transactional outbox: events are committed with the state change, the relay publishes
them in order and marks them sent, and a relay SIGKILLed between publish and mark publishes
again (at-least-once) while an idempotent consumer applies each event once.  Real broker
(in a thread), real registry, real SQLite, a real child process for the crash."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from schemas.client import RegistryClient
from schemas.serde import AvroSerializer, RecordValidationError
from services.common.consumer import ConsumerRunner
from services.common.db_sqlite import SqliteDatabase
from services.common.kafka import EventProducer
from services.common.outbox import OutboxRelay
from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import create_topic
from tests.support.kit_processes import (
    CATALOG,
    EFFECTS,
    Kit,
    consume_all,
    count_effects,
    effects_handler,
    kit,
    open_outbox,
    order_created,
    read_line,
    spawn,
)
from tests.support.registry import ThreadRegistry

ORDERS_DDL = "CREATE TABLE orders (id TEXT PRIMARY KEY, status TEXT NOT NULL);"


@pytest.fixture
async def tools(broker: ThreadBroker, shared_registry: ThreadRegistry) -> AsyncIterator[Kit]:
    create_topic(broker.bootstrap, "orders", 6)
    async with kit(broker.bootstrap, shared_registry.url) as k:
        yield k


def _rows(path: Path) -> list[tuple[str, int | None]]:
    with sqlite3.connect(path) as conn:
        return [(r[0], r[1]) for r in conn.execute("SELECT event_id, sent_at FROM outbox ORDER BY id")]


async def test_database_is_wal_with_foreign_keys_migrates_once_and_serializes_transactions(tmp_path: Path) -> None:
    """The connection is in WAL mode with foreign keys and a busy timeout; a component's steps
    apply once; 50 concurrent read-modify-write transactions don't interleave; `db.*` inside a
    transaction is refused instead of deadlocking."""
    db = await SqliteDatabase(tmp_path / "kit.db", busy_timeout_ms=1234).open()
    pragmas = [(await db.fetchone(f"PRAGMA {p}")) for p in ("journal_mode", "foreign_keys", "busy_timeout")]
    assert [tuple(r) for r in pragmas if r is not None] == [("wal",), (1,), (1234,)]
    steps = ["CREATE TABLE counter (n INTEGER NOT NULL);\nINSERT INTO counter VALUES (0);"]
    assert await db.migrate("demo", steps) == 1
    assert await db.migrate("demo", [*steps, "ALTER TABLE counter ADD COLUMN note TEXT;"]) == 1
    assert await db.applied_version("demo") == 2

    async def bump() -> None:
        async with db.transaction() as tx:
            row = await tx.fetchone("SELECT n FROM counter")
            assert row is not None
            await asyncio.sleep(0)
            await tx.execute("UPDATE counter SET n = ?", (row[0] + 1,))

    await asyncio.gather(*(bump() for _ in range(50)))
    assert tuple(await db.fetchone("SELECT n FROM counter") or ()) == (50,)

    async def misuse() -> None:
        async with db.transaction():
            await db.fetchone("SELECT 1")

    with pytest.raises(RuntimeError, match="use tx"):
        await misuse()
    await db.close()


async def test_event_row_is_committed_with_the_state_change_and_rolled_back_with_it(tmp_path: Path) -> None:
    """A committed transaction holds the order and its event; a rolled back one (the body raised,
    or the record did not match its schema) holds neither."""
    db, outbox = await open_outbox(tmp_path / "orders.db")
    await db.migrate("orders", [ORDERS_DDL])
    good = order_created()
    async with db.transaction() as tx:
        await tx.execute("INSERT INTO orders VALUES (?, 'created')", (good["order_id"],))
        event_id = await outbox.add(tx, "orders", good["order_id"], "OrderCreated", good)
    assert event_id == good["envelope"]["event_id"]

    async def create(record: dict[str, Any], *, fail: bool = False) -> None:
        async with db.transaction() as tx:
            await tx.execute("INSERT INTO orders VALUES (?, 'created')", (record["order_id"],))
            await outbox.add(tx, "orders", record["order_id"], "OrderCreated", record)
            if fail:
                raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await create(order_created(), fail=True)
    invalid = order_created()
    invalid["total"] = 25.0  # a float is not money
    with pytest.raises(RecordValidationError, match="total"):
        await create(invalid)

    orders = [r["id"] for r in await db.fetchall("SELECT id FROM orders")]
    assert orders == [good["order_id"]]
    assert _rows(tmp_path / "orders.db") == [(good["envelope"]["event_id"], None)]
    assert await outbox.pending_count() == 1
    await db.close()


async def test_relay_publishes_pending_rows_in_order_per_key_and_marks_them_sent(
    tmp_path: Path, broker: ThreadBroker, tools: Kit
) -> None:
    """40 events over 4 keys, interleaved, each committed in its own transaction while the relay
    runs: all reach the topic as Confluent-framed Avro with the event_id header, every key's
    events in commit order, and every row is marked sent."""
    db, outbox = await open_outbox(tmp_path / "orders.db")
    relay = OutboxRelay(outbox, tools.producer, batch_size=7, poll_interval=0.2)
    relay.start()
    keys = [order_created()["order_id"] for _ in range(4)]
    expected: dict[str, list[str]] = {k: [] for k in keys}
    for i in range(40):
        key = keys[i % 4]
        record = order_created(key)
        async with db.transaction() as tx:
            await outbox.add(tx, "orders", key, "OrderCreated", record, {"traceparent": _request_trace(i)})
        expected[key].append(record["envelope"]["event_id"])
    records = await consume_all(broker.bootstrap, "orders", 40)
    for _ in range(100):
        if await outbox.pending_count() == 0:
            break
        await asyncio.sleep(0.05)
    await relay.stop()

    assert len(records) == 40
    requests = {_request_trace(i).split("-")[1] for i in range(40)}
    seen: dict[str, list[str]] = {k: [] for k in keys}
    for rec in records:
        decoded = await tools.deserializer.deserialize(rec.value)
        event_id = str(decoded.value["envelope"]["event_id"])
        assert decoded.record_name == "io.streamshop.events.orders.OrderCreated"
        assert dict(rec.headers)["event_id"] == event_id.encode()
        # The relay's send continues the request's trace stored with the row: same trace, its own span.
        _, trace_id, span_id, _ = dict(rec.headers)["traceparent"].decode().split("-")
        assert trace_id in requests
        assert span_id != "00f067aa0ba902b7"
        seen[rec.key.decode()].append(event_id)
    assert seen == expected
    assert all(sent is not None for _, sent in _rows(tmp_path / "orders.db"))
    assert relay.published == 40
    await db.close()


async def test_relay_sigkilled_between_publish_and_mark_republishes_and_consumer_applies_once(
    tmp_path: Path, broker: ThreadBroker, shared_registry: ThreadRegistry, tools: Kit
) -> None:
    """A relay child process SIGKILLs itself after the broker acknowledged its batch and before
    marking it sent: the rows stay pending, a new relay publishes them again (duplicates on the
    topic), and an idempotent consumer applies each of the 10 events exactly once."""
    path = tmp_path / "orders.db"
    db, outbox = await open_outbox(path)
    for _ in range(10):
        record = order_created()
        async with db.transaction() as tx:
            await outbox.add(tx, "orders", record["order_id"], "OrderCreated", record)
    await db.close()

    spec = {"bootstrap": broker.bootstrap, "registry": shared_registry.url, "db": str(path)}
    child = await spawn("relay", {**spec, "crash_after_publish": True})
    assert await read_line(child) == "published 10"
    assert await asyncio.wait_for(child.wait(), 30) == -9  # really killed, before the mark
    assert all(sent is None for _, sent in _rows(path))
    assert len(await consume_all(broker.bootstrap, "orders", 10)) == 10  # the first copies are out

    child = await spawn("relay", spec)
    assert await read_line(child) == "done"
    assert await asyncio.wait_for(child.wait(), 30) == 0
    assert all(sent is not None for _, sent in _rows(path))
    assert len(await consume_all(broker.bootstrap, "orders", 20)) == 20  # republished: at least once

    consumer_db = await SqliteDatabase(tmp_path / "consumer.db").open()
    await consumer_db.migrate("effects", EFFECTS)
    handler = effects_handler(consumer_db, "analytics")
    await handler.setup()
    runner = ConsumerRunner(
        broker.bootstrap,
        "dedup",
        ["orders"],
        handler,
        deserializer=tools.deserializer,
        producer=tools.producer,
    )
    await runner.start()
    for _ in range(200):
        if runner.stats.processed == 20:
            break
        await asyncio.sleep(0.05)
    await runner.stop()
    await consumer_db.close()
    assert runner.stats.processed == 20
    assert handler.duplicates == 10
    assert count_effects(tmp_path / "consumer.db") == (10, 10)


async def test_relay_keeps_rows_pending_and_backs_off_while_the_registry_is_unreachable(
    tmp_path: Path, broker: ThreadBroker, tools: Kit
) -> None:
    """With the registry unreachable nothing is sent or marked: the relay records the failure on
    the row and retries with a growing delay (a few attempts in a second, not hundreds)."""
    db, outbox = await open_outbox(tmp_path / "orders.db")
    record = order_created()
    async with db.transaction() as tx:
        await outbox.add(tx, "orders", record["order_id"], "OrderCreated", record)
    async with RegistryClient("http://127.0.0.1:9", timeout=1) as down:
        serializer = AvroSerializer(down, topic_strategies=CATALOG.topic_strategies())
        async with EventProducer(broker.bootstrap, serializer) as producer:
            relay = OutboxRelay(outbox, producer, backoff_initial=0.05, backoff_max=0.4)
            relay.start()
            await asyncio.sleep(1.5)
            await relay.stop()
    assert 3 <= relay.failures <= 8
    row = await db.fetchone("SELECT attempts, last_error, sent_at FROM outbox")
    assert row is not None
    assert row["attempts"] == relay.failures
    assert "RegistryUnavailableError" in row["last_error"]
    assert row["sent_at"] is None
    await db.close()


def _request_trace(i: int) -> str:
    """The `traceparent` of the i-th request: its own trace, one span."""
    return f"00-{i:032x}-00f067aa0ba902b7-01".replace("-" + "0" * 32 + "-", "-" + "f" * 32 + "-")
