"""Consumer runner: at-least-once processing of Avro events, with retries, a DLQ and lag.

    handler = IdempotentHandler(db, "sms-sender", send_sms)   # effect + event id in one transaction
    await handler.setup()
    runner = ConsumerRunner(
        bootstrap, "sms-sender", ["otp.requests"], handler, deserializer=deserializer, producer=producer
    )
    await runner.start()
    ...
    await runner.stop()      # graceful: finish the record in flight, commit, leave the group

Guarantees and behaviour:
- **Commit after processing**: an offset is committed only once its record was handled (or
  dead-lettered and the DLQ write acknowledged).  A crash re-delivers what was processed since
  the last commit: at-least-once.  Commits are batched: every `commit_every` records or
  `commit_interval_ms`, whichever first, and on partition revocation and shutdown.
- **Exactly-once effects** with `IdempotentHandler`: the event id (`envelope.event_id`, falling
  back to topic/partition/offset for records without an envelope) is inserted in the same SQLite
  transaction as the handler's effect; a redelivered event finds it and is skipped.
- **Retries**: a handler exception is retried `max_retries` times with exponential backoff
  (`backoff_initial` doubling up to `backoff_max`); then the record is dead-lettered.  A
  `PermanentError` from the handler or a `SerdeError` (bad magic byte, unknown schema id, garbage)
  is dead-lettered at once.  An unreachable registry (`RegistryError` that is not a serde error) or
  a failing DLQ write is *not* the record's fault: it is retried with capped backoff until it
  works or the runner stops, and the partition waits (nothing is skipped).
- **Dead-letter topic** `<topic>.dlq` (must exist where topics are not auto-created): same key,
  the original value bytes, the original headers plus `dlq.error.class`, `dlq.error.message`,
  `dlq.original.topic`, `dlq.original.partition`, `dlq.original.offset`,
  `dlq.original.timestamp` (ms), `dlq.failed.at` (ms), `dlq.attempts`, `dlq.group`.
  The partition moves on: one poison record never blocks the ones behind it.
- **Graceful shutdown**: `stop()` stops fetching, finishes the record in flight, commits what was
  processed and leaves the group (LeaveGroup), so the partitions move to other members at once
  instead of after the session timeout.  A static member (``group_instance_id``, KIP-345) does
  not leave, as in Kafka: its partitions wait up to the session timeout for the same instance to
  come back, and a restart (or a SIGKILL and restart) takes them back without a rebalance.
- **Batches**: a handler with a `handle_batch(messages)` method gets each fetched run of decoded
  records of a partition at once (one transaction for many records instead of one each).  It
  must be all-or-nothing; when it raises, the run is replayed record by record through the
  handler itself, so retries and the DLQ hit the record at fault only.  The run's span links to
  its records' producers; a handler whose records carry their producer in the payload rather
  than the headers (shipped log lines) gives it with an `origin(message)` method.
- **Lag**: `await runner.lag()` -> {TopicPartition: log end offset - position} for the assigned
  partitions; `runner.last_lag` is a snapshot refreshed about once a second, for a sync gauge.
- **Effects outside the database** (an e-mail, an HTTP call): `IdempotentHandler.already_processed`
  first, then the effect, then `IdempotentHandler.record` of it; see `already_processed`.

In a service, `runner_for_service(config, ...)` builds the runner with the service's Kafka settings
and `consuming(runner, prune=handler)` runs it (and the pruning of old event ids) for a block.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.errors import CommitFailedError, KafkaError
from aiokafka.structs import ConsumerRecord, TopicPartition

from kit import tracing
from kit.health import Check
from kit.logging import get_logger
from schemas.client import RegistryError
from schemas.serde import AvroDeserializer, SerdeError
from services.common.config import ServiceConfig
from services.common.db import Database, Migration, Session, Step, row_chunks
from services.common.kafka import EventProducer
from services.common.outbox import event_id_of

__all__ = [
    "MIGRATIONS",
    "ConsumerRunner",
    "Handler",
    "IdempotentHandler",
    "Message",
    "PermanentError",
    "RunnerStats",
    "consuming",
    "decode_record",
    "dlq_headers",
    "prune_forever",
    "runner_check",
    "runner_for_service",
]

log = get_logger(__name__)

MIGRATIONS: Sequence[Migration] = (
    Step(
        sqlite="""
        CREATE TABLE processed_events (
            consumer TEXT NOT NULL,
            event_id TEXT NOT NULL,
            processed_at INTEGER NOT NULL,
            PRIMARY KEY (consumer, event_id)
        ) WITHOUT ROWID;
        CREATE INDEX processed_events_age ON processed_events (processed_at);
        """,
        postgresql="""
        CREATE TABLE processed_events (
            consumer TEXT NOT NULL,
            event_id TEXT NOT NULL,
            processed_at BIGINT NOT NULL,
            PRIMARY KEY (consumer, event_id)
        );
        CREATE INDEX processed_events_age ON processed_events (processed_at);
        """,
    ),
)


class PermanentError(Exception):
    """Raised by a handler for a record that can never be processed: dead-letter it, no retry."""


@dataclass(frozen=True, slots=True)
class Message:
    """One decoded record handed to a handler."""

    topic: str
    partition: int
    offset: int
    key: str | None
    record_name: str
    value: Any
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int

    @property
    def event_id(self) -> str:
        """`envelope.event_id`, or `topic/partition/offset` for a record without envelope."""
        return event_id_of(self.value) or f"{self.topic}/{self.partition}/{self.offset}"

    def header(self, name: str) -> bytes | None:
        """The last header called `name`."""
        found = None
        for key, value in self.headers:
            if key == name:
                found = value
        return found


Handler = Callable[[Message], Awaitable[None]]
TxHandler = Callable[[Session, Message], Awaitable[None]]


class IdempotentHandler:
    """Runs `handler(tx, message)` once per event id: the id is recorded in `processed_events` in
    the same transaction as the handler's effect, and a duplicate is skipped (`duplicates` counts
    them).  `name` scopes the ids (two consumer groups sharing a database each see every event)."""

    def __init__(self, db: Database, name: str, handler: TxHandler) -> None:
        self.db = db
        self.name = name
        self.handler = handler
        self.duplicates = 0

    async def setup(self) -> None:
        await self.db.migrate("consumer", MIGRATIONS)

    async def __call__(self, message: Message) -> None:
        await self.record(message, self.handler)

    async def record(self, message: Message, effect: TxHandler | None = None) -> bool:
        """Record `message`'s event id and run `effect(tx, message)` in the same transaction;
        False (nothing run, counted in `duplicates`) when the id was already recorded."""
        async with self.db.transaction() as tx:
            if not await self.claim(tx, message.event_id):
                self.duplicates += 1
                return False
            if effect is not None:
                await effect(tx, message)
        return True

    async def claim(self, s: Session, event_id: str) -> bool:
        """Record `event_id` in the caller's open transaction; False when it was already recorded
        (for batch handlers running their own `Database.write`).  On PostgreSQL a second
        instance claiming the same id at once waits for the first's transaction, then gets False."""
        return event_id in await self.claim_many(s, [event_id])

    async def claim_many(self, s: Session, event_ids: Sequence[str]) -> set[str]:
        """`claim` for a batch, in a few statements: the ids recorded now (an id already recorded,
        or twice in `event_ids`, is claimed at most once).  Sorted, so two instances claiming
        overlapping batches take the rows' locks in one order and never deadlock."""
        now = int(time.time() * 1000)
        claimed: set[str] = set()
        rows = [(self.name, event_id, now) for event_id in sorted(set(event_ids))]
        for values, params in row_chunks(rows):
            for row in await s.fetchall(
                "INSERT INTO processed_events (consumer, event_id, processed_at)"
                f" VALUES {values} ON CONFLICT DO NOTHING RETURNING event_id",
                params,
            ):
                claimed.add(row[0])
        return claimed

    async def already_processed(self, message: Message) -> bool:
        """Whether `message`'s event id is recorded (then counted in `duplicates`).

        For an effect outside the database: check this, make the effect, then `record` it.  The
        SQLite write lock is then never held across network I/O; the price is that a crash between
        the effect and its record repeats the effect on redelivery, so the other side must
        deduplicate it (an idempotency key, a deterministic Message-ID)."""
        row = await self.db.fetchone(
            "SELECT 1 FROM processed_events WHERE consumer = ? AND event_id = ?", (self.name, message.event_id)
        )
        if row is None:
            return False
        self.duplicates += 1
        return True

    async def prune(self, older_than_ms: int) -> int:
        """Forget ids processed more than `older_than_ms` ago (keep longer than any redelivery)."""
        return await self.db.execute(
            "DELETE FROM processed_events WHERE consumer = ? AND processed_at < ?",
            (self.name, int(time.time() * 1000) - older_than_ms),
        )


