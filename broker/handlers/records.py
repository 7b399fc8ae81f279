"""DeleteRecords: move a partition's log start forward (kafka-delete-records, Admin.deleteRecords).

Records below the new start are gone for readers at once; whole segments below it are
deleted from disk, and the start itself is written to the partition's `log-start-offset`
file so it holds across restarts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.core import Broker
from broker.handlers.base import Messages, RequestContext
from broker.protocol.codec import build, nested
from broker.protocol.errors import ErrorCode, KafkaError
from broker.security.acls import Operation

if TYPE_CHECKING:
    from broker.handlers.kio_types import DeleteRecordsRequest, DeleteRecordsResponse

API_KEY = 21
MIN_VERSION, MAX_VERSION = 0, 2
MESSAGES: Messages[DeleteRecordsRequest, DeleteRecordsResponse] = Messages(API_KEY, MIN_VERSION, MAX_VERSION)


def _delete(broker: Broker, ctx: RequestContext, topic: str, partition: int, offset: int) -> tuple[ErrorCode, int]:
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
        return ErrorCode.none, plog.delete_records(offset)
    except KafkaError as e:
        return e.code, -1


def handle(broker: Broker, ctx: RequestContext, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
    cls = MESSAGES.response(ctx.api_version)
    topic_cls = nested(cls, "DeleteRecordsTopicResult")
    part_cls = nested(cls, "DeleteRecordsPartitionResult")
    topics = []
    for topic in request.topics:
        parts = []
        for part in topic.partitions:
            error, low = _delete(broker, ctx, topic.name, part.partition_index, part.offset)
            parts.append(build(part_cls, partition_index=part.partition_index, low_watermark=low, error_code=error))
        topics.append(build(topic_cls, name=topic.name, partitions=tuple(parts)))
    return build(cls, throttle_time=0, topics=tuple(topics))
