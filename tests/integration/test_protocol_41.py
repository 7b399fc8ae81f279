"""The versions Kafka 4.1 added, byte for byte over a real socket, answered as a Kafka 4.1 broker
answers them (each checked against one): Produce v13 naming topics by id, ListOffsets v9-v10
(latest tiered, a timeout, the version each special timestamp needs), Metadata v13's top-level
error, DescribeCluster v2's fenced brokers, ListTransactions v2's id pattern, Fetch v18's
follower high watermark, and the features ApiVersions v3+ finalizes; librdkafka's own Metadata
v13."""

from __future__ import annotations

import importlib
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from kio.schema.api_versions.v2.request import ApiVersionsRequest as ApiVersionsV2
from kio.schema.api_versions.v4.request import ApiVersionsRequest as ApiVersionsV4
from kio.schema.describe_cluster.v2.request import DescribeClusterRequest
from kio.schema.fetch.v18.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.list_transactions.v1.request import ListTransactionsRequest as ListTransactionsV1
from kio.schema.list_transactions.v2.request import ListTransactionsRequest
from kio.schema.metadata.v13.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v13.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.static.primitive import Records, i8, i16, i32, i64

from broker.protocol.errors import ErrorCode
from tests.integration.test_metadata_topic_ids import _topic_id
from tests.support.api_recorder import record_versions
from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import confluent_consume, confluent_produce, create_topic
from tests.support.kafka_wire import KafkaConnection, batch, connect, ms

ZERO = uuid.UUID(int=0)


def _produce_v13(topics: dict[uuid.UUID, dict[int, bytes]], acks: int = -1) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=None,
        acks=i16(acks),
        timeout=ms(10_000),
        topic_data=tuple(
            TopicProduceData(
                topic_id=topic_id,
                partition_data=tuple(
                    PartitionProduceData(index=i32(p), records=Records(batch([value]))) for p, value in parts.items()
                ),
            )
            for topic_id, parts in topics.items()
        ),
    )


def test_produce_v13_names_topics_by_id_and_an_unknown_id_is_unknown_topic_id(broker: ThreadBroker) -> None:
    create_topic(broker.bootstrap, "v13.orders", 2)
    known, unknown = _topic_id(broker, "v13.orders"), uuid.uuid4()
    with connect(broker.bootstrap) as conn:
        answer = conn.request(
            _produce_v13({known: {0: b"by-id", 5: b"no-partition"}, unknown: {0: b"x"}, ZERO: {0: b"y"}})
        )
        got = {
            t.topic_id: [(p.index, p.error_code, p.base_offset) for p in t.partition_responses]
            for t in answer.responses
        }
        assert got == {
            known: [(0, ErrorCode.none, 0), (5, ErrorCode.unknown_topic_or_partition, -1)],
            unknown: [(0, ErrorCode.unknown_topic_id, -1)],
            None: [(0, ErrorCode.unknown_topic_id, -1)],  # the zero id, which kio reads back as none
        }
        assert [r.value for r in conn.read_all("v13.orders", 0)] == [b"by-id"]
        # acks=0: a refused batch closes the connection, as Kafka lets the producer notice.
        conn.send(_produce_v13({unknown: {0: b"lost"}}, acks=0))
        assert conn.wait_closed() == b""


def _list_offsets(conn: KafkaConnection, version: int, timestamps: dict[int, int]) -> list[tuple[Any, ...]]:
    """(error, offset, timestamp, leader epoch) of each partition of "v10.offsets" asked at a time."""
    mod: Any = importlib.import_module(f"kio.schema.list_offsets.v{version}.request")
    fields: dict[str, Any] = {
        "replica_id": i32(-1),
        "topics": (
            mod.ListOffsetsTopic(
                name="v10.offsets",
                partitions=tuple(
                    mod.ListOffsetsPartition(partition_index=i32(p), timestamp=i64(ts)) for p, ts in timestamps.items()
                ),
            ),
        ),
    }
    if version >= 2:
        fields["isolation_level"] = i8(0)
    if version >= 10:
        fields["timeout"] = ms(30_000)
    request = mod.ListOffsetsRequest(**fields)
    return [
        (p.error_code, p.offset, p.timestamp, getattr(p, "leader_epoch", None))
        for t in conn.request(request).topics
        for p in t.partitions
    ]