@dataclass
class RunnerStats:
    processed: int = 0
    retries: int = 0
    dead_lettered: int = 0
    commits: int = 0
    commit_failures: int = 0
    errors: dict[str, int] = field(default_factory=dict)


class _Stopping(Exception):
    """The runner stops while a record waits for a retry: leave it uncommitted."""


class ConsumerRunner:
    """A consumer-group member that runs `handler` on every record of `topics`.

    `consumer_config` is passed to `AIOKafkaConsumer` (security settings, `session_timeout_ms`,
    `heartbeat_interval_ms`, `client_id`...); offsets are always committed by the runner.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        group_id: str,
        topics: Sequence[str],
        handler: Handler,
        *,
        deserializer: AvroDeserializer,
        producer: EventProducer,
        commit_every: int = 100,
        commit_interval_ms: int = 1000,
        max_retries: int = 3,
        backoff_initial: float = 0.05,
        backoff_max: float = 2.0,
        max_records: int = 500,
        dlq_suffix: str = ".dlq",
        **consumer_config: Any,
    ) -> None:
        self.group_id = group_id
        self.topics = list(topics)
        self.handler = handler
        self.deserializer = deserializer
        self.producer = producer
        self.commit_every = commit_every
        self.commit_interval = commit_interval_ms / 1000
        self.max_retries = max_retries
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.max_records = max_records
        self.dlq_suffix = dlq_suffix
        self.stats = RunnerStats()
        self.last_lag: dict[TopicPartition, int] = {}
        self._config: dict[str, Any] = {
            "auto_offset_reset": "earliest",
            **consumer_config,
            "bootstrap_servers": bootstrap_servers,
            "group_id": group_id,
            "enable_auto_commit": False,
        }
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._stopped = asyncio.Event()
        self._pending: dict[TopicPartition, int] = {}  # next offsets processed, not yet committed
        self._positions: dict[TopicPartition, int] = {}  # next offset to process, per partition
        self._uncommitted = 0
        self._last_commit = time.monotonic()
        self._revocations = 0
        self._commit_lock = asyncio.Lock()

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Join the group and start the processing task."""
        if self._consumer is not None:
            return
        consumer = AIOKafkaConsumer(**self._config)
        await consumer.start()
        consumer.subscribe(self.topics, listener=_Listener(self))
        self._consumer = consumer
        self._stopping = False
        self._stopped.clear()
        self._task = asyncio.create_task(self._run(), name=f"consumer-{self.group_id}")

    async def stop(self, grace: float = 30) -> None:
        """Stop fetching, finish the record in flight, commit, leave the group."""
        self._stopping = True
        self._stopped.set()
        task, self._task = self._task, None
        if task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(task), grace)
            except TimeoutError:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._consumer is not None:
            try:
                await self._commit()
            finally:
                consumer, self._consumer = self._consumer, None
                await consumer.stop()  # sends LeaveGroup

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def failure(self) -> str | None:
        """Why the runner is not consuming (None while it is): for readiness and operators."""
        task = self._task
        if task is None:
            return "not started"
        if not task.done():
            return None
        if task.cancelled():
            return "cancelled"
        error = task.exception()
        return f"{type(error).__name__}: {error}" if error is not None else "the consuming task has ended"

    def assignment(self) -> set[TopicPartition]:
        return set(self._consumer.assignment()) if self._consumer is not None else set()

    # -- the loop -------------------------------------------------------------------------------

    async def _run(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        last_lag = 0.0
        while not self._stopping:
            try:
                batches = await consumer.getmany(timeout_ms=200, max_records=self.max_records)
            except KafkaError as e:
                log.warning("fetch failed", group=self.group_id, error=repr(e))
                await self._sleep(self.backoff_initial)
                continue
            try:
                for tp, records in batches.items():
                    await self._process_partition(tp, records)
            except _Stopping:
                break
            if self._uncommitted >= self.commit_every or time.monotonic() - self._last_commit >= self.commit_interval:
                await self._commit()
            if time.monotonic() - last_lag >= 1.0:
                last_lag = time.monotonic()
                with contextlib.suppress(KafkaError, TimeoutError):
                    self.last_lag = await self.lag()

    async def _process_partition(self, tp: TopicPartition, records: list[ConsumerRecord[bytes, bytes]]) -> None:
        generation = self._revocations
        batch_handler = getattr(self.handler, "handle_batch", None)
        run: list[tuple[ConsumerRecord[bytes, bytes], Message]] = []
        for record in records:
            if self._stopping:
                raise _Stopping
            if generation != self._revocations:
                return  # revoked meanwhile: the new owner (maybe us again) starts from the committed offset
            if batch_handler is not None:
                message = await self._decode_quietly(record)
                if message is not None:
                    run.append((record, message))
                    continue
                await self._flush(tp, run, batch_handler)  # keep the order: what came before goes first
                run = []
            self._positions[tp] = record.offset
            await self._process(record)
            self._done(tp, record)
            if self._uncommitted >= self.commit_every:
                await self._commit()
        if run and generation == self._revocations:
            await self._flush(tp, run, batch_handler)

    def _done(self, tp: TopicPartition, record: ConsumerRecord[bytes, bytes]) -> None:
        self._pending[tp] = record.offset + 1
        self._positions[tp] = record.offset + 1
        self._uncommitted += 1

    async def _decode_quietly(self, record: ConsumerRecord[bytes, bytes]) -> Message | None:
        """The decoded record, or None for one the per-record path must handle (DLQ, registry retry)."""
        try:
            return await self._decode(record)
        except Exception:
            return None

    async def _decode(self, record: ConsumerRecord[bytes, bytes]) -> Message:
        return await decode_record(self.deserializer, record)

    async def _flush(
        self,
        tp: TopicPartition,
        run: list[tuple[ConsumerRecord[bytes, bytes], Message]],
        batch_handler: Callable[[list[Message]], Awaitable[None]] | None,
    ) -> None:
        """Hand a run of decoded records to the handler's `handle_batch` at once; if it fails,
        replay them one by one so retries and the DLQ apply to the record at fault only (the batch
        handler must be all-or-nothing, e.g. one transaction)."""
        if not run or batch_handler is None:
            return
        self._positions[tp] = run[0][0].offset
        origin_of = getattr(self.handler, "origin", None)  # a record's producer in its payload
        origin = None if origin_of is None else lambda index: origin_of(run[index][1])
        try:
            with tracing.batch_span(tp.topic, group=self.group_id, records=[r.headers for r, _ in run], origin=origin):
                await batch_handler([message for _, message in run])
        except Exception as e:
            self._count(e)
            log.warning(
                "batch failed; replaying record by record", group=self.group_id, records=len(run), error=repr(e)
            )
            for record, _ in run:
                if self._stopping:
                    raise _Stopping from None
                self._positions[tp] = record.offset
                await self._process(record)
                self._done(tp, record)
        else:
            self.stats.processed += len(run)
            for record, _ in run:
                self._done(tp, record)
        if self._uncommitted >= self.commit_every:
            await self._commit()

    async def _process(self, record: ConsumerRecord[bytes, bytes], delivery_count: int | None = None) -> None:
        """The handler on one record, inside its ``process {topic}`` span (the producer's child)."""
        key = record.key.decode("utf-8", "replace") if record.key is not None else None
        with tracing.process_span(
            record.topic,
            group=self.group_id,
            headers=record.headers,
            partition=record.partition,
            offset=record.offset,
            key=key,
            delivery_count=delivery_count,
        ):
            await self._process_traced(record)

    async def _process_traced(self, record: ConsumerRecord[bytes, bytes]) -> None:
        failures = 0
        infra_delay = self.backoff_initial
        while True:
            try:
                await self.handler(await self._decode(record))
                self.stats.processed += 1
                return
            except (SerdeError, PermanentError) as e:
                await self._dead_letter(record, e, failures + 1)
                return
            except RegistryError as e:  # registry unreachable: not the record's fault
                self._count(e)
                log.warning("registry error", group=self.group_id, retry_in_s=round(infra_delay, 2), error=str(e))
                await self._backoff(infra_delay)
                infra_delay = min(infra_delay * 2, self.backoff_max)
            except Exception as e:
                failures += 1
                self._count(e)
                if failures > self.max_retries:
                    await self._dead_letter(record, e, failures)
                    return
                self.stats.retries += 1
                await self._backoff(min(self.backoff_initial * 2 ** (failures - 1), self.backoff_max))

    def _count(self, e: BaseException) -> None:
        name = type(e).__name__
        self.stats.errors[name] = self.stats.errors.get(name, 0) + 1

    async def _backoff(self, seconds: float) -> None:
        await self._sleep(seconds)
        if self._stopping:
            raise _Stopping

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopped.wait(), seconds)

    async def _dead_letter(self, record: ConsumerRecord[bytes, bytes], error: BaseException, attempts: int) -> None:
        headers = dlq_headers(record, error, attempts, self.group_id)
        delay = self.backoff_initial
        while True:
            try:
                future = await self.producer.send_raw(
                    record.topic + self.dlq_suffix, record.key, record.value, headers, keep_trace=True
                )
                await future
                break
            except KafkaError as e:
                log.warning("DLQ write failed", group=self.group_id, retry_in_s=round(delay, 2), error=repr(e))
                await self._backoff(delay)
                delay = min(delay * 2, self.backoff_max)
        self.stats.dead_lettered += 1
        log.warning(
            "record dead-lettered",
            group=self.group_id,
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            attempts=attempts,
            error=repr(error),
        )

    # -- offsets --------------------------------------------------------------------------------

    async def _commit(self, only: set[TopicPartition] | None = None) -> None:
        async with self._commit_lock:
            consumer = self._consumer
            if consumer is None or not self._pending:
                self._last_commit = time.monotonic()
                return
            assigned = consumer.assignment()
            offsets = {tp: o for tp, o in self._pending.items() if tp in assigned and (only is None or tp in only)}
            for tp in offsets:
                del self._pending[tp]
            if only is None:
                self._pending.clear()  # offsets of partitions we no longer own: their new owner redoes them
                self._uncommitted = 0
                self._last_commit = time.monotonic()
            if not offsets:
                return
            try:
                await consumer.commit(offsets)
                self.stats.commits += 1
            except (CommitFailedError, KafkaError) as e:
                # Rebalanced away or broker unreachable: the records will be redelivered (idempotent handlers).
                self.stats.commit_failures += 1
                # JSON log lines need string keys: TopicPartition keys as "topic/partition".
                positions = {f"{tp.topic}/{tp.partition}": o for tp, o in offsets.items()}
                log.warning("commit failed", group=self.group_id, offsets=positions, error=repr(e))

    async def _on_revoked(self, revoked: set[TopicPartition]) -> None:
        self._revocations += 1
        await self._commit(only=revoked)
        for tp in revoked:
            self._pending.pop(tp, None)
            self._positions.pop(tp, None)

    # -- lag ------------------------------------------------------------------------------------

    async def lag(self) -> dict[TopicPartition, int]:
        """Log end offset - position, per assigned partition (0 when caught up)."""
        consumer = self._consumer
        if consumer is None:
            return {}
        assigned = consumer.assignment()
        ends: dict[TopicPartition, int] = {}
        unknown = []
        for tp in assigned:
            end = consumer.highwater(tp)
            if end is None:
                unknown.append(tp)
            else:
                ends[tp] = end
        if unknown:
            ends.update(await asyncio.wait_for(consumer.end_offsets(unknown), 5))
        out = {}
        for tp, end in ends.items():
            known = self._positions.get(tp)
            position: int = known if known is not None else await asyncio.wait_for(consumer.position(tp), 5)
            out[tp] = max(0, end - position)
        return out


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, runner: ConsumerRunner) -> None:
        self._runner = runner

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self._runner._on_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        return None


