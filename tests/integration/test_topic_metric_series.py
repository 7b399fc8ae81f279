"""A deleted topic takes its metric series with it (as Kafka's per-topic metrics are removed):
topics that clients create and delete in turn do not grow the broker's metrics registry."""

from __future__ import annotations

from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.types import TopicName

from broker.protocol.errors import ErrorCode
from tests.support.harness import ThreadBroker
from tests.support.kafka_wire import batch, connect, ms

SERIES = ("streamshop_bytes_in", "streamshop_records_in", "streamshop_bytes_out", "streamshop_records_out")


def _topics_with_series(broker: ThreadBroker) -> set[str]:
    registry = broker.broker.metrics.registry
    return {
        sample.labels["topic"]
        for family in registry.collect()
        if family.name in SERIES
        for sample in family.samples
        if "topic" in sample.labels
    }


def test_a_deleted_topic_leaves_no_series_behind(broker: ThreadBroker) -> None:
    with connect(broker.bootstrap) as conn:
        for n in range(20):
            name = f"churn.{n}"
            assert conn.create_topic(name).error_code == ErrorCode.none
            assert conn.produce(name, 0, batch([b"v"])).error_code == ErrorCode.none
            assert conn.fetch_partition(name, 0, 0).records is not None
            assert name in _topics_with_series(broker)
            deleted = conn.request(
                DeleteTopicsRequest(topics=(DeleteTopicState(name=TopicName(name), topic_id=None),), timeout=ms(10_000))
            )
            assert deleted.responses[0].error_code == ErrorCode.none
        assert conn.create_topic("kept").error_code == ErrorCode.none
        assert conn.produce("kept", 0, batch([b"v"])).error_code == ErrorCode.none
    assert _topics_with_series(broker) == {"kept"}
