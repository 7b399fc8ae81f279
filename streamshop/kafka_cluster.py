"""A real Apache Kafka cluster on loopback, from Maven Central's jars: `streamshop kafka-cluster`.

Apache Kafka's release tarball is not a package of any registry; its jars are.  `resolve` copies
the broker (`org.apache.kafka:kafka_2.13`), the command-line tools (`kafka-tools`) and their
dependencies, as `apache-kafka/pom.xml` pins them, into a cache directory with Maven, once.
`start` then runs N KRaft nodes, each broker and controller at once, the first three (or all,
when fewer) voters of a static controller quorum, each its own JVM with a small heap:

    node n: Kafka on 127.0.0.1:<port n>, its controller on 127.0.0.1:<controller port n>,
            data and logs under DIR/node-n, state of the whole cluster in DIR/cluster.json

The cluster is set up as the compose file's `kafka` profile: replication factor 3 (or N when
fewer nodes), `min.insync.replicas` 2, unclean leader election off; and, so that a learner sees
failover within seconds, the controller fences a broker after 3 s without a heartbeat (Kafka's
default is 9 s).  Stopping sends SIGTERM (Kafka shuts down cleanly) and SIGKILL after 60 s.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kit.pids import StartedProcesses
from kit.ports import free_ports
from streamshop import kafka_tools
from streamshop.clients import CommandError
from streamshop.kafka_jars import KAFKA_VERSION, kafka_java, resolve, run_java
from streamshop.stack.state import write_private

__all__ = [
    "Cluster",
    "ClusterSecurity",
    "Node",
    "quorum",
    "start",
    "status",
    "stop",
]

MAX_VOTERS = 3
STOP_GRACE_S = 60.0


@dataclass
class Node:
    node_id: int
    port: int
    controller_port: int
    voter: bool
    pid: int | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


@dataclass(frozen=True)
class ClusterSecurity:
    """A secured cluster: clients and brokers on SASL_SSL (SCRAM, the PEM keystore's
    certificate), controllers on SASL_PLAINTEXT with PLAIN (SCRAM credentials live in the
    metadata the controllers serve, so they cannot log the controllers in), StandardAuthorizer
    with the admin as the only super user, created with the storage (`kafka-storage format
    --add-scram`)."""

    keystore: str  # PEM: private key (PKCS#8), certificate, CA
    truststore: str  # PEM: the CA
    admin: str
    admin_password: str

    def client_config(self) -> dict[str, str]:
        """librdkafka settings of the admin."""
        return {
            "security.protocol": "sasl_ssl",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": self.admin,
            "sasl.password": self.admin_password,
            "ssl.ca.location": self.truststore,
        }

    def settings(self) -> dict[str, str]:
        scram = "org.apache.kafka.common.security.scram.ScramLoginModule required"
        plain = "org.apache.kafka.common.security.plain.PlainLoginModule required"
        login = f'username="{self.admin}" password="{self.admin_password}"'
        return {
            "listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
            "inter.broker.listener.name": "SASL_SSL",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": f"{scram} {login};",
            "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": f"{scram} {login};",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": (
                f'{plain} {login} user_{self.admin}="{self.admin_password}";'
            ),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": self.keystore,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": self.truststore,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{self.admin}",
            "allow.everyone.if.no.acl.found": "false",
        }


@dataclass
class Cluster:
    """What `start` wrote to DIR/cluster.json (mode 0600: a secured cluster's holds the admin's
    password)."""

    directory: Path
    cluster_id: str
    nodes: list[Node]
    heap_mb: int
    settings: dict[str, str] = field(default_factory=dict)
    security: ClusterSecurity | None = None

    @property
    def listener(self) -> str:
        return "SASL_SSL" if self.security else "PLAINTEXT"

    def client_config(self) -> dict[str, str]:
        """librdkafka settings that reach the cluster (the admin's login when secured)."""
        return self.security.client_config() if self.security else {}

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    @property
    def replication_factor(self) -> int:
        return min(3, len(self.nodes))

    def node(self, node_id: int) -> Node:
        return next(n for n in self.nodes if n.node_id == node_id)

    def node_dir(self, node: Node) -> Path:
        return self.directory / f"node-{node.node_id}"

    def save(self) -> None:
        body = {
            "cluster_id": self.cluster_id,
            "heap_mb": self.heap_mb,
            "settings": self.settings,
            "nodes": [asdict(n) for n in self.nodes],
            "security": asdict(self.security) if self.security else None,
        }
        write_private(self.directory / "cluster.json", json.dumps(body, indent=2) + "\n")

    @classmethod
    def load(cls, directory: Path) -> Cluster:
        path = directory / "cluster.json"
        try:
            body = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise CommandError(f"no cluster in {directory} ({e}); start one with streamshop kafka-cluster start") from e
        nodes = [Node(**n) for n in body["nodes"]]
        security = ClusterSecurity(**body["security"]) if body.get("security") else None
        settings = dict(body.get("settings", {}))
        return cls(directory, body["cluster_id"], nodes, int(body["heap_mb"]), settings, security)

    # -- one node -------------------------------------------------------------------------------

    def properties(self, node: Node) -> str:
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes if n.voter)
        rf = self.replication_factor
        roles = "broker,controller" if node.voter else "broker"
        listeners = f"{self.listener}://127.0.0.1:{node.port}"
        if node.voter:
            listeners += f",CONTROLLER://127.0.0.1:{node.controller_port}"
        settings = {
            "process.roles": roles,
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "listeners": listeners,
            "advertised.listeners": f"{self.listener}://127.0.0.1:{node.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.node_dir(node) / "data"),
            "num.partitions": "3",
            "default.replication.factor": str(rf),
            "min.insync.replicas": str(min(2, rf)),
            "offsets.topic.replication.factor": str(rf),
            "transaction.state.log.replication.factor": str(rf),
            "transaction.state.log.min.isr": str(min(2, rf)),
            "share.coordinator.state.topic.replication.factor": str(rf),
            "share.coordinator.state.topic.min.isr": str(min(2, rf)),
            "unclean.leader.election.enable": "false",
            "group.initial.rebalance.delay.ms": "100",
            # Failover within seconds for a learner watching (Kafka's defaults: 9 s and 2 s).
            "broker.session.timeout.ms": "3000",
            "broker.heartbeat.interval.ms": "500",
            # A broker gives up when the quorum has not registered it within this (Kafka's
            # default: 60 s); nodes starting together on a busy host can take longer.
            "initial.broker.registration.timeout.ms": "300000",
            **(self.security.settings() if self.security else {}),
            **self.settings,
        }
        return "".join(f"{key}={value}\n" for key, value in settings.items())

    def format(self, lib: Path, node: Node) -> None:
        home = self.node_dir(node)
        if (home / "data" / "meta.properties").exists():
            return
        home.mkdir(parents=True, exist_ok=True)
        config = home / "server.properties"
        config.write_text(self.properties(node))
        # Share groups (KIP-932) are a preview feature of Kafka 4.1, off unless enabled here.
        args = ["format", "-t", self.cluster_id, "-c", str(config), "--feature", "share.version=1"]
        if self.security is not None:  # the admin exists before any broker serves a client
            for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                login = f"name={self.security.admin},password={self.security.admin_password}"
                args += ["--add-scram", f"{mechanism}=[{login}]"]
        done = run_java(lib, "kafka.tools.StorageTool", *args, family="kafka-storage")
        if done.returncode != 0:
            raise CommandError(f"formatting node {node.node_id} failed: {(done.stdout + done.stderr)[-1500:]}")

    def launch(self, lib: Path, node: Node) -> None:
        """Start node's JVM (its storage formatted); returns at once."""
        if alive(node.pid):
            return
        self.format(lib, node)
        home = self.node_dir(node)
        (home / "server.properties").write_text(self.properties(node))
        command = kafka_java(lib, "kafka.Kafka", str(home / "server.properties"), heap_mb=self.heap_mb)
        command[1:1] = [
            f"-Dlog4j2.configurationFile={lib.parent / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={home}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
        ]
        with open(home / "stdout.log", "ab") as out:
            proc = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        _STARTED.add(proc)
        node.pid = proc.pid
        self.save()

    def kill(self, node: Node, sig: int = signal.SIGKILL) -> None:
        """Signal a node's JVM (SIGKILL: a crash, nothing flushed)."""
        if node.pid is not None and alive(node.pid):
            os.kill(node.pid, sig)
            if sig == signal.SIGKILL:
                wait_gone(node.pid, 10)

    def stop_node(self, node: Node, grace: float = STOP_GRACE_S) -> None:
        pid = node.pid
        if pid is None or not alive(pid):
            node.pid = None
            return
        os.kill(pid, signal.SIGTERM)
        if not wait_gone(pid, grace):
            os.kill(pid, signal.SIGKILL)
            wait_gone(pid, 10)
        node.pid = None
        self.save()