def runner_for_service(
    config: ServiceConfig,
    group_id: str,
    topics: Sequence[str],
    handler: Handler,
    *,
    deserializer: AvroDeserializer,
    producer: EventProducer,
    **options: Any,
) -> ConsumerRunner:
    """A runner with the service's Kafka settings (bootstrap servers, security) and a client id
    naming the group and the instance; `options` are ConsumerRunner's (commit_every...)."""
    kafka = config.kafka_client_kwargs()
    bootstrap = kafka.pop("bootstrap_servers")
    return ConsumerRunner(
        bootstrap,
        group_id,
        topics,
        handler,
        deserializer=deserializer,
        producer=producer,
        client_id=f"{group_id}-{config.instance_id}",
        **kafka,
        **options,
    )


async def decode_record(deserializer: AvroDeserializer, record: ConsumerRecord[bytes, bytes]) -> Message:
    """The Message of a fetched record; raises what the deserializer raises (SerdeError...)."""
    decoded = await deserializer.deserialize(record.value or b"")
    return Message(
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        key=None if record.key is None else record.key.decode("utf-8", "replace"),
        record_name=decoded.record_name,
        value=decoded.value,
        headers=tuple(record.headers or ()),
        timestamp_ms=record.timestamp,
    )


def dlq_headers(
    record: ConsumerRecord[bytes, bytes], error: BaseException, attempts: int, group_id: str
) -> list[tuple[str, bytes]]:
    """A dead-lettered record's headers: its own, then why and where it failed."""
    return [
        *(record.headers or ()),
        ("dlq.error.class", f"{type(error).__module__}.{type(error).__qualname__}".encode()),
        ("dlq.error.message", str(error)[:4000].encode()),
        ("dlq.original.topic", record.topic.encode()),
        ("dlq.original.partition", str(record.partition).encode()),
        ("dlq.original.offset", str(record.offset).encode()),
        ("dlq.original.timestamp", str(record.timestamp).encode()),
        ("dlq.failed.at", str(int(time.time() * 1000)).encode()),
        ("dlq.attempts", str(attempts).encode()),
        ("dlq.group", group_id.encode()),
    ]


