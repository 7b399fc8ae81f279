"""The bundled broker's configs side by side with Apache Kafka 4.1's (the run's cluster): the
same topic configs with the same types, values and synonyms, the same verdicts on the same
config sets, and the same read-only flags on the broker settings both have."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from streamshop.kafka_cluster import Cluster
from tests.support.configs import ACCEPTED, BROKER, KAFKA_TOPIC_CONFIGS, REFUSED, TOPIC, describe
from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import create_topic

pytestmark = pytest.mark.kafka

# The cluster sets these itself (streamshop kafka-cluster: min.insync.replicas 2, unclean
# leader election off), so their values and sources are its own.
CLUSTER_SET = {"min.insync.replicas", "unclean.leader.election.enable"}


def _verdict(admin: AdminClient, configs: dict[str, str]) -> str:
    future = admin.create_topics([NewTopic("parity.checked", 1, config=configs)], validate_only=True)
    try:
        future["parity.checked"].result(30)
    except KafkaException as e:
        return e.args[0].name()  # type: ignore[no-any-return]
    return "OK"


def test_topic_configs_are_described_and_validated_as_by_kafka_4_1(apache_kafka: Cluster, broker: ThreadBroker) -> None:
    kafka = AdminClient({"bootstrap.servers": apache_kafka.bootstrap, **apache_kafka.client_config()})
    kafka.create_topics([NewTopic("parity.described", 1)])["parity.described"].result(60)
    create_topic(broker.bootstrap, "parity.described", 1)
    theirs = describe(apache_kafka.nodes[0].bootstrap, TOPIC, "parity.described")[1]
    ours = describe(broker.bootstrap, TOPIC, "parity.described")[1]
    assert set(theirs) == set(ours) == set(KAFKA_TOPIC_CONFIGS)
    for name in set(ours) - CLUSTER_SET:
        mine, kafkas = ours[name], theirs[name]
        assert (mine.value, mine.source, mine.synonyms) == (kafkas.value, kafkas.source, kafkas.synonyms), name
        assert (mine.config_type, mine.read_only, mine.sensitive) == (kafkas.config_type, False, False), name

    ours_admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for configs in [*ACCEPTED, *REFUSED]:
        assert _verdict(ours_admin, configs) == _verdict(kafka, configs), configs


def test_the_broker_settings_both_have_are_read_only_alike(apache_kafka: Cluster, broker: ThreadBroker) -> None:
    node = apache_kafka.nodes[0]
    theirs = describe(node.bootstrap, BROKER, str(node.node_id))[1]
    ours = describe(broker.bootstrap, BROKER, "1")[1]
    shared = set(theirs) & set(ours)
    assert len(shared) > 60
    assert {n: ours[n].read_only for n in shared} == {n: theirs[n].read_only for n in shared}
    assert {n: ours[n].config_type for n in shared} == {n: theirs[n].config_type for n in shared}
    assert {n: ours[n].sensitive for n in shared} == {n: theirs[n].sensitive for n in shared}
