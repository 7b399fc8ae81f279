"""Apache Kafka itself (4.1, from Maven Central's jars), three KRaft nodes on loopback started by
`streamshop kafka-cluster`: the settings the compose file's kafka profile promises, and the
first replication scenario, a partition leader killed under acks=all traffic."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from streamshop import kafka_cluster
from streamshop.kafka_cluster import Cluster, wait_ready


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp("kafka-cluster")
    running = kafka_cluster.start(directory, nodes=3, heap_mb=320, timeout=180)
    try:
        yield running
    finally:
        kafka_cluster.stop(directory, grace=30)


_ADMINS: dict[str, AdminClient] = {}


def admin(cluster: Cluster) -> AdminClient:
    """One admin client per cluster, kept: a client dropped while its futures are pending
    destroys its handle and fails them."""
    if cluster.bootstrap not in _ADMINS:
        _ADMINS[cluster.bootstrap] = AdminClient({"bootstrap.servers": cluster.bootstrap})
    return _ADMINS[cluster.bootstrap]


def partition_state(cluster: Cluster, topic: str, partition: int) -> tuple[int, list[int], list[int]]:
    """(leader, replicas, isr) as the cluster's metadata says now."""
    metadata = admin(cluster).list_topics(topic, timeout=10)
    p = metadata.topics[topic].partitions[partition]
    return p.leader, list(p.replicas), sorted(p.isrs)


def wait_for(what: str, check: object, timeout: float = 60) -> object:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = check()  # type: ignore[operator]
        except Exception as e:  # the cluster is between states
            last = e
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"{what} not reached within {timeout} s (last: {last!r})")


def create(cluster: Cluster, topic: str, partitions: int = 3) -> None:
    admin(cluster).create_topics([NewTopic(topic, partitions)])[topic].result(30)
    wait_for(
        f"{topic} with a leader per partition",
        lambda: all(partition_state(cluster, topic, p)[0] >= 0 for p in range(partitions)),
    )


def read_all(cluster: Cluster, topic: str, partitions: int, expected: int, timeout: float = 60) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": f"read-{topic}", "enable.auto.commit": False}
    )
    values: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        while len(values) < expected and time.monotonic() < deadline:
            for message in consumer.consume(500, 0.5):
                value = message.value()
                if message.error() is None and value is not None:
                    values.append(value)
    finally:
        consumer.close()
    return values


def test_three_kraft_nodes_elect_a_controller_and_replicate_every_partition_three_times_with_min_isr_2(
    cluster: Cluster,
) -> None:
    described = admin(cluster).describe_cluster(request_timeout=10).result(15)
    assert sorted(n.id for n in described.nodes) == [1, 2, 3]
    assert described.controller is not None
    create(cluster, "replicated")
    for p in range(3):
        leader, replicas, isr = partition_state(cluster, "replicated", p)
        assert sorted(replicas) == [1, 2, 3]
        assert isr == [1, 2, 3]
        assert leader in replicas
    resource = ConfigResource(ConfigResource.Type.TOPIC, "replicated")
    configs = admin(cluster).describe_configs([resource])[resource].result(15)
    assert configs["min.insync.replicas"].value == "2"
    assert configs["unclean.leader.election.enable"].value == "false"

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(300):
        producer.produce("replicated", f"v{i}".encode(), f"k{i % 17}".encode())
    assert producer.flush(30) == 0
    assert sorted(read_all(cluster, "replicated", 3, 300)) == sorted(f"v{i}".encode() for i in range(300))


class KeyedTraffic:
    """acks=all, idempotent, keyed records sent until stopped; remembers which were acknowledged."""

    def __init__(self, cluster: Cluster, topic: str) -> None:
        self.producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 60_000,
            }
        )
        self.topic = topic
        self.acked: set[bytes] = set()
        self.errors: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, error: KafkaError | None, message: object) -> None:
        if error is None:
            self.acked.add(message.value())  # type: ignore[attr-defined]
        else:
            self.errors.append(error.name())

    def _run(self) -> None:
        while not self._stop.is_set():
            value = f"r{self.sent}".encode()
            try:
                self.producer.produce(self.topic, value, f"key-{self.sent % 31}".encode(), on_delivery=self._delivered)
                self.sent += 1
            except BufferError:
                pass
            self.producer.poll(0.002)

    def __enter__(self) -> KeyedTraffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.producer.flush(90)


