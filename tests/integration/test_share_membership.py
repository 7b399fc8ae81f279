"""Who may use a share group's records, over real connections: a member id the group does not
have acquires nothing and acknowledges nothing (UNKNOWN_MEMBER_ID), a member's share session is
its connection's alone (another connection naming the member finds none and cannot open one
over it), and a member whose session ran out rejoins and fetches again."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.share_acknowledge.v1 import request as share_ack
from kio.schema.share_fetch.v1 import request as share_fetch
from kio.schema.types import GroupId
from kio.static.primitive import i8, i32, i64

from broker.protocol.errors import ErrorCode
from tests.support.configs import set_group_configs
from tests.support.harness import ThreadBroker
from tests.support.kafka_wire import KafkaConnection, connect, ms
from tests.support.share_wire import heartbeat

GROUP = "members"
ACCEPT, RELEASE = 1, 2


def _setup(broker: ThreadBroker, topic: str, records: int) -> uuid.UUID:
    """`topic` with `records` records, read by the group from its start; the topic's id."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)
    set_group_configs(broker.bootstrap, GROUP, {"share.auto.offset.reset": "earliest"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(records):
        producer.produce(topic, value=b"v%d" % i)
    assert producer.flush(30) == 0
    with connect(broker.bootstrap) as conn:
        request = MetadataRequest(
            topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
        )
        topic_id: uuid.UUID = next(t.topic_id for t in conn.request(request).topics if t.name == topic)
    return topic_id


def _fetch(conn: KafkaConnection, member: str, epoch: int, tid: uuid.UUID, acks: tuple[Any, ...] = ()) -> Any:
    part = share_fetch.FetchPartition(partition_index=i32(0), acknowledgement_batches=acks)
    return conn.request(
        share_fetch.ShareFetchRequest(
            group_id=GroupId(GROUP), member_id=member, share_session_epoch=i32(epoch), max_wait=ms(0),
            min_bytes=i32(1), max_bytes=i32(1 << 20), max_records=i32(10_000), batch_size=i32(10_000),
            topics=(share_fetch.FetchTopic(topic_id=tid, partitions=(part,)),), forgotten_topics_data=(),
        )
    )  # fmt: skip


def _acknowledge(conn: KafkaConnection, member: str, epoch: int, tid: uuid.UUID, acks: tuple[Any, ...]) -> Any:
    part = share_ack.AcknowledgePartition(partition_index=i32(0), acknowledgement_batches=acks)
    return conn.request(
        share_ack.ShareAcknowledgeRequest(
            group_id=GroupId(GROUP), member_id=member, share_session_epoch=i32(epoch),
            topics=(share_ack.AcknowledgeTopic(topic_id=tid, partitions=(part,)),),
        )
    )  # fmt: skip


def _batch(first: int, last: int, kind: int) -> Any:
    return share_fetch.AcknowledgementBatch(
        first_offset=i64(first), last_offset=i64(last), acknowledge_types=(i8(kind),)
    )


def _ack_batch(first: int, last: int, kind: int) -> Any:
    return share_ack.AcknowledgementBatch(first_offset=i64(first), last_offset=i64(last), acknowledge_types=(i8(kind),))


def _acquired(response: Any) -> list[tuple[int, int, int]]:
    assert response.error_code == ErrorCode.none, response
    return [
        (a.first_offset, a.last_offset, a.delivery_count)
        for t in response.responses
        for p in t.partitions
        for a in p.acquired_records
    ]


def _join(conn: KafkaConnection, member: str, topic: str) -> None:
    joined = heartbeat(conn, GROUP, member, 0, [topic])
    assert joined.error_code == ErrorCode.none, joined


def test_a_member_id_that_never_joined_acquires_and_acknowledges_nothing(
    broker_factory: Callable[..., ThreadBroker],
) -> None:
    """ShareFetch and ShareAcknowledge at any epoch from a member id the group does not have
    are UNKNOWN_MEMBER_ID and touch no record: a member that joins then gets every record, on
    its first delivery."""
    broker = broker_factory()
    tid = _setup(broker, "never-joined", 50)
    with connect(broker.bootstrap) as intruder, connect(broker.bootstrap) as member:
        for epoch in (0, 1, -1):
            refused = _fetch(intruder, "ghost", epoch, tid, () if epoch == 0 else (_batch(0, 9, ACCEPT),))
            assert refused.error_code == ErrorCode.unknown_member_id, refused
            assert refused.responses == ()
        for epoch in (1, -1):
            refused = _acknowledge(intruder, "ghost", epoch, tid, (_ack_batch(0, 9, ACCEPT),))
            assert refused.error_code == ErrorCode.unknown_member_id, refused
        _join(member, "real", "never-joined")
        assert _acquired(_fetch(member, "real", 0, tid)) == [(0, 49, 1)]
        _join(intruder, "ghost", "never-joined")  # once it has joined, it is a member like any
        assert _fetch(intruder, "ghost", 0, tid).error_code == ErrorCode.none


def test_another_connection_cannot_continue_or_replace_a_members_share_session(
    broker_factory: Callable[..., ThreadBroker],
) -> None:
    """A second connection naming a current member (its id is in DescribeGroups) finds no
    share session at any epoch, cannot open one over the member's, and acknowledges nothing;
    the member's own session goes on at its epoch and its records are still its own."""
    broker = broker_factory()
    tid = _setup(broker, "taken-over", 20)
    with connect(broker.bootstrap) as owner, connect(broker.bootstrap) as other:
        _join(owner, "victim", "taken-over")
        assert _acquired(_fetch(owner, "victim", 0, tid)) == [(0, 19, 1)]
        for epoch in (1, 2, -1):
            refused = _fetch(other, "victim", epoch, tid, (_batch(0, 9, RELEASE),))
            assert refused.error_code == ErrorCode.share_session_not_found, refused
            refused = _acknowledge(other, "victim", epoch, tid, (_ack_batch(0, 9, ACCEPT),))
            assert refused.error_code == ErrorCode.share_session_not_found, refused
        replaced = _fetch(other, "victim", 0, tid)
        assert replaced.error_code == ErrorCode.invalid_share_session_epoch, replaced
        assert replaced.responses == ()
        acked = _acknowledge(owner, "victim", 1, tid, (_ack_batch(0, 19, ACCEPT),))  # still epoch 1, all its own
        assert acked.error_code == ErrorCode.none
        assert [p.error_code for t in acked.responses for p in t.partitions] == [ErrorCode.none]
        assert _fetch(owner, "victim", -1, tid).error_code == ErrorCode.none
    with connect(broker.bootstrap) as later:  # the owner's connection closed: nothing left to take
        _join(later, "victim", "taken-over")
        assert _acquired(_fetch(later, "victim", 0, tid)) == []


def test_a_member_whose_session_ran_out_rejoins_and_fetches_again(
    broker_factory: Callable[..., ThreadBroker],
) -> None:
    """A member that stops heartbeating is removed, its records released and its share session
    ended: its next fetch is UNKNOWN_MEMBER_ID.  Joining again under the same id, it opens a
    new session and gets the records again, on their second delivery."""
    broker = broker_factory(
        settings={"group.share.session.timeout.ms": "1000", "group.share.heartbeat.interval.ms": "200"}
    )
    tid = _setup(broker, "rejoin", 5)
    with connect(broker.bootstrap) as conn:
        _join(conn, "sleepy", "rejoin")
        assert _acquired(_fetch(conn, "sleepy", 0, tid)) == [(0, 4, 1)]
        deadline = time.monotonic() + 30
        epoch = 1
        while (fetched := _fetch(conn, "sleepy", epoch, tid)).error_code == ErrorCode.none:
            assert time.monotonic() < deadline, "the member never expired"
            epoch += 1
            time.sleep(0.1)
        assert fetched.error_code == ErrorCode.unknown_member_id, fetched
        _join(conn, "sleepy", "rejoin")
        assert _fetch(conn, "sleepy", epoch, tid).error_code == ErrorCode.share_session_not_found
        assert _acquired(_fetch(conn, "sleepy", 0, tid)) == [(0, 4, 2)]
