"""Transactional outbox: events are written with the state change, published afterwards.

    async with db.transaction() as tx:
        await tx.execute("INSERT INTO orders ...")
        await outbox.add(tx, "orders", order_id, "OrderCreated", record, {"traceparent": tp})

`add` writes the event row in the caller's transaction: the order and its event are committed
together or not at all.  The `OutboxRelay` task then publishes pending rows through the
`EventProducer` (acks=all, idempotent) and marks them sent once the broker acknowledged them.

What a row stores (the decision): the record's **Avro binary encoding** (validated and encoded at
`add` time, unframed) plus a reference to the exact **schema text** it was encoded with (table
`outbox_schemas`, keyed by a SHA-256 fingerprint).  The relay frames it with that schema's
registry id at publish time.  So: an invalid record fails the caller's transaction (not the relay,
hours later); no registry call happens while the write lock is held and a registry outage never
blocks the service's writes; a deploy with a newer schema cannot re-encode old rows with the wrong
schema; the published bytes are exactly Confluent-framed Avro.

Guarantees:
- **Atomic**: no event without its state change, no state change without its event.
- **At least once**: a row is marked sent only after the broker acknowledged it.  A crash (or a
  failed mark) between the two republishes the row; its `envelope.event_id` (also in the
  `event_id` header) stays the same, so idempotent consumers (`services.common.consumer`) skip
  the copy.
- **Order per key**: rows are published in insertion order (`id`); records of one key go to one
  partition, and the idempotent producer keeps a partition in send order.  When a send fails, only
  the rows before the first failure are marked sent and the rest is retried in order, after a
  backoff (exponential, capped, with jitter).  After a crash the unmarked suffix is published
  again in order, so the first copy of each event still arrives in key order.
- One relay at a time per database: on SQLite the process that owns the file; on PostgreSQL the
  instance holding the relay's advisory lock (`Database.leadership`), the others standing by
  (docs/adr/011-outbox-across-instances.md).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kit.logging import get_logger
from schemas.serde import AvroSchema, encode, frame
from services.common.db import Database, Leadership, Migration, Session, Step, in_chunks
from services.common.kafka import EventProducer, Headers, encode_headers

__all__ = ["MIGRATIONS", "Outbox", "OutboxRelay", "PendingRow", "PreparedEvent", "event_id_of"]

log = get_logger(__name__)

MIGRATIONS: Sequence[Migration] = (
    Step(
        sqlite="""
        CREATE TABLE outbox_schemas (
            fingerprint TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            text TEXT NOT NULL
        ) WITHOUT ROWID;
        CREATE TABLE outbox (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            event_id TEXT NOT NULL UNIQUE,
            topic TEXT NOT NULL,
            key TEXT,
            event_name TEXT NOT NULL,
            schema_fp TEXT NOT NULL REFERENCES outbox_schemas (fingerprint),
            payload BLOB NOT NULL,
            headers TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            sent_at INTEGER,
            attempts INTEGER NOT NULL DEFAULT 0,
            last_error TEXT
        );
        CREATE INDEX outbox_pending ON outbox (id) WHERE sent_at IS NULL;
        """,
        postgresql="""
        CREATE TABLE outbox_schemas (
            fingerprint TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            text TEXT NOT NULL
        );
        CREATE TABLE outbox (
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            event_id TEXT NOT NULL UNIQUE,
            topic TEXT NOT NULL,
            key TEXT,
            event_name TEXT NOT NULL,
            schema_fp TEXT NOT NULL REFERENCES outbox_schemas (fingerprint),
            payload BYTEA NOT NULL,
            headers TEXT NOT NULL,
            created_at BIGINT NOT NULL,
            sent_at BIGINT,
            attempts INTEGER NOT NULL DEFAULT 0,
            last_error TEXT
        );
        CREATE INDEX outbox_pending ON outbox (id) WHERE sent_at IS NULL;
        """,
    ),
)

EVENT_ID_HEADER = "event_id"
EVENT_NAME_HEADER = "event_name"


def stored_headers(text: str) -> list[tuple[str, bytes]]:
    """An event's headers as `prepare` stores them (JSON pairs, base64 values), decoded."""
    return [(n, base64.b64decode(v)) for n, v in json.loads(text)]


def event_id_of(record: Any) -> str | None:
    """`record["envelope"]["event_id"]` as a string, or None when the record has no envelope."""
    envelope = record.get("envelope") if isinstance(record, Mapping) else None
    event_id = envelope.get("event_id") if isinstance(envelope, Mapping) else None
    return None if event_id is None else str(event_id)


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class PendingRow:
    id: int
    event_id: str
    topic: str
    key: str | None
    event_name: str
    schema: AvroSchema
    payload: bytes
    headers: list[tuple[str, bytes]]


