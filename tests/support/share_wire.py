"""Share-group requests over the raw protocol (tests/support/kafka_wire.py's connection):
a member's heartbeat, and the offset APIs Kafka's Admin client sends."""

from __future__ import annotations

from typing import Any

from kio.schema.alter_share_group_offsets.v0.request import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsRequestPartition,
    AlterShareGroupOffsetsRequestTopic,
)
from kio.schema.delete_share_group_offsets.v0.request import (
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsRequestTopic,
)
from kio.schema.describe_share_group_offsets.v0.request import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroup,
    DescribeShareGroupOffsetsRequestTopic,
)
from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i64

from broker.protocol.errors import ErrorCode
from tests.support.kafka_wire import KafkaConnection


def heartbeat(conn: KafkaConnection, group: str, member: str, epoch: int, topics: list[str] | None) -> Any:
    """One ShareGroupHeartbeat: epoch 0 joins, -1 leaves."""
    return conn.request(
        ShareGroupHeartbeatRequest(
            group_id=GroupId(group),
            member_id=member,
            member_epoch=i32(epoch),
            rack_id=None,
            subscribed_topic_names=None if topics is None else tuple(TopicName(t) for t in topics),
        )
    )


def describe(conn: KafkaConnection, group: str, topics: dict[str, list[int]] | None) -> Any:
    """DescribeShareGroupOffsets of one group (`topics` None: all its partitions)."""
    asked = (
        None
        if topics is None
        else tuple(
            DescribeShareGroupOffsetsRequestTopic(topic_name=TopicName(t), partitions=tuple(i32(p) for p in ps))
            for t, ps in topics.items()
        )
    )
    group_entry = DescribeShareGroupOffsetsRequestGroup(group_id=GroupId(group), topics=asked)
    return conn.request(DescribeShareGroupOffsetsRequest(groups=(group_entry,))).groups[0]


def offsets_of(conn: KafkaConnection, group: str, topics: dict[str, list[int]]) -> dict[tuple[str, int], int] | None:
    """Each partition's start offset (-1 without state); None while the group is unknown."""
    described = describe(conn, group, topics)
    if described.error_code == ErrorCode.group_id_not_found:
        return None
    assert described.error_code == ErrorCode.none, described
    return {(t.topic_name, p.partition_index): p.start_offset for t in described.topics for p in t.partitions}


def alter(conn: KafkaConnection, group: str, offsets: dict[str, dict[int, int]]) -> Any:
    """AlterShareGroupOffsets: {topic: {partition: start offset}}."""
    topics = tuple(
        AlterShareGroupOffsetsRequestTopic(
            topic_name=TopicName(t),
            partitions=tuple(
                AlterShareGroupOffsetsRequestPartition(partition_index=i32(p), start_offset=i64(o))
                for p, o in parts.items()
            ),
        )
        for t, parts in offsets.items()
    )
    return conn.request(AlterShareGroupOffsetsRequest(group_id=GroupId(group), topics=topics))


def delete(conn: KafkaConnection, group: str, topics: list[str]) -> Any:
    """DeleteShareGroupOffsets of whole topics."""
    asked = tuple(DeleteShareGroupOffsetsRequestTopic(topic_name=TopicName(t)) for t in topics)
    return conn.request(DeleteShareGroupOffsetsRequest(group_id=GroupId(group), topics=asked))


def partition_errors(response: Any) -> dict[tuple[str, int], int]:
    """An AlterShareGroupOffsets response's error code of each partition."""
    return {(t.topic_name, p.partition_index): p.error_code for t in response.responses for p in t.partitions}