# The JVMs this process started, kept until they are reaped.
_STARTED = StartedProcesses()


def alive(pid: int | None) -> bool:
    return _STARTED.alive(pid)


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def start(
    directory: Path,
    *,
    nodes: int = 3,
    base_port: int | None = None,
    heap_mb: int = 384,
    settings: Mapping[str, str] | None = None,
    timeout: float = 120.0,
    security: ClusterSecurity | None = None,
) -> Cluster:
    """Start the cluster in `directory` (created and formatted the first time; a stopped one is
    started again as it was) and wait until every broker is registered."""
    lib = resolve()
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / "cluster.json").exists():
        cluster = Cluster.load(directory)
    else:
        if not 1 <= nodes <= 9:
            raise CommandError("--nodes must be 1 to 9")
        if base_port is None:
            ports = free_ports(2 * nodes)
            pairs = [(ports[2 * i], ports[2 * i + 1]) for i in range(nodes)]
        else:
            pairs = [(base_port + 2 * i, base_port + 2 * i + 1) for i in range(nodes)]
        members = [Node(i + 1, port, cport, voter=i < MAX_VOTERS) for i, (port, cport) in enumerate(pairs)]
        cluster_id = _random_uuid(lib)
        cluster = Cluster(directory, cluster_id, members, heap_mb, dict(settings or {}), security)
        cluster.save()
    for node in cluster.nodes:
        cluster.launch(lib, node)
    wait_ready(cluster, timeout)
    return cluster


