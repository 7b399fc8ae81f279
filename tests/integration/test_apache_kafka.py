"""Apache Kafka itself (4.1, from Maven Central's jars), KRaft nodes on loopback started by
`streamshop kafka-cluster`: the settings the compose file's kafka profile promises, and the
replication scenarios of `streamshop scenario` (streamshop/scenarios.py) under acks=all traffic."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import ConfigResource, NewTopic

from streamshop import kafka_cluster, scenarios
from streamshop.kafka_cluster import Cluster

pytestmark = pytest.mark.kafka


@pytest.fixture
def cluster(apache_kafka: Cluster) -> Cluster:
    """The run's 3-node cluster (conftest), as its directory says now: a node restarted by a
    scenario's own process has a new pid.  The scenarios put back every node they stop."""
    return Cluster.load(apache_kafka.directory)


def test_three_kraft_nodes_elect_a_controller_and_replicate_every_partition_three_times_with_min_isr_2(
    cluster: Cluster,
) -> None:
    run = scenarios.Scenario(cluster, say=print)
    described = run.admin.describe_cluster(request_timeout=10).result(15)
    assert sorted(n.id for n in described.nodes) == [1, 2, 3]
    assert described.controller is not None
    run.create("replicated", NewTopic("replicated", 3))
    # Every broker's metadata, not only the one asked first, has the three replicas in the ISR.
    run.wait_for(
        "three replicas in sync on every partition",
        lambda: all(
            (state := run.partition("replicated", p))[2] == [1, 2, 3]
            and sorted(state[1]) == [1, 2, 3]
            and state[0] in state[1]
            for p in range(3)
        ),
    )
    resource = ConfigResource(ConfigResource.Type.TOPIC, "replicated")
    # The broker that answers DescribeConfigs may learn of the topic after the others' Metadata
    # shows it in sync (it answered UNKNOWN_TOPIC_OR_PARTITION once): ask until it knows.
    configs = run.wait_for(
        "the topic's configs described", lambda: run.admin.describe_configs([resource])[resource].result(15)
    )
    assert configs["min.insync.replicas"].value == "2"
    assert configs["unclean.leader.election.enable"].value == "false"

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(300):
        producer.produce("replicated", f"v{i}".encode(), f"k{i % 17}".encode())
    assert producer.flush(30) == 0
    assert sorted(run.read_all("replicated", 3, 300)) == sorted(f"v{i}".encode() for i in range(300))


def test_killing_a_partition_leader_elects_a_new_one_from_the_isr_and_loses_no_acknowledged_record(
    cluster: Cluster,
) -> None:
    result = scenarios.leader_kill(cluster, say=print)
    assert result["new_leader"] in result["isr_before"]  # from the ISR: nothing acknowledged is behind it
    assert result["isr_during"] == sorted(set(result["isr_before"]) - {result["killed"]})
    assert result["acknowledged"] > 1000
    assert result["lost"] == 0
    assert set(result["producer_errors"]) <= {"_MSG_TIMED_OUT"}, result
    assert result["to_new_leader_s"] < 20  # broker.session.timeout.ms is 3 s


