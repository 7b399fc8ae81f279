"""Every field the message schemas allow to be null, sent null: the broker answers with what
Kafka answers (never a closed connection or a failure inside a handler)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.describe_log_dirs.v4.request import DescribeLogDirsRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.offset_commit.v8.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_fetch.v7.request import OffsetFetchRequest as OffsetFetchRequestV7
from kio.schema.offset_fetch.v8.request import OffsetFetchRequest, OffsetFetchRequestGroup
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i8, i32, i64

from tests.support.harness import ThreadBroker
from tests.support.kafka_wire import KafkaConnection, batch, connect, ms


def _failures(broker: ThreadBroker) -> float:
    total = 0.0
    for metric in broker.broker.metrics.registry.collect():
        if metric.name == "streamshop_request_failures":
            total += sum(s.value for s in metric.samples if s.name.endswith("_total"))
    return total


def _metadata_by_unknown_id(c: KafkaConnection) -> None:
    topic_id = uuid.uuid4()
    response = c.request(
        MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=topic_id, name=None),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    assert [(t.error_code, t.topic_id) for t in response.topics] == [(ErrorCode.unknown_topic_id, topic_id)]


def _metadata_with_neither_name_nor_id(c: KafkaConnection) -> None:
    response = c.request(
        MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=None, name=None),),
            allow_auto_topic_creation=True,
            include_topic_authorized_operations=False,
        )
    )
    assert [t.error_code for t in response.topics] != [ErrorCode.none]


def _delete_by_unknown_id(c: KafkaConnection) -> None:
    response = c.request(
        DeleteTopicsRequest(topics=(DeleteTopicState(name=None, topic_id=uuid.uuid4()),), timeout=ms(10_000))
    )
    assert [r.error_code for r in response.responses] == [ErrorCode.unknown_topic_id]


def _delete_with_neither(c: KafkaConnection) -> None:
    response = c.request(DeleteTopicsRequest(topics=(DeleteTopicState(name=None, topic_id=None),), timeout=ms(10_000)))
    assert [r.error_code for r in response.responses] != [ErrorCode.none]
    assert [t.name for t in c.metadata(None).topics] == ["nulls"]


def _commit_null_metadata(c: KafkaConnection) -> None:
    response = c.request(
        OffsetCommitRequest(
            group_id=GroupId("standalone"),
            generation_id_or_member_epoch=i32(-1),
            member_id="",
            group_instance_id=None,
            topics=(
                OffsetCommitRequestTopic(
                    name=TopicName("nulls"),
                    partitions=(
                        OffsetCommitRequestPartition(
                            partition_index=i32(0),
                            committed_offset=i64(1),
                            committed_leader_epoch=i32(-1),
                            committed_metadata=None,
                        ),
                    ),
                ),
            ),
        )
    )
    assert response.topics[0].partitions[0].error_code == ErrorCode.none


def _fetch_all_offsets_v8(c: KafkaConnection) -> None:
    response = c.request(
        OffsetFetchRequest(
            groups=(OffsetFetchRequestGroup(group_id=GroupId("standalone"), topics=None),), require_stable=False
        )
    )
    group = response.groups[0]
    assert group.error_code == ErrorCode.none
    assert [(t.name, [p.committed_offset for p in t.partitions]) for t in group.topics] == [("nulls", [1])]


def _fetch_all_offsets_v7(c: KafkaConnection) -> None:
    response = c.request(OffsetFetchRequestV7(group_id=GroupId("standalone"), topics=None, require_stable=False))
    assert response.error_code == ErrorCode.none
    assert [t.name for t in response.topics] == ["nulls"]


def _describe_all_configs(c: KafkaConnection) -> None:
    response = c.request(
        DescribeConfigsRequest(
            resources=(DescribeConfigsResource(resource_type=i8(2), resource_name="nulls", configuration_keys=None),),
            include_synonyms=False,
            include_documentation=False,
        )
    )
    assert response.results[0].error_code == ErrorCode.none
    assert any(config.name == "cleanup.policy" for config in response.results[0].configs)


def _describe_all_log_dirs(c: KafkaConnection) -> None:
    response = c.request(DescribeLogDirsRequest(topics=None))
    assert response.error_code == ErrorCode.none
    assert any(t.name == "nulls" for result in response.results for t in result.topics)


CASES: dict[str, Callable[[KafkaConnection], Any]] = {
    "Metadata topic id, null name": _metadata_by_unknown_id,
    "Metadata null name and null id": _metadata_with_neither_name_nor_id,
    "DeleteTopics null name": _delete_by_unknown_id,
    "DeleteTopics null name and null id": _delete_with_neither,
    "OffsetCommit null metadata": _commit_null_metadata,
    "OffsetFetch v8 null topics": _fetch_all_offsets_v8,
    "OffsetFetch v7 null topics": _fetch_all_offsets_v7,
    "DescribeConfigs null keys": _describe_all_configs,
    "DescribeLogDirs null topics": _describe_all_log_dirs,
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_field_the_schema_allows_null_is_answered_when_null(broker: ThreadBroker, case: str) -> None:
    with connect(broker.bootstrap) as c:
        assert c.create_topic("nulls", 1).error_code == ErrorCode.none
        assert c.produce("nulls", 0, batch([b"x"])).error_code == ErrorCode.none
        if case.startswith("OffsetFetch"):
            _commit_null_metadata(c)
        CASES[case](c)
        assert c.api_versions().error_code == ErrorCode.none  # the same connection goes on
    assert _failures(broker) == 0
