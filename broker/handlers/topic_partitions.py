"""DescribeTopicPartitions (KIP-966): topics and their partitions, a page at a time.

Kafka 4.x's admin client describes topics with it (`kafka-topics --describe`).  An answer holds
at most `ResponsePartitionLimit` partitions (and at most `max.request.partition.size.limit`);
when there are more, `NextCursor` names the topic and partition the next request starts at.
Topics are answered in name order; an empty topic list means every topic the principal may
describe (the others are left out, as from Metadata).  A topic named explicitly without DESCRIBE
is answered TOPIC_AUTHORIZATION_FAILED, after the page, whatever the cursor.  Every partition is
led and replicated by this node alone: no eligible leader replicas, none offline.
"""

from __future__ import annotations

import heapq
import uuid
from typing import TYPE_CHECKING, Protocol

from broker.config import validate_topic_name
from broker.cooperative import STEP
from broker.handlers.base import Messages, RequestContext, Serial
from broker.handlers.services import HasConfig, HasNodeId, HasSecurity, HasStore, VisibleTopics
from broker.handlers.stepped import Steps, stepped
from broker.metadata import METADATA_TOPIC, Topic
from broker.protocol.codec import build, nested
from broker.protocol.errors import ErrorCode
from broker.security.acls import Operation, ResourceType

if TYPE_CHECKING:
    from kio.static.protocol import Entity

    from broker.handlers.kio_types import DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse

API_KEY = 75
MESSAGES: Messages[DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse] = Messages(API_KEY, 0, 0)
_ZERO_UUID = uuid.UUID(int=0)


class TopicPartitionsBroker(HasSecurity, HasStore, HasConfig, HasNodeId, VisibleTopics, Protocol):
    """What DescribeTopicPartitions uses of the broker."""


def handle(
    broker: TopicPartitionsBroker, ctx: RequestContext, request: DescribeTopicPartitionsRequest
) -> DescribeTopicPartitionsResponse | Serial:
    entries = len(request.topics) if request.topics else len(broker.store.topics)
    return stepped(_described(broker, ctx, request), entries)


def _described(
    broker: TopicPartitionsBroker, ctx: RequestContext, request: DescribeTopicPartitionsRequest
) -> Steps[DescribeTopicPartitionsResponse]:
    """Each topic checked and looked up on its own, the loop free between steps of them."""
    cls = MESSAGES.response(ctx.api_version)
    security, session = broker.security, ctx.session
    cursor = request.cursor
    after = cursor.topic_name if cursor is not None else ""
    every = not request.topics
    names: set[str] = set()
    # Sorted a run of STEP names at a time and merged as the loop goes: one sort of 100,000
    # names would hold it for a while.
    runs: list[list[str]] = [[]]
    for topic_name in (t.name for t in broker.visible_topics()) if every else (t.name for t in request.topics):
        yield
        if topic_name >= after and topic_name not in names:
            names.add(topic_name)
            runs[-1].append(topic_name)
            if len(runs[-1]) == STEP:
                runs[-1].sort()
                runs.append([])
    runs[-1].sort()
    if not every and cursor is not None and cursor.topic_name not in names:
        # As Kafka: the whole request is refused, each topic it named answered with the error.
        refused = []
        for t in request.topics:
            yield
            refused.append(_topic(cls, ErrorCode.invalid_request, t.name))
        return build(cls, throttle_time=0, topics=tuple(refused))
    denied: list[Entity] = []
    allowed: list[str] = []
    for name in heapq.merge(*runs):
        yield
        if security.topic(session, Operation.DESCRIBE, name):
            allowed.append(name)
        elif not every:  # never say whether a topic one may not describe exists
            denied.append(_topic(cls, ErrorCode.topic_authorization_failed, name))
    # The cursor's partition counts only for a topic the principal may describe.
    first = cursor.partition_index if cursor is not None and security.topic(session, Operation.DESCRIBE, after) else 0
    remaining = min(int(request.response_partition_limit), broker.config.values.max_request_partition_size_limit)
    topics: list[Entity] = []
    next_cursor = None
    cursor_cls = nested(cls, "Cursor")
    for name in allowed:
        yield
        if remaining < 0:  # as Kafka: a negative limit answers nothing, and no cursor
            break
        if remaining == 0:
            next_cursor = build(cursor_cls, topic_name=name, partition_index=0)
            break
        topic = broker.store.get(name)
        if topic is None or topic.name == METADATA_TOPIC:
            if not every:
                error = (
                    ErrorCode.invalid_topic_exception
                    if validate_topic_name(name)
                    else ErrorCode.unknown_topic_or_partition
                )
                topics.append(_topic(cls, error, name))
            continue
        start = max(first, 0) if name == after else 0  # a negative index names no partition: from 0
        end = min(topic.partitions, start + remaining)
        ops = security.operations(session, ResourceType.TOPIC, name)
        topics.append(
            _topic(
                cls,
                ErrorCode.none,
                name,
                topic=topic,
                partitions=range(start, end),
                node=broker.node_id,
                operations=ops,
            )
        )
        if end < topic.partitions:
            next_cursor = build(cursor_cls, topic_name=name, partition_index=end)
            break
        remaining -= max(0, end - start)
    return build(cls, throttle_time=0, topics=(*topics, *denied), next_cursor=next_cursor)


def _topic(
    cls: type[Entity],
    error: ErrorCode,
    name: str,
    *,
    topic: Topic | None = None,
    partitions: range = range(0),
    node: int = -1,
    operations: int = -2147483648,
) -> Entity:
    partition_cls = nested(cls, "DescribeTopicPartitionsResponsePartition")
    nodes = (node,)
    return build(
        nested(cls, "DescribeTopicPartitionsResponseTopic"),
        error_code=error,
        name=name,
        topic_id=topic.topic_id if topic is not None else _ZERO_UUID,
        is_internal=bool(topic and topic.internal),
        partitions=tuple(
            build(
                partition_cls,
                error_code=ErrorCode.none,
                partition_index=p,
                leader_id=node,
                leader_epoch=0,
                replica_nodes=nodes,
                isr_nodes=nodes,
                eligible_leader_replicas=(),
                last_known_elr=(),
                offline_replicas=(),
            )
            for p in partitions
        ),
        topic_authorized_operations=operations,
    )
