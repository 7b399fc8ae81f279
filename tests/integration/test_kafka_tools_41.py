"""Kafka 4.1's own clients, from its jars, against the bundled broker, sending the versions Kafka
4.1 added, which the broker records as it serves them: Produce v13 (by topic id), Fetch v18,
Metadata v13 and ListOffsets v10 from the console clients; ListOffsets' latest tiered offset
from kafka-get-offsets; DescribeCluster v2 from kafka-cluster list-endpoints; ListTransactions
v2 from kafka-transactions list; and transactions v2 (EndTxn v5, TxnOffsetCommit v5, partitions
and groups joining without AddPartitionsToTxn or AddOffsetsToTxn) from the Java producer."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from streamshop.kafka_jars import resolve, run_java
from tests.support import kafka_tools as kt
from tests.support.api_recorder import record_versions
from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import confluent_consume, confluent_produce, create_topic

pytestmark = [pytest.mark.kafka, pytest.mark.xdist_group("kafka-tools")]


def test_console_clients_produce_by_topic_id_and_fetch_with_the_41_versions(
    broker: ThreadBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = broker.bootstrap
    create_topic(b, "tools41.console", 2)
    seen = record_versions(monkeypatch)
    kt.run("kafka-console-producer", "--bootstrap-server", b, "--topic", "tools41.console", "--property",
           "parse.key=true", "--property", "key.separator=:", stdin="k1:one\nk2:two\nk1:three\n")  # fmt: skip
    assert seen["Produce"] == {13}
    out = kt.run("kafka-console-consumer", "--bootstrap-server", b, "--topic", "tools41.console", "--from-beginning",
                 "--max-messages", "3", "--timeout-ms", "20000", "--property", "print.key=true")  # fmt: skip
    assert sorted(out.split()) == sorted(["k1", "one", "k2", "two", "k1", "three"])
    assert (seen["Fetch"], seen["Metadata"], seen["ListOffsets"]) == ({18}, {13}, {10})


def test_get_offsets_asks_the_latest_tiered_offset_which_no_partition_has_here(
    broker: ThreadBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = broker.bootstrap
    create_topic(b, "tools41.offsets", 2)
    confluent_produce(b, "tools41.offsets", [{"value": b"v", "partition": 0, "timestamp": 1_000 + i} for i in range(3)])
    seen = record_versions(monkeypatch)
    # As against a Kafka without tiered storage: no offset, so the tool prints no line.
    for time in ("-5", "latest-tiered"):
        assert kt.run("kafka-get-offsets", "--bootstrap-server", b, "--topic", "tools41.offsets", "--time", time) == ""
    earliest_local = kt.run("kafka-get-offsets", "--bootstrap-server", b, "--topic", "tools41.offsets", "--time", "-4")
    assert earliest_local.split() == ["tools41.offsets:0:0", "tools41.offsets:1:0"]
    latest = kt.run("kafka-get-offsets", "--bootstrap-server", b, "--topic", "tools41.offsets")
    assert latest.split() == ["tools41.offsets:0:3", "tools41.offsets:1:0"]
    assert seen["ListOffsets"] == {10}


def test_cluster_list_endpoints_with_fenced_brokers_lists_this_unfenced_one(
    broker: ThreadBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = record_versions(monkeypatch)
    for extra in ((), ("--include-fenced-brokers",)):
        out = kt.run("kafka-cluster", "list-endpoints", "--bootstrap-server", broker.bootstrap, *extra)
        head, *rows = [line.split() for line in out.splitlines() if line.strip()]
        assert head == ["ID", "HOST", "PORT", "RACK", "STATE", "ENDPOINT_TYPE"]
        assert rows == [["1", "127.0.0.1", str(broker.port), "null", "unfenced", "broker"]]
    assert seen["DescribeCluster"] == {2}


def test_transactions_list_filters_by_an_id_pattern(broker: ThreadBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    b = broker.bootstrap
    create_topic(b, "tools41.txn", 1)
    for transactional_id in ("orders-eos", "orders-2", "billing"):
        producer = Producer({"bootstrap.servers": b, "transactional.id": transactional_id})
        producer.init_transactions(15)
        producer.begin_transaction()
        producer.produce("tools41.txn", b"x", partition=0)
        producer.commit_transaction(15)
    seen = record_versions(monkeypatch)
    out = kt.run("kafka-transactions", "--bootstrap-server", b, "list", "--transactional-id-pattern", "orders-.*")
    rows = [line.split("\t")[0].strip() for line in out.splitlines()[1:] if line.strip()]
    assert sorted(rows) == ["orders-2", "orders-eos"]
    failed = kt.fails("kafka-transactions", "--bootstrap-server", b, "list", "--transactional-id-pattern", "orders-[")
    assert "INVALID_REGULAR_EXPRESSION" in failed
    assert seen["ListTransactions"] == {2}


def test_java_producer_uses_transactions_v2_and_copies_exactly_once_through_random_aborts(
    broker: ThreadBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka's TransactionalMessageCopier (its system tests' consume-transform-produce loop)
    with random aborts: a Java 4.1 producer sees `transaction.version` 2 finalized, so its
    partitions join through Produce v13, its offsets through TxnOffsetCommit v5, and each
    EndTxn v5 bumps its epoch; every input record is in the output exactly once, and the group's
    offset is committed with the last transaction."""
    b = broker.bootstrap
    create_topic(b, "tools41.in", 1)
    create_topic(b, "tools41.out", 2)
    confluent_produce(b, "tools41.in", [{"value": f"v{i}".encode(), "partition": 0} for i in range(500)])
    seen = record_versions(monkeypatch)
    done = run_java(
        resolve(), "org.apache.kafka.tools.TransactionalMessageCopier",
        "--broker-list", b, "--input-topic", "tools41.in", "--input-partition", "0", "--output-topic", "tools41.out",
        "--consumer-group", "tools41-copier", "--transaction-size", "50", "--transactional-id", "tools41-copier",
        "--enable-random-aborts", "--use-group-metadata",
        family="kafka-tools", timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    last = json.loads(done.stdout.strip().splitlines()[-1])
    assert (last["stage"], last["totalProcessed"], last["remaining"]) == ("ShutdownComplete", 500, 0)
    assert (seen["Produce"], seen["TxnOffsetCommit"], seen["EndTxn"]) == ({13}, {5}, {5})
    assert "AddPartitionsToTxn" not in seen
    assert "AddOffsetsToTxn" not in seen
    copied = confluent_consume(
        b, [TopicPartition("tools41.out", p, 0) for p in range(2)], 500, {"isolation.level": "read_committed"}
    )
    assert sorted(c.value for c in copied) == sorted(f"v{i}".encode() for i in range(500))
    consumer = Consumer({"bootstrap.servers": b, "group.id": "tools41-copier"})
    try:
        [committed] = consumer.committed([TopicPartition("tools41.in", 0)], timeout=15)
    finally:
        consumer.close()
    assert committed.offset == 500
    state = broker.call(lambda: broker.broker.transactions.txns["tools41-copier"])
    assert state.producer_epoch > 1  # bumped at every end, aborts included
