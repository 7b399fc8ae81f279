"""Kafka's own command-line tools, from Apache Kafka 4.1's jars, against the bundled broker:
what Kafka users type, over a real socket, each answer checked against the broker's state
or another client."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from aiokafka.partitioner import murmur2
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from broker.handlers import APIS
from tests.support import kafka_tools as kt
from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import confluent_consume, confluent_produce, create_topic

# Kafka's Java tools against the bundled broker, no Kafka cluster: a queue of their own beside the
# run's cluster and the tests on it (tests/conftest.py), which need not wait for them.
pytestmark = [pytest.mark.kafka, pytest.mark.xdist_group("kafka-tools")]


def _partition_of(key: bytes, partitions: int) -> int:
    return int(murmur2(key) & 0x7FFFFFFF) % partitions  # the Java client's default partitioner


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=15)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in got}


def _table(output: str, first: str) -> list[dict[str, str]]:
    """Rows of a kafka-consumer-groups table, by column name."""
    lines = [line.split() for line in output.splitlines() if line.strip()]
    head = next(i for i, cols in enumerate(lines) if cols and cols[0] == first)
    return [dict(zip(lines[head], cols, strict=False)) for cols in lines[head + 1 :] if len(cols) == len(lines[head])]


def test_broker_api_versions_lists_every_api_the_broker_implements_as_usable(broker: ThreadBroker) -> None:
    """Run as a user would, through `streamshop kafka-tool`."""
    done = subprocess.run(
        [sys.executable, "-m", "streamshop.cli", "kafka-tool", "kafka-broker-api-versions", "--bootstrap-server",
         broker.bootstrap],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"{broker.bootstrap} (id: 1 rack: null" in out
    for api in APIS:
        line = next((x for x in out.splitlines() if re.search(rf"\({api.key}\): ", x)), None)
        assert line is not None, f"{api.name} missing from:\n{out}"
        versions = (
            str(api.min_version) if api.min_version == api.max_version else f"{api.min_version} to {api.max_version}"
        )
        assert f"): {versions} [usable: {api.max_version}]" in line, line
    implemented = {api.key for api in APIS}
    listed = {int(k): rest for k, rest in re.findall(r"\((\d+)\): (.*)", out)}
    assert len(listed) > 70  # the tool knows every API of Kafka 4.1 and asks about each
    assert {k for k, rest in listed.items() if not rest.startswith("UNSUPPORTED")} == implemented


def test_kafka_topics_creates_describes_alters_and_deletes(broker: ThreadBroker) -> None:
    b = broker.bootstrap
    out = kt.run(
        "kafka-topics", "--bootstrap-server", b, "--create", "--topic", "tools.topics", "--partitions", "2",
        "--config", "retention.ms=60000", "--config", "cleanup.policy=compact",
    )  # fmt: skip
    assert "Created topic tools.topics." in out
    kt.run("kafka-topics", "--bootstrap-server", b, "--alter", "--topic", "tools.topics", "--partitions", "5")
    described = kt.run("kafka-topics", "--bootstrap-server", b, "--describe", "--topic", "tools.topics")
    head, *rows = described.strip().splitlines()
    assert "PartitionCount: 5" in head
    assert "ReplicationFactor: 1" in head
    assert "cleanup.policy=compact" in head
    assert "retention.ms=60000" in head
    assert [re.search(r"Partition: (\d+)\s+Leader: 1\s+Replicas: 1\s+Isr: 1", r).group(1) for r in rows] == [  # type: ignore[union-attr]
        "0", "1", "2", "3", "4",
    ]  # fmt: skip
    assert broker.call(lambda: broker.broker.store.get("tools.topics").partitions) == 5
    assert "tools.topics" in kt.run("kafka-topics", "--bootstrap-server", b, "--list").split()

    kt.run("kafka-topics", "--bootstrap-server", b, "--delete", "--topic", "tools.topics")
    assert broker.call(lambda: broker.broker.store.get("tools.topics")) is None
    assert "tools.topics" not in kt.run("kafka-topics", "--bootstrap-server", b, "--list").split()
    refused = kt.fails(
        "kafka-topics", "--bootstrap-server", b, "--create", "--topic", "tools.rf3", "--replication-factor", "3"
    )
    assert "InvalidReplicationFactorException" in refused
    assert broker.call(lambda: broker.broker.store.get("tools.rf3")) is None


def test_kafka_configs_alters_and_describes_topic_configs(broker: ThreadBroker) -> None:
    b = broker.bootstrap
    create_topic(b, "tools.configs", 1)
    target = ["--bootstrap-server", b, "--entity-type", "topics", "--entity-name", "tools.configs"]
    out = kt.run("kafka-configs", *target, "--alter", "--add-config", "retention.ms=123456,segment.bytes=1048576")
    assert "Completed updating config for topic tools.configs." in out
    described = kt.run("kafka-configs", *target, "--describe")
    assert "retention.ms=123456 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=123456" in described
    assert "segment.bytes=1048576" in described

    kt.run("kafka-configs", *target, "--alter", "--delete-config", "retention.ms")
    admin = AdminClient({"bootstrap.servers": b})
    resource = ConfigResource(ConfigResource.Type.TOPIC, "tools.configs")
    configs = admin.describe_configs([resource])[resource].result(15)
    assert configs["retention.ms"].is_default
    assert configs["segment.bytes"].value == "1048576"
    assert "cleanup.policy=delete" in kt.run("kafka-configs", *target, "--describe", "--all")

    bad = kt.fails("kafka-configs", *target, "--alter", "--add-config", "retention.ms=soon")
    assert "InvalidConfigurationException" in bad
    assert "retention.ms" in bad
    assert broker.call(lambda: broker.broker.store.get("tools.configs").configs) == {"segment.bytes": "1048576"}


def test_legacy_alter_configs_replaces_a_topics_whole_set(broker: ThreadBroker) -> None:
    """AlterConfigs (the API before IncrementalAlterConfigs), still sent by older admin code."""
    create_topic(broker.bootstrap, "tools.legacy", 1, {"retention.ms": "60000"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, "tools.legacy", set_config={"segment.bytes": "2097152"})
    with pytest.warns(DeprecationWarning, match="incremental_alter_configs"):
        futures = admin.alter_configs([resource])
    futures[resource].result(15)
    assert broker.call(lambda: broker.broker.store.get("tools.legacy").configs) == {"segment.bytes": "2097152"}


def test_console_producer_and_consumer_carry_keys_to_the_java_clients_partitions(broker: ThreadBroker) -> None:
    b = broker.bootstrap
    create_topic(b, "tools.console", 4)
    lines = [f"user-{i % 7}:event-{i}" for i in range(40)]
    kt.run(
        "kafka-console-producer", "--bootstrap-server", b, "--topic", "tools.console",
        "--property", "parse.key=true", "--property", "key.separator=:",
        stdin="\n".join(lines) + "\n",
    )  # fmt: skip
    out = kt.run(
        "kafka-console-consumer", "--bootstrap-server", b, "--topic", "tools.console", "--from-beginning",
        "--max-messages", "40", "--group", "tools.console.g",
        "--property", "print.key=true", "--property", "print.partition=true", "--property", "key.separator=|",
    )  # fmt: skip
    got = sorted((int(p.removeprefix("Partition:")), rest) for p, rest in (x.split("|", 1) for x in out.splitlines()))
    expected = sorted((_partition_of(line.split(":")[0].encode(), 4), line.replace(":", "|")) for line in lines)
    assert got == expected
    # The same keys from librdkafka with Java's partitioner land beside them, in order per key.
    java_partitioner = {"partitioner": "murmur2_random"}
    confluent_produce(b, "tools.console", [{"key": b"user-3", "value": b"from-python"}], java_partitioner)
    p = _partition_of(b"user-3", 4)
    tail = confluent_consume(b, [TopicPartition("tools.console", p, 0)], 100, timeout=5)
    assert tail[-1].value == b"from-python"
    assert [r.value for r in tail if r.key == b"user-3"][:-1] == [
        f"event-{i}".encode() for i in range(40) if i % 7 == 3
    ]


def test_kafka_consumer_groups_describes_lag_resets_and_deletes(broker: ThreadBroker) -> None:
    b = broker.bootstrap
    create_topic(b, "tools.groups", 3)
    confluent_produce(b, "tools.groups", [{"value": f"v{i}".encode(), "partition": i % 3} for i in range(30)])
    kt.run(
        "kafka-console-consumer", "--bootstrap-server", b, "--topic", "tools.groups", "--from-beginning",
        "--max-messages", "30", "--group", "tools.g",
    )  # fmt: skip
    confluent_produce(b, "tools.groups", [{"value": b"late", "partition": 1}] * 4)

    assert "tools.g" in kt.run("kafka-consumer-groups", "--bootstrap-server", b, "--list").split()
    described = kt.run("kafka-consumer-groups", "--bootstrap-server", b, "--describe", "--group", "tools.g")
    rows = {int(r["PARTITION"]): r for r in _table(described, "GROUP")}
    assert {p: (r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) for p, r in rows.items()} == {
        0: ("10", "10", "0"),
        1: ("10", "14", "4"),
        2: ("10", "10", "0"),
    }

    group = ["--bootstrap-server", b, "--group", "tools.g"]
    planned = kt.run("kafka-consumer-groups", *group, "--reset-offsets", "--topic", "tools.groups", "--to-earliest")
    assert {r["NEW-OFFSET"] for r in _table(planned, "GROUP")} == {"0"}
    assert _committed(b, "tools.g", "tools.groups", 3) == {0: 10, 1: 10, 2: 10}  # a dry run by default
    kt.run("kafka-consumer-groups", *group, "--reset-offsets", "--topic", "tools.groups", "--to-earliest", "--execute")
    assert _committed(b, "tools.g", "tools.groups", 3) == {0: 0, 1: 0, 2: 0}
    shift = ["--reset-offsets", "--topic", "tools.groups:1", "--shift-by", "12", "--execute"]
    kt.run("kafka-consumer-groups", *group, *shift)
    assert _committed(b, "tools.g", "tools.groups", 3) == {0: 0, 1: 12, 2: 0}

    out = kt.run("kafka-consumer-groups", *group, "--delete")
    assert "Deletion of requested consumer groups ('tools.g') was successful." in out
    assert "tools.g" not in kt.run("kafka-consumer-groups", "--bootstrap-server", b, "--list").split()


def test_get_offsets_and_delete_records_move_the_log_start_durably(broker: ThreadBroker, tmp_path: Path) -> None:
    b = broker.bootstrap
    create_topic(b, "tools.delete", 2, {"segment.bytes": "16384"})  # batches stay under it below
    confluent_produce(
        b, "tools.delete", [{"value": bytes(500), "partition": i % 2} for i in range(200)], {"batch.num.messages": 10}
    )
    latest = kt.run("kafka-get-offsets", "--bootstrap-server", b, "--topic", "tools.delete")
    assert latest.split() == ["tools.delete:0:100", "tools.delete:1:100"]
    segments_before = len(list((broker.data_dir / "tools.delete-0").glob("*.log")))

    plan = tmp_path / "delete.json"

    def plan_deletion(topic: str, partition: int, offset: int) -> None:
        plan.write_text(
            json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": partition, "offset": offset}]})
        )

    plan_deletion("tools.delete", 0, 70)
    out = kt.run("kafka-delete-records", "--bootstrap-server", b, "--offset-json-file", str(plan))
    assert "partition: tools.delete-0\tlow_watermark: 70" in out
    earliest = kt.run("kafka-get-offsets", "--bootstrap-server", b, "--topic", "tools.delete", "--time", "-2")
    assert earliest.split() == ["tools.delete:0:70", "tools.delete:1:0"]
    assert len(list((broker.data_dir / "tools.delete-0").glob("*.log"))) < segments_before  # files went too
    first = confluent_consume(b, [TopicPartition("tools.delete", 0, -2)], 1, timeout=10)
    assert first[0].offset == 70

    plan_deletion("tools.delete", 1, 101)
    beyond = kt.run("kafka-delete-records", "--bootstrap-server", b, "--offset-json-file", str(plan))
    assert "OffsetOutOfRangeException" in beyond
    committer = Consumer({"bootstrap.servers": b, "group.id": "tools.delete.g"})
    committer.commit(offsets=[TopicPartition("tools.delete", 0, 75)], asynchronous=False)  # __consumer_offsets exists
    committer.close()
    plan_deletion("__consumer_offsets", 0, -1)
    internal = kt.run("kafka-delete-records", "--bootstrap-server", b, "--offset-json-file", str(plan))
    assert "InvalidTopicException" in internal

    broker.restart()
    after = kt.run("kafka-get-offsets", "--bootstrap-server", broker.bootstrap, "--topic", "tools.delete", "--time=-2")
    assert after.split() == ["tools.delete:0:70", "tools.delete:1:0"]


def test_producer_and_consumer_perf_tests_run_against_the_broker(broker: ThreadBroker) -> None:
    b = broker.bootstrap
    create_topic(b, "tools.perf", 2)
    out = kt.run(
        "kafka-producer-perf-test", "--topic", "tools.perf", "--num-records", "20000", "--record-size", "100",
        "--throughput", "-1", "--producer-props", f"bootstrap.servers={b}", "acks=all",
    )  # fmt: skip
    assert re.search(r"^20000 records sent, [\d.]+ records/sec", out, re.M), out
    out = kt.run("kafka-consumer-perf-test", "--bootstrap-server", b, "--topic", "tools.perf", "--messages", "20000")
    header, values = out.strip().splitlines()[-2:]
    row = dict(zip([h.strip() for h in header.split(",")], [v.strip() for v in values.split(",")], strict=True))
    assert row["data.consumed.in.nMsg"] == "20000"
    ends = kt.run("kafka-get-offsets", "--bootstrap-server", b, "--topic", "tools.perf")
    assert sum(int(line.rsplit(":", 1)[1]) for line in ends.split()) == 20000


def test_kafka_dump_log_reads_the_brokers_own_segments_and_finds_its_indexes_right(broker: ThreadBroker) -> None:
    b = broker.bootstrap
    create_topic(b, "tools.dump", 1, {"segment.bytes": "65536", "index.interval.bytes": "1024"})
    confluent_produce(
        b, "tools.dump", [{"key": f"k{i}".encode(), "value": f"value-{i}".encode() * 20} for i in range(2000)],
        {"linger.ms": 0, "batch.num.messages": 7},
    )  # fmt: skip
    broker.stop()  # a clean stop seals every segment's indexes, as Kafka's does
    directory = broker.data_dir / "tools.dump-0"
    logs = sorted(directory.glob("*.log"))
    assert len(logs) > 3
    printed = kt.run("kafka-dump-log", "--files", ",".join(map(str, logs)), "--deep-iteration", "--print-data-log")
    records = re.findall(r"^\| offset: (\d+) .* key: (\S+) payload: value-(\d+)", printed, re.M)
    assert [int(o) for o, _, _ in records] == list(range(2000))
    assert all(k == f"k{n}" and int(o) == int(n) for o, k, n in records)
    assert "isvalid: false" not in printed
    assert "isvalid: true" in printed

    indexes = sorted(directory.glob("*.index")) + sorted(directory.glob("*.timeindex"))
    checked = kt.run("kafka-dump-log", "--files", ",".join(map(str, indexes)), "--verify-index-only")
    assert "Mismatches" not in checked
    assert "not found" not in checked
    assert "out of order" not in checked.lower()
    dumped = kt.run("kafka-dump-log", "--files", str(indexes[0]))
    assert len(re.findall(r"^offset: \d+ position: \d+$", dumped, re.M)) > 5


def test_bad_deletions_and_config_sets_are_refused_with_kafkas_codes_and_change_nothing(broker: ThreadBroker) -> None:
    """librdkafka's admin, the other way in: DeleteRecords below -1 or past the end; AlterConfigs
    with an unknown name or a value that does not parse."""
    b = broker.bootstrap
    create_topic(b, "tools.bad", 1, {"retention.ms": "60000"})
    confluent_produce(b, "tools.bad", [{"value": b"kept"}] * 5)
    admin = AdminClient({"bootstrap.servers": b})
    for offset, code in ((-5, "OFFSET_OUT_OF_RANGE"), (6, "OFFSET_OUT_OF_RANGE")):
        tp = TopicPartition("tools.bad", 0, offset)
        with pytest.raises(KafkaException, match=code):
            admin.delete_records([tp], request_timeout=10)[tp].result(15)
    assert broker.call(lambda: broker.broker.store.partition_log("tools.bad", 0).log_start_offset) == 0
    assert [r.value for r in confluent_consume(b, [TopicPartition("tools.bad", 0, 0)], 5)] == [b"kept"] * 5

    for bad in ({"no.such.config": "1"}, {"retention.ms": "soon"}):
        resource = ConfigResource(ConfigResource.Type.TOPIC, "tools.bad", set_config=bad)
        with pytest.warns(DeprecationWarning, match="incremental_alter_configs"):
            futures = admin.alter_configs([resource])
        with pytest.raises(KafkaException, match="INVALID_CONFIG"):
            futures[resource].result(15)
    assert broker.call(lambda: broker.broker.store.get("tools.bad").configs) == {"retention.ms": "60000"}


def test_java_transactions_perf_test_transactions_tool_and_read_committed_console_consumer(
    broker: ThreadBroker,
) -> None:
    """Kafka's Java producer in transactions (kafka-producer-perf-test commits every 50 ms), then
    kafka-transactions list/describe, and kafka-console-consumer at read_committed skipping a
    transaction another client aborted."""
    b = broker.bootstrap
    create_topic(b, "tools.txn", 2)
    out = kt.run(
        "kafka-producer-perf-test", "--topic", "tools.txn", "--num-records", "5000", "--record-size", "100",
        "--throughput", "-1", "--transactional-id", "java-perf", "--transaction-duration-ms", "50",
        "--producer-props", f"bootstrap.servers={b}",
    )  # fmt: skip
    assert re.search(r"^5000 records sent, [\d.]+ records/sec", out, re.M), out
    listed = _table(kt.run("kafka-transactions", "--bootstrap-server", b, "list"), "TransactionalId")
    assert {(r["TransactionalId"], r["TransactionState"]) for r in listed} == {("java-perf", "CompleteCommit")}
    # Tab-separated, with an empty last column (no partitions in a completed transaction).
    head, row = (
        [cell.strip() for cell in line.split("\t")]
        for line in kt.run(
            "kafka-transactions", "--bootstrap-server", b, "describe", "--transactional-id", "java-perf"
        ).splitlines()
        if line.strip()
    )
    described = dict(zip(head, row, strict=True))
    assert (described["TransactionalId"], described["TransactionState"]) == ("java-perf", "CompleteCommit")
    assert described["CurrentTransactionStartTimeMs"] == "None"
    # Another client's aborted transaction between two committed records of partition 0.
    mixed = Producer({"bootstrap.servers": b, "transactional.id": "tools-mixed"})
    mixed.init_transactions(15)
    for value, commit in ((b"first", True), (b"never", False), (b"last", True)):
        mixed.begin_transaction()
        mixed.produce("tools.mixed", value, partition=0)
        if commit:
            mixed.commit_transaction(15)
        else:
            assert mixed.flush(15) == 0
            mixed.abort_transaction(15)
    out = kt.run(
        "kafka-console-consumer", "--bootstrap-server", b, "--topic", "tools.mixed", "--from-beginning",
        "--isolation-level", "read_committed", "--max-messages", "2", "--timeout-ms", "20000",
    )  # fmt: skip
    assert out.split() == ["first", "last"]
    everything = kt.run(
        "kafka-console-consumer", "--bootstrap-server", b, "--topic", "tools.mixed", "--from-beginning",
        "--max-messages", "3", "--timeout-ms", "20000",
    )  # fmt: skip
    assert everything.split() == ["first", "never", "last"]
    # The Java perf test's 5000 records are all committed: read_committed reads every one.
    got = confluent_consume(
        b, [TopicPartition("tools.txn", p, 0) for p in range(2)], 5000, {"isolation.level": "read_committed"}
    )
    assert len(got) == 5000


def test_kafka_transactions_finds_and_aborts_a_hanging_transaction(broker: ThreadBroker) -> None:
    """find-hanging (DescribeProducers on every partition, then ListTransactions and
    DescribeTransactions) tells a live transaction from a hanging one, open in a partition but
    unknown to its coordinator; abort (WriteTxnMarkers) ends it at its start offset, and
    read_committed readers move past it."""
    b = broker.bootstrap
    create_topic(b, "tools.hang", 1)
    confluent_produce(b, "tools.hang", [{"value": b"before", "partition": 0}])
    stuck = Producer({"bootstrap.servers": b, "transactional.id": "tools-hanging"})
    stuck.init_transactions(15)
    stuck.begin_transaction()
    stuck.produce("tools.hang", b"stuck", partition=0)
    assert stuck.flush(15) == 0
    confluent_produce(b, "tools.hang", [{"value": b"after", "partition": 0}])
    # A live transaction is not hanging: its coordinator knows it.
    live = kt.run("kafka-transactions", "--bootstrap-server", b, "find-hanging", "--broker-id", "1",
                  "--max-transaction-timeout", "0")  # fmt: skip
    assert _tab_rows(live) == []
    # Hanging: open in the partition, unknown to the coordinator (here its state is dropped).
    coordinator = broker.broker.transactions
    broker.run(coordinator._store(None, "tools-hanging"))  # a coordinator that lost track of it
    found = kt.run("kafka-transactions", "--bootstrap-server", b, "find-hanging", "--broker-id", "1",
                   "--max-transaction-timeout", "0")  # fmt: skip
    rows = _tab_rows(found)
    assert [(r["Topic"], r["Partition"], r["StartOffset"]) for r in rows] == [("tools.hang", "0", "1")], found
    kt.run("kafka-transactions", "--bootstrap-server", b, "abort", "--topic", "tools.hang", "--partition", "0",
           "--start-offset", "1")  # fmt: skip
    got = confluent_consume(b, [TopicPartition("tools.hang", 0, 0)], 2, {"isolation.level": "read_committed"})
    assert [g.value for g in got] == [b"before", b"after"]
    plog = broker.broker.store.partition_log("tools.hang", 0)
    assert plog is not None
    assert plog.last_stable_offset == plog.high_watermark


def _tab_rows(output: str) -> list[dict[str, str]]:
    """Rows of a kafka-transactions table (tab-separated, cells padded)."""
    lines = [[cell.strip() for cell in line.split("\t")] for line in output.splitlines() if "\t" in line]
    return [dict(zip(lines[0], row, strict=False)) for row in lines[1:]]


def test_a_tool_writes_its_class_data_archive_once_and_later_runs_map_it(
    broker: ThreadBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kit.jvm with a real JVM: the first run writes the archive as it exits; the next runs map
    it and answer the same; a run killed by its timeout leaves nothing that a later JVM could
    map half-written."""
    cache = tmp_path / "jvm"
    monkeypatch.setenv("STREAMSHOP_JVM_CACHE", str(cache))
    create_topic(broker.bootstrap, "archived", 1)
    listing = ("--bootstrap-server", broker.bootstrap, "--list")
    first = kt.run("kafka-topics", *listing)
    archives = list(cache.glob("kafka-tools-*.jsa"))
    assert len(archives) == 1
    assert archives[0].stat().st_size > 1_000_000
    assert sorted(p.name for p in cache.iterdir()) == [archives[0].name]
    assert kt.run("kafka-topics", *listing) == first == "archived\n"
    # Another tool maps the same archive (the class path is the same); its answer is unchanged.
    assert "Dynamic configs for broker 1 are:" in kt.run(
        "kafka-configs", "--bootstrap-server", broker.bootstrap, "--describe", "--entity-type", "brokers",
        "--entity-name", "1",
    )  # fmt: skip

    archives[0].unlink()
    with pytest.raises(subprocess.TimeoutExpired):
        kt.run("kafka-console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", "archived", timeout=3)
    assert list(cache.iterdir()) == []
