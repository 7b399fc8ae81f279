"""End to end on the secured stack (`streamshop up --secure`), on the bundled broker and on an
Apache Kafka cluster secured alike: every Kafka connection over
SASL_SSL with a SCRAM user per component and least-privilege ACLs, the registry on HTTPS with
basic auth, the services behind API keys, the dashboard behind a sign-in.

The demo's flows pass as the operator and fail with 401 without a key; orders' events decode
through the HTTPS registry; the logs of every service are indexed (log shipping and the
indexer's group under ACLs); the analytics job commits its progress (Spark's workers log in to
the broker and the registry); the dashboard, once signed in, sees the cluster, the groups and the
inbox; each principal is held to its ACLs (a service cannot write another's topic nor read
another's group); and no password or key appears in any child's output."""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import aiohttp
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from schemas.client import basic_authorization
from streamshop import kafka_cluster
from streamshop.stack.secure import ADMIN, SecureStack
from tests.support.kafka_clients import coordinator_moving
from tests.support.stack import REPO, Stack, running_stack

pytestmark = [pytest.mark.stack, pytest.mark.spark]


@pytest.fixture(scope="module", params=["bundled", pytest.param("apache-kafka", marks=pytest.mark.kafka)])
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The secured stack on the bundled broker, then on a 3-node Apache Kafka cluster secured the
    same way (SASL_SSL between brokers too) with the stack's certificates and operator login."""
    data = tmp_path_factory.mktemp(f"secure-{request.param}")
    if request.param == "bundled":
        with running_stack(data, without=(), secure=True, within=300) as running:
            yield running
        return
    material = SecureStack.load_or_create(data / "secure")
    security = kafka_cluster.ClusterSecurity(
        str(material.keystore("broker")), str(material.ca.cert_path), ADMIN, material.kafka_passwords[ADMIN]
    )
    directory = tmp_path_factory.mktemp("secure-kafka-cluster")
    cluster = kafka_cluster.start(directory, nodes=3, heap_mb=320, timeout=300, security=security)
    try:
        with running_stack(data, without=(), bootstrap=cluster.bootstrap, secure=True, within=300) as running:
            running.kafka = cluster
            yield running
    finally:
        kafka_cluster.stop(directory, grace=30)


@pytest.fixture(scope="module")
def secure(stack: Stack) -> SecureStack:
    return SecureStack.load_or_create(stack.data / "secure")


def url(stack: Stack, child: str, role: str = "http") -> str:
    return str(stack.child(child)["urls"][role]).rstrip("/")


def kafka_conf(stack: Stack, secure: SecureStack, user: str, password: str | None = None) -> dict[str, Any]:
    conf = {"bootstrap.servers": url(stack, "broker", "bootstrap"), **secure.kafka(user).librdkafka_config()}
    if password is not None:
        conf["sasl.password"] = password
    return conf


async def eventually(what: str, check: Callable[[], Any], within: float = 180, every: float = 0.5) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if found := await check():
            return found
        await asyncio.sleep(every)
    raise AssertionError(f"no {what} within {within} s")


