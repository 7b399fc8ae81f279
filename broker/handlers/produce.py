"""Produce: validate and append each partition's batch; acks decide when we answer.

acks=0  no response (the connection is closed if anything failed, as Kafka does);
acks=1  answer once the batch reached the OS (os.write returned);
acks=-1 answer once the batch is fsynced, through the group-commit flusher.
"""

from __future__ import annotations

import asyncio
import inspect
from functools import partial
from typing import TYPE_CHECKING

import structlog

from broker.core import INTERNAL_TOPICS, Broker
from broker.handlers.base import CLOSE_CONNECTION, NO_RESPONSE, Answer, Messages, RequestContext, Serial, Signal
from broker.log.partition_log import OpenedBatch, PartitionLog
from broker.log.validator import PayloadTooLarge
from broker.protocol.batch import InvalidBatch, split_batches
from broker.protocol.codec import build, nested
from broker.protocol.errors import ErrorCode, KafkaError
from broker.security.acls import Operation, ResourceType

if TYPE_CHECKING:
    from broker.handlers.kio_types import ProduceRequest, ProduceResponse

API_KEY = 0
MIN_VERSION, MAX_VERSION = 3, 12
MESSAGES: Messages[ProduceRequest, ProduceResponse] = Messages(API_KEY, MIN_VERSION, MAX_VERSION)

log = structlog.get_logger(__name__)


class _Outcome:
    __slots__ = (
        "base_offset",
        "batch",
        "error",
        "log_append_time",
        "log_start_offset",
        "message",
        "opened",
        "partition",
        "plog",
    )

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.error = ErrorCode.none
        self.message: str | None = None
        self.base_offset = -1
        self.log_append_time = -1
        self.log_start_offset = -1
        self.plog: PartitionLog | None = None
        self.batch: memoryview | None = None
        self.opened: OpenedBatch | None = None

    def fail(self, error: KafkaError) -> None:
        self.error, self.message = error.code, error.message


def _single_batch(records: bytes | None) -> memoryview:
    if not records:
        raise KafkaError(ErrorCode.invalid_record, "no record batch in the request")
    try:
        batches = split_batches(records)
    except InvalidBatch as e:
        raise KafkaError(ErrorCode.corrupt_message, str(e)) from e
    if len(batches) != 1:
        raise KafkaError(
            ErrorCode.invalid_record, "produce requests v3+ must hold exactly one record batch per partition"
        )
    return batches[0]


def _append(broker: Broker, out: _Outcome, transactional_id: str | None) -> bool:
    """Append an opened batch; True when it was new (not a retried duplicate).  A
    transactional batch is taken only for a partition its ongoing transaction holds."""
    assert out.plog is not None
    assert out.batch is not None
    assert out.opened is not None
    plog = out.plog
    header = out.opened.header
    if header.is_transactional:
        if transactional_id is None:
            raise KafkaError(ErrorCode.transactional_id_authorization_failed, "a transactional batch needs its id")
        broker.transactions.check_produce(
            transactional_id, header.producer_id, header.producer_epoch, (plog.topic, plog.partition)
        )
    result = plog.append(out.batch, out.opened)
    out.base_offset = result.base_offset
    out.log_append_time = result.log_append_time
    out.log_start_offset = result.log_start_offset
    if not result.duplicate:
        topic = plog.topic
        broker.metrics.bytes_in.labels(topic).inc(len(out.batch))
        broker.metrics.records_in.labels(topic).inc(result.last_offset - result.base_offset + 1)
        broker.notify_append(plog, len(out.batch))
    return not result.duplicate


