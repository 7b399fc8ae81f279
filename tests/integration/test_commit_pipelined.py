"""A connection's requests are served in order, as Kafka serves them: an OffsetFetch sent right
behind an OffsetCommit, in the same write, sees the offsets just committed, in both durability
modes (page-cache answers a commit of few offsets at once, fsync once it is synced)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kio.schema.offset_commit.v9.request import OffsetCommitRequest, OffsetCommitRequestPartition
from kio.schema.offset_commit.v9.request import OffsetCommitRequestTopic as CommitTopic
from kio.schema.offset_fetch.v9.request import OffsetFetchRequest, OffsetFetchRequestGroup
from kio.schema.offset_fetch.v9.request import OffsetFetchRequestTopics as FetchTopic
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i64

from broker.protocol.errors import ErrorCode
from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import create_topic
from tests.support.kafka_wire import KafkaConnection, decode_response, encode_request, parse_bootstrap

TOPIC = TopicName("pipelined-commits")
GROUP = GroupId("pipelined")
PARTITIONS = 12


def _commit(offset: int) -> OffsetCommitRequest:
    parts = tuple(
        OffsetCommitRequestPartition(
            partition_index=i32(p),
            committed_offset=i64(offset + p),
            committed_leader_epoch=i32(-1),
            committed_metadata="",
        )
        for p in range(PARTITIONS)
    )
    return OffsetCommitRequest(
        group_id=GROUP,
        generation_id_or_member_epoch=i32(-1),
        member_id="",
        group_instance_id=None,
        topics=(CommitTopic(name=TOPIC, partitions=parts),),
    )


def _fetch() -> OffsetFetchRequest:
    topics = (FetchTopic(name=TOPIC, partition_indexes=tuple(i32(p) for p in range(PARTITIONS))),)
    group = OffsetFetchRequestGroup(group_id=GROUP, member_id=None, member_epoch=i32(-1), topics=topics)
    return OffsetFetchRequest(groups=(group,), require_stable=False)


@pytest.mark.parametrize("mode", ["page-cache", "fsync"])
def test_a_fetch_pipelined_behind_a_commit_sees_it(broker_factory: Callable[..., ThreadBroker], mode: str) -> None:
    broker = broker_factory({"log.durability": mode})
    create_topic(broker.bootstrap, TOPIC, PARTITIONS)
    with KafkaConnection(*parse_bootstrap(broker.bootstrap)) as conn:
        for offset in (100, 200, 300):  # the first commit also creates __consumer_offsets
            commit, fetch = conn.correlation_id(), conn.correlation_id()
            conn.send_raw(encode_request(_commit(offset), commit) + encode_request(_fetch(), fetch))
            answered, committed = decode_response(8, 9, conn.recv_frame())
            assert answered == commit
            assert [(p.partition_index, p.error_code) for t in committed.topics for p in t.partitions] == [
                (p, ErrorCode.none) for p in range(PARTITIONS)
            ]
            answered, fetched = decode_response(9, 9, conn.recv_frame())
            assert answered == fetch
            (group,) = fetched.groups
            assert group.error_code == ErrorCode.none
            assert [(p.partition_index, p.committed_offset) for t in group.topics for p in t.partitions] == [
                (p, offset + p) for p in range(PARTITIONS)
            ]
