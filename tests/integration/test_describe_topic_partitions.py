"""DescribeTopicPartitions (API 75) and DescribeQuorum (API 55), over real sockets: kafka-python's
admin client pages through topics and reads the quorum; raw requests check the pagination
(`ResponsePartitionLimit`, `NextCursor`), the errors Kafka gives (unknown topics, a cursor
outside the topic list, a partition other than `__cluster_metadata`-0) and the ACLs (DESCRIBE on
the topic; DESCRIBE on the cluster)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AclOperation, AdminClient, ResourceType
from kafka.admin import KafkaAdminClient
from kio.schema.describe_quorum.v0 import request as v0
from kio.schema.describe_quorum.v1 import request as v1
from kio.schema.describe_quorum.v2.request import DescribeQuorumRequest, PartitionData, TopicData
from kio.schema.describe_topic_partitions.v0.request import Cursor, DescribeTopicPartitionsRequest, TopicRequest
from kio.schema.types import TopicName
from kio.static.primitive import i32

from broker.protocol.errors import ErrorCode
from streamshop.pki import LocalCA
from tests.integration.test_security_acls import ALICE, ALICE_PASSWORD, acl, create_topic
from tests.integration.test_security_clients import add_user, grant
from tests.support.harness import ThreadBroker
from tests.support.kafka_wire import KafkaConnection, connect
from tests.support.secure import SecureBroker, make_admin_user, sasl_login, secure_settings


def _describe(conn: KafkaConnection, *names: str, limit: int = 2000, cursor: tuple[str, int] | None = None) -> Any:
    return conn.request(
        DescribeTopicPartitionsRequest(
            topics=tuple(TopicRequest(name=TopicName(n)) for n in names),
            response_partition_limit=i32(limit),
            cursor=None if cursor is None else Cursor(topic_name=TopicName(cursor[0]), partition_index=i32(cursor[1])),
        )
    )


def _pages(conn: KafkaConnection, *names: str, limit: int) -> list[list[tuple[str, int]]]:
    """Every page of a paginated description: (topic, partition) per page, following the cursor."""
    pages: list[list[tuple[str, int]]] = []
    cursor = None
    while True:
        response = _describe(conn, *names, limit=limit, cursor=cursor)
        assert all(t.error_code == ErrorCode.none for t in response.topics)
        pages.append([(t.name, p.partition_index) for t in response.topics for p in t.partitions])
        if response.next_cursor is None:
            return pages
        cursor = (response.next_cursor.topic_name, response.next_cursor.partition_index)
        assert len(pages) < 100, "the cursor never ended"


def _quorum(conn: KafkaConnection, topic: str = "__cluster_metadata", partition: int = 0) -> Any:
    return conn.request(
        DescribeQuorumRequest(
            topics=(
                TopicData(topic_name=TopicName(topic), partitions=(PartitionData(partition_index=i32(partition)),)),
            )
        )
    )


def test_kafka_python_describes_topic_partitions_page_by_page(broker: ThreadBroker) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        with connect(broker.bootstrap) as conn:
            for name, partitions in (("dtp.b", 3), ("dtp.a", 2)):
                assert conn.create_topic(name, partitions).error_code == ErrorCode.none
        first = admin.describe_topic_partitions(["dtp.b", "dtp.a"], response_partition_limit=3)
        # Name order, three partitions, then the cursor where the next page starts.
        assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in first["topics"]] == [
            ("dtp.a", [0, 1]),
            ("dtp.b", [0]),
        ]
        assert first["next_cursor"] == {"topic_name": "dtp.b", "partition_index": 1}
        second = admin.describe_topic_partitions(["dtp.b", "dtp.a"], cursor=first["next_cursor"])
        assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in second["topics"]] == [
            ("dtp.b", [1, 2])
        ]
        assert second["next_cursor"] is None
        partition = second["topics"][0]["partitions"][0]
        node = broker.broker.node_id
        assert partition["leader_id"] == node
        assert partition["replica_nodes"] == partition["isr_nodes"] == [node]
        assert partition["offline_replicas"] == []
        assert second["topics"][0]["topic_id"] == broker.broker.store.get("dtp.b").topic_id
    finally:
        admin.close()


def test_kafka_python_describes_the_metadata_quorum_as_one_combined_node(broker: ThreadBroker) -> None:
    with connect(broker.bootstrap) as conn:  # a metadata record, so that the log is not empty
        assert conn.create_topic("quorum.t", 1).error_code == ErrorCode.none
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        quorum = admin.describe_metadata_quorum()
    finally:
        admin.close()
    node = broker.broker.node_id
    (topic,) = quorum["topics"]
    (partition,) = topic["partitions"]
    meta_log = broker.broker.store.meta_log
    assert topic["topic_name"] == "__cluster_metadata"
    assert partition["partition_index"] == 0
    assert partition["error"] is None
    assert partition["leader_id"] == node
    assert partition["high_watermark"] == meta_log.high_watermark > 0
    (voter,) = partition["current_voters"]
    assert voter["replica_id"] == node
    assert voter["log_end_offset"] == meta_log.next_offset
    assert partition["observers"] == []
    host, port = broker.bootstrap.split(":")
    assert [(n["node_id"], [(li["host"], li["port"]) for li in n["listeners"]]) for n in quorum["nodes"]] == [
        (node, [(host, int(port))])
    ]


def test_every_topic_is_paged_in_name_order_with_each_partition_exactly_once(broker: ThreadBroker) -> None:
    with connect(broker.bootstrap) as conn:
        for name, partitions in (("page.c", 4), ("page.a", 5), ("page.b", 1)):
            assert conn.create_topic(name, partitions).error_code == ErrorCode.none
        pages = _pages(conn, limit=2)
        seen = [tp for page in pages for tp in page]
        expected = [("page.a", p) for p in range(5)] + [("page.b", 0)] + [("page.c", p) for p in range(4)]
        assert seen == expected
        assert all(len(page) <= 2 for page in pages)
        # Named topics page the same way.
        assert [tp for page in _pages(conn, "page.c", "page.a", limit=3) for tp in page] == [
            tp for tp in expected if tp[0] != "page.b"
        ]


def test_the_broker_caps_a_page_at_max_request_partition_size_limit(
    broker_factory: Callable[..., ThreadBroker],
) -> None:
    broker = broker_factory(settings={"max.request.partition.size.limit": "3"})
    with connect(broker.bootstrap) as conn:
        assert conn.create_topic("capped", 7).error_code == ErrorCode.none
        response = _describe(conn, "capped", limit=100)
        assert [p.partition_index for p in response.topics[0].partitions] == [0, 1, 2]
        assert (response.next_cursor.topic_name, response.next_cursor.partition_index) == ("capped", 3)


def test_unknown_and_invalid_topics_are_answered_with_kafkas_errors(broker: ThreadBroker) -> None:
    with connect(broker.bootstrap) as conn:
        response = _describe(conn, "no.such.topic", "bad name!", "__cluster_metadata")
        errors = {t.name: t.error_code for t in response.topics}
        assert errors == {
            "no.such.topic": ErrorCode.unknown_topic_or_partition,
            "bad name!": ErrorCode.invalid_topic_exception,
            "__cluster_metadata": ErrorCode.unknown_topic_or_partition,
        }
        assert all(not t.partitions for t in response.topics)
        # Every topic (no list) never shows the metadata log.
        assert "__cluster_metadata" not in {t.name for t in _describe(conn).topics}


def test_a_cursor_outside_the_topic_list_is_an_invalid_request(broker: ThreadBroker) -> None:
    with connect(broker.bootstrap) as conn:
        assert conn.create_topic("cur.a", 1).error_code == ErrorCode.none
        response = _describe(conn, "cur.a", cursor=("cur.z", 0))
        assert [(t.name, t.error_code) for t in response.topics] == [("cur.a", ErrorCode.invalid_request)]
        assert response.next_cursor is None


def test_a_cursor_past_the_partitions_ends_the_topic_and_a_negative_one_starts_at_0(broker: ThreadBroker) -> None:
    with connect(broker.bootstrap) as conn:
        assert conn.create_topic("cur.b", 3).error_code == ErrorCode.none
        past = _describe(conn, "cur.b", cursor=("cur.b", 7))
        assert [(t.name, len(t.partitions)) for t in past.topics] == [("cur.b", 0)]
        assert past.next_cursor is None
        negative = _describe(conn, "cur.b", limit=2, cursor=("cur.b", -5))
        assert [p.partition_index for p in negative.topics[0].partitions] == [0, 1]
        assert (negative.next_cursor.topic_name, negative.next_cursor.partition_index) == ("cur.b", 2)


def test_describe_quorum_answers_only_the_metadata_partition_in_every_version(broker: ThreadBroker) -> None:
    with connect(broker.bootstrap) as conn:
        for topic, partition in (("__cluster_metadata", 1), ("orders", 0)):
            response = _quorum(conn, topic, partition)
            assert response.error_code == ErrorCode.unknown_topic_or_partition
            assert response.topics == ()
        assert _quorum(conn).error_code == ErrorCode.none
        for version in (v0, v1):  # before KIP-853's nodes and directory ids
            topic = version.TopicData(
                topic_name=TopicName("__cluster_metadata"), partitions=(version.PartitionData(partition_index=i32(0)),)
            )
            answer = conn.request(version.DescribeQuorumRequest(topics=(topic,)))
            (partition,) = answer.topics[0].partitions
            assert (answer.error_code, partition.leader_id) == (ErrorCode.none, broker.broker.node_id)
            assert [v.replica_id for v in partition.current_voters] == [broker.broker.node_id]


@pytest.fixture
def secure(tmp_path: Path, broker_factory: Callable[..., ThreadBroker]) -> SecureBroker:
    ca = LocalCA(tmp_path / "pki")
    server = ca.issue("broker", hosts=("127.0.0.1",))
    make_admin_user(tmp_path / "broker")
    sb = SecureBroker(broker_factory(settings=secure_settings(ca, server)), ca, tmp_path)
    add_user(AdminClient(sb.admin()), ALICE, ALICE_PASSWORD)
    return sb


def _alice(secure: SecureBroker) -> KafkaConnection:
    host, port = secure.address("SASL_PLAINTEXT").split(":")
    conn = KafkaConnection(host, int(port))
    assert sasl_login(conn, "SCRAM-SHA-256", ALICE, ALICE_PASSWORD).error_code == ErrorCode.none
    return conn


def test_topics_need_describe_and_the_quorum_needs_describe_on_the_cluster(secure: SecureBroker) -> None:
    create_topic(secure, "acl.seen", 2)
    create_topic(secure, "acl.hidden", 1)
    admin = AdminClient(secure.admin())
    grant(admin, acl(ResourceType.TOPIC, "acl.seen", AclOperation.DESCRIBE))
    with _alice(secure) as conn:
        named = _describe(conn, "acl.seen", "acl.hidden", "acl.absent")
        # The page first, then the refused names, which are never said to exist or not.
        assert [(t.name, t.error_code) for t in named.topics] == [
            ("acl.seen", ErrorCode.none),
            ("acl.absent", ErrorCode.topic_authorization_failed),
            ("acl.hidden", ErrorCode.topic_authorization_failed),
        ]
        assert named.topics[0].topic_authorized_operations == 1 << 8  # DESCRIBE only
        assert {t.name for t in _describe(conn).topics} == {"acl.seen"}  # every topic: the others left out
        assert _quorum(conn).error_code == ErrorCode.cluster_authorization_failed
        grant(admin, acl(ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE))
        assert _quorum(conn).error_code == ErrorCode.none
