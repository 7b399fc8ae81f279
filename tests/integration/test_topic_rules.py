"""Topic creation follows Kafka's naming rules beyond the character set."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.harness import ThreadBroker


def _create(admin: AdminClient, name: str) -> KafkaError | None:
    future = admin.create_topics([NewTopic(name, 1, 1)], operation_timeout=10)[name]
    try:
        future.result(15)
    except KafkaException as e:
        error: KafkaError = e.args[0]
        return error
    return None


def test_names_that_differ_only_by_dot_and_underscore_collide(broker: ThreadBroker) -> None:
    """Kafka refuses 'a_b' once 'a.b' exists: metric names would clash."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert _create(admin, "orders.v1") is None
    error = _create(admin, "orders_v1")
    assert error is not None
    assert error.code() == KafkaError.TOPIC_EXCEPTION
    assert "collides" in error.str()
    assert set(admin.list_topics(timeout=10).topics) == {"orders.v1"}


@pytest.mark.parametrize("name", ["__consumer_offsets", "__cluster_metadata", "__transaction_state"])
def test_internal_topic_names_cannot_be_created_by_clients(broker: ThreadBroker, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    error = _create(admin, name)
    assert error is not None
    assert error.code() == KafkaError.INVALID_REQUEST
    assert name not in admin.list_topics(timeout=10).topics


def test_the_metadata_topic_is_invisible_to_clients(broker: ThreadBroker) -> None:
    """Cluster metadata lives in the broker's own log but is not a client topic."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert _create(admin, "visible") is None
    topics = admin.list_topics(timeout=10).topics
    assert "__cluster_metadata" not in topics
    assert "visible" in topics
