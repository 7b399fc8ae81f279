"""Replication scenarios on a running `streamshop kafka-cluster`: `streamshop scenario NAME`.

Each scenario breaks the cluster the way the documents describe, while an idempotent acks=all
producer sends keyed records, says what happens as it happens (leader, ISR, quorum, producer
errors), puts the cluster back, reads every partition from the start and counts what was
acknowledged and is missing.  The tests run the same functions and assert on what they return.

    leader-kill        SIGKILL a partition's leader: a new leader from the ISR, the ISR shrinks,
                       then grows back once the node returns; nothing acknowledged is lost
    controller-kill    SIGKILL the active controller: another voter leads the quorum
    unclean-election   no live ISR member: offline with unclean election off, back and lossy on
    two-down           two of a partition's three replicas down (five nodes, so the quorum
                       lives): acks=all refused with NOT_ENOUGH_REPLICAS until one returns
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, ElectionType, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from streamshop import kafka_cluster, kafka_jars
from streamshop.clients import CommandError
from streamshop.kafka_cluster import Cluster

__all__ = ["SCENARIOS", "Scenario", "controller_kill", "leader_kill", "two_down", "unclean_election"]

Say = Callable[[str], None]


class Scenario:
    """One run: the cluster, its admin client (kept, as confluent-kafka fails the futures of a
    client that is dropped), what was said, and the figures."""

    def __init__(self, cluster: Cluster, say: Say = print) -> None:
        self.cluster = cluster
        self.admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
        self._say = say
        self.started = time.monotonic()

    def say(self, text: str) -> None:
        self._say(f"[{time.monotonic() - self.started:6.1f} s] {text}")

    def partition(self, topic: str, partition: int) -> tuple[int, list[int], list[int]]:
        """(leader, replicas, ISR) as the cluster's metadata says now."""
        metadata = self.admin.list_topics(topic, timeout=10)
        p = metadata.topics[topic].partitions[partition]
        return p.leader, list(p.replicas), sorted(p.isrs)

    def wait_for(self, what: str, check: Callable[[], Any], timeout: float = 90) -> Any:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = check()
            except Exception as e:  # the cluster is between states
                last = e
            else:
                if last:
                    return last
            time.sleep(0.1)
        raise CommandError(f"{what} not reached within {timeout:g} s (last: {last!r})")

    def create(self, topic: str, spec: NewTopic) -> None:
        try:
            self.admin.create_topics([spec])[topic].result(30)
        except KafkaException as e:
            raise CommandError(f"cannot create {topic}: {e.args[0].str()} (a scenario needs a new topic)") from None
        self.wait_for(f"{topic} with leaders", lambda: self.partition(topic, 0)[0] >= 0)

    def read_all(self, topic: str, partitions: int, expected: int, timeout: float = 90) -> list[bytes]:
        consumer = Consumer(
            {"bootstrap.servers": self.cluster.bootstrap, "group.id": f"scenario-read-{topic}", "log_level": 0}
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

    def restart(self, node_id: int) -> None:
        self.cluster.launch(kafka_jars.resolve(), self.cluster.node(node_id))


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
                "log_level": 0,
            }
        )
        self.topic = topic
        self.acked: set[bytes] = set()
        self.errors: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="scenario-traffic")

    def _delivered(self, error: KafkaError | None, message: Message) -> None:
        if error is None:
            self.acked.add(message.value() or b"")
        else:
            self.errors.append(error.name())

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                value, key = f"r{self.sent}".encode(), f"key-{self.sent % 31}".encode()
                self.producer.produce(self.topic, value, key, on_delivery=self._delivered)
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


def _lost(run: Scenario, topic: str, traffic: KeyedTraffic) -> dict[str, Any]:
    acknowledged = set(traffic.acked)
    stored = set(run.read_all(topic, 3, len(acknowledged)))
    lost = acknowledged - stored
    run.say(f"read back: {len(acknowledged)} records acknowledged, {len(lost)} of them missing")
    return {
        "topic": topic,
        "acknowledged": len(acknowledged),
        "lost": len(lost),
        "producer_errors": sorted(set(traffic.errors)),
    }