@dataclass(frozen=True, slots=True)
class PreparedEvent:
    """An outbox row encoded on the event loop, written by `write(session)` in the caller's transaction."""

    event_id: str
    topic: str
    key: str | None
    event_name: str
    schema: AvroSchema
    fingerprint: str
    payload: bytes
    headers: str
    stored: set[str]  # the outbox's fingerprints known to be in outbox_schemas

    async def write(self, s: Session) -> None:
        if self.fingerprint not in self.stored:
            await s.execute(
                "INSERT INTO outbox_schemas (fingerprint, name, text) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                (self.fingerprint, self.schema.name, self.schema.text),
            )
            # Known stored once committed (a rollback would take the row with it): one statement
            # fewer for every later event of this schema.
            s.on_commit(lambda: self.stored.add(self.fingerprint))
        # Sent with the other events of a group-committed batch on PostgreSQL (Session.insert),
        # in the order they were written: the relay publishes by id.
        await s.insert(
            "INSERT INTO outbox (event_id, topic, key, event_name, schema_fp, payload, headers, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                self.event_id,
                self.topic,
                self.key,
                self.event_name,
                self.fingerprint,
                self.payload,
                self.headers,
                _now_ms(),
            ),
        )


class Outbox:
    """The outbox of one service database.  `schema_for(event_name)` resolves event names (normally
    `default_catalog().schema`); call `await outbox.setup()` once to create its tables."""

    def __init__(self, db: Database, schema_for: Callable[[str], AvroSchema]) -> None:
        self.db = db
        self._schema_for = schema_for
        self._fingerprints: dict[str, str] = {}  # schema text -> fingerprint
        self._parsed: dict[str, AvroSchema] = {}  # fingerprint -> schema
        self._stored: set[str] = set()  # fingerprints committed to outbox_schemas by this process
        self.wakeup = asyncio.Event()

    async def setup(self) -> None:
        await self.db.migrate("outbox", MIGRATIONS)

    async def add(  # noqa: PLR0917 - the call reads like the row it writes: add(tx, topic, key, event, record)
        self,
        tx: Session,
        topic: str,
        key: str | None,
        event_name: str,
        record: Mapping[str, Any],
        headers: Headers | None = None,
    ) -> str:
        """Write the event in `tx`; its event id.  Raises `RecordValidationError` (invalid record)
        or `ValueError` (no `envelope.event_id`) before touching the database; the caller's
        transaction rolls back."""
        row = self.prepare(topic, key, event_name, record, headers)
        await row.write(tx)
        tx.on_commit(self.wakeup.set)
        return row.event_id

    def prepare(
        self,
        topic: str,
        key: str | None,
        event_name: str,
        record: Mapping[str, Any],
        headers: Headers | None = None,
    ) -> PreparedEvent:
        """The event encoded and ready to insert with `PreparedEvent.write(session)` inside a
        `Database.write` function; call `wake()` once that write returned (committed).  Raises
        like `add`, before anything is written."""
        event_id = event_id_of(record)
        if event_id is None:
            raise ValueError(f"{event_name} record has no envelope.event_id: outbox events need one")
        schema = self._schema_for(event_name)
        return PreparedEvent(
            event_id=event_id,
            topic=topic,
            key=key,
            event_name=event_name,
            schema=schema,
            fingerprint=self._fingerprint(schema),
            payload=encode(schema, record),
            headers=json.dumps([[n, base64.b64encode(v).decode()] for n, v in encode_headers(headers)]),
            stored=self._stored,
        )

    def wake(self) -> None:
        """Tell the relay that new rows were committed."""
        self.wakeup.set()

    def _fingerprint(self, schema: AvroSchema) -> str:
        fingerprint = self._fingerprints.get(schema.text)
        if fingerprint is None:
            fingerprint = hashlib.sha256(schema.text.encode()).hexdigest()
            self._fingerprints[schema.text] = fingerprint
            self._parsed[fingerprint] = schema
        return fingerprint

    async def pending(self, limit: int = 500) -> list[PendingRow]:
        """The oldest unsent rows, in insertion order."""
        rows = await self.db.fetchall(
            "SELECT o.id, o.event_id, o.topic, o.key, o.event_name, o.schema_fp, o.payload, o.headers, s.text"
            " FROM outbox o JOIN outbox_schemas s ON s.fingerprint = o.schema_fp"
            " WHERE o.sent_at IS NULL ORDER BY o.id LIMIT ?",
            (limit,),
        )
        out = []
        for r in rows:
            schema = self._parsed.get(r["schema_fp"])
            if schema is None:
                schema = self._parsed[r["schema_fp"]] = AvroSchema.parse(r["text"])
            headers = stored_headers(r["headers"])
            out.append(
                PendingRow(r["id"], r["event_id"], r["topic"], r["key"], r["event_name"], schema, r["payload"], headers)
            )
        return out

    async def mark_sent(self, ids: Sequence[int]) -> None:
        if not ids:
            return
        now = _now_ms()

        async def mark(s: Session) -> None:
            for marks, chunk in in_chunks(ids):
                await s.execute(f"UPDATE outbox SET sent_at = ? WHERE id IN ({marks})", (now, *chunk))

        await self.db.write(mark)

    async def record_failure(self, row_id: int, error: BaseException) -> None:
        await self.db.execute(
            "UPDATE outbox SET attempts = attempts + 1, last_error = ? WHERE id = ?",
            (f"{type(error).__name__}: {error}"[:1000], row_id),
        )

    async def pending_count(self) -> int:
        row = await self.db.fetchone("SELECT COUNT(*) FROM outbox WHERE sent_at IS NULL")
        return int(row[0]) if row is not None else 0

    async def prune(self, older_than_ms: int) -> int:
        """Delete sent rows sent more than `older_than_ms` ago; returns how many."""
        return await self.db.execute(
            "DELETE FROM outbox WHERE sent_at IS NOT NULL AND sent_at < ?", (_now_ms() - older_than_ms,)
        )