def _random_uuid(lib: Path) -> str:
    done = run_java(lib, "kafka.tools.StorageTool", "random-uuid", family="kafka-storage")
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0 or not lines:
        raise CommandError(f"kafka-storage random-uuid failed: {done.stderr[-1000:]}")
    return lines[-1]


def _why_stopped(home: Path, limit: int = 12) -> str:
    """What a node logged about why it stopped: the first ERROR or FATAL line of its server.log
    with what follows (the exception), else the last lines the JVM printed (a crash, a bad
    option)."""
    logs = {}
    for name in ("server.log", "stdout.log"):
        try:
            logs[name] = (home / name).read_text(errors="replace").splitlines()
        except OSError:
            logs[name] = []
    server = logs["server.log"]
    marked = [i for i, line in enumerate(server) if " ERROR " in line or " FATAL " in line]
    name, picked = (
        ("server.log", server[marked[0] : marked[0] + limit]) if marked else ("stdout.log", logs["stdout.log"][-limit:])
    )
    return f"\n{home / name}:" + "".join(f"\n  {line[:400]}" for line in picked)


def wait_ready(cluster: Cluster, timeout: float, brokers: int | None = None) -> None:
    """Until `brokers` (default: every node) are registered and a controller is elected."""
    from confluent_kafka.admin import AdminClient

    wanted = len(cluster.nodes) if brokers is None else brokers
    deadline = time.monotonic() + timeout
    # log_level 0: refused connections are expected while the JVMs start; the error says the rest.
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0, **cluster.client_config()})
    last = "no answer"
    while time.monotonic() < deadline:
        dead = [n.node_id for n in cluster.nodes if n.pid is not None and not alive(n.pid)]
        if dead and brokers is None:
            reasons = "".join(_why_stopped(cluster.node_dir(cluster.node(d))) for d in dead)
            raise CommandError(f"node(s) {dead} exited while starting:{reasons}")
        try:
            described = admin.describe_cluster(request_timeout=5).result(6)
            registered = len(described.nodes)
            if registered >= wanted and described.controller is not None:
                return
            last = f"{registered} of {wanted} brokers registered"
        except Exception as e:  # not up yet
            last = str(e)
        time.sleep(0.5)
    raise CommandError(f"the cluster was not ready within {timeout:g} s: {last}")