def test_list_offsets_v9_v10_latest_tiered_and_the_version_each_special_timestamp_needs(broker: ThreadBroker) -> None:
    """Without tiered storage the latest tiered offset is none (-1, no error), as Kafka answers;
    a special timestamp older than its version, or any other negative one, is
    UNSUPPORTED_VERSION for that partition."""
    create_topic(broker.bootstrap, "v10.offsets", 1)
    base = int(time.time() * 1000) - 60_000
    confluent_produce(
        broker.bootstrap, "v10.offsets", [{"value": b"r", "partition": 0, "timestamp": base + i} for i in range(3)]
    )
    none, unsupported = ErrorCode.none, ErrorCode.unsupported_version
    with connect(broker.bootstrap) as conn:
        for version in (9, 10):
            assert _list_offsets(conn, version, {0: -5}) == [(none, -1, -1, -1)]
            assert _list_offsets(conn, version, {0: -4}) == [(none, 0, -1, 0)]
            assert _list_offsets(conn, version, {0: -3}) == [(none, 2, base + 2, 0)]
            assert _list_offsets(conn, version, {0: -6}) == [(unsupported, -1, -1, -1)]
            assert _list_offsets(conn, version, {0: base + 10_000}) == [(none, -1, -1, -1)]  # nothing that late
        assert _list_offsets(conn, 8, {0: -5}) == [(unsupported, -1, -1, -1)]
        assert _list_offsets(conn, 7, {0: -4}) == [(unsupported, -1, -1, -1)]
        assert _list_offsets(conn, 6, {0: -3}) == [(unsupported, -1, -1, -1)]
        assert _list_offsets(conn, 1, {0: -100}) == [(unsupported, -1, -1, None)]
        assert _list_offsets(conn, 1, {0: -2}) == [(none, 0, -1, None)]
        # The timestamp's version is checked before the partition's existence, as Kafka.
        assert _list_offsets(conn, 10, {5: -7}) == [(unsupported, -1, -1, -1)]
        assert _list_offsets(conn, 10, {5: -5}) == [(ErrorCode.unknown_topic_or_partition, -1, -1, -1)]


