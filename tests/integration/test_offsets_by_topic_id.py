"""OffsetCommit and OffsetFetch v10 name topics by id, as Kafka 4.1 does: a commit and a fetch by
id meet the offsets committed by name; an id the broker does not know is UNKNOWN_TOPIC_ID; a
fetch of every offset names each topic by its id."""

from __future__ import annotations

import uuid

from kio.schema.offset_commit.v10.request import OffsetCommitRequest, OffsetCommitRequestPartition
from kio.schema.offset_commit.v10.request import OffsetCommitRequestTopic as CommitTopic
from kio.schema.offset_fetch.v10.request import OffsetFetchRequest, OffsetFetchRequestGroup
from kio.schema.offset_fetch.v10.request import OffsetFetchRequestTopics as FetchTopic
from kio.static.primitive import i32, i64

from broker.protocol.errors import ErrorCode
from tests.integration.test_metadata_topic_ids import _connection, _topic_id
from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import create_topic


def _commit(topic_id: uuid.UUID, offsets: dict[int, int]) -> OffsetCommitRequest:
    parts = tuple(
        OffsetCommitRequestPartition(
            partition_index=i32(p), committed_offset=i64(o), committed_leader_epoch=i32(-1), committed_metadata="m"
        )
        for p, o in offsets.items()
    )
    return OffsetCommitRequest(
        group_id="by-id",
        generation_id_or_member_epoch=i32(-1),
        member_id="",
        group_instance_id=None,
        topics=(CommitTopic(topic_id=topic_id, partitions=parts),),
    )


def _fetch(topics: tuple[FetchTopic, ...] | None) -> OffsetFetchRequest:
    group = OffsetFetchRequestGroup(group_id="by-id", member_id=None, member_epoch=i32(-1), topics=topics)
    return OffsetFetchRequest(groups=(group,), require_stable=False)


def test_offsets_committed_and_fetched_by_topic_id(broker: ThreadBroker) -> None:
    create_topic(broker.bootstrap, "offsets.by-id", 2)
    topic_id = _topic_id(broker, "offsets.by-id")
    unknown = uuid.uuid4()
    with _connection(broker) as conn:
        committed = conn.request(_commit(topic_id, {0: 5, 1: 7}))
        assert [(t.topic_id, [p.error_code for p in t.partitions]) for t in committed.topics] == [
            (topic_id, [ErrorCode.none, ErrorCode.none])
        ]
        refused = conn.request(_commit(unknown, {0: 1}))
        assert [p.error_code for t in refused.topics for p in t.partitions] == [ErrorCode.unknown_topic_id]

        wanted = (FetchTopic(topic_id=topic_id, partition_indexes=(i32(0), i32(1))),)
        (group,) = conn.request(_fetch(wanted)).groups
        assert group.error_code == ErrorCode.none
        (topic,) = group.topics
        assert topic.topic_id == topic_id
        assert [(p.partition_index, p.committed_offset, p.metadata) for p in topic.partitions] == [
            (0, 5, "m"),
            (1, 7, "m"),
        ]

        (group,) = conn.request(_fetch((FetchTopic(topic_id=unknown, partition_indexes=(i32(0),)),))).groups
        assert [p.error_code for t in group.topics for p in t.partitions] == [ErrorCode.unknown_topic_id]

        (group,) = conn.request(_fetch(None)).groups  # every committed offset, named by id
        assert [(t.topic_id, len(t.partitions)) for t in group.topics] == [(topic_id, 2)]
