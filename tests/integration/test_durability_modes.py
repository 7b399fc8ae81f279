"""log.durability, through a real broker process and real clients: in page-cache mode an
acks=all produce, an OffsetCommit and a transaction's end are answered without an fsync (the
fsync mode's are the control, measured the same way), and DescribeConfigs shows the setting."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support.configs import BROKER, DEFAULT_CONFIG, STATIC_BROKER_CONFIG, describe
from tests.support.harness import BrokerProcess
from tests.support.kafka_clients import create_topic

TOPIC = "durability"


def _fsyncs(broker: BrokerProcess) -> int:
    """Segment files the broker's group commit has fdatasynced (its Prometheus counter)."""
    with urllib.request.urlopen(f"{broker.admin_url}/metrics", timeout=30) as response:
        text = response.read().decode()
    found = re.search(r"^streamshop_fsync_files_total (\S+)$", text, re.MULTILINE)
    assert found is not None, "no streamshop_fsync_files_total in /metrics"
    return int(float(found.group(1)))


def _acknowledged_work(bootstrap: str, rounds: int) -> None:
    """`rounds` of: 20 acks=all records, a synchronous commit, a committed transaction."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "committer", "enable.auto.commit": False})
    transactional = Producer({"bootstrap.servers": bootstrap, "transactional.id": "durability-tx", "linger.ms": 0})
    try:
        transactional.init_transactions(30)
        for i in range(rounds):
            for j in range(20):
                producer.produce(TOPIC, value=b"%d-%d" % (i, j))
            assert producer.flush(30) == 0
            done = consumer.commit(offsets=[TopicPartition(TOPIC, 0, i + 1)], asynchronous=False)
            assert all(tp.error is None for tp in done or [])
            transactional.begin_transaction()
            transactional.produce(TOPIC, value=b"tx-%d" % i)
            transactional.commit_transaction(30)
    finally:
        consumer.close()


@pytest.mark.parametrize("mode", ["fsync", "page-cache"])
def test_page_cache_mode_answers_produce_commits_and_transactions_without_fsync(
    broker_process_factory: Callable[..., BrokerProcess], mode: str
) -> None:
    """After a warm-up that creates the topic and the internal topics (their records in the
    metadata log are fsynced in both modes), ten rounds of acks=all produce, OffsetCommit and
    EndTxn: the fsync mode fdatasyncs for them, the page-cache mode not once."""
    broker = broker_process_factory({"log.durability": mode})
    create_topic(broker.bootstrap, TOPIC, 1)
    _acknowledged_work(broker.bootstrap, 1)
    before = _fsyncs(broker)
    _acknowledged_work(broker.bootstrap, 10)
    synced = _fsyncs(broker) - before
    print(f"\n{mode}: {synced} files fdatasynced for 10 rounds")
    if mode == "fsync":
        assert synced >= 10 * 3  # the records, the commit, the transaction's state and markers: each waited
    else:
        assert synced == 0


def test_describe_configs_shows_the_durability_and_where_it_comes_from(tmp_path: Path) -> None:
    """The default is fsync (DEFAULT_CONFIG); BROKER_DURABILITY, as --durability, sets it
    (STATIC_BROKER_CONFIG)."""
    default = BrokerProcess(tmp_path / "default")
    chosen = BrokerProcess(tmp_path / "chosen")
    chosen.env = {"BROKER_DURABILITY": "page-cache"}
    try:
        default.start()
        chosen.start()
        seen = {}
        for name, broker in (("default", default), ("chosen", chosen)):
            error, configs = describe(broker.bootstrap, BROKER, "1")
            assert error == 0
            entry = configs["log.durability"]
            assert entry.read_only
            seen[name] = (entry.value, entry.source)
    finally:
        default.kill()
        chosen.kill()
    assert seen == {"default": ("fsync", DEFAULT_CONFIG), "chosen": ("page-cache", STATIC_BROKER_CONFIG)}
