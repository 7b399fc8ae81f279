"""ListOffsets: earliest (-2), latest (-1), max timestamp (-3), earliest local (-4), latest
tiered (-5), or the first offset whose record timestamp is at or after a given time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from broker.handlers.base import Messages, RequestContext
from broker.handlers.services import HasSecurity, HasStore
from broker.protocol.codec import build, nested
from broker.protocol.errors import ErrorCode, KafkaError
from broker.security.acls import Operation

if TYPE_CHECKING:
    from kio.schema.list_offsets import v1 as list_offsets_v1
    from typing_extensions import TypeIs

    from broker.handlers.kio_types import ListOffsetsRequest, ListOffsetsResponse

API_KEY = 2
MIN_VERSION, MAX_VERSION = 1, 10
MESSAGES: Messages[ListOffsetsRequest, ListOffsetsResponse] = Messages(API_KEY, MIN_VERSION, MAX_VERSION)

READ_COMMITTED = 1
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
# The version that introduced each special timestamp (KIP-734, KIP-405, KIP-1005).  As Kafka, an
# older request asking one, or any other negative timestamp, is UNSUPPORTED_VERSION.
_SINCE = {LATEST: 0, EARLIEST: 0, MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9}
# v10's timeout_ms bounds a wait for remote (tiered) storage: with none, every answer is at once.


class ListOffsetsBroker(HasSecurity, HasStore, Protocol):
    """What ListOffsets uses of the broker."""


def _reads_all(request: ListOffsetsRequest) -> TypeIs[list_offsets_v1.ListOffsetsRequest]:
    return request.__version__ < 2  # v2 added the isolation level (KIP-98)


def handle(broker: ListOffsetsBroker, ctx: RequestContext, request: ListOffsetsRequest) -> ListOffsetsResponse:
    cls = MESSAGES.response(ctx.api_version)
    committed = not _reads_all(request) and request.isolation_level == READ_COMMITTED
    topic_cls = nested(cls, "ListOffsetsTopicResponse")
    part_cls = nested(cls, "ListOffsetsPartitionResponse")
    topics = []
    for topic in request.topics:
        parts = []
        described = broker.security.topic(ctx.session, Operation.DESCRIBE, topic.name)
        for part in topic.partitions:
            error, offset, timestamp = ErrorCode.none, -1, -1
            plog = broker.store.partition_log(topic.name, part.partition_index) if described else None
            ts = part.timestamp
            try:
                if not described:
                    error = ErrorCode.topic_authorization_failed
                elif ts < 0 and ctx.api_version < _SINCE.get(ts, 1 << 15):
                    error = ErrorCode.unsupported_version
                elif plog is None:
                    error = ErrorCode.unknown_topic_or_partition
                elif ts == LATEST:
                    offset = plog.last_stable_offset if committed else plog.high_watermark
                elif ts in (EARLIEST, EARLIEST_LOCAL):
                    offset = plog.log_start_offset
                elif ts == MAX_TIMESTAMP:
                    found = plog.max_timestamp_offset()
                    if found is not None:
                        offset, timestamp = found
                elif ts == LATEST_TIERED:
                    pass  # nothing is ever tiered here: no offset, as Kafka without remote storage
                else:
                    found = plog.offset_for_timestamp(ts)
                    if found is not None:
                        offset, timestamp = found
            except KafkaError as e:  # a stored batch that cannot be read: this partition's error
                error, offset, timestamp = e.code, -1, -1
            parts.append(
                build(
                    part_cls,
                    partition_index=part.partition_index,
                    error_code=error,
                    timestamp=timestamp,
                    offset=offset,
                    leader_epoch=0 if error == ErrorCode.none and offset >= 0 else -1,
                )
            )
        topics.append(build(topic_cls, name=topic.name, partitions=tuple(parts)))
    return build(cls, throttle_time=0, topics=tuple(topics))
