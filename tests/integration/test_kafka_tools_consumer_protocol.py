"""Kafka's own Java consumer and kafka-consumer-groups (Apache Kafka 4.1's jars) with the
consumer group protocol (KIP-848) against the bundled broker."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer

from tests.support import kafka_tools as kt
from tests.support.group_clients import wait_until
from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import confluent_produce, create_topic

pytestmark = [pytest.mark.kafka, pytest.mark.xdist_group("kafka-tools")]


def _table(output: str, first: str) -> list[dict[str, str]]:
    """Rows of a kafka-consumer-groups table, by column name."""
    lines = [line.split() for line in output.splitlines() if line.strip()]
    head = next(i for i, cols in enumerate(lines) if cols and cols[0] == first)
    return [dict(zip(lines[head], cols, strict=False)) for cols in lines[head + 1 :] if len(cols) == len(lines[head])]


def test_the_java_consumer_reads_as_a_member_of_a_consumer_protocol_group(broker: ThreadBroker) -> None:
    b = broker.bootstrap
    create_topic(b, "tools.kip848", 3)
    confluent_produce(b, "tools.kip848", [{"value": f"v{i}".encode(), "partition": i % 3} for i in range(30)])
    out = kt.run(
        "kafka-console-consumer", "--bootstrap-server", b, "--topic", "tools.kip848", "--from-beginning",
        "--max-messages", "30", "--group", "tools.kip848.java", "--consumer-property", "group.protocol=consumer",
    )  # fmt: skip
    assert sorted(out.split()) == sorted(f"v{i}" for i in range(30))
    listed = kt.run("kafka-consumer-groups", "--bootstrap-server", b, "--list", "--type", "consumer")
    assert "tools.kip848.java" in listed.split()
    classic = kt.run("kafka-consumer-groups", "--bootstrap-server", b, "--list", "--type", "classic")
    assert "tools.kip848.java" not in classic.split()
    described = kt.run("kafka-consumer-groups", "--bootstrap-server", b, "--describe", "--group", "tools.kip848.java")
    rows = {int(r["PARTITION"]): r for r in _table(described, "GROUP")}
    assert {p: (r["CURRENT-OFFSET"], r["LAG"]) for p, r in rows.items()} == {
        0: ("10", "0"),
        1: ("10", "0"),
        2: ("10", "0"),
    }


def test_kafka_consumer_groups_describes_the_members_and_state_of_a_consumer_protocol_group(
    broker: ThreadBroker,
) -> None:
    b = broker.bootstrap
    create_topic(b, "tools.kip848.members", 4)
    consumers = [
        Consumer(
            {
                "bootstrap.servers": b,
                "group.id": "tools.kip848.live",
                "group.protocol": "consumer",
                "client.id": f"live-{i}",
            }
        )
        for i in range(2)
    ]
    try:
        for c in consumers:
            c.subscribe(["tools.kip848.members"])

        def settled() -> bool:
            for c in consumers:
                c.poll(0.05)
            return all(len(c.assignment()) == 2 for c in consumers)

        wait_until(settled, 20, "the two members' assignments")
        group = ["--bootstrap-server", b, "--group", "tools.kip848.live", "--describe"]
        state = _table(kt.run("kafka-consumer-groups", *group, "--state", "--verbose"), "GROUP")
        assert [(r["ASSIGNMENT-STRATEGY"], r["STATE"], r["#MEMBERS"]) for r in state] == [("uniform", "Stable", "2")]
        epoch = state[0]["GROUP-EPOCH"]
        assert state[0]["TARGET-ASSIGNMENT-EPOCH"] == epoch
        members = _table(kt.run("kafka-consumer-groups", *group, "--members", "--verbose"), "GROUP")
        assert sorted(r["CLIENT-ID"] for r in members) == ["live-0", "live-1"]
        assert {(r["#PARTITIONS"], r["CURRENT-EPOCH"], r["TARGET-EPOCH"]) for r in members} == {("2", epoch, epoch)}
        assert all(r["CURRENT-ASSIGNMENT"] == r["TARGET-ASSIGNMENT"] for r in members)
        held = sorted(int(p) for r in members for p in r["CURRENT-ASSIGNMENT"].split(":")[1].split(","))
        assert held == [0, 1, 2, 3]
    finally:
        for c in consumers:
            c.close()
