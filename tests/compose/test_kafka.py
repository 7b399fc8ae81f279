"""The `kafka` profile: the stack on three Apache Kafka brokers (KRaft, each broker and
controller), every topic with 3 replicas and min.insync.replicas 2.  The same order and OTP
flows as on the bundled broker; then a broker container is SIGKILLed during order traffic: the
stack keeps accepting orders, every acknowledged order reaches `orders`, and the broker comes
back by its restart policy."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator

import pytest

from tests.compose.conftest import running
from tests.compose.stackcheck import DASHBOARD, eventually, http, otp_delivered, post_order, read_orders
from tests.support.docker import Compose, docker

pytestmark = pytest.mark.compose

BOOTSTRAP = "kafka-1:9092,kafka-2:9092,kafka-3:9092"


@pytest.fixture(scope="module")
def stack(docker_host: str, images: None) -> Iterator[Compose]:
    project = Compose(docker_host, "streamshop-test", profiles=("kafka",), variables={"BOOTSTRAP_SERVERS": BOOTSTRAP})
    with running(project, "up --wait, kafka profile (3 brokers)", timeout=900) as up:
        yield up


def describe(stack: Compose, topic: str) -> str:
    tool = "/opt/kafka/bin/kafka-topics.sh"
    return stack.exec("kafka-1", tool, "--bootstrap-server", BOOTSTRAP, "--describe", "--topic", topic)


def test_three_brokers_hold_every_topic_with_three_replicas(stack: Compose) -> None:
    for topic in ("orders", "otp.requests", "_schemas"):
        described = describe(stack, topic)
        assert re.search(r"ReplicationFactor:\s*3", described), described

    def brokers() -> int:
        status, snap = http("GET", f"{DASHBOARD}/api/snapshot")
        return len(snap["cluster"]["brokers"]) if status == 200 and isinstance(snap, dict) else 0

    assert eventually("three brokers on the dashboard", lambda: brokers() == 3)


def test_an_order_and_an_otp_flow_through_kafka(stack: Compose) -> None:
    order_id = post_order(0)
    assert read_orders(stack, {order_id}, bootstrap=BOOTSTRAP).keys() == {order_id}
    otp_delivered()


def test_a_broker_killed_during_order_traffic_loses_no_acknowledged_order(stack: Compose) -> None:
    container = stack("ps", "-q", "kafka-2").stdout.strip()
    acknowledged = [post_order(i) for i in range(10)]
    pid = int(docker(stack.host, "inspect", "-f", "{{.State.Pid}}", container).stdout)
    os.kill(pid, signal.SIGKILL)  # the broker's JVM dies: a crash, not a stop docker was asked for
    acknowledged += [post_order(i) for i in range(10, 40)]  # while it is down or restarting

    def healthy() -> bool:
        out = docker(stack.host, "inspect", "-f", "{{.RestartCount}} {{.State.Health.Status}}", container).stdout
        restarts, health = out.split()
        return int(restarts) >= 1 and health == "healthy"

    eventually("kafka-2 restarted by its policy and healthy", healthy, within=240, every=1)
    acknowledged += [post_order(i) for i in range(40, 50)]
    found = read_orders(stack, set(acknowledged), bootstrap=BOOTSTRAP, within=180)
    assert set(acknowledged) - found.keys() == set()