def demo(stack: Stack, key: str | None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"}
    if key is not None:
        env["STREAMSHOP_API_KEY"] = key
    return subprocess.run(
        [sys.executable, "-m", "streamshop.cli", "demo", "--stack", str(stack.data), "--orders", "12", "--otp", "3"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def demo_done(stack: Stack, secure: SecureStack) -> subprocess.CompletedProcess[str]:
    """The demo run once as the operator: the orders, logs and e-mails the tests below read,
    whichever of them runs first (or alone)."""
    return demo(stack, secure.api_keys[ADMIN])


def test_the_demo_passes_as_the_operator_and_is_refused_without_a_key(
    stack: Stack, demo_done: subprocess.CompletedProcess[str]
) -> None:
    refused = demo(stack, None)
    assert refused.returncode == 1
    assert "HTTP 401" in refused.stdout
    done = demo_done
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 requested, 3 verified" in done.stdout


def test_each_principal_is_held_to_its_acls(stack: Stack, secure: SecureStack) -> None:
    def produce(user: str, topic: str) -> KafkaError | None:
        errors: list[KafkaError | None] = []
        producer = Producer(
            {**kafka_conf(stack, secure, user), "enable.idempotence": True, "message.timeout.ms": 10000}
        )
        producer.produce(topic, b"acl probe", on_delivery=lambda err, _msg: errors.append(err))
        producer.flush(15)
        return errors[0] if errors else KafkaError(KafkaError._MSG_TIMED_OUT)

    assert produce("orders", "orders") is None
    for user, topic in [
        ("orders", "otp.requests"),
        ("otp", "orders"),
        ("analytics", "orders"),
        ("dashboard", "orders"),
    ]:
        error = produce(user, topic)
        assert error is not None, (user, topic)
        assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, (user, topic, error)

    # The senders' transactional variant: each sender may use its own transactional ids only.
    own = Producer({**kafka_conf(stack, secure, "sms-sender"), "transactional.id": "sms-sender-otp.requests-0"})
    own.init_transactions(15)
    other = Producer({**kafka_conf(stack, secure, "sms-sender"), "transactional.id": "email-sender-otp.requests-0"})
    with pytest.raises(KafkaException) as refused:
        other.init_transactions(15)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    # The sms sender's login cannot join the email sender's group.
    consumer = Consumer({**kafka_conf(stack, secure, "sms-sender"), "group.id": "email-sender"})
    consumer.subscribe(["otp.requests"])
    errors: list[int] = []
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is not None:
            errors.append(message.error().code())
    consumer.close()
    assert errors == [KafkaError.GROUP_AUTHORIZATION_FAILED]

    # A wrong password never gets in.
    wrong = Producer({**kafka_conf(stack, secure, "orders", "not-the-password"), "message.timeout.ms": 5000})
    failures: list[KafkaError] = []
    try:
        wrong.produce("orders", b"x", on_delivery=lambda err, _msg: failures.append(err))
        wrong.flush(10)
    finally:
        wrong.close()  # or it goes on trying to log in, beside the tests that follow
    assert failures
    assert failures[0].code() in (KafkaError._MSG_TIMED_OUT, KafkaError._AUTHENTICATION)


async def test_the_registry_needs_a_login_and_the_admin_role_to_delete(stack: Stack, secure: SecureStack) -> None:
    registry = url(stack, "registry")
    assert registry.startswith("https://")
    context = ssl.create_default_context(cafile=str(secure.ca.cert_path))
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{registry}/subjects", ssl=context) as response:
            assert response.status == 401
        orders = {"Authorization": basic_authorization("orders", secure.registry_passwords["orders"])}
        async with session.get(f"{registry}/subjects", ssl=context, headers=orders) as response:
            assert response.status == 200
            subject = "orders-io.streamshop.events.orders.OrderCreated"
            assert subject in await response.json()
        async with session.delete(f"{registry}/subjects/{subject}", ssl=context, headers=orders) as response:
            assert response.status == 403
            assert (await response.json())["error_code"] == 40301


async def test_logs_are_indexed_and_searchable_with_a_key(
    stack: Stack, secure: SecureStack, demo_done: subprocess.CompletedProcess[str]
) -> None:
    logs = url(stack, "logs")
    headers = {"Authorization": f"Bearer {secure.api_keys[ADMIN]}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        for service in ("orders", "otp", "sms-sender", "email-sender", "logs"):

            async def found(service: str = service) -> list[Any]:
                async with session.get(f"{logs}/logs", params={"service": service, "limit": "5"}) as response:
                    assert response.status == 200
                    items: list[Any] = (await response.json())["items"]
                    return items

            await eventually(f"logs of {service}", found)
    async with aiohttp.ClientSession() as anonymous, anonymous.get(f"{logs}/logs") as response:
        assert response.status == 401


async def test_the_analytics_job_commits_its_progress_under_its_own_login(
    stack: Stack, secure: SecureStack, demo_done: subprocess.CompletedProcess[str]
) -> None:
    partitions = [TopicPartition("orders", p) for p in range(6)]
    consumer = Consumer({**kafka_conf(stack, secure, ADMIN), "group.id": "analytics", "enable.auto.commit": False})
    try:

        async def committed() -> bool:
            try:
                return any(tp.offset > 0 for tp in consumer.committed(partitions, timeout=10))
            except KafkaException as e:
                if coordinator_moving(e):
                    return False
                raise

        await eventually("offsets committed by the analytics job", committed, within=300, every=2)
    finally:
        consumer.close()


async def test_the_dashboard_signs_in_and_shows_the_cluster_and_the_inbox(
    stack: Stack, secure: SecureStack, demo_done: subprocess.CompletedProcess[str]
) -> None:
    dashboard = url(stack, "dashboard")
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as browser:
        async with browser.get(f"{dashboard}/api/snapshot") as response:
            assert response.status == 401
        login = {"user": ADMIN, "password": secure.kafka_passwords[ADMIN]}
        async with browser.post(f"{dashboard}/login", data=login) as response:
            assert response.status == 200
            assert str(response.url).rstrip("/") == dashboard

        async def snapshot() -> dict[str, Any] | None:
            async with browser.get(f"{dashboard}/api/snapshot") as response:
                assert response.status == 200
                snap: dict[str, Any] = await response.json()
            groups = {g["group_id"] for g in snap["groups"]}
            topics = {t["name"] for t in snap["cluster"]["topics"]}
            wanted = {"sms-sender", "email-sender", "log-indexer"} <= groups and "orders" in topics
            return snap if wanted else None

        await eventually("the cluster and its groups on the dashboard", snapshot)
        async with browser.get(f"{dashboard}/api/inbox") as response:
            assert response.status == 200, await response.text()
            assert (await response.json())["total"] >= 3  # the demo's e-mails


def test_no_password_or_key_appears_in_any_output(stack: Stack, secure: SecureStack) -> None:
    secrets = [
        *secure.kafka_passwords.values(),
        *secure.registry_passwords.values(),
        *secure.api_keys.values(),
    ]
    outputs = [*sorted((stack.data / "output").glob("*.log")), stack.output]
    assert len(outputs) > 5
    for path in outputs:
        text = path.read_text(errors="replace")
        leaked = [s[:4] + "…" for s in secrets if s in text]
        assert not leaked, f"{path.name} shows secrets {leaked}"
    state = json.loads((stack.data / "stack.json").read_text())
    assert not any(s in json.dumps(state) for s in secrets)