def handle(broker: Broker, ctx: RequestContext, request: ProduceRequest) -> Answer[ProduceResponse | Signal] | Serial:
    """Validate every batch; those small enough are opened here, on the event loop.  If any
    needs more work (a large or highly compressed payload, recompression), every batch of
    the request is opened in a worker thread and appended afterwards, and the connection
    dispatches nothing else meanwhile (`Serial`), so a producer's batches keep their order."""
    acks = request.acks
    results: list[tuple[str, list[_Outcome]]] = []
    ready: list[_Outcome] = []
    later: list[_Outcome] = []
    limit = broker.config.get("message.max.decompressed.bytes")
    security, session = broker.security, ctx.session
    for topic_data in request.topic_data:
        outcomes = []
        writable = security.topic(session, Operation.WRITE, topic_data.name)
        for pdata in topic_data.partition_data:
            out = _Outcome(pdata.index)
            outcomes.append(out)
            try:
                if not writable:
                    raise KafkaError(ErrorCode.topic_authorization_failed, f"WRITE on topic {topic_data.name} denied")
                if acks not in (0, 1, -1):
                    raise KafkaError(ErrorCode.invalid_required_acks, f"acks must be 0, 1 or -1, not {acks}")
                if request.transactional_id is not None and not security.allowed(
                    session, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id
                ):
                    raise KafkaError(
                        ErrorCode.transactional_id_authorization_failed,
                        f"WRITE on transactional id {request.transactional_id} denied",
                    )
                if topic_data.name in INTERNAL_TOPICS:
                    # The broker's own records: a client's would be replayed at the next start.
                    raise KafkaError(
                        ErrorCode.invalid_topic_exception,
                        f"{topic_data.name} is an internal topic: clients cannot produce to it",
                    )
                plog = broker.store.partition_log(topic_data.name, pdata.index)
                if plog is None:
                    raise KafkaError(
                        ErrorCode.unknown_topic_or_partition, f"{topic_data.name}-{pdata.index} does not exist"
                    )
                out.plog = plog
                out.batch = _single_batch(pdata.records)
                try:
                    out.opened = plog.open_batch(out.batch, limit=limit, inline=True)
                    ready.append(out)
                except PayloadTooLarge:
                    later.append(out)
            except KafkaError as e:
                out.fail(e)
        results.append((topic_data.name, outcomes))
    if not later:
        return _finish(broker, ctx.api_version, acks, results, ready, transactional_id=request.transactional_id)

    async def opened_in_worker() -> ProduceResponse | Signal:
        loop = asyncio.get_running_loop()
        for out in later:
            assert out.plog is not None
            assert out.batch is not None
            try:
                out.opened = await loop.run_in_executor(
                    broker.workers, partial(out.plog.open_batch, out.batch, limit=limit, inline=False)
                )
            except KafkaError as e:
                out.fail(e)
        outcome = _finish(
            broker, ctx.api_version, acks, results, [*ready, *later], transactional_id=request.transactional_id
        )
        return await outcome if inspect.isawaitable(outcome) else outcome

    return Serial(opened_in_worker())


def _finish(
    broker: Broker,
    version: int,
    acks: int,
    results: list[tuple[str, list[_Outcome]]],
    opened: list[_Outcome],
    *,
    transactional_id: str | None,
) -> Answer[ProduceResponse | Signal]:
    """Append the opened batches, then answer as `acks` says."""
    touched: list[PartitionLog] = []
    for out in opened:
        if out.error != ErrorCode.none:
            continue
        try:
            _append(broker, out, transactional_id)
            assert out.plog is not None
            touched.append(out.plog)
        except KafkaError as e:
            out.fail(e)
    failed = False
    for _, outcomes in results:
        for out in outcomes:
            if out.error != ErrorCode.none:
                failed = True
                broker.metrics.errors.labels("Produce", out.error.name).inc()
            out.batch = out.opened = None  # the response does not need the records
    if acks == 0:
        return CLOSE_CONNECTION if failed else NO_RESPONSE
    if acks == -1 and touched:

        async def durable() -> ProduceResponse:
            try:
                await broker.sync(touched)
            except OSError as e:
                log.exception("fsync failed; failing acks=all produce", error=str(e))
                for _, outcomes in results:
                    for out in outcomes:
                        if out.error == ErrorCode.none:
                            out.error, out.message = ErrorCode.kafka_storage_error, str(e)
            return _response(version, results)

        return durable()
    return _response(version, results)


def _response(version: int, results: list[tuple[str, list[_Outcome]]]) -> ProduceResponse:
    cls = MESSAGES.response(version)
    topic_cls = nested(cls, "TopicProduceResponse")
    part_cls = nested(cls, "PartitionProduceResponse")
    return build(
        cls,
        throttle_time=0,
        responses=tuple(
            build(
                topic_cls,
                name=name,
                partition_responses=tuple(
                    build(
                        part_cls,
                        index=o.partition,
                        error_code=o.error,
                        base_offset=o.base_offset,
                        log_append_time=o.log_append_time,
                        log_start_offset=o.log_start_offset,
                        record_errors=(),
                        error_message=o.message,
                    )
                    for o in outcomes
                ),
            )
            for name, outcomes in results
        ),
    )
