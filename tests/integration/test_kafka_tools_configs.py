"""Kafka 4.1's own kafka-configs against the bundled broker: every topic config described
line for line as Kafka 4.1 describes a fresh topic's, the new ones altered, tiered storage
refused with Kafka's words, and the broker's settings with Kafka's sources and synonyms."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.support import kafka_tools as kt
from tests.support.configs import KAFKA_TOPIC_CONFIGS
from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import create_topic

pytestmark = [pytest.mark.kafka, pytest.mark.xdist_group("kafka-tools")]


def _lines(out: str) -> set[str]:
    return {line.strip() for line in out.splitlines()[1:] if line.strip()}


def test_kafka_configs_describes_every_topic_config_as_kafka_4_1_does(broker: ThreadBroker) -> None:
    create_topic(broker.bootstrap, "tools.every", 1)
    target = ("--bootstrap-server", broker.bootstrap, "--entity-type", "topics", "--entity-name", "tools.every")
    out = kt.run("kafka-configs", *target, "--describe", "--all")
    assert out.splitlines()[0] == "All configs for topic tools.every are:"
    # What a fresh Kafka 4.1 broker prints for a new topic (kafka-configs --describe --all); its
    # cluster starts with min.insync.replicas set cluster-wide (KIP-966).
    expected = {
        f"{name}={default} sensitive=false synonyms={{{f'DEFAULT_CONFIG:{synonym}={default}' if synonym else ''}}}"
        for name, (default, _, synonym) in KAFKA_TOPIC_CONFIGS.items()
        if name != "min.insync.replicas"
    } | {
        "min.insync.replicas=1 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:min.insync.replicas=1, "
        "DEFAULT_CONFIG:min.insync.replicas=1}"
    }
    assert _lines(out) == expected


def test_kafka_configs_alters_the_new_topic_configs_and_is_refused_tiered_storage(broker: ThreadBroker) -> None:
    create_topic(broker.bootstrap, "tools.new", 1)
    target = ("--bootstrap-server", broker.bootstrap, "--entity-type", "topics", "--entity-name", "tools.new")
    changes = "file.delete.delay.ms=1000,flush.messages=100,segment.jitter.ms=5000,compression.zstd.level=10"
    kt.run("kafka-configs", *target, "--alter", "--add-config", f"{changes},preallocate=true,local.retention.ms=1000")
    described = _lines(kt.run("kafka-configs", *target, "--describe"))
    assert (
        "file.delete.delay.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:file.delete.delay.ms=1000, "
        "DEFAULT_CONFIG:log.segment.delete.delay.ms=60000}"
    ) in described
    assert "segment.jitter.ms=5000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:segment.jitter.ms=5000}" in described
    assert len(described) == 6
    config = broker.call(lambda: broker.broker.store.get("tools.new").logs[0].config)
    assert (config.file_delete_delay_ms, config.flush_messages, config.segment_jitter_ms) == (1000, 100, 5000)

    refused = kt.fails("kafka-configs", *target, "--alter", "--add-config", "remote.storage.enable=true")
    assert "Tiered Storage functionality is disabled in the broker" in refused
    conflict = kt.fails(
        "kafka-configs", *target, "--alter", "--add-config", "max.compaction.lag.ms=1,min.compaction.lag.ms=2"
    )
    assert "conflict topic config setting min.compaction.lag.ms (2) > max.compaction.lag.ms (1)" in conflict
    removed = kt.fails("kafka-configs", *target, "--alter", "--add-config", "message.downconversion.enable=true")
    assert "message.downconversion.enable" in removed
    kt.run("kafka-configs", *target, "--alter", "--delete-config", "preallocate,local.retention.ms")
    assert len(_lines(kt.run("kafka-configs", *target, "--describe"))) == 4


def test_kafka_configs_describes_the_brokers_settings_with_kafkas_sources(
    broker_factory: Callable[..., ThreadBroker],
) -> None:
    broker = broker_factory(settings={"num.partitions": "3", "log.retention.ms": "3600000"})
    brokers = ("--bootstrap-server", broker.bootstrap, "--entity-type", "brokers")
    every = _lines(kt.run("kafka-configs", *brokers, "--entity-name", "1", "--describe", "--all"))
    for line in (
        "num.partitions=3 sensitive=false synonyms={STATIC_BROKER_CONFIG:num.partitions=3, "
        "DEFAULT_CONFIG:num.partitions=3}",
        "log.retention.ms=3600000 sensitive=false synonyms={STATIC_BROKER_CONFIG:log.retention.ms=3600000}",
        "log.segment.delete.delay.ms=60000 sensitive=false synonyms={DEFAULT_CONFIG:log.segment.delete.delay.ms=60000}",
        "log.roll.ms=604800000 sensitive=false synonyms={}",
        "ssl.key.password=null sensitive=true synonyms={}",
        "ssl.keystore.location=null sensitive=false synonyms={}",
        "advertised.listeners=null sensitive=false synonyms={}",
    ):
        assert line in every
    # Without --all, only the dynamic configs: none for the broker; cluster-wide, the one a
    # Kafka 4.1 cluster starts with.
    assert _lines(kt.run("kafka-configs", *brokers, "--entity-name", "1", "--describe")) == set()
    assert _lines(kt.run("kafka-configs", *brokers, "--entity-default", "--describe")) == {
        "min.insync.replicas=1 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:min.insync.replicas=1}"
    }