def runner_check(runner: ConsumerRunner) -> Check:
    """Readiness: `runner` is consuming.  A consumer that died while its process lives must turn
    the instance red, or it looks ready while its share of the records waits for nobody."""

    async def check() -> None:
        if not runner.running:
            raise ConnectionError(f"group {runner.group_id}: {runner.failure or 'not running'}")

    return check


async def prune_forever(handler: IdempotentHandler, older_than_ms: int, interval_s: float = 60.0) -> None:
    """Forget processed event ids older than `older_than_ms` every `interval_s` (their records are
    long committed); runs until cancelled."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await handler.prune(older_than_ms)
        except Exception as e:  # a busy database now is no reason to stop pruning later
            log.warning("event id pruning failed", consumer=handler.name, error=repr(e))


@asynccontextmanager
async def consuming(
    runner: ConsumerRunner,
    *,
    prune: IdempotentHandler | None = None,
    dedupe_window_ms: int = 7 * 24 * 3600 * 1000,
    grace: float = 30,
) -> AsyncIterator[ConsumerRunner]:
    """Run `runner` for the block (and, with `prune`, forget that handler's event ids older than
    `dedupe_window_ms`); on exit stop pruning and stop the runner gracefully (commit, leave)."""
    await runner.start()
    pruner = (
        asyncio.create_task(prune_forever(prune, dedupe_window_ms), name=f"prune-{runner.group_id}")
        if prune is not None
        else None
    )
    try:
        yield runner
    finally:
        if pruner is not None:
            pruner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pruner
        await runner.stop(grace)
