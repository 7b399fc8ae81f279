"""Every client authenticates to the secured broker: confluent-kafka, aiokafka and
kafka-python with SCRAM-SHA-256/512 over TLS and with PLAIN; a wrong password is
SASL_AUTHENTICATION_FAILED; an SSL client's principal comes from its certificate; users and
ACLs are managed with the admin APIs and survive SIGKILL."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kafka
import kafka.errors
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError as AioKafkaError
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from streamshop.pki import LocalCA
from tests.support.harness import BrokerProcess, ThreadBroker
from tests.support.secure import ADMIN, ADMIN_PASSWORD, SecureBroker, make_admin_user, secure_settings

ALICE, ALICE_PASSWORD = "alice", "alice-secret"


@pytest.fixture
def secure(tmp_path: Path, broker_factory: Callable[..., ThreadBroker]) -> SecureBroker:
    ca = LocalCA(tmp_path / "pki")
    server = ca.issue("broker", hosts=("127.0.0.1", "localhost"))
    make_admin_user(tmp_path / "broker")
    broker = broker_factory(settings=secure_settings(ca, server), name="broker")
    return SecureBroker(broker, ca, tmp_path)


def wait(futures: dict[Any, Any]) -> None:
    for future in futures.values():
        future.result(timeout=15)


def add_user(admin: AdminClient, name: str, password: str) -> None:
    # One request per mechanism: Kafka refuses a user named twice in one request.
    for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
        upsert = UserScramCredentialUpsertion(name, ScramCredentialInfo(mechanism, 4096), password.encode())
        wait(admin.alter_user_scram_credentials([upsert]))


def grant(admin: AdminClient, *bindings: AclBinding) -> None:
    for future in admin.create_acls(list(bindings)).values():
        future.result(timeout=15)


def prefixed(rtype: ResourceType, name: str, principal: str, op: AclOperation = AclOperation.ALL) -> AclBinding:
    return AclBinding(rtype, name, ResourcePatternType.PREFIXED, principal, "*", op, AclPermissionType.ALLOW)


@pytest.fixture
def alice(secure: SecureBroker) -> SecureBroker:
    """User alice, who may do anything with topics and groups named sec.*"""
    admin = AdminClient(secure.admin())
    add_user(admin, ALICE, ALICE_PASSWORD)
    grant(
        admin,
        prefixed(ResourceType.TOPIC, "sec.", f"User:{ALICE}"),
        prefixed(ResourceType.GROUP, "sec.", f"User:{ALICE}"),
    )
    return secure


def confluent_roundtrip(conf: dict[str, Any], topic: str) -> list[bytes]:
    producer = Producer(conf)
    for i in range(20):
        producer.produce(topic, key=f"k{i}", value=f"v{i}".encode())
    assert producer.flush(15) == 0
    consumer = Consumer(conf | {"group.id": f"sec.{uuid.uuid4().hex}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(got) < 20 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append(message.value())
    consumer.close()
    return got


METHODS = [
    ("SASL_SSL", "SCRAM-SHA-256"),
    ("SASL_SSL", "SCRAM-SHA-512"),
    ("SASL_SSL", "PLAIN"),
    ("SASL_PLAINTEXT", "PLAIN"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
]


@pytest.mark.parametrize(("listener", "mechanism"), METHODS)
def test_confluent_kafka_authenticates(alice: SecureBroker, listener: str, mechanism: str) -> None:
    topic = f"sec.confluent.{mechanism.lower()}.{listener.lower()}"
    got = confluent_roundtrip(alice.confluent(listener, ALICE, ALICE_PASSWORD, mechanism), topic)
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(20))
    assert _metric(alice, "streamshop_authentications_total", mechanism=mechanism, result="ok") >= 1


@pytest.mark.parametrize(("listener", "mechanism"), METHODS)
async def test_aiokafka_authenticates(alice: SecureBroker, listener: str, mechanism: str) -> None:
    topic = f"sec.aiokafka.{mechanism.lower()}.{listener.lower()}"
    conf = alice.aiokafka(listener, ALICE, ALICE_PASSWORD, mechanism)
    producer = AIOKafkaProducer(**conf)
    await producer.start()
    try:
        for i in range(20):
            await producer.send_and_wait(topic, f"v{i}".encode(), key=b"k")
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, group_id=f"sec.{uuid.uuid4().hex}", auto_offset_reset="earliest", **conf)
    await consumer.start()
    try:
        got = []
        async with asyncio.timeout(20):
            while len(got) < 20:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got += [r.value for r in records]
        await consumer.commit()
    finally:
        await consumer.stop()
    assert got == [f"v{i}".encode() for i in range(20)]


def _kafka_python(secure: SecureBroker, listener: str, mechanism: str, password: str) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap_servers": secure.address(listener),
        "security_protocol": listener,
        "sasl_mechanism": mechanism,
        "sasl_plain_username": ALICE,
        "sasl_plain_password": password,
    }
    if "SSL" in listener:
        conf["ssl_cafile"] = str(secure.ca.cert_path)
    return conf


@pytest.mark.parametrize(("listener", "mechanism"), METHODS)
def test_kafka_python_authenticates(alice: SecureBroker, listener: str, mechanism: str) -> None:
    topic = f"sec.kafka-python.{mechanism.lower()}.{listener.lower()}"
    conf = _kafka_python(alice, listener, mechanism, ALICE_PASSWORD)
    producer = kafka.KafkaProducer(**conf)
    for i in range(20):
        producer.send(topic, key=b"k", value=f"v{i}".encode()).get(timeout=15)
    producer.close()
    consumer = kafka.KafkaConsumer(
        topic, group_id=f"sec.{uuid.uuid4().hex}", auto_offset_reset="earliest", consumer_timeout_ms=15_000, **conf
    )
    got = [m.value for _, m in zip(range(20), consumer, strict=False)]
    consumer.close()
    assert got == [f"v{i}".encode() for i in range(20)]


def test_a_wrong_password_is_sasl_authentication_failed_for_every_client(
    alice: SecureBroker,
) -> None:
    errors: list[KafkaError] = []
    conf = alice.confluent("SASL_SSL", ALICE, "wrong", "SCRAM-SHA-512") | {"error_cb": errors.append}
    admin = AdminClient(conf)
    _poll_until(admin, lambda: _authentication_failed(errors, "invalid credentials"))
    assert _authentication_failed(errors, "invalid credentials"), errors

    # kafka-python retries the bootstrap until its timeout.  In a child process: a KafkaProducer
    # whose __init__ raises cannot be closed, and its socket pair would otherwise outlive the test
    # in the log records that name its connection.  Its log does not always name the cause: the
    # broker sends the answer and closes (as Kafka does), and when kafka-python reads both in one
    # go it drops the answer and reports a disconnect.  So the broker's count is the witness.
    # The two children (one mechanism each, so each count is its own) wait out their timeouts
    # side by side, while the AdminClient above is shown to get no metadata.
    script = (
        "import json, logging, sys, kafka\n"
        "logging.basicConfig(level=logging.INFO)\n"
        "try:\n"
        "    kafka.KafkaProducer(**json.loads(sys.argv[1]), bootstrap_timeout_ms=5000)\n"
        "except Exception as e:\n"
        "    print('raised', type(e).__name__)\n"
    )
    children = {}
    for listener, mechanism in (("SASL_SSL", "SCRAM-SHA-256"), ("SASL_PLAINTEXT", "PLAIN")):
        refused = _refusals(alice, mechanism)
        conf = _kafka_python(alice, listener, mechanism, "wrong")
        command = [sys.executable, "-c", script, json.dumps(conf)]
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        children[mechanism] = (refused, child)
    try:
        with pytest.raises(Exception):  # noqa: B017 - only the reported cause matters
            admin.list_topics(timeout=3)
        for mechanism, (refused, child) in children.items():
            stdout, stderr = child.communicate(timeout=60)
            assert "raised KafkaTimeoutError" in stdout, stdout + stderr[-2000:]
            assert "Authenticated as" not in stderr
            assert _refusals(alice, mechanism) > refused
    finally:
        for _, child in children.values():
            child.kill()
            child.wait()

    async def aiokafka_login() -> None:
        producer = AIOKafkaProducer(**alice.aiokafka("SASL_SSL", ALICE, "wrong", "SCRAM-SHA-256"))
        try:
            await producer.start()
        finally:
            await producer.stop()

    with pytest.raises(AioKafkaError):
        asyncio.run(aiokafka_login())
    for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"):
        assert _refusals(alice, mechanism) >= 1


def _refusals(secure: SecureBroker, mechanism: str) -> float:
    """Logins refused: checked and wrong, or unchecked once the guessing throttle closed (the
    clients above retry the wrong password, and alice's fourth failure closes her name)."""
    return sum(
        _metric(secure, "streamshop_authentications_total", mechanism=mechanism, result=result)
        for result in ("failed", "throttled")
    )


def test_an_ssl_client_is_the_principal_of_its_certificate(secure: SecureBroker) -> None:
    """mTLS: the DN of the client certificate is the principal ACLs name; without a
    certificate the client is ANONYMOUS and gets nothing."""
    issued = secure.ca.issue("reporting", client=True)
    principal = "User:CN=reporting,O=streamshop"
    grant(AdminClient(secure.admin()), prefixed(ResourceType.TOPIC, "sec.mtls", principal))
    conf = secure.confluent("SSL") | {
        "ssl.certificate.location": str(issued.certificate),
        "ssl.key.location": str(issued.key),
    }
    producer = Producer(conf)
    producer.produce("sec.mtls", value=b"signed")
    assert producer.flush(15) == 0
    anonymous = Producer(secure.confluent("SSL") | {"message.timeout.ms": 3000})
    failures: list[Any] = []
    anonymous.produce("sec.mtls", value=b"anonymous", on_delivery=lambda err, msg: failures.append(err))
    anonymous.flush(10)
    assert [e.code() for e in failures] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert _records(secure, "sec.mtls") == 1


def test_users_are_managed_with_the_scram_apis(secure: SecureBroker) -> None:
    admin = AdminClient(secure.admin())
    add_user(admin, "bob", "bob-1")
    described = admin.describe_user_scram_credentials(["bob"])["bob"].result(timeout=15)
    assert sorted((i.mechanism, i.iterations) for i in described.scram_credential_infos) == [
        (ScramMechanism.SCRAM_SHA_256, 4096),
        (ScramMechanism.SCRAM_SHA_512, 4096),
    ]
    with pytest.raises(Exception, match=r"RESOURCE_NOT_FOUND|does not exist"):
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result(timeout=15)
    # No names (librdkafka sends an empty list) is every user, as Kafka answers it.
    everyone = admin.describe_user_scram_credentials().result(timeout=15)
    assert {"bob", ADMIN} <= set(everyone)
    assert len(everyone["bob"].scram_credential_infos) == 2
    with pytest.raises(Exception, match=r"UNACCEPTABLE_CREDENTIAL|iterations"):
        wait(
            admin.alter_user_scram_credentials(
                [UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 10), b"x")]
            )
        )
    # a new password replaces the old one at once
    add_user(admin, "bob", "bob-2")
    assert _can_login(secure, "bob", "bob-2")
    assert not _can_login(secure, "bob", "bob-1")
    both = [UserScramCredentialDeletion("bob", m) for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)]
    with pytest.raises(Exception, match=r"DUPLICATE_RESOURCE"):  # a user named twice, refused whole, as Kafka
        wait(admin.alter_user_scram_credentials(both))
    assert _can_login(secure, "bob", "bob-2")
    for deletion in both:
        wait(admin.alter_user_scram_credentials([deletion]))
    assert not _can_login(secure, "bob", "bob-2")
    # only who may ALTER the cluster changes users
    add_user(admin, "eve", "eve-pw")
    eve = AdminClient(secure.confluent("SASL_SSL", "eve", "eve-pw"))
    with pytest.raises(Exception, match=r"CLUSTER_AUTHORIZATION_FAILED|[Aa]uthoriz"):
        add_user(eve, "eve", "new")


