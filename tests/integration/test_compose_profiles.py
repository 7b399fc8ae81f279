"""docker-compose.yml's kafka profile (three KRaft brokers, replication 3 and min ISR 2, the
release and settings of `streamshop kafka-cluster`, the topics kafka-setup creates) and its
postgres profile (a database for each service with state).

The fast tier (no Docker engine): each claim the file makes is checked against what the
processes really read and listen on.  tests/compose/ builds the images and runs the profiles
for real.
"""

from __future__ import annotations

import base64
import re
from urllib.parse import urlsplit

from registry.config import RegistryConfig
from registry.id_mark import ids_topic
from services.notify.config import SenderConfig
from services.orders.config import OrdersConfig
from services.otp.config import OtpConfig
from tests.support.compose_file import (
    BOOTSTRAP_REF,
    COMPOSE,
    KAFKA_BOOTSTRAP,
    SERVICES,
    command_of,
    config_of,
    dependencies,
    environment,
    image,
    is_long_running,
    one_service,
    url_target,
)
from tests.support.harness import REPO


def kafka_nodes() -> list[str]:
    return [n for n in SERVICES if image(n).startswith("apache/kafka:") and is_long_running(n)]


def test_the_kafka_profile_is_three_kraft_brokers_with_replication_3_and_min_isr_2() -> None:
    nodes = kafka_nodes()
    assert len(nodes) == 3
    envs = {n: environment(n) for n in nodes}
    assert sorted(int(e["KAFKA_NODE_ID"]) for e in envs.values()) == [1, 2, 3]
    voters = {f"{e['KAFKA_NODE_ID']}@{n}:9093" for n, e in envs.items()}
    for name, env in envs.items():
        assert SERVICES[name]["profiles"] == ["kafka"]
        assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}, "combined mode"
        assert set(env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")) == voters
        assert env["KAFKA_ADVERTISED_LISTENERS"] == f"PLAINTEXT://{name}:9092"
        assert "CONTROLLER://:9093" in env["KAFKA_LISTENERS"].split(",")
        assert env["KAFKA_DEFAULT_REPLICATION_FACTOR"] == "3"
        assert env["KAFKA_MIN_INSYNC_REPLICAS"] == "2"
        assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "3"
        assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "3"
        assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "2"
    (cluster_id,) = {e["CLUSTER_ID"] for e in envs.values()}
    assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16, "a Kafka cluster id is 16 bytes"
    assert {url_target(a)[0] for a in KAFKA_BOOTSTRAP.split(",")} == set(nodes)


def test_the_kafka_profile_runs_the_release_and_settings_of_streamshop_kafka_cluster() -> None:
    """The tests' Apache Kafka (`streamshop kafka-cluster`) and the compose profile are one
    release with one set of cluster settings."""
    from streamshop.kafka_cluster import Cluster, Node
    from streamshop.kafka_jars import KAFKA_VERSION, POM

    pom_version = re.search(r"<kafka.version>([^<]+)</kafka.version>", POM.read_text())
    assert pom_version is not None
    assert pom_version.group(1) == KAFKA_VERSION
    nodes = [Node(i, 9092 + 2 * i, 9093 + 2 * i, voter=True) for i in (1, 2, 3)]
    properties = dict(
        line.split("=", 1) for line in Cluster(REPO, "id", nodes, 256).properties(nodes[0]).splitlines() if line
    )
    node_specific = {"NODE_ID", "LISTENERS", "ADVERTISED_LISTENERS", "CONTROLLER_QUORUM_VOTERS", "LOG_DIRS"}
    for name in kafka_nodes():
        assert image(name) == f"apache/kafka:{KAFKA_VERSION}"
        env = environment(name)
        shared = {
            key.removeprefix("KAFKA_").lower().replace("_", "."): value
            for key, value in env.items()
            if key.startswith("KAFKA_") and key.removeprefix("KAFKA_") not in node_specific
        }
        shared = {key: value for key, value in shared.items() if key in properties}
        assert set(shared) >= {
            "default.replication.factor",
            "min.insync.replicas",
            "unclean.leader.election.enable",
            "broker.session.timeout.ms",
            "num.partitions",
        }
        assert shared == {key: properties[key] for key in shared}, name


def _created_topics() -> dict[str, tuple[int, dict[str, str]]]:
    (setup,) = [n for n in SERVICES if image(n).startswith("apache/kafka:") and n not in kafka_nodes()]
    script = "\n".join(command_of(setup))
    (create,) = re.findall(r"^create\(\) \{(.*)\}$", script, re.M)
    assert "--replication-factor 3" in create
    assert '--bootstrap-server "$$BOOTSTRAP_SERVERS"' in create
    assert SERVICES[setup]["environment"]["BOOTSTRAP_SERVERS"] == BOOTSTRAP_REF
    topics = {}
    for line in re.findall(r"^create (.+)$", script, re.M):
        name, *options = line.split()
        flags = dict(zip(options[::2], options[1::2], strict=True))
        configs = dict(c.split("=", 1) for c in re.findall(r"--config (\S+)", line))
        topics[name] = (int(flags["--partitions"]), configs)
    return topics


def test_kafka_setup_creates_every_topic_the_registry_and_services_would_create_with_one_replica() -> None:
    """They create topics with replication factor 1; on Kafka with min.insync.replicas=2 their
    acks=all writes would be refused, so these exist first with replication factor 3."""
    expected: dict[str, tuple[int, dict[str, str]]] = {}
    registry = RegistryConfig.from_env(environment(one_service("registry")))
    expected[registry.topic] = (1, {"cleanup.policy": "compact"})  # registry.store creates it so
    expected[ids_topic(registry.topic)] = (1, {"cleanup.policy": "compact"})  # and its id mark
    for sub in ("orders", "otp"):
        config = config_of(one_service(sub))
        assert isinstance(config, (OrdersConfig, OtpConfig))
        expected[config.topic] = (config.topic_partitions, {})
    for sub in ("sms-sender", "email-sender"):
        sender = config_of(one_service(sub))
        assert isinstance(sender, SenderConfig)
        expected.update({topic: (n, {}) for topic, n in sender.topics_to_create().items()})
    assert _created_topics() == expected


def test_the_postgres_profile_gives_each_service_with_state_a_database_the_server_makes() -> None:
    """`--env-file compose/postgres.env --profile postgres`: each stateful service's URL names the
    profile's server and a database its first start creates; without the file the URL is empty
    (an unset setting: SQLite)."""
    lines = (REPO / "compose" / "postgres.env").read_text().splitlines()
    urls = dict(line.split("=", 1) for line in lines if line.strip() and not line.startswith("#"))
    made = set(re.findall(r"CREATE DATABASE (\w+);", COMPOSE["configs"]["postgres-databases"]["content"]))
    server = SERVICES["postgres"]
    password = re.fullmatch(r"\$\{STREAMSHOP_POSTGRES_PASSWORD:-(.+)\}", server["environment"]["POSTGRES_PASSWORD"])
    assert password is not None
    stateful = {
        "orders": "ORDERS",
        "otp": "OTP",
        "logs": "LOGS",
        "sms-sender": "SMS_SENDER",
        "email-sender": "EMAIL_SENDER",
    }
    assert set(urls) == {f"{prefix}_DATABASE_URL" for prefix in stateful.values()}
    for name, prefix in stateful.items():
        variable = f"{prefix}_DATABASE_URL"
        assert SERVICES[name]["environment"][variable] == f"${{{variable}:-}}", name
        url = urlsplit(urls[variable])
        assert (url.scheme, url.hostname, url.port) == ("postgresql", "postgres", 5432), name
        assert url.username == server["environment"]["POSTGRES_USER"]
        assert url.password == password.group(1)
        assert url.path.lstrip("/") in made, name
        assert dependencies(name)["postgres"] == {"condition": "service_healthy", "required": False}
        assert config_of(name).database_url is None  # the compose file alone: SQLite
