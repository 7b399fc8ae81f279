"""DeleteRecords: move a partition's log start forward (kafka-delete-records, Admin.deleteRecords).

Records below the new start are gone for readers at once; whole segments below it are
deleted from disk, and the start itself is written to the partition's `log-start-offset`
file, fsynced in a worker thread before the answer, so it holds across a machine crash."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from broker.core import Broker
from broker.handlers.base import Answer, Messages, RequestContext
from broker.log.partition_log import PartitionLog
from broker.protocol.codec import build, nested
from broker.protocol.errors import ErrorCode, KafkaError
from broker.security.acls import Operation

if TYPE_CHECKING:
    from broker.handlers.kio_types import DeleteRecordsRequest, DeleteRecordsResponse

API_KEY = 21
MIN_VERSION, MAX_VERSION = 0, 2
MESSAGES: Messages[DeleteRecordsRequest, DeleteRecordsResponse] = Messages(API_KEY, MIN_VERSION, MAX_VERSION)


def _delete(
    broker: Broker, ctx: RequestContext, topic: str, partition: int, offset: int, *, moved: list[PartitionLog]
) -> tuple[ErrorCode, int]:
    if not broker.security.topic(ctx.session, Operation.DELETE, topic):
        return ErrorCode.topic_authorization_failed, -1
    found = broker.store.get(topic)
    if found is None:
        return ErrorCode.unknown_topic_or_partition, -1
    if found.internal:
        return ErrorCode.invalid_topic_exception, -1  # as Kafka: internal topics keep their records
    plog = broker.store.partition_log(topic, partition)
    if plog is None:
        return ErrorCode.unknown_topic_or_partition, -1
    try:
        before = plog.log_start_offset
        start = plog.delete_records(offset)
    except KafkaError as e:
        return e.code, -1
    if start != before:
        moved.append(plog)
    return ErrorCode.none, start


def handle(broker: Broker, ctx: RequestContext, request: DeleteRecordsRequest) -> Answer[DeleteRecordsResponse]:
    cls = MESSAGES.response(ctx.api_version)
    topic_cls = nested(cls, "DeleteRecordsTopicResult")
    part_cls = nested(cls, "DeleteRecordsPartitionResult")
    moved: list[PartitionLog] = []
    results = [
        (
            topic.name,
            [
                (p.partition_index, *_delete(broker, ctx, topic.name, p.partition_index, p.offset, moved=moved))
                for p in topic.partitions
            ],
        )
        for topic in request.topics
    ]

    def respond(failed: frozenset[int] = frozenset()) -> DeleteRecordsResponse:
        topics = []
        for name, parts in results:
            built = []
            for index, error, low in parts:
                plog = broker.store.partition_log(name, index)
                lost = plog is not None and id(plog) in failed  # its new start may not survive a crash
                built.append(
                    build(
                        part_cls,
                        partition_index=index,
                        low_watermark=-1 if lost else low,
                        error_code=ErrorCode.kafka_storage_error if lost else error,
                    )
                )
            topics.append(build(topic_cls, name=name, partitions=tuple(built)))
        return build(cls, throttle_time=0, topics=tuple(topics))

    if not moved:
        return respond()

    async def durable() -> DeleteRecordsResponse:
        loop = asyncio.get_running_loop()
        failed = set()
        for plog in moved:
            try:
                await loop.run_in_executor(broker.admin_workers, plog.sync_log_start)
            except OSError:
                failed.add(id(plog))
        return respond(frozenset(failed))

    return durable()