def test_killing_a_partition_leader_elects_a_new_one_from_the_isr_and_loses_no_acknowledged_record(
    cluster: Cluster,
) -> None:
    topic = "leader-kill"
    create(cluster, topic)
    with KeyedTraffic(cluster, topic) as traffic:
        wait_for("records acknowledged", lambda: len(traffic.acked) > 500)
        leader, _, isr_before = partition_state(cluster, topic, 0)
        assert len(isr_before) == 3
        victim = cluster.node(leader)
        killed_at = time.monotonic()
        cluster.kill(victim, signal.SIGKILL)
        new_leader = wait_for(
            "a new leader of partition 0",
            lambda: (state := partition_state(cluster, topic, 0))[0] not in (-1, leader) and state[0],
        )
        to_new_leader = time.monotonic() - killed_at
        assert new_leader in isr_before  # elected from the ISR: nothing acknowledged is behind it
        wait_for(
            "the ISR without the killed node",
            lambda: partition_state(cluster, topic, 0)[2] == sorted(set(isr_before) - {leader}),
        )
        acked_while_down = len(traffic.acked)
        wait_for("traffic going on with two replicas", lambda: len(traffic.acked) > acked_while_down + 500)

        restarted_at = time.monotonic()
        cluster.launch(kafka_cluster.resolve(), victim)
        wait_for("the ISR back to three", lambda: partition_state(cluster, topic, 0)[2] == [1, 2, 3], timeout=120)
        to_rejoin = time.monotonic() - restarted_at
    assert traffic.errors == [] or set(traffic.errors) <= {"_MSG_TIMED_OUT"}, traffic.errors[:5]
    acknowledged = set(traffic.acked)
    stored = set(read_all(cluster, topic, 3, len(acknowledged), timeout=90))
    lost = acknowledged - stored
    print(
        f"\nleader kill: node {leader} SIGKILLed, node {new_leader} leads after {to_new_leader:.1f} s, "
        f"node {leader} back in the ISR {to_rejoin:.1f} s after its restart; {len(acknowledged)} acknowledged, "
        f"{len(lost)} lost"
    )
    assert lost == set()
    assert to_new_leader < 20  # broker.session.timeout.ms is 3 s


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


def test_killing_the_active_controller_hands_the_quorum_to_another_voter_while_traffic_goes_on(
    cluster: Cluster,
) -> None:
    topic = "controller-kill"
    create(cluster, topic)
    with KeyedTraffic(cluster, topic) as traffic:
        wait_for("records acknowledged", lambda: len(traffic.acked) > 300)
        before = kafka_cluster.quorum(cluster)
        leader = int(before["LeaderId"])
        victim = cluster.node(leader)
        killed_at = time.monotonic()
        cluster.kill(victim, signal.SIGKILL)

        def new_leader() -> dict[str, str] | None:
            q = kafka_cluster.quorum(cluster)
            return q if int(q["LeaderId"]) not in (-1, leader) else None

        after = cast(dict[str, str], wait_for("another voter leading the quorum", new_leader))
        to_new_controller = time.monotonic() - killed_at
        assert int(after["LeaderEpoch"]) > int(before["LeaderEpoch"])
        acked = len(traffic.acked)
        wait_for("traffic going on under the new controller", lambda: len(traffic.acked) > acked + 300)
        cluster.launch(kafka_cluster.resolve(), victim)
        wait_ready(cluster, 120)
    acknowledged = set(traffic.acked)
    lost = acknowledged - set(read_all(cluster, topic, 3, len(acknowledged), timeout=90))
    print(
        f"\ncontroller kill: node {leader} SIGKILLed, node {after['LeaderId']} leads the quorum after "
        f"{to_new_controller:.1f} s; {len(acknowledged)} acknowledged, {len(lost)} lost"
    )
    assert lost == set()