def test_users_and_acls_survive_sigkill(tmp_path: Path) -> None:
    ca = LocalCA(tmp_path / "pki")
    server = ca.issue("broker", hosts=("127.0.0.1",))
    make_admin_user(tmp_path / "b")
    settings = secure_settings(ca, server, listeners="SASL_SSL://127.0.0.1:0")
    process = BrokerProcess(tmp_path / "b", settings).start()
    try:
        secure = SecureBroker(_Ports(process.port), ca, tmp_path)  # type: ignore[arg-type]
        admin = AdminClient(secure.admin())
        add_user(admin, ALICE, ALICE_PASSWORD)
        binding = prefixed(ResourceType.TOPIC, "sec.", f"User:{ALICE}", AclOperation.WRITE)
        grant(admin, binding)
        process.kill()  # SIGKILL: nothing flushed at exit
        process.start()
        secure = SecureBroker(_Ports(process.port), ca, tmp_path)  # type: ignore[arg-type]
        admin = AdminClient(secure.admin())
        everything = AclBindingFilter(
            ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
        )
        found = admin.describe_acls(everything).result(timeout=15)
        assert found == [binding]
        assert _can_login(secure, ALICE, ALICE_PASSWORD)
    finally:
        process.kill()


class _Ports:
    """The bits of ThreadBroker SecureBroker uses, for a broker process with one listener."""

    def __init__(self, port: int) -> None:
        self.server = self
        self.ports = {"SASL_SSL": port}


