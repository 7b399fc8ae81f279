"""kafka-leader-election, kafka-reassign-partitions and kafka-log-dirs, from Apache Kafka 4.1's
jars, against the bundled broker: they run as against a one-broker Kafka, whose every partition
has its preferred leader and its only possible assignment, in its one log directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import kafka_tools as kt
from tests.support.harness import ThreadBroker

pytestmark = [pytest.mark.kafka, pytest.mark.xdist_group("kafka-tools")]


def test_leader_election_finds_every_leader_elected_and_names_an_unknown_partition(broker: ThreadBroker) -> None:
    b = broker.bootstrap
    kt.run("kafka-topics", "--bootstrap-server", b, "--create", "--topic", "tools.elect", "--partitions", "2")
    out = kt.run("kafka-leader-election", "--bootstrap-server", b, "--election-type", "preferred", "--topic",
                 "tools.elect", "--partition", "1")  # fmt: skip
    assert out.strip() == "Valid replica already elected for partitions tools.elect-1"
    # Every partition: none needs an election, so the tool has nothing to report.
    out = kt.run(
        "kafka-leader-election", "--bootstrap-server", b, "--election-type", "unclean", "--all-topic-partitions"
    )
    assert out.strip() == ""
    failed = kt.fails("kafka-leader-election", "--bootstrap-server", b, "--election-type", "preferred", "--topic",
                      "tools.unknown", "--partition", "0")  # fmt: skip
    assert "Error completing leader election (PREFERRED) for partition: tools.unknown-0" in failed
    assert "UnknownTopicOrPartitionException: No such topic as tools.unknown" in failed


def test_reassignment_to_the_assignment_and_log_dir_each_partition_has_executes_and_verifies(
    broker: ThreadBroker, tmp_path: Path
) -> None:
    b = broker.bootstrap
    kt.run("kafka-topics", "--bootstrap-server", b, "--create", "--topic", "tools.move", "--partitions", "2")
    described = kt.run("kafka-log-dirs", "--bootstrap-server", b, "--describe", "--topic-list", "tools.move")
    report = json.loads(next(line for line in described.splitlines() if line.startswith("{")))
    (node,) = report["brokers"]
    (log_dir,) = node["logDirs"]
    assert (node["broker"], log_dir["error"]) == (1, None)
    assert sorted(p["partition"] for p in log_dir["partitions"]) == ["tools.move-0", "tools.move-1"]

    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": "tools.move"}]}))
    generated = kt.run("kafka-reassign-partitions", "--bootstrap-server", b, "--topics-to-move-json-file",
                       str(topics), "--broker-list", "1", "--generate")  # fmt: skip
    current, proposed = [json.loads(line) for line in generated.splitlines() if line.startswith("{")]
    assert current == proposed  # one broker: the only assignment is the one there is

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "tools.move", "partition": 0, "replicas": [1], "log_dirs": [log_dir["logDir"]]},
        {"topic": "tools.move", "partition": 1, "replicas": [1]},
    ]}))  # fmt: skip
    executed = kt.run("kafka-reassign-partitions", "--bootstrap-server", b, "--reassignment-json-file", str(plan),
                      "--execute")  # fmt: skip
    assert "Successfully started partition reassignments for tools.move-0,tools.move-1" in executed
    assert f"Successfully started moving log directory to {log_dir['logDir']} for replica tools.move-0" in executed
    verified = kt.run("kafka-reassign-partitions", "--bootstrap-server", b, "--reassignment-json-file", str(plan),
                      "--verify")  # fmt: skip
    for line in (
        "Reassignment of partition tools.move-0 is completed.",
        "Reassignment of partition tools.move-1 is completed.",
        "Reassignment of replica tools.move-0-1 completed successfully.",
        "Clearing topic-level throttles on topic tools.move",
    ):
        assert line in verified
    listed = kt.run("kafka-reassign-partitions", "--bootstrap-server", b, "--list")
    assert "No partition reassignments found." in listed

    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "tools.move", "partition": 1, "replicas": [1], "log_dirs": [str(tmp_path / "no-such-dir")]},
    ]}))  # fmt: skip
    failed = kt.fails("kafka-reassign-partitions", "--bootstrap-server", b, "--reassignment-json-file",
                      str(elsewhere), "--execute")  # fmt: skip
    assert "LogDirNotFoundException" in failed
