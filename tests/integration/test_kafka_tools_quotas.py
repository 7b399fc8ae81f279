"""`kafka-configs --entity-type users|clients`, from Apache Kafka 4.1's jars, sets, describes and
removes client quotas on the bundled broker (AlterClientQuotas, DescribeClientQuotas)."""

from __future__ import annotations

import pytest

from tests.support import kafka_tools as kt
from tests.support.harness import ThreadBroker

pytestmark = [pytest.mark.kafka, pytest.mark.xdist_group("kafka-tools")]


def test_kafka_configs_sets_describes_and_removes_client_quotas(broker: ThreadBroker) -> None:
    server = ["--bootstrap-server", broker.bootstrap]
    alice_app = ["--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients", "--entity-name", "app"]
    out = kt.run(
        "kafka-configs",
        *server,
        "--alter",
        *alice_app,
        "--add-config",
        "producer_byte_rate=1024,consumer_byte_rate=2048",
    )
    assert "Completed updating config" in out
    kt.run(
        "kafka-configs", *server, "--alter", "--entity-type", "clients", "--entity-default",
        "--add-config", "controller_mutation_rate=10",
    )  # fmt: skip
    described = kt.run("kafka-configs", *server, "--describe", *alice_app)
    assert "consumer_byte_rate=2048.0" in described
    assert "producer_byte_rate=1024.0" in described
    defaults = kt.run("kafka-configs", *server, "--describe", "--entity-type", "clients", "--entity-default")
    assert "controller_mutation_rate=10.0" in defaults
    assert broker.call(lambda: broker.broker.quotas.entities) == {
        (("client-id", "app"), ("user", "alice")): {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0},
        (("client-id", None),): {"controller_mutation_rate": 10.0},
    }

    kt.run("kafka-configs", *server, "--alter", *alice_app, "--delete-config", "producer_byte_rate")
    assert "producer_byte_rate" not in kt.run("kafka-configs", *server, "--describe", *alice_app)
    bad = kt.fails("kafka-configs", *server, "--alter", *alice_app, "--add-config", "producer_byte_rate=1.5")
    assert "producer_byte_rate" in bad
