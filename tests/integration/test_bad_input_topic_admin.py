"""The bundled broker against bad admin requests: invalid topic configs (CreateTopics,
IncrementalAlterConfigs, changing nothing), invalid partition counts and replication factors,
CreatePartitions to fewer or of unknown topics.

Each test seeds a topic with records, opens a bystander connection, sends the bad input
on its own connection, then `assert_survived` checks: the bystander connection still gets
answers, a fresh connection can produce, and every record stored before is still readable.
"""

from __future__ import annotations

import datetime

import pytest
from kio.schema.create_partitions.v3.request import CreatePartitionsRequest, CreatePartitionsTopic
from kio.schema.create_topics.v7.request import CreatableTopic, CreatableTopicConfig, CreateTopicsRequest
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)

from tests.support.bad_input import TOPIC, Stored, assert_survived
from tests.support.kafka_wire import (
    KafkaConnection,
    connect,
)

TOPIC_RESOURCE = 2
SET, APPEND = 0, 2


INVALID_CONFIGS: list[dict[str, str | None]] = [
    {"no.such.config": "1"},
    {"retention.ms": "one week"},
    {"retention.ms": "-2"},
    {"segment.bytes": "1"},
    {"cleanup.policy": "forever"},
    {"message.timestamp.type": "WallClock"},
    {"compression.type": "brotli"},
    {"min.cleanable.dirty.ratio": "1.5"},
    {"max.message.bytes": "2147483648"},
    {"retention.ms": None},
]


