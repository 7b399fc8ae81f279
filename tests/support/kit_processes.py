"""Child processes and helpers for the service-kit tests (outbox relay, consumer runner).

`python -m tests.support.kit_processes relay SPEC_JSON` publishes a database's outbox; with
`crash_after_publish` it SIGKILLs itself after the broker acknowledged the first batch and
before marking it sent (the relay's `after_publish` seam: the process really dies there).

`python -m tests.support.kit_processes consumer SPEC_JSON` runs a `ConsumerRunner` with an
idempotent handler whose effect is a row in `effects`; it prints one line per delivery
(`delivered <event_id>`, flushed before the effect) and, with `kill_after` N, SIGKILLs itself
right after the N-th effect committed.  SIGTERM stops it gracefully.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import ConsumerRecord, TopicPartition

from kit.logging import configure_logging
from schemas.catalog import default_catalog
from schemas.client import RegistryClient
from schemas.serde import AvroDeserializer, AvroSerializer
from services.common.consumer import ConsumerRunner, IdempotentHandler, Message
from services.common.db import Database, Session
from services.common.db_sqlite import SqliteDatabase
from services.common.kafka import EventProducer
from services.common.outbox import Outbox, OutboxRelay, PendingRow

REPO = Path(__file__).resolve().parents[2]
CATALOG = default_catalog()
EFFECTS = ("CREATE TABLE effects (id INTEGER PRIMARY KEY, event_id TEXT NOT NULL, order_id TEXT NOT NULL);",)


def order_created(order_id: str | None = None, *, event_id: str | None = None) -> dict[str, Any]:
    """A valid OrderCreated record with fresh ids."""
    now = datetime.now(UTC)
    return {
        "envelope": {
            "event_id": event_id or str(uuid.uuid4()),
            "occurred_at": now,
            "producer": {"service": "orders", "instance": "test"},
            "trace_id": None,
        },
        "order_id": order_id or str(uuid.uuid4()),
        "customer_id": "cust-1",
        "items": [{"sku": "MUG", "quantity": 2, "unit_price": Decimal("12.50")}],
        "total": Decimal("25.00"),
        "currency": "EUR",
        "created_at": now,
    }


@dataclass
class Kit:
    """A registry client, serde and started producer for one test or child."""

    registry: RegistryClient
    serializer: AvroSerializer
    deserializer: AvroDeserializer
    producer: EventProducer


@asynccontextmanager
async def kit(bootstrap: str, registry_url: str) -> AsyncIterator[Kit]:
    async with RegistryClient(registry_url) as registry:
        serializer = AvroSerializer(registry, topic_strategies=CATALOG.topic_strategies())
        deserializer = AvroDeserializer(registry, reader_schemas=CATALOG.schemas.values())
        async with EventProducer(bootstrap, serializer, client_id="kit-test") as producer:
            yield Kit(registry, serializer, deserializer, producer)


async def open_outbox(path: Path) -> tuple[Database, Outbox]:
    db = await SqliteDatabase(path).open()
    outbox = Outbox(db, CATALOG.schema)
    await outbox.setup()
    return db, outbox


def effects_handler(db: Database, name: str) -> IdempotentHandler:
    async def apply(tx: Session, message: Message) -> None:
        await tx.execute(
            "INSERT INTO effects (event_id, order_id) VALUES (?, ?)", (message.event_id, str(message.value["order_id"]))
        )

    return IdempotentHandler(db, name, apply)


def count_effects(path: Path) -> tuple[int, int]:
    """(effect rows, distinct event ids) read with a separate connection."""
    with sqlite3.connect(path) as conn:
        try:
            row = conn.execute("SELECT COUNT(*), COUNT(DISTINCT event_id) FROM effects").fetchone()
        except sqlite3.OperationalError:  # table not created yet
            return 0, 0
    return int(row[0]), int(row[1])


async def consume_all(
    bootstrap: str, topic: str, count: int, within: float = 20, partitions: int = 6
) -> list[ConsumerRecord[bytes, bytes]]:
    """Every record of `topic` (partitions 0..partitions-1) from the start, until `count` arrived."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    got: list[ConsumerRecord[bytes, bytes]] = []
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        deadline = time.monotonic() + within
        while len(got) < count and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=100)).values():
                got.extend(records)
    finally:
        await consumer.stop()
    return got


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def _relay(spec: dict[str, Any]) -> None:
    db, outbox = await open_outbox(Path(spec["db"]))

    async def crash(rows: Sequence[PendingRow]) -> None:
        _say(f"published {len(rows)}")
        os.kill(os.getpid(), signal.SIGKILL)

    async with kit(spec["bootstrap"], spec["registry"]) as k:
        relay = OutboxRelay(outbox, k.producer, batch_size=spec.get("batch_size", 500))
        if spec.get("crash_after_publish"):
            relay.after_publish = crash
        while await outbox.pending_count():
            await relay.publish_once()
    await db.close()
    _say("done")


async def _consumer(spec: dict[str, Any]) -> None:
    db = await SqliteDatabase(Path(spec["db"])).open()
    await db.migrate("effects", EFFECTS)
    inner = effects_handler(db, spec["group"])
    await inner.setup()
    kill_after = spec.get("kill_after")
    handled = 0

    async def handler(message: Message) -> None:
        nonlocal handled
        _say(f"delivered {message.event_id}")
        await inner(message)
        handled += 1
        if kill_after is not None and handled >= kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with kit(spec["bootstrap"], spec["registry"]) as k:
        runner = ConsumerRunner(
            spec["bootstrap"],
            spec["group"],
            [spec["topic"]],
            handler,
            deserializer=k.deserializer,
            producer=k.producer,
            commit_every=spec.get("commit_every", 100),
            commit_interval_ms=spec.get("commit_interval_ms", 60_000),
            max_records=spec.get("max_records", 500),
            **spec.get("consumer_config", {}),
        )
        await runner.start()
        _say("started")
        await stop.wait()
        await runner.stop()
    _say(f"stopped duplicates={inner.duplicates}")
    await db.close()


def command(mode: str, spec: dict[str, Any]) -> list[str]:
    return [sys.executable, "-m", "tests.support.kit_processes", mode, json.dumps(spec)]


async def spawn(mode: str, spec: dict[str, Any]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *command(mode, spec),
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


async def read_line(proc: asyncio.subprocess.Process, within: float = 30) -> str:
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), within)
    return line.decode().rstrip("\n")


def main(argv: Sequence[str]) -> None:
    mode, spec = argv[0], json.loads(argv[1])
    configure_logging(fmt="console", stream=sys.stderr)  # stdout is the protocol with the test
    asyncio.run(_relay(spec) if mode == "relay" else _consumer(spec))


if __name__ == "__main__":
    main(sys.argv[1:])