def leader_kill(cluster: Cluster, say: Say = print, topic: str = "scenario.leader-kill") -> dict[str, Any]:
    run = Scenario(cluster, say)
    run.create(topic, NewTopic(topic, 3))
    with KeyedTraffic(cluster, topic) as traffic:
        run.wait_for("records acknowledged", lambda: len(traffic.acked) > 500)
        leader, replicas, isr_before = run.partition(topic, 0)
        run.say(f"{topic}[0]: leader {leader}, replicas {replicas}, ISR {isr_before}; SIGKILL node {leader}")
        killed_at = time.monotonic()
        cluster.kill(cluster.node(leader), signal.SIGKILL)
        new_leader = run.wait_for(
            "a new leader", lambda: (s := run.partition(topic, 0))[0] not in (-1, leader) and s[0]
        )
        to_new_leader = time.monotonic() - killed_at
        run.say(f"node {new_leader} leads after {to_new_leader:.1f} s (the controller fenced node {leader})")
        survivors = sorted(set(isr_before) - {leader})
        run.wait_for("the ISR without the killed node", lambda: run.partition(topic, 0)[2] == survivors)
        run.say(f"ISR shrank to {survivors}; {len(traffic.acked)} acknowledged so far, traffic goes on")
        acked = len(traffic.acked)
        run.wait_for("traffic on two replicas", lambda: len(traffic.acked) > acked + 500)
        restarted_at = time.monotonic()
        run.restart(leader)
        run.say(f"node {leader} restarted")
        run.wait_for("the ISR back to three", lambda: run.partition(topic, 0)[2] == sorted(isr_before), 150)
        to_rejoin = time.monotonic() - restarted_at
        run.say(f"node {leader} caught up and is back in the ISR after {to_rejoin:.1f} s")
    return {
        "killed": leader,
        "new_leader": new_leader,
        "isr_before": isr_before,
        "isr_during": survivors,
        "to_new_leader_s": to_new_leader,
        "to_rejoin_s": to_rejoin,
        **_lost(run, topic, traffic),
    }


def controller_kill(cluster: Cluster, say: Say = print, topic: str = "scenario.controller-kill") -> dict[str, Any]:
    run = Scenario(cluster, say)
    run.create(topic, NewTopic(topic, 3))
    with KeyedTraffic(cluster, topic) as traffic:
        run.wait_for("records acknowledged", lambda: len(traffic.acked) > 300)
        before = kafka_cluster.quorum(cluster)
        leader = int(before["LeaderId"])
        run.say(f"quorum: leader {leader}, epoch {before['LeaderEpoch']}; SIGKILL node {leader}")
        killed_at = time.monotonic()
        cluster.kill(cluster.node(leader), signal.SIGKILL)

        def new_quorum() -> dict[str, str] | None:
            q = kafka_cluster.quorum(cluster)
            return q if int(q["LeaderId"]) not in (-1, leader) else None

        after: dict[str, str] = run.wait_for("another voter leading the quorum", new_quorum)
        to_new_controller = time.monotonic() - killed_at
        run.say(
            f"node {after['LeaderId']} leads the quorum after {to_new_controller:.1f} s, epoch {after['LeaderEpoch']}"
        )
        acked = len(traffic.acked)
        run.wait_for("traffic under the new controller", lambda: len(traffic.acked) > acked + 300)
        run.say(f"traffic goes on: {len(traffic.acked) - acked} more acknowledged")
        run.restart(leader)
        kafka_cluster.wait_ready(cluster, 120)
        run.say(f"node {leader} back")
    return {
        "killed": leader,
        "new_controller": int(after["LeaderId"]),
        "epoch_before": int(before["LeaderEpoch"]),
        "epoch_after": int(after["LeaderEpoch"]),
        "to_new_controller_s": to_new_controller,
        **_lost(run, topic, traffic),
    }