def test_killing_the_active_controller_hands_the_quorum_to_another_voter_while_traffic_goes_on(
    cluster: Cluster,
) -> None:
    """Run by hand, as a learner would: `streamshop scenario controller-kill --dir DIR`."""
    done = subprocess.run(
        [sys.executable, "-m", "streamshop.cli", "scenario", "controller-kill", "--dir", str(cluster.directory)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    print(done.stdout)
    narrative, _, tail = done.stdout.partition("\n{")
    result = json.loads("{" + tail)
    assert re.search(r"quorum: leader \d, epoch \d+; SIGKILL node \d", narrative)
    assert re.search(r"node \d leads the quorum after [\d.]+ s", narrative)
    assert result["new_controller"] not in (-1, result["killed"])
    assert result["epoch_after"] > result["epoch_before"]
    assert result["acknowledged"] > 600
    assert result["lost"] == 0
    # The command restarted the node in its own process: the cluster file has its new pid.
    reloaded = Cluster.load(cluster.directory)
    for node in cluster.nodes:
        node.pid = reloaded.node(node.node_id).pid
    assert all(kafka_cluster.alive(n.pid) for n in cluster.nodes)

    # A topic that exists already is refused with a clear error, before anything is broken.
    command = [sys.executable, "-m", "streamshop.cli", "scenario", "leader-kill", "--dir", str(cluster.directory)]
    again = subprocess.run(
        [*command, "--topic", result["topic"]],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert again.returncode == 1
    assert f"cannot create {result['topic']}: " in again.stderr
    assert "a scenario needs a new topic" in again.stderr
    assert "Traceback" not in again.stderr


def test_unclean_leader_election_off_keeps_a_partition_offline_and_on_revives_it_losing_what_only_the_dead_had(
    cluster: Cluster,
) -> None:
    """The trade-off the documents describe (partition on nodes 1 and 2, min.insync.replicas 1)."""
    result = scenarios.unclean_election(cluster, say=print)
    assert result["offline_leader"] == -1  # off: an out-of-sync replica must not lead
    assert result["acknowledged_by_one"] == 150
    assert result["both_kept"] is True
    assert result["lost"] == 150
    assert result["lost_is_exactly_the_one_replica_records"] is True
    assert result["lost_after_rejoin"] == 150  # node 1 truncated to the new leader's log


def test_with_two_of_three_replicas_down_acks_all_is_refused_with_not_enough_replicas_until_one_returns(
    tmp_path: Path,
) -> None:
    """Five nodes, the first three the quorum; the replicas on node 3 and broker-only nodes 4 and 5."""
    five = kafka_cluster.start(tmp_path / "five", nodes=5, heap_mb=288, timeout=400)
    try:
        result = scenarios.two_down(five, say=print)
    finally:
        kafka_cluster.stop(five.directory, grace=30)
    assert result["before"] == "ok"
    assert result["during"] == ["NOT_ENOUGH_REPLICAS"] * 5
    assert result["after"] == "ok"
    assert result["stored"] == [b"after", b"before"]  # nothing refused was stored


def test_the_command_starts_reports_and_stops_a_one_node_cluster_and_starts_it_again_as_it_was(tmp_path: Path) -> None:
    directory = tmp_path / "one"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "streamshop.cli", "kafka-cluster", *args, "--dir", str(directory)],
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )

    started = cli("start", "--nodes", "1", "--heap-mb", "256")
    assert started.returncode == 0, started.stderr
    assert re.search(r"Apache Kafka 4\.1\.0: 1 nodes ready, bootstrap 127\.0\.0\.1:\d+", started.stdout)
    try:
        report = json.loads(cli("status", "--json").stdout)
        assert report["brokers"] == [1]
        assert report["controller"] == 1
        assert report["nodes"][0]["running"] is True
        producer = Producer({"bootstrap.servers": report["nodes"][0]["bootstrap"], "acks": "all"})
        producer.produce("kept", b"survives a restart")
        assert producer.flush(30) == 0
    finally:
        stopped = cli("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert "stopped 1 nodes" in stopped.stdout
    assert "stopped" in cli("status").stdout
    assert cli("start").returncode == 0  # same cluster id, ports and data
    try:
        bootstrap = json.loads(cli("status", "--json").stdout)["nodes"][0]["bootstrap"]
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "auto.offset.reset": "earliest"})
        consumer.subscribe(["kept"])
        message = None
        deadline = time.monotonic() + 30
        while message is None and time.monotonic() < deadline:
            polled = consumer.poll(0.5)
            message = polled if polled is not None and polled.error() is None else None
        consumer.close()
        assert message is not None
        assert message.value() == b"survives a restart"
    finally:
        assert cli("stop").returncode == 0
