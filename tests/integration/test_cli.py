"""The console tools (`streamshop topics|produce|consume|roundtrip`) run as real child processes
with confluent-kafka inside, against a real broker over TCP."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.support.harness import REPO, ThreadBroker


def cli(*args: str, stdin: str | None = None, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamshop.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        check=False,
    )


def topics(broker: ThreadBroker, *args: str) -> subprocess.CompletedProcess[str]:
    return cli("topics", "--bootstrap", broker.bootstrap, *args)


def end_offsets(broker: ThreadBroker, topic: str) -> list[int]:
    return broker.call(lambda: [plog.next_offset for plog in broker.broker.store.get(topic).logs])


def test_topics_create_then_list_and_describe_json_show_partitions_offsets_id_and_overrides(
    broker: ThreadBroker,
) -> None:
    created = topics(broker, "create", "orders", "--partitions", "4", "--config", "retention.ms=60000")
    assert created.returncode == 0, created.stderr
    assert "created topic orders" in created.stdout

    listed = topics(broker, "list")
    assert listed.returncode == 0, listed.stderr
    assert re.search(r"^orders\s+4$", listed.stdout, re.MULTILINE)
    assert json.loads(topics(broker, "list", "--json").stdout) == [{"name": "orders", "partitions": 4}]

    cli("produce", "--bootstrap", broker.bootstrap, "--topic", "orders", "--partition", "2", stdin="a\nb\nc\n")
    described = topics(broker, "describe", "orders", "--json")
    assert described.returncode == 0, described.stderr
    [topic] = json.loads(described.stdout)
    topic_id = broker.call(lambda: broker.broker.store.get("orders").topic_id)
    assert topic["id"] == base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")  # Kafka's text form
    assert [(p["partition"], p["log_start_offset"], p["log_end_offset"]) for p in topic["partitions"]] == [
        (0, 0, 0),
        (1, 0, 0),
        (2, 0, 3),
        (3, 0, 0),
    ]
    assert topic["partitions"][0]["leader"] == 1
    assert topic["overrides"] == {"retention.ms": "60000"}
    assert topic["configs"]["retention.ms"] == "60000"
    assert topic["configs"]["cleanup.policy"] == "delete"  # a default, not an override

    table = topics(broker, "describe", "orders").stdout
    assert "Configs (overrides):\n  retention.ms=60000\nConfigs (defaults):" in table
    assert re.search(r"^2\s+1\s+1\s+1\s+0\s+3$", table, re.MULTILINE)


def test_topics_alter_sets_and_deletes_configs_and_adds_partitions(broker: ThreadBroker) -> None:
    assert topics(broker, "create", "prices", "--partitions", "2", "--config", "retention.ms=60000").returncode == 0

    altered = topics(broker, "alter", "prices", "--set", "segment.bytes=1048576", "--delete", "retention.ms")
    assert altered.returncode == 0, altered.stderr
    grown = topics(broker, "alter", "prices", "--partitions", "5")
    assert grown.returncode == 0, grown.stderr

    assert broker.call(lambda: broker.broker.store.get("prices").configs) == {"segment.bytes": "1048576"}
    [topic] = json.loads(topics(broker, "describe", "prices", "--json").stdout)
    assert topic["overrides"] == {"segment.bytes": "1048576"}
    assert [p["partition"] for p in topic["partitions"]] == [0, 1, 2, 3, 4]


def test_topics_delete_removes_the_topic(broker: ThreadBroker) -> None:
    assert topics(broker, "create", "doomed", "--partitions", "1").returncode == 0
    deleted = topics(broker, "delete", "doomed")
    assert deleted.returncode == 0, deleted.stderr
    assert "deleted topic doomed" in deleted.stdout
    assert broker.call(lambda: broker.broker.store.get("doomed")) is None
    assert json.loads(topics(broker, "list", "--json").stdout) == []


def test_topics_create_if_not_exists_and_delete_if_exists_succeed_when_there_is_nothing_to_do(
    broker: ThreadBroker,
) -> None:
    """As kafka-topics.sh --if-not-exists / --if-exists: the existing topic is left as it was
    (its partition count too), a missing one is not an error; other errors still are."""
    assert topics(broker, "create", "kept", "--partitions", "2").returncode == 0
    again = topics(broker, "create", "kept", "--partitions", "5", "--if-not-exists")
    assert again.returncode == 0, again.stderr
    assert "topic kept already exists" in again.stdout
    assert broker.call(lambda: broker.broker.store.get("kept").partitions) == 2
    fresh = topics(broker, "create", "fresh", "--if-not-exists")
    assert fresh.returncode == 0
    assert "created topic fresh" in fresh.stdout
    bad = topics(broker, "create", "bad name", "--if-not-exists")
    assert bad.returncode == 1
    assert "TOPIC_EXCEPTION" in bad.stderr
    gone = topics(broker, "delete", "fresh", "never-was", "--if-exists")
    assert gone.returncode == 0, gone.stderr
    assert "deleted topic fresh" in gone.stdout
    assert "topic never-was does not exist" in gone.stdout
    assert broker.call(lambda: broker.broker.store.get("fresh")) is None


def test_an_unreachable_broker_says_what_was_tried_and_what_to_check() -> None:
    """Every console tool fails at once (not after its timeout) with the addresses it tried
    and how to start the local stack or point at another cluster."""
    for args in (("topics", "list"), ("groups", "list"), ("consume", "--topic", "t"), ("produce", "--topic", "t")):
        done = cli(*args[:1], "--bootstrap", "127.0.0.1:1,127.0.0.1:2", *args[1:], stdin="x\n", timeout=20)
        assert done.returncode == 1, (args, done.stderr)
        assert "cannot reach a broker at 127.0.0.1:1 (Connection refused), 127.0.0.1:2 (Connection refused)" in (
            done.stderr
        )
        assert "make demo" in done.stderr
        assert "STREAMSHOP_BOOTSTRAP_SERVERS" in done.stderr


@pytest.fixture(scope="module")
def existing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadBroker]:
    """A broker with topic `existing` (2 partitions), which the refused commands leave as it is:
    shared by the error cases (each checks that it is unchanged)."""
    broker = ThreadBroker(tmp_path_factory.mktemp("cli-errors")).start()
    try:
        assert topics(broker, "create", "existing", "--partitions", "2").returncode == 0
        yield broker
    finally:
        broker.close()


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["create", "bad name"], "TOPIC_EXCEPTION"),
        (["create", "fine", "--config", "no.such.config=1"], "INVALID_CONFIG"),
        (["create", "fine", "--config", "retention.ms=soon"], "INVALID_CONFIG"),
        (["create", "existing"], "TOPIC_ALREADY_EXISTS"),
        (["describe", "missing"], "UNKNOWN_TOPIC_OR_PART"),
        (["delete", "missing"], "UNKNOWN_TOPIC_OR_PART"),
        (["alter", "existing", "--set", "retention.ms=soon"], "INVALID_CONFIG"),
        (["alter", "existing", "--partitions", "1"], "INVALID_PARTITIONS"),
    ],
)
def test_topics_broker_errors_print_the_kafka_error_and_exit_1(
    existing: ThreadBroker, args: list[str], error: str
) -> None:
    result = topics(existing, *args)
    assert result.returncode == 1
    assert re.search(rf"^streamshop topics: .+?: {error}: .+", result.stderr, re.MULTILINE), result.stderr
    names = existing.call(lambda: sorted(existing.broker.store.topics))
    assert "fine" not in names
    assert "bad name" not in names
    assert existing.call(lambda: existing.broker.store.get("existing").partitions) == 2


def test_produce_keyed_lines_with_headers_then_consume_from_beginning_prints_keys_and_offsets(
    broker: ThreadBroker,
) -> None:
    assert topics(broker, "create", "keyed", "--partitions", "3").returncode == 0
    lines = [f"user-{i % 4}:event-{i}" for i in range(40)]
    produced = cli(
        "produce",
        "--bootstrap",
        broker.bootstrap,
        "--topic",
        "keyed",
        "--key-separator",
        ":",
        "--header",
        "source=cli",
        stdin="\n".join(lines) + "\n",
    )
    assert produced.returncode == 0, produced.stderr
    assert "40 records sent to keyed" in produced.stderr

    consumed = cli(
        "consume",
        "--bootstrap",
        broker.bootstrap,
        "--topic",
        "keyed",
        "--from-beginning",
        "--print-key",
        "--print-offset",
        "--max-messages",
        "40",
        "--timeout",
        "20",
    )
    assert consumed.returncode == 0, consumed.stderr
    rows = [line.split("\t") for line in consumed.stdout.splitlines()]
    assert sorted(value for _, _, value in rows) == sorted(f"event-{i}" for i in range(40))
    partitions_of_key: dict[str, set[str]] = {}
    for position, key, value in rows:
        partition, offset = position.split(":")
        partitions_of_key.setdefault(key, set()).add(partition)
        assert value.startswith("event-")
        assert int(offset) >= 0
    assert set(partitions_of_key) == {"user-0", "user-1", "user-2", "user-3"}
    assert all(len(parts) == 1 for parts in partitions_of_key.values())  # one key, one partition
    assert "processed a total of 40 messages" in consumed.stderr

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("keyed", p, 0) for p in range(3)])
        message = None
        for _ in range(100):
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                break
        assert message is not None
        assert message.error() is None
        assert message.headers() == [("source", b"cli")]
    finally:
        consumer.close()


@pytest.mark.parametrize("acks", ["all", "1", "0"])
def test_produce_with_each_acks_setting_stores_every_line(broker: ThreadBroker, acks: str) -> None:
    result = cli(
        "produce",
        "--bootstrap",
        broker.bootstrap,
        "--topic",
        "acks",
        "--acks",
        acks,
        "--partition",
        "0",
        stdin="".join(f"line {i}\n" for i in range(25)),
    )
    assert result.returncode == 0, result.stderr
    assert end_offsets(broker, "acks")[0] == 25


def test_produce_reports_each_line_without_the_key_separator_and_exits_1(broker: ThreadBroker) -> None:
    result = cli(
        "produce",
        "--bootstrap",
        broker.bootstrap,
        "--topic",
        "strict",
        "--key-separator",
        ":",
        stdin="a:1\nno separator here\nb:2\nalso bad\n",
    )
    assert result.returncode == 1
    assert "line 2: no key separator ':'" in result.stderr
    assert "line 4: no key separator ':'" in result.stderr
    assert "2 records sent to strict" in result.stderr
    assert sum(end_offsets(broker, "strict")) == 2  # the good lines still went out


def test_consume_partition_and_offset_start_there_and_stop_at_max_messages(broker: ThreadBroker) -> None:
    assert topics(broker, "create", "picked", "--partitions", "2").returncode == 0
    for partition in ("0", "1"):
        cli(
            "produce",
            "--bootstrap",
            broker.bootstrap,
            "--topic",
            "picked",
            "--partition",
            partition,
            stdin="".join(f"p{partition}-{i}\n" for i in range(6)),
        )
    result = cli(
        "consume",
        "--bootstrap",
        broker.bootstrap,
        "--topic",
        "picked",
        "--partition",
        "1",
        "--offset",
        "2",
        "--max-messages",
        "3",
        "--print-offset",
        "--timeout",
        "20",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["1:2\tp1-2", "1:3\tp1-3", "1:4\tp1-4"]


def test_consume_without_from_beginning_starts_at_the_end_and_stops_when_idle(broker: ThreadBroker) -> None:
    cli("produce", "--bootstrap", broker.bootstrap, "--topic", "old", stdin="before\n")
    result = cli("consume", "--bootstrap", broker.bootstrap, "--topic", "old", "--timeout", "1")
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert "processed a total of 0 messages" in result.stderr


def test_consume_unknown_topic_exits_1_with_the_kafka_error(broker: ThreadBroker) -> None:
    result = cli("consume", "--bootstrap", broker.bootstrap, "--topic", "nowhere", "--timeout", "5")
    assert result.returncode == 1
    assert "UNKNOWN_TOPIC_OR_PART" in result.stderr
    assert broker.call(lambda: broker.broker.store.get("nowhere")) is None  # consumers never auto-create


@pytest.mark.slow
def test_roundtrip_exit_runs_broker_and_registry_round_trips_records_and_avro_and_stops_cleanly(
    tmp_path: Path,
) -> None:
    data = tmp_path / "roundtrip"
    result = cli("roundtrip", "--exit", "--listen", "127.0.0.1:0", "--data-dir", str(data), timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert re.search(r"produced\s+1000 records in [\d.]+ s \([\d,]+ records/s, acks=all, 0 failed\)", out), out
    assert re.search(r"consumed\s+1000 records in [\d.]+ s \([\d,]+ records/s\)", out), out
    counts = re.search(r"partitions\s+(.+)", out)
    assert counts is not None
    per_partition = dict(item.split(":") for item in counts.group(1).split())
    assert sorted(per_partition) == [str(p) for p in range(6)]
    assert sum(int(n) for n in per_partition.values()) == 1000
    assert "each in exactly one partition: yes" in out
    assert re.search(r"avro\s+100 OrderCreated events to orders \(schema id \d+ in the registry\), 100 decoded", out), (
        out
    )
    assert (data / "registry.log").exists()
    admin = re.search(r"admin API\s+http://127\.0\.0\.1:(\d+)/api/topics", out)
    assert admin is not None
    assert int(admin.group(1)) > 0
    assert "broker stopped cleanly" in out
    assert (data / "broker" / ".clean-shutdown").exists()  # SIGTERM, not a kill
    assert sorted(p.name for p in (data / "broker").glob("demo.events-*")) == [f"demo.events-{p}" for p in range(6)]
    assert "broker ready" in (data / "broker.log").read_text()
