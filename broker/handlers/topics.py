"""CreateTopics, DeleteTopics, CreatePartitions.  Metadata changes are fsynced before
the response, so an acknowledged topic survives a crash."""

from __future__ import annotations

import uuid
from typing import Any

from broker.core import Broker
from broker.handlers.configs import topic_config_entries
from broker.protocol.codec import RequestHeader, build, nested, nested_or_none, response_type
from broker.protocol.errors import ErrorCode, KafkaError

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
_ZERO_UUID = uuid.UUID(int=0)


async def _durable(broker: Broker, response: Any) -> Any:
    await broker.sync_metadata()
    return response


def create_topics(broker: Broker, header: RequestHeader, request: Any) -> Any:
    version = header.api_version
    cls = response_type(CREATE_TOPICS, version)
    result_cls = nested(cls, "CreatableTopicResult")
    config_cls = nested_or_none(cls, "CreatableTopicConfigs")
    validate_only = getattr(request, "validate_only", False)
    names = [t.name for t in request.topics]
    results = []
    for item in request.topics:
        topic_id, partitions, replication, configs_out = _ZERO_UUID, -1, -1, ()
        try:
            if names.count(item.name) > 1:
                raise KafkaError(ErrorCode.invalid_request, f"topic {item.name!r} appears more than once")
            partitions = item.num_partitions
            if item.assignments:
                if partitions != -1 or item.replication_factor != -1:
                    raise KafkaError(
                        ErrorCode.invalid_request,
                        "both a replica assignment and a partition count or replication factor were given",
                    )
                for assignment in item.assignments:
                    if list(assignment.broker_ids) != [broker.node_id]:
                        raise KafkaError(
                            ErrorCode.invalid_replica_assignment,
                            f"partition {assignment.partition_index} assigned to brokers "
                            f"{list(assignment.broker_ids)}; the only broker is {broker.node_id}",
                        )
                partitions = len(item.assignments)
            configs = broker.check_new_topic(
                item.name, partitions, item.replication_factor, {c.name: c.value for c in item.configs}
            )
            if partitions == -1:
                partitions = broker.config.get("num.partitions")
            replication = 1
            if not validate_only:
                topic = broker.create_topic(item.name, partitions, configs)
                topic_id = topic.topic_id
            values = {**broker.config.topic_defaults(), **configs}
            configs_out = (
                ()
                if config_cls is None
                else tuple(
                    build(
                        config_cls,
                        name=e.name,
                        value=e.value,
                        read_only=False,
                        config_source=e.source,
                        is_sensitive=False,
                    )
                    for e in topic_config_entries(broker, values, set(configs))
                )
            )
            error, message = ErrorCode.none, None
        except KafkaError as e:
            error, message = e.code, e.message
            partitions, replication = -1, -1
        results.append(
            build(
                result_cls,
                name=item.name,
                topic_id=topic_id,
                error_code=error,
                error_message=message,
                topic_config_error_code=ErrorCode.none,
                num_partitions=partitions,
                replication_factor=replication,
                configs=configs_out if error == ErrorCode.none else (),
            )
        )
    response = build(cls, throttle_time=0, topics=tuple(results))
    return response if validate_only else _durable(broker, response)


def delete_topics(broker: Broker, header: RequestHeader, request: Any) -> Any:
    version = header.api_version
    cls = response_type(DELETE_TOPICS, version)
    result_cls = nested(cls, "DeletableTopicResult")
    if version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    results = []
    for name, topic_id in wanted:
        if name is None and topic_id not in (None, _ZERO_UUID):
            topic = broker.store.by_id.get(topic_id)
            missing = ErrorCode.unknown_topic_id
        else:
            topic = broker.store.get(name) if name else None
            missing = ErrorCode.unknown_topic_or_partition
        if topic is None:
            results.append(
                build(
                    result_cls,
                    name=name,
                    topic_id=topic_id or _ZERO_UUID,
                    error_code=missing,
                    error_message=f"topic {name or topic_id} does not exist",
                )
            )
            continue
        broker.store.delete_topic(topic.name)
        results.append(
            build(result_cls, name=topic.name, topic_id=topic.topic_id, error_code=ErrorCode.none, error_message=None)
        )
    return _durable(broker, build(cls, throttle_time=0, responses=tuple(results)))


def create_partitions(broker: Broker, header: RequestHeader, request: Any) -> Any:
    cls = response_type(CREATE_PARTITIONS, header.api_version)
    result_cls = nested(cls, "CreatePartitionsTopicResult")
    results = []
    for item in request.topics:
        try:
            topic = broker.store.get(item.name)
            if topic is None:
                raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic {item.name!r} does not exist")
            if item.count <= topic.partitions:
                raise KafkaError(
                    ErrorCode.invalid_partitions,
                    f"topic currently has {topic.partitions} partitions, which is higher than or "
                    f"equal to the requested {item.count}",
                )
            if item.assignments is not None:
                if len(item.assignments) != item.count - topic.partitions:
                    raise KafkaError(ErrorCode.invalid_replica_assignment, "one assignment is needed per new partition")
                for assignment in item.assignments:
                    if list(assignment.broker_ids) != [broker.node_id]:
                        raise KafkaError(ErrorCode.invalid_replica_assignment, f"the only broker is {broker.node_id}")
            if not request.validate_only:
                broker.store.add_partitions(item.name, item.count)
            results.append(build(result_cls, name=item.name, error_code=ErrorCode.none, error_message=None))
        except KafkaError as e:
            results.append(build(result_cls, name=item.name, error_code=e.code, error_message=e.message))
    response = build(cls, throttle_time=0, results=tuple(results))
    return response if request.validate_only else _durable(broker, response)
