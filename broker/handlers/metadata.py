"""Metadata: brokers, topics and partitions; auto-creates topics when allowed."""

from __future__ import annotations

import uuid
from typing import Any

from broker.config import validate_topic_name
from broker.core import Broker
from broker.handlers.base import ALL_TOPIC_OPERATIONS, NOT_REQUESTED_OPERATIONS
from broker.metadata import Topic
from broker.protocol.codec import RequestHeader, build, nested, response_type
from broker.protocol.errors import ErrorCode

API_KEY = 3
MIN_VERSION, MAX_VERSION = 0, 12
_ZERO_UUID = uuid.UUID(int=0)


def handle(broker: Broker, header: RequestHeader, request: Any) -> Any:
    version = header.api_version
    requested = request.topics
    # v0: an empty list means all topics; v1+: null means all, empty means none.
    all_topics = requested is None or (version == 0 and not requested)
    allow_auto = getattr(request, "allow_auto_topic_creation", True)
    include_ops = getattr(request, "include_topic_authorized_operations", False)
    entries: list[tuple[str | None, uuid.UUID | None, ErrorCode, Topic | None]] = []
    created = False
    if all_topics:
        entries = [(t.name, t.topic_id, ErrorCode.none, t) for t in broker.visible_topics()]
    else:
        for item in requested:
            topic_id = getattr(item, "topic_id", None)
            name = item.name
            if name is None and topic_id not in (None, _ZERO_UUID):
                topic = broker.store.by_id.get(topic_id)
                code = ErrorCode.none if topic else ErrorCode.unknown_topic_id
                entries.append((topic.name if topic else None, topic_id, code, topic))
                continue
            if name is None or validate_topic_name(name) is not None:
                entries.append((name, None, ErrorCode.invalid_topic_exception, None))
                continue
            topic = broker.store.get(name)
            if topic is None and allow_auto:
                topic = broker.auto_create(name)
                created = created or topic is not None
            if topic is None:
                entries.append((name, None, ErrorCode.unknown_topic_or_partition, None))
            else:
                entries.append((name, topic.topic_id, ErrorCode.none, topic))

    def respond() -> Any:
        return _response(broker, version, entries, include_ops)

    if created:

        async def durable() -> Any:
            await broker.sync_metadata()
            return respond()

        return durable()
    return respond()


def _response(broker: Broker, version: int, entries: list[Any], include_ops: bool) -> Any:
    cls = response_type(API_KEY, version)
    topic_cls = nested(cls, "MetadataResponseTopic")
    partition_cls = nested(cls, "MetadataResponsePartition")
    broker_cls = nested(cls, "MetadataResponseBroker")
    node = broker.node_id
    topics = []
    for name, topic_id, code, topic in entries:
        partitions = ()
        if topic is not None:
            partitions = tuple(
                build(
                    partition_cls,
                    error_code=ErrorCode.none,
                    partition_index=p,
                    leader_id=node,
                    leader_epoch=0,
                    replica_nodes=(node,),
                    isr_nodes=(node,),
                    offline_replicas=(),
                )
                for p in range(topic.partitions)
            )
        topics.append(
            build(
                topic_cls,
                error_code=code,
                name=name,
                topic_id=topic_id or _ZERO_UUID,
                is_internal=bool(topic and topic.internal),
                partitions=partitions,
                topic_authorized_operations=ALL_TOPIC_OPERATIONS if include_ops else NOT_REQUESTED_OPERATIONS,
            )
        )
    host, port = broker.advertised
    return build(
        cls,
        throttle_time=0,
        brokers=(build(broker_cls, node_id=node, host=host, port=port, rack=None),),
        cluster_id=broker.cluster_id,
        controller_id=node,
        topics=tuple(topics),
        cluster_authorized_operations=NOT_REQUESTED_OPERATIONS,
    )
