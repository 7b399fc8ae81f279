"""The senders' exactly-once variant (``*_DELIVERY_MODE=transactional``): consume, deliver,
produce and commit the input offsets in one Kafka transaction.

Per fetched run of a partition's records:

    begin -> deliver each request (the provider call) -> produce its OtpDelivered / OtpFailed
          -> send the offset after the run to the transaction -> commit

so a request's delivery events and its consumed offset become visible together or not at all:
``otp.deliveries`` read at read_committed holds each outcome exactly once, even across crashes
of the sender.  The provider call itself, an SMS or an e-mail, is outside Kafka: a sender killed
after the provider accepted and before the commit re-sends on redelivery, exactly as the outbox
variant does, and the provider-side keys (the webhook's Idempotency-Key, the mail's
deterministic Message-ID) collapse that copy.  See docs/services.md for when to use which.

Fencing.  aiokafka's `send_offsets_to_transaction` carries the group id only, not the member's
generation (Kafka's KIP-447), so a member that lost a partition could still commit for it.  So
each input partition has its own transactional producer, ``transactional.id =
<group>-<topic>-<partition>`` (Kafka's design before KIP-447): the member a partition moves to
starts that producer before it reads the partition's committed offset, which aborts the previous
owner's open transaction and fences it.

State.  Kafka is the only record of progress here: no processed-id table (the committed offset
is the dedupe) and no outbox.  The ``deliveries`` table behind ``GET /deliveries`` is written
after each commit, a read model rebuilt by the next commit if a crash loses it.

Errors.  A record that cannot be decoded or that the handler refuses (`PermanentError`) is
dead-lettered to ``<topic>.dlq`` inside the transaction; any other failure aborts it, the
partition goes back to the run's first offset and is retried with backoff, and after
`max_retries` the failing record is dead-lettered.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord, OffsetAndMetadata, TopicPartition

from kit.logging import get_logger
from kit.tracing import kafka_headers
from schemas.serde import AvroDeserializer, SerdeError, frame
from services.common.consumer import Message, PermanentError, decode_record, dlq_headers
from services.common.outbox import PreparedEvent, stored_headers
from services.notify.sender import OtpRequest, Sender, _Outcome

__all__ = ["TransactionalLoop", "TransactionalSender", "transactional_id"]

log = get_logger(__name__)

SchemaId = Callable[[str, Any], Awaitable[int]]


def transactional_id(group_id: str, tp: TopicPartition) -> str:
    return f"{group_id}-{tp.topic}-{tp.partition}"


@dataclass
class _Pending:
    """What one transaction will publish and, once committed, record."""

    events: list[PreparedEvent] = field(default_factory=list)
    rows: list[tuple[OtpRequest, str, _Outcome, bool]] = field(default_factory=list)  # ..., final


class TransactionalSender(Sender):
    """The sender whose outcomes go to the current Kafka transaction instead of SQLite."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pending = _Pending()

    async def _seen(self, message: Message) -> bool:
        return False  # the committed offset is the dedupe: a record is seen again only if its transaction aborted

    async def _mark_done(self, message: Message) -> bool:
        return True

    def _buffer(self, request: OtpRequest, address: str, outcome: _Outcome, *, final: bool) -> None:
        event = self.outbox.prepare(
            self.policy.deliveries_topic, request.request_id, outcome.event_name, outcome.event, kafka_headers()
        )
        self.pending.events.append(event)
        self.pending.rows.append((request, address, outcome, final))

    async def _record_retry(self, request: OtpRequest, address: str, outcome: _Outcome) -> None:
        self._buffer(request, address, outcome, final=False)

    async def _finish(self, message: Message, request: OtpRequest, address: str, outcome: _Outcome) -> None:
        self._buffer(request, address, outcome, final=True)

    def take(self) -> _Pending:
        pending, self.pending = self.pending, _Pending()
        return pending

    async def committed(self, pending: _Pending) -> None:
        """After the commit: the read model's rows and the counters."""
        if not pending.rows:
            return
        async with self.db.transaction() as tx:
            for request, address, outcome, _ in pending.rows:
                await self._write_row(tx, request, address, outcome)
        for _, _, outcome, final in pending.rows:
            self._count(outcome, final=final)