def _can_login(secure: SecureBroker, user: str, password: str) -> bool:
    """Whether `user` gets metadata with `password` within 5 s; a refusal the client reports
    (served by poll) ends the wait early."""
    errors: list[KafkaError] = []
    admin = AdminClient(secure.confluent("SASL_SSL", user, password) | {"error_cb": errors.append})
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=0.2)
        except KafkaException:
            admin.poll(0)
            if _authentication_failed(errors):
                return False
        else:
            return not _authentication_failed(errors)
    return False


def _authentication_failed(errors: list[KafkaError], cause: str = "") -> bool:
    return any(e.code() == KafkaError._AUTHENTICATION and cause in e.str() for e in errors)


def _poll_until(client: AdminClient, done: Callable[[], bool], timeout: float = 15) -> None:
    """Serve the client's callbacks until `done()` or the timeout."""
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        client.poll(0.05)


def _records(secure: SecureBroker, topic: str) -> int:
    """Records in every partition of `topic`, read as the admin."""
    consumer = Consumer(secure.admin() | {"group.id": "sec.offsets"})
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    total = sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions)
    consumer.close()
    return int(total)


def _metric(secure: SecureBroker, name: str, **labels: str) -> float:
    value = secure.broker.broker.metrics.registry.get_sample_value(name, labels)
    return float(value or 0)


