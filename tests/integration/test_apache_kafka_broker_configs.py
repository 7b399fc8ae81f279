"""The broker's `advertised.listeners` and `min.insync.replicas` described side by side with
Apache Kafka 4.1's (the run's cluster, which sets both in its server.properties): the same
sources, synonyms and read-only flags, for the broker, the cluster-wide resource and a topic."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from streamshop.kafka_cluster import Cluster
from tests.integration.test_broker_config_sources import AdvertisedBroker
from tests.support.configs import BROKER, TOPIC, Described, describe
from tests.support.kafka_wire import connect

pytestmark = pytest.mark.kafka

MIN_ISR = "min.insync.replicas"


def _shape(entry: Described) -> tuple[int, bool, int, list[tuple[str, int]]]:
    """Where a value comes from, not the value: the cluster's differ (its addresses, its 2)."""
    return entry.source, entry.read_only, entry.config_type, [(name, source) for name, _, source in entry.synonyms]


def test_advertised_listeners_and_min_insync_replicas_are_described_as_by_kafka_4_1(
    apache_kafka: Cluster, tmp_path: Path
) -> None:
    node = apache_kafka.nodes[0]
    kafka = AdminClient({"bootstrap.servers": apache_kafka.bootstrap, **apache_kafka.client_config()})
    kafka.create_topics([NewTopic("parity.isr", 1)])["parity.isr"].result(60)
    ours = AdvertisedBroker(tmp_path / "broker", ("127.0.0.1", 19092), {MIN_ISR: "1"}).start()
    try:
        with connect(ours.bootstrap) as conn:
            assert conn.create_topic("parity.isr").error_code == 0
        keys = ("advertised.listeners", MIN_ISR)
        theirs_broker = describe(node.bootstrap, BROKER, str(node.node_id), keys)[1]
        ours_broker = describe(ours.bootstrap, BROKER, "1", keys)[1]
        theirs_cluster = describe(node.bootstrap, BROKER, "")[1]
        ours_cluster = describe(ours.bootstrap, BROKER, "")[1]
        theirs_topic = describe(node.bootstrap, TOPIC, "parity.isr", (MIN_ISR,))[1][MIN_ISR]
        ours_topic = describe(ours.bootstrap, TOPIC, "parity.isr", (MIN_ISR,))[1][MIN_ISR]
    finally:
        ours.close()
    for name in keys:
        assert _shape(ours_broker[name]) == _shape(theirs_broker[name]), name
    assert theirs_broker["advertised.listeners"].value == f"PLAINTEXT://127.0.0.1:{node.port}"
    assert ours_broker["advertised.listeners"].value == "PLAINTEXT://127.0.0.1:19092"
    assert set(ours_cluster) == set(theirs_cluster) == {MIN_ISR}
    assert _shape(ours_cluster[MIN_ISR]) == _shape(theirs_cluster[MIN_ISR])
    assert _shape(ours_topic) == _shape(theirs_topic)
    # The cluster-wide value is the static one, over Kafka's default of 1: on both.
    for entry in (theirs_broker[MIN_ISR], ours_broker[MIN_ISR], theirs_topic, ours_topic):
        assert [value for _, value, _ in entry.synonyms] == [entry.value, entry.value, "1"]