def stop(directory: Path, grace: float = STOP_GRACE_S) -> Cluster:
    """Stop every node: SIGTERM to all at once (each shuts down cleanly while the quorum still
    answers), SIGKILL to any still running after `grace` seconds."""
    cluster = Cluster.load(directory)
    running = [n for n in cluster.nodes if alive(n.pid)]
    for node in running:
        assert node.pid is not None
        os.kill(node.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for node in running:
        assert node.pid is not None
        if not wait_gone(node.pid, max(0.0, deadline - time.monotonic())):
            os.kill(node.pid, signal.SIGKILL)
            wait_gone(node.pid, 10)
    for node in cluster.nodes:
        node.pid = None
    cluster.save()
    reap()
    return cluster


def reap() -> None:
    """Collect the exit status of every JVM this process started that has ended (one may have
    been killed by another process, a `streamshop scenario` say)."""
    _STARTED.reap()


def quorum(cluster: Cluster, timeout: float = 30.0) -> dict[str, str]:
    """The metadata quorum as Kafka's own kafka-metadata-quorum tool describes it (DescribeQuorum):
    LeaderId (the active controller), LeaderEpoch, HighWatermark, CurrentVoters..."""
    running = [n.bootstrap for n in cluster.nodes if alive(n.pid)] or [cluster.bootstrap]
    done = kafka_tools.run(
        "kafka-metadata-quorum",
        "--bootstrap-server",
        ",".join(running),
        "describe",
        "--status",
        heap_mb=128,
        timeout=timeout,
    )
    fields = {}
    for line in done.stdout.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and " " not in key.strip():
            fields[key.strip()] = value.strip()
    if done.returncode != 0 or "LeaderId" not in fields:
        raise CommandError(f"kafka-metadata-quorum failed: {(done.stdout + done.stderr)[-1000:]}")
    return fields


def status(directory: Path) -> dict[str, object]:
    """Each node (process, port), the registered brokers, the active controller, and the
    partitions that are under-replicated or offline."""
    from confluent_kafka.admin import AdminClient

    cluster = Cluster.load(directory)
    nodes = [
        {"node_id": n.node_id, "voter": n.voter, "bootstrap": n.bootstrap, "pid": n.pid, "running": alive(n.pid)}
        for n in cluster.nodes
    ]
    out: dict[str, object] = {"directory": str(directory), "version": KAFKA_VERSION, "nodes": nodes}
    if not any(n["running"] for n in nodes):
        return out
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0, **cluster.client_config()})
    try:
        described = admin.describe_cluster(request_timeout=5).result(6)
        metadata = admin.list_topics(timeout=5)
    except Exception as e:
        out["error"] = f"the cluster does not answer: {e}"
        return out
    under = offline = 0
    for topic in metadata.topics.values():
        for partition in topic.partitions.values():
            offline += partition.leader < 0
            under += len(partition.isrs) < len(partition.replicas)
    try:
        controller: int | None = int(quorum(cluster)["LeaderId"])
    except (CommandError, ValueError, subprocess.TimeoutExpired):
        controller = None  # no quorum: fewer than two voters answer
    out.update(
        {
            "brokers": sorted(n.id for n in described.nodes),
            # DescribeCluster names a random broker as controller under KRaft; the quorum's
            # leader is the active controller.
            "controller": controller,
            "topics": len(metadata.topics),
            "under_replicated_partitions": under,
            "offline_partitions": offline,
        }
    )
    return out