def test_admin_password_is_never_logged(secure: SecureBroker, capfd: pytest.CaptureFixture[str]) -> None:
    """Neither the right password (of the offline user command) nor a wrong one tried
    against the broker appears in any output."""
    errors: list[KafkaError] = []
    admin = AdminClient(secure.confluent("SASL_SSL", "admin", "not-the-password") | {"error_cb": errors.append})
    with pytest.raises(Exception):  # noqa: B017 - authentication fails; the output is what is checked
        admin.list_topics(timeout=3)
    admin.poll(1)  # serves error_cb
    assert errors
    out, err = capfd.readouterr()
    assert ADMIN_PASSWORD not in out + err
    assert "not-the-password" not in out + err


def test_a_password_setting_is_described_as_sensitive_and_without_its_value(
    broker_factory: Callable[..., ThreadBroker],
) -> None:
    broker = broker_factory(settings={"ssl.key.password": "key-pw-never-shown"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(ConfigResource.Type.BROKER, "1")
    configs = admin.describe_configs([resource])[resource].result(15)
    secret = configs["ssl.key.password"]
    assert secret.value is None
    assert secret.is_sensitive
    assert not configs["ssl.client.auth"].is_sensitive  # only passwords are hidden
    assert configs["ssl.client.auth"].value == "none"