def unclean_election(cluster: Cluster, say: Say = print, topic: str = "scenario.unclean") -> dict[str, Any]:
    """Partition 0 on nodes 1 (leader) and 2 with min.insync.replicas 1 (node 3 keeps the
    quorum alive with whichever of them runs)."""
    if len(cluster.nodes) < 3:
        raise CommandError("unclean-election needs at least three nodes")
    run = Scenario(cluster, say)
    run.create(topic, NewTopic(topic, 1, replica_assignment=[[1, 2]], config={"min.insync.replicas": "1"}))
    run.wait_for("ISR 1, 2", lambda: run.partition(topic, 0)[2] == [1, 2])
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    both = [f"both-{i}".encode() for i in range(200)]
    for value in both:
        producer.produce(topic, value, partition=0)
    if producer.flush(30):
        raise CommandError("records on both replicas were not acknowledged")
    run.say(f"{len(both)} records acknowledged by nodes 1 and 2; SIGKILL node 2")
    cluster.kill(cluster.node(2), signal.SIGKILL)
    run.wait_for("node 2 out of the ISR", lambda: run.partition(topic, 0)[2] == [1])
    acked_alone: list[bytes] = []

    def delivered(error: KafkaError | None, message: Message) -> None:
        if error is None:
            acked_alone.append(message.value() or b"")

    only_node_1 = [f"only-node-1-{i}".encode() for i in range(150)]
    for value in only_node_1:
        producer.produce(topic, value, partition=0, on_delivery=delivered)
    producer.flush(30)
    run.say(f"ISR [1]: {len(acked_alone)} more records acknowledged by node 1 alone; SIGKILL node 1, restart node 2")
    cluster.kill(cluster.node(1), signal.SIGKILL)
    run.restart(2)
    run.wait_for("partition 0 offline", lambda: run.partition(topic, 0)[0] == -1, 90)
    hold = 8.0
    time.sleep(hold)
    # Read again until offline: node 2, just restarted, may answer from metadata it has not yet
    # caught up on (the dead node 1 still leading); an elected leader would never read -1.
    leader, _, isr = run.wait_for(
        "partition 0 still offline", lambda: (state := run.partition(topic, 0))[0] == -1 and state, 30
    )
    run.say(f"unclean.leader.election.enable=false: leader {leader}, ISR {isr} after {hold:g} s: offline")
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("unclean.leader.election.enable", "true", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    run.admin.incremental_alter_configs([resource])[resource].result(30)
    # With the setting on, the election is also asked for (ElectLeaders UNCLEAN, what
    # kafka-leader-election --election-type unclean sends): Kafka 4.1 keeps eligible leader
    # replicas (KIP-966) and, in the test runs, did not elect on the setting alone within 90 s.
    try:
        elected = run.admin.elect_leaders(ElectionType.UNCLEAN, [TopicPartition(topic, 0)]).result(30)
        run.say(f"ElectLeaders(UNCLEAN): {elected}")
    except KafkaException as e:
        run.say(f"ElectLeaders(UNCLEAN) answered {e}")
    run.wait_for("node 2 leading", lambda: run.partition(topic, 0)[0] == 2)
    stored = set(run.read_all(topic, 1, len(both)))
    lost = set(acked_alone) - stored
    run.say(f"unclean.leader.election.enable=true: node 2 leads; {len(lost)} acknowledged records are gone")
    run.restart(1)
    run.wait_for("node 1 back in the ISR", lambda: run.partition(topic, 0)[2] == [1, 2], 150)
    stored_after = set(run.read_all(topic, 1, len(both)))
    run.say(f"node 1 rejoined and truncated its log to node 2's: {len(set(acked_alone) - stored_after)} still gone")
    return {
        "acknowledged_by_both": len(both),
        "acknowledged_by_one": len(acked_alone),
        "offline_leader": leader,
        "offline_for_s": hold,
        "both_kept": set(both) <= stored,
        "lost": len(lost),
        "lost_after_rejoin": len(set(acked_alone) - stored_after),
        "lost_is_exactly_the_one_replica_records": lost == set(only_node_1),
    }


def two_down(cluster: Cluster, say: Say = print, topic: str = "scenario.two-down") -> dict[str, Any]:
    """Replicas on node 3 and the broker-only nodes 4 and 5; 4 and 5 die, the quorum (1-3) lives."""
    if len(cluster.nodes) < 5:
        raise CommandError(
            "two-down needs five nodes (kafka-cluster start --nodes 5): with three combined nodes, two "
            "down is also the controller quorum gone, the ISR cannot shrink and acks=all just times out"
        )
    run = Scenario(cluster, say)
    run.create(topic, NewTopic(topic, 1, replica_assignment=[[3, 4, 5]]))
    run.wait_for("ISR 3, 4, 5", lambda: run.partition(topic, 0)[2] == [3, 4, 5])
    outcomes: dict[bytes, str] = {}
    strict = {"bootstrap.servers": cluster.bootstrap, "acks": "all", "retries": 0, "enable.idempotence": False}

    def send(value: bytes) -> str:
        producer = Producer({**strict, "message.timeout.ms": 15_000, "log_level": 0})

        def delivered(error: KafkaError | None, message: Message) -> None:
            outcomes[value] = "ok" if error is None else error.name()

        producer.produce(topic, value, partition=0, on_delivery=delivered)
        producer.flush(30)
        return outcomes.get(value, "no answer")

    run.say(f"acks=all with ISR [3, 4, 5]: {send(b'before')}; SIGKILL nodes 4 and 5")
    for node_id in (4, 5):
        cluster.kill(cluster.node(node_id), signal.SIGKILL)
    run.wait_for("the ISR down to node 3", lambda: run.partition(topic, 0)[2] == [3])
    refused_at = time.monotonic()
    during = [send(f"during-{i}".encode()) for i in range(5)]
    run.say(f"ISR [3], below min.insync.replicas 2: acks=all sends answered {during}")
    run.restart(4)
    run.wait_for("node 4 back in the ISR", lambda: run.partition(topic, 0)[2] == [3, 4], 150)
    recovered_after = time.monotonic() - refused_at
    after = send(b"after")
    run.say(f"node 4 back, ISR [3, 4]: acks=all {after} ({recovered_after:.1f} s after the first refusal)")
    stored = set(run.read_all(topic, 1, 2))
    run.restart(5)
    return {
        "before": outcomes[b"before"],
        "during": during,
        "after": after,
        "recovered_after_s": recovered_after,
        "stored": sorted(stored),
    }


SCENARIOS: dict[str, Callable[..., dict[str, Any]]] = {
    "leader-kill": leader_kill,
    "controller-kill": controller_kill,
    "unclean-election": unclean_election,
    "two-down": two_down,
}