@pytest.mark.parametrize("configs", INVALID_CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_create_topics_with_invalid_config_gets_invalid_config(stored: Stored, configs: dict[str, str | None]) -> None:
    """An unknown config name or an unparseable / out-of-range value is INVALID_CONFIG (40)
    and the topic is not created."""
    with connect(stored.broker.bootstrap) as client:
        response = client.request(
            CreateTopicsRequest(
                topics=(
                    CreatableTopic(
                        name="configured",
                        num_partitions=1,
                        replication_factor=-1,
                        assignments=(),
                        configs=tuple(CreatableTopicConfig(name=k, value=v) for k, v in configs.items()),
                    ),
                ),
                timeout=datetime.timedelta(seconds=10),
            )
        )
        assert response.topics[0].error_code == ErrorCode.invalid_config
        assert response.topics[0].error_message
        assert {t.name for t in client.metadata(None).topics} == {TOPIC}
    assert_survived(stored)


def _describe_topic_configs(client: KafkaConnection, topic: str) -> dict[str, str | None]:
    response = client.request(
        DescribeConfigsRequest(
            resources=(
                DescribeConfigsResource(resource_type=TOPIC_RESOURCE, resource_name=topic, configuration_keys=None),
            )
        )
    )
    result = response.results[0]
    assert result.error_code == ErrorCode.none
    return {c.name: c.value for c in result.configs}


@pytest.mark.parametrize(
    "ops",
    [
        [("no.such.config", SET, "1")],
        [("retention.ms", SET, "soon")],
        [("segment.bytes", SET, "0")],
        [("cleanup.policy", SET, "keep")],
        [("retention.ms", SET, None)],
        [("retention.ms", APPEND, "5")],
        [("retention.ms", SET, "1234"), ("segment.ms", SET, "never")],
    ],
    ids=["unknown", "not-int", "out-of-range", "bad-policy", "null-value", "append-non-list", "one-bad-of-two"],
)
def test_incremental_alter_configs_with_invalid_config_gets_invalid_config_and_changes_nothing(
    stored: Stored, ops: list[tuple[str, int, str | None]]
) -> None:
    """An invalid operation is INVALID_CONFIG (40); the resource is altered all or
    nothing, so a valid change next to an invalid one is not applied either."""
    with connect(stored.broker.bootstrap) as client:
        before = _describe_topic_configs(client, TOPIC)
        response = client.request(
            IncrementalAlterConfigsRequest(
                resources=(
                    AlterConfigsResource(
                        resource_type=TOPIC_RESOURCE,
                        resource_name=TOPIC,
                        configs=tuple(AlterableConfig(name=n, config_operation=op, value=v) for n, op, v in ops),
                    ),
                ),
                validate_only=False,
            )
        )
        assert response.responses[0].error_code == ErrorCode.invalid_config
        assert _describe_topic_configs(client, TOPIC) == before
    assert_survived(stored)


def test_incremental_alter_configs_of_unknown_topic_gets_unknown_topic_or_partition(stored: Stored) -> None:
    with connect(stored.broker.bootstrap) as client:
        response = client.request(
            IncrementalAlterConfigsRequest(
                resources=(
                    AlterConfigsResource(
                        resource_type=TOPIC_RESOURCE,
                        resource_name="no-such-topic",
                        configs=(AlterableConfig(name="retention.ms", config_operation=SET, value="1000"),),
                    ),
                ),
                validate_only=False,
            )
        )
        assert response.responses[0].error_code == ErrorCode.unknown_topic_or_partition
    assert_survived(stored)


# --- partitions and replication ------------------------------------------------------


def _create(client: KafkaConnection, name: str, partitions: int, replication: int) -> object:
    response = client.request(
        CreateTopicsRequest(
            topics=(
                CreatableTopic(
                    name=name, num_partitions=partitions, replication_factor=replication, assignments=(), configs=()
                ),
            ),
            timeout=datetime.timedelta(seconds=10),
        )
    )
    return response.topics[0]


@pytest.mark.parametrize("partitions", [0, -2, -1000])
def test_create_topics_with_invalid_partition_count_gets_invalid_partitions(stored: Stored, partitions: int) -> None:
    """A partition count of 0 or below -1 (-1 means the broker default) is INVALID_PARTITIONS (37)."""
    with connect(stored.broker.bootstrap) as client:
        result = _create(client, "counted", partitions, -1)
        assert result.error_code == ErrorCode.invalid_partitions  # type: ignore[attr-defined]
        assert {t.name for t in client.metadata(None).topics} == {TOPIC}
    assert_survived(stored)


@pytest.mark.parametrize("replication", [2, 3, 0, -2])
def test_create_topics_with_replication_factor_other_than_one_gets_invalid_replication_factor(
    stored: Stored, replication: int
) -> None:
    """A single broker cannot hold more than one replica; 0 and values below -1 are invalid
    too: INVALID_REPLICATION_FACTOR (38), nothing created."""
    with connect(stored.broker.bootstrap) as client:
        result = _create(client, "replicated", 1, replication)
        assert result.error_code == ErrorCode.invalid_replication_factor  # type: ignore[attr-defined]
        assert {t.name for t in client.metadata(None).topics} == {TOPIC}
    assert_survived(stored)


@pytest.mark.parametrize("count", [1, 2, 0], ids=["equal", "fewer", "zero"])
def test_create_partitions_to_fewer_or_equal_count_gets_invalid_partitions(stored: Stored, count: int) -> None:
    """CreatePartitions can only grow a topic: a count at or below the current one is
    INVALID_PARTITIONS (37) and the topic keeps its partitions and records."""
    with connect(stored.broker.bootstrap) as client:
        assert client.create_topic("grown", 2).error_code == ErrorCode.none
        response = client.request(
            CreatePartitionsRequest(
                topics=(CreatePartitionsTopic(name="grown", count=count, assignments=None),),
                timeout=datetime.timedelta(seconds=10),
                validate_only=False,
            )
        )
        assert response.results[0].error_code == ErrorCode.invalid_partitions
        topics = {t.name: t for t in client.metadata(["grown"]).topics}
        assert len(topics["grown"].partitions) == 2
    assert_survived(stored)


def test_create_partitions_of_unknown_topic_gets_unknown_topic_or_partition(stored: Stored) -> None:
    with connect(stored.broker.bootstrap) as client:
        response = client.request(
            CreatePartitionsRequest(
                topics=(CreatePartitionsTopic(name="no-such-topic", count=4, assignments=None),),
                timeout=datetime.timedelta(seconds=10),
                validate_only=False,
            )
        )
        assert response.results[0].error_code == ErrorCode.unknown_topic_or_partition
    assert_survived(stored)
