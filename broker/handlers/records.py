"""DeleteRecords: move a partition's log start forward (kafka-delete-records, Admin.deleteRecords).

Records below the new start are gone for readers at once; whole segments below it are
deleted from disk, and the start itself is written to the partition's `log-start-offset`
file, fsynced in a worker thread before the answer, so it holds across a machine crash."""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Protocol, TypeAlias

from broker.cooperative import STEP, pause
from broker.handlers.base import Answer, Messages, RequestContext, Serial
from broker.handlers.services import HasSecurity, HasStore
from broker.log.partition_log import PartitionLog
from broker.protocol.codec import build, nested
from broker.protocol.errors import ErrorCode, KafkaError
from broker.security.acls import Operation

if TYPE_CHECKING:
    from kio.static.protocol import Entity

    from broker.handlers.kio_types import DeleteRecordsRequest, DeleteRecordsResponse

API_KEY = 21
MIN_VERSION, MAX_VERSION = 0, 2
MESSAGES: Messages[DeleteRecordsRequest, DeleteRecordsResponse] = Messages(API_KEY, MIN_VERSION, MAX_VERSION)


# A partition's answer: its index, error, new log start, and the log it names (None: none).
_Result: TypeAlias = tuple[int, ErrorCode, int, PartitionLog | None]


class RecordsBroker(HasSecurity, HasStore, Protocol):
    """What DeleteRecords uses of the broker."""

    @property
    def admin_workers(self) -> Executor: ...


def _delete(
    broker: RecordsBroker, ctx: RequestContext, topic: str, partition: int, offset: int, *, moved: list[PartitionLog]
) -> _Result:
    if not broker.security.topic(ctx.session, Operation.DELETE, topic):
        return partition, ErrorCode.topic_authorization_failed, -1, None
    found = broker.store.get(topic)
    if found is None:
        return partition, ErrorCode.unknown_topic_or_partition, -1, None
    if found.internal:
        return partition, ErrorCode.invalid_topic_exception, -1, None  # as Kafka: internal topics keep their records
    plog = broker.store.partition_log(topic, partition)
    if plog is None:
        return partition, ErrorCode.unknown_topic_or_partition, -1, None
    try:
        before = plog.log_start_offset
        start = plog.delete_records(offset)
    except KafkaError as e:
        return partition, e.code, -1, plog
    if start != before:
        moved.append(plog)
    return partition, ErrorCode.none, start, plog


class _Answer:
    """The response classes of the request's version and the building of its entries."""

    def __init__(self, version: int) -> None:
        self.cls = MESSAGES.response(version)
        self.topic_cls = nested(self.cls, "DeleteRecordsTopicResult")
        self.part_cls = nested(self.cls, "DeleteRecordsPartitionResult")

    def partition(self, result: _Result, failed: frozenset[int]) -> Entity:
        index, error, low, plog = result
        lost = plog is not None and id(plog) in failed  # its new start may not survive a crash
        return build(
            self.part_cls,
            partition_index=index,
            low_watermark=-1 if lost else low,
            error_code=ErrorCode.kafka_storage_error if lost else error,
        )

    def topic(self, name: str, partitions: list[Entity]) -> Entity:
        return build(self.topic_cls, name=name, partitions=tuple(partitions))

    def response(self, topics: list[Entity]) -> DeleteRecordsResponse:
        return build(self.cls, throttle_time=0, topics=tuple(topics))


async def _synced(broker: RecordsBroker, moved: list[PartitionLog]) -> frozenset[int]:
    """Fsync the new log starts; the ids of the logs whose start could not be."""
    loop = asyncio.get_running_loop()
    failed = set()
    for plog in moved:
        try:
            await loop.run_in_executor(broker.admin_workers, plog.sync_log_start)
        except OSError:
            failed.add(id(plog))
    return frozenset(failed)


def handle(
    broker: RecordsBroker, ctx: RequestContext, request: DeleteRecordsRequest
) -> Answer[DeleteRecordsResponse] | Serial:
    if sum(len(topic.partitions) for topic in request.topics) > STEP:
        return Serial(_in_steps(broker, ctx, request))
    answer = _Answer(ctx.api_version)
    moved: list[PartitionLog] = []
    results = [
        (
            topic.name,
            [_delete(broker, ctx, topic.name, p.partition_index, p.offset, moved=moved) for p in topic.partitions],
        )
        for topic in request.topics
    ]

    def respond(failed: frozenset[int] = frozenset()) -> DeleteRecordsResponse:
        return answer.response(
            [answer.topic(name, [answer.partition(r, failed) for r in parts]) for name, parts in results]
        )

    if not moved:
        return respond()

    async def durable() -> DeleteRecordsResponse:
        return respond(await _synced(broker, moved))

    return durable()


async def _in_steps(broker: RecordsBroker, ctx: RequestContext, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
    """`handle` for a request of many partitions, STEP partitions at a time, the loop free
    between steps (each partition's deletion whole within one); the connection reads no
    further request meanwhile (`Serial`)."""
    answer = _Answer(ctx.api_version)
    moved: list[PartitionLog] = []
    results: list[tuple[str, list[_Result]]] = []
    count = 0
    for topic in request.topics:
        parts = []
        for p in topic.partitions:
            parts.append(_delete(broker, ctx, topic.name, p.partition_index, p.offset, moved=moved))
            count += 1
            await pause(count)
        results.append((topic.name, parts))
    failed = await _synced(broker, moved) if moved else frozenset()
    topics = []
    count = 0
    for name, parts in results:
        built = []
        for result in parts:
            built.append(answer.partition(result, failed))
            count += 1
            await pause(count)
        topics.append(answer.topic(name, built))
    return answer.response(topics)