class _Producers(ConsumerRebalanceListener):  # type: ignore[misc]  # aiokafka's listener is untyped
    """One started transactional producer per assigned partition (see the module docstring)."""

    def __init__(self, loop: TransactionalLoop) -> None:
        self.loop = loop

    async def on_partitions_revoked(self, revoked: Any) -> None:
        async with self.loop.lock:  # not in the middle of a partition's transaction
            for tp in revoked:
                await self.loop.close_producer(tp)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        async with self.loop.lock:
            for tp in assigned:
                await self.loop.open_producer(tp)


class TransactionalLoop:
    """Consume `topic` as `group_id` at read_committed and run `sender` in one transaction per run."""

    def __init__(
        self,
        sender: TransactionalSender,
        *,
        group_id: str,
        topic: str,
        deserializer: AvroDeserializer,
        schema_id: SchemaId,
        kafka: dict[str, Any],
        max_retries: int = 5,
        backoff_initial: float = 0.2,
        backoff_max: float = 5.0,
        max_records: int = 100,
        transaction_timeout_ms: int = 60_000,
        consumer_options: dict[str, Any] | None = None,
    ) -> None:
        self.sender = sender
        self.group_id = group_id
        self.topic = topic
        self.deserializer = deserializer
        self.schema_id = schema_id
        self.kafka = dict(kafka)
        self.max_retries = max_retries
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.max_records = max_records
        self.transaction_timeout_ms = transaction_timeout_ms
        self.consumer_options = dict(consumer_options or {})
        self.lock = asyncio.Lock()
        self.producers: dict[TopicPartition, AIOKafkaProducer] = {}
        self.consumer: AIOKafkaConsumer | None = None
        self.committed_transactions = 0
        self.aborted_transactions = 0
        self.dead_lettered = 0
        self._failures: dict[tuple[TopicPartition, int], int] = {}
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    # -- producers ------------------------------------------------------------------------------

    async def open_producer(self, tp: TopicPartition) -> None:
        if tp in self.producers:
            return
        producer = AIOKafkaProducer(
            **self.kafka,
            transactional_id=transactional_id(self.group_id, tp),
            transaction_timeout_ms=self.transaction_timeout_ms,
            client_id=f"{self.group_id}-txn-{tp.partition}",
        )
        await producer.start()  # InitProducerId: fences the previous owner, aborts its open transaction
        self.producers[tp] = producer

    async def close_producer(self, tp: TopicPartition) -> None:
        producer = self.producers.pop(tp, None)
        if producer is not None:
            with contextlib.suppress(KafkaError):
                await producer.stop()

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        consumer = AIOKafkaConsumer(
            **self.kafka,
            group_id=self.group_id,
            client_id=f"{self.group_id}-txn",
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            **self.consumer_options,
        )
        await consumer.start()
        consumer.subscribe([self.topic], listener=_Producers(self))
        self.consumer = consumer
        self._task = asyncio.create_task(self._run(), name=f"{self.group_id}-transactional")

    async def stop(self) -> None:
        self._stopping.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.consumer is not None:
            await self.consumer.stop()
        for tp in list(self.producers):
            await self.close_producer(tp)

    async def _run(self) -> None:
        assert self.consumer is not None
        while not self._stopping.is_set():
            try:
                batches = await self.consumer.getmany(timeout_ms=200, max_records=self.max_records)
            except KafkaError as e:
                log.warning("transactional sender: fetch failed", error=repr(e))
                await self._sleep(self.backoff_initial)
                continue
            for tp, records in batches.items():
                if self._stopping.is_set():
                    return
                try:
                    async with self.lock:
                        if tp in self.producers:  # revoked meanwhile: the new owner reads it again
                            await self._process(tp, records)
                except Exception as e:  # never let one partition's trouble end the loop
                    log.exception("transactional sender: a run failed", partition=tp.partition, error=repr(e)[:300])
                    with contextlib.suppress(Exception):
                        self.consumer.seek(tp, records[0].offset)
                    await self._sleep(self.backoff_max)

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    # -- one transaction ------------------------------------------------------------------------

    async def _process(self, tp: TopicPartition, records: list[ConsumerRecord[bytes, bytes]]) -> None:
        assert self.consumer is not None
        producer = self.producers[tp]
        failing: ConsumerRecord[bytes, bytes] | None = None
        try:
            await producer.begin_transaction()
            pending = _Pending()
            for record in records:
                failing = record
                await self._handle(producer, tp, record)
                # Each record's events go out as soon as it is handled (the commit waits for them).
                done = self.sender.take()
                for event in done.events:
                    schema_id = await self.schema_id(event.topic, event.schema)
                    await producer.send(
                        event.topic,
                        key=None if event.key is None else event.key.encode(),
                        value=frame(schema_id, event.payload),
                        headers=stored_headers(event.headers),
                    )
                pending.rows.extend(done.rows)
            failing = None
            offsets = {tp: OffsetAndMetadata(records[-1].offset + 1, "")}
            await producer.send_offsets_to_transaction(offsets, self.group_id)
            await producer.commit_transaction()
        except Exception as e:
            self.sender.take()  # nothing of it was published
            self.aborted_transactions += 1
            await self._abort(producer, tp, records[0].offset, failing, e)
            return
        self.committed_transactions += 1
        for record in records:
            self._failures.pop((tp, record.offset), None)
        try:
            await self.sender.committed(pending)
        except Exception as e:  # committed in Kafka: the read model lags, the run is never read again
            log.warning("transactional sender: deliveries rows not written", error=repr(e)[:300])

    async def _handle(
        self, producer: AIOKafkaProducer, tp: TopicPartition, record: ConsumerRecord[bytes, bytes]
    ) -> None:
        attempts = self._failures.get((tp, record.offset), 0)
        try:
            if attempts >= self.max_retries:
                raise _GaveUp(f"failed {attempts} times")
            message = await decode_record(self.deserializer, record)
            await self.sender(message)
        except (PermanentError, SerdeError, _GaveUp) as e:
            # Dead-lettered in the same transaction as the offset that moves past it.
            await producer.send(
                record.topic + ".dlq",
                key=record.key,
                value=record.value,
                headers=dlq_headers(record, e, attempts + 1, self.group_id),
            )
            self.dead_lettered += 1
            log.warning(
                "transactional sender: record dead-lettered",
                topic=record.topic,
                partition=record.partition,
                offset=record.offset,
                error=str(e)[:200],
            )

    async def _abort(
        self,
        producer: AIOKafkaProducer,
        tp: TopicPartition,
        first: int,
        failing: ConsumerRecord[bytes, bytes] | None,
        error: BaseException,
    ) -> None:
        assert self.consumer is not None
        attempts = 0
        if failing is not None:
            attempts = self._failures[(tp, failing.offset)] = self._failures.get((tp, failing.offset), 0) + 1
        log.warning(
            "transactional sender: transaction aborted, the run is read again",
            partition=tp.partition,
            offset=first,
            attempts=attempts,
            error=repr(error)[:300],
        )
        try:
            await producer.abort_transaction()
        except KafkaError:
            # Fenced, or the producer is in an unusable state: a new one (same id) takes over.
            await self.close_producer(tp)
            with contextlib.suppress(KafkaError):
                await self.open_producer(tp)
        if tp in self.consumer.assignment():
            self.consumer.seek(tp, first)
        await self._sleep(min(self.backoff_initial * 2 ** max(attempts - 1, 0), self.backoff_max))


class _GaveUp(Exception):
    """A record whose transaction failed `max_retries` times: dead-lettered."""