AfterPublish = Callable[[Sequence[PendingRow]], Awaitable[None]]


class OutboxRelay:
    """Publishes pending outbox rows, marks them sent, backs off on failure.

    `start()` runs it as a task (woken by every committed `add`, and every `poll_interval` s in
    case another writer added rows); `stop()` finishes the batch in flight and returns.
    `after_publish` is called after the broker acknowledged a batch and before it is marked sent
    (a test seam: crash tests SIGKILL the process there).
    """

    def __init__(
        self,
        outbox: Outbox,
        producer: EventProducer,
        *,
        batch_size: int = 500,
        poll_interval: float = 1.0,
        backoff_initial: float = 0.1,
        backoff_max: float = 10.0,
        retain_sent_ms: int = 24 * 3600 * 1000,
        after_publish: AfterPublish | None = None,
    ) -> None:
        self.outbox = outbox
        self.producer = producer
        self.batch_size = batch_size
        self.poll_interval = poll_interval
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.retain_sent_ms = retain_sent_ms
        self.after_publish = after_publish
        self.published = 0  # rows acknowledged and marked sent by this relay
        self.failures = 0  # failed publish rounds
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._stopped = asyncio.Event()
        self.leadership: Leadership | None = None  # while running: whether this relay leads

    async def publish_once(self) -> int:
        """Publish one batch of pending rows; returns how many were marked sent.  Raises the first
        send error after marking the rows acknowledged before it."""
        rows = await self.outbox.pending(self.batch_size)
        if not rows:
            return 0
        futures: list[asyncio.Future[Any]] = []
        error: BaseException | None = None
        for row in rows:
            try:
                schema_id = await self.producer.serializer.schema_id(row.topic, row.schema)
                headers = [
                    (EVENT_ID_HEADER, row.event_id.encode()),
                    (EVENT_NAME_HEADER, row.event_name.encode()),
                    *row.headers,
                ]
                futures.append(await self.producer.send_raw(row.topic, row.key, frame(schema_id, row.payload), headers))
            except Exception as e:  # registry down, producer buffer error...: send nothing after it
                error = e
                break
        results = await asyncio.gather(*futures, return_exceptions=True)
        acked: list[PendingRow] = []
        for row, result in zip(rows, results, strict=False):
            if isinstance(result, BaseException):
                error = result
                break
            acked.append(row)
        if acked and self.after_publish is not None:
            await self.after_publish(acked)
        await self.outbox.mark_sent([r.id for r in acked])
        self.published += len(acked)
        if error is not None:
            failed = rows[len(acked)]
            await self.outbox.record_failure(failed.id, error)
            raise error
        return len(acked)

    async def run(self) -> None:
        """Publish until stopped: drain, then wait for a wakeup or the poll interval.  Only while
        this instance leads (`Database.leadership`): on PostgreSQL one relay of all the service's
        instances publishes, another takes over when it dies; on SQLite it always leads."""
        async with self.outbox.db.leadership(RELAY_LEADERSHIP) as lead:
            self.leadership = lead
            await self._publish_while_leading(lead)

    async def _publish_while_leading(self, lead: Leadership) -> None:
        delay = self.backoff_initial
        last_prune = 0.0
        while not self._stopping:
            if not lead.held:
                await _first(lead.wait(), self._stopped.wait())
                continue
            self.outbox.wakeup.clear()
            try:
                sent = await self.publish_once()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self.failures += 1
                log.warning("relay publish failed", retry_in_s=round(delay, 2), error=repr(e))
                await self._sleep(delay * random.uniform(0.8, 1.2))
                delay = min(delay * 2, self.backoff_max)
                continue
            delay = self.backoff_initial
            if time.monotonic() - last_prune > 60:
                last_prune = time.monotonic()
                await self.outbox.prune(self.retain_sent_ms)
            if sent < self.batch_size:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.outbox.wakeup.wait(), self.poll_interval)

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopped.wait(), seconds)

    def start(self) -> None:
        if self._task is None:
            self._stopping = False
            self._stopped.clear()
            self._task = asyncio.create_task(self.run(), name="outbox-relay")

    async def stop(self) -> None:
        """Let the batch in flight finish (published and marked), then end the task."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping = True
        self._stopped.set()
        self.outbox.wakeup.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), 30)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


RELAY_LEADERSHIP = "streamshop.outbox-relay"


async def _first(*waits: Awaitable[Any]) -> None:
    """Until the first of `waits` is done; the others are cancelled."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