def test_metadata_v13_answers_with_no_top_level_error_and_librdkafka_asks_it(
    broker: ThreadBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = record_versions(monkeypatch)
    create_topic(broker.bootstrap, "v13.meta", 2)
    confluent_produce(broker.bootstrap, "v13.meta", [{"value": b"m", "partition": 1}])
    got = confluent_consume(broker.bootstrap, [TopicPartition("v13.meta", 1, 0)], 1)
    assert [g.value for g in got] == [b"m"]
    assert seen["Metadata"] == {13}  # librdkafka 2.16 speaks the newest
    with connect(broker.bootstrap) as conn:
        answer = conn.request(
            MetadataRequest(
                topics=(MetadataRequestTopic(topic_id=None, name="v13.meta"),),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )
    assert answer.error_code == ErrorCode.none
    assert [(t.name, t.error_code, len(t.partitions)) for t in answer.topics] == [("v13.meta", ErrorCode.none, 2)]


def test_describe_cluster_v2_flags_fenced_brokers_and_this_one_is_not(broker: ThreadBroker) -> None:
    with connect(broker.bootstrap) as conn:
        for include in (False, True):
            answer = conn.request(
                DescribeClusterRequest(
                    include_cluster_authorized_operations=False, endpoint_type=i8(1), include_fenced_brokers=include
                )
            )
            assert answer.error_code == ErrorCode.none
            assert [(b.broker_id, b.port, b.is_fenced) for b in answer.brokers] == [(1, broker.port, False)]


def _transactions(conn: KafkaConnection, pattern: str | None) -> tuple[ErrorCode, list[str]]:
    answer = conn.request(
        ListTransactionsRequest(
            state_filters=(), producer_id_filters=(), duration_filter=i64(-1), transactional_id_pattern=pattern
        )
    )
    return answer.error_code, [t.transactional_id for t in answer.transaction_states]


def test_list_transactions_v2_filters_by_a_pattern_matching_the_whole_id(broker: ThreadBroker) -> None:
    create_topic(broker.bootstrap, "v2.txns", 1)
    for transactional_id in ("txn-abc", "other", "Txn-X"):
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": transactional_id})
        producer.init_transactions(15)
        producer.begin_transaction()
        producer.produce("v2.txns", b"x", partition=0)
        producer.commit_transaction(15)
    everyone = ["Txn-X", "other", "txn-abc"]
    with connect(broker.bootstrap) as conn:
        # As Kafka 4.1 answers each: RE2 syntax, matching the whole id; null or empty is every id.
        assert _transactions(conn, None) == (ErrorCode.none, everyone)
        assert _transactions(conn, "") == (ErrorCode.none, everyone)
        assert _transactions(conn, "txn") == (ErrorCode.none, [])
        assert _transactions(conn, "txn.*") == (ErrorCode.none, ["txn-abc"])
        assert _transactions(conn, ".*abc") == (ErrorCode.none, ["txn-abc"])
        assert _transactions(conn, "(?i)txn.*") == (ErrorCode.none, ["Txn-X", "txn-abc"])
        assert _transactions(conn, r"\w+") == (ErrorCode.none, ["other"])
        assert _transactions(conn, "txn-abc|other") == (ErrorCode.none, ["other", "txn-abc"])
        assert _transactions(conn, "[") == (ErrorCode.invalid_regular_expression, [])
        older = conn.request(ListTransactionsV1(state_filters=(), producer_id_filters=(), duration_filter=i64(-1)))
        assert sorted(t.transactional_id for t in older.transaction_states) == everyone


def test_fetch_v18_serves_a_consumer_and_a_follower_high_watermark_changes_nothing(broker: ThreadBroker) -> None:
    create_topic(broker.bootstrap, "v18.fetch", 1)
    confluent_produce(broker.bootstrap, "v18.fetch", [{"value": b"a", "partition": 0}, {"value": b"b", "partition": 0}])
    topic_id = _topic_id(broker, "v18.fetch")
    with connect(broker.bootstrap) as conn:
        for high_watermark in (2**63 - 1, -1, 1):  # not supported, unknown, behind the leader's
            answer = conn.request(
                FetchRequest(
                    max_wait=ms(0),
                    min_bytes=i32(0),
                    topics=(
                        FetchTopic(
                            topic_id=topic_id,
                            partitions=(
                                FetchPartition(
                                    partition=i32(0),
                                    fetch_offset=i64(0),
                                    partition_max_bytes=i32(1 << 20),
                                    high_watermark=i64(high_watermark),
                                ),
                            ),
                        ),
                    ),
                    forgotten_topics_data=(),
                    rack_id="",
                )
            )
            assert answer.error_code == ErrorCode.none
            (part,) = answer.responses[0].partitions
            assert (answer.responses[0].topic_id, part.error_code, part.high_watermark) == (topic_id, ErrorCode.none, 2)
            assert part.records


def test_api_versions_v3_and_later_finalize_transaction_version_2_as_kafka_4_1(broker: ThreadBroker) -> None:
    with connect(broker.bootstrap) as conn:
        answer = conn.request(ApiVersionsV4(client_software_name="raw", client_software_version="1"))
        assert [(f.name, f.min_version, f.max_version) for f in answer.supported_features] == [
            ("transaction.version", 0, 2)
        ]
        assert [(f.name, f.min_version_level, f.max_version_level) for f in answer.finalized_features] == [
            ("transaction.version", 2, 2)
        ]
        assert answer.finalized_features_epoch >= 0  # a client reads features of an epoch above -1 only
        versions = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in answer.api_keys}
        assert [versions[k] for k in (0, 1, 2, 3)] == [(3, 13), (4, 18), (1, 10), (0, 13)]
        older = conn.request(ApiVersionsV2())
        assert {int(k.api_key): int(k.max_version) for k in older.api_keys} == {k: v for k, (_, v) in versions.items()}
