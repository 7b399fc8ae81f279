"""`connections.max.reauth.ms` (KIP-368): the broker gives each SASL session a lifetime; a
client that re-authenticates in time keeps its connection (librdkafka, producing without a
gap across several lifetimes), one that does not is closed on
its next request, and a re-authentication renews the session with the same mechanism only."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from broker.protocol.errors import ErrorCode
from streamshop.pki import LocalCA
from tests.support.harness import ThreadBroker
from tests.support.kafka_wire import KafkaConnection
from tests.support.secure import ADMIN, ADMIN_PASSWORD, SecureBroker, make_admin_user, sasl_login, secure_settings

LIFETIME_MS = 1500


@pytest.fixture
def secure(tmp_path: Path, broker_factory: Callable[..., ThreadBroker]) -> SecureBroker:
    ca = LocalCA(tmp_path / "pki")
    make_admin_user(tmp_path / "broker")
    settings = secure_settings(
        ca, ca.issue("broker", hosts=("127.0.0.1",)), **{"connections.max.reauth.ms": str(LIFETIME_MS)}
    )
    return SecureBroker(broker_factory(settings=settings, name="broker"), ca, tmp_path)


def logins(secure: SecureBroker, mechanism: str) -> float:
    registry = secure.broker.broker.metrics.registry
    return float(
        registry.get_sample_value("streamshop_authentications_total", {"mechanism": mechanism, "result": "ok"}) or 0
    )


def expiries(secure: SecureBroker) -> float:
    registry = secure.broker.broker.metrics.registry
    sample = registry.get_sample_value(
        "streamshop_connections_closed_authentication_total", {"reason": "SASL session expired"}
    )
    return float(sample or 0)


def test_a_client_that_reauthenticates_keeps_producing_across_lifetimes(secure: SecureBroker) -> None:
    admin = AdminClient(secure.admin())
    admin.create_topics([NewTopic("reauth", 3, 1)])["reauth"].result(15)
    before, expired = logins(secure, "SCRAM-SHA-512"), expiries(secure)
    producer = Producer({**secure.admin(), "enable.idempotence": True, "linger.ms": 5})
    failures: list[object] = []
    delivered = 0

    def done(err: object, _msg: object) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1
        else:
            failures.append(err)

    sent = 0
    deadline = time.monotonic() + 4 * LIFETIME_MS / 1000
    while time.monotonic() < deadline:
        producer.produce("reauth", f"r{sent}".encode(), on_delivery=done)
        sent += 1
        producer.poll(0.02)
    assert producer.flush(15) == 0
    assert failures == []
    assert delivered == sent
    # Its connections logged in again before their sessions ended, and none was closed for expiry.
    assert logins(secure, "SCRAM-SHA-512") - before >= 4
    assert expiries(secure) == expired


def test_a_session_that_is_not_renewed_ends_at_its_next_request(secure: SecureBroker) -> None:
    host, port = secure.address("SASL_PLAINTEXT").split(":")
    conn = KafkaConnection(host, int(port))
    answer = sasl_login(conn, "SCRAM-SHA-256", ADMIN, ADMIN_PASSWORD)
    assert answer.error_code == ErrorCode.none
    assert answer.session_lifetime.total_seconds() * 1000 == pytest.approx(LIFETIME_MS, abs=1)
    assert conn.request(
        MetadataRequest(topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    ).brokers
    time.sleep(LIFETIME_MS / 1000 + 0.3)
    conn.send(MetadataRequest(topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    assert conn.wait_closed() == b""
    conn.close()
    assert expiries(secure) == 1


def test_a_reauthentication_renews_with_the_same_mechanism_and_may_not_switch(secure: SecureBroker) -> None:
    host, port = secure.address("SASL_PLAINTEXT").split(":")
    with KafkaConnection(host, int(port)) as conn:
        assert sasl_login(conn, "SCRAM-SHA-256", ADMIN, ADMIN_PASSWORD).error_code == ErrorCode.none
        renewed = sasl_login(conn, "SCRAM-SHA-256", ADMIN, ADMIN_PASSWORD)
        assert renewed.error_code == ErrorCode.none
        assert renewed.session_lifetime.total_seconds() > 0
    with KafkaConnection(host, int(port)) as conn:
        assert sasl_login(conn, "SCRAM-SHA-256", ADMIN, ADMIN_PASSWORD).error_code == ErrorCode.none
        handshake = conn.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
        assert handshake.error_code == ErrorCode.illegal_sasl_state  # then closed, as Kafka does
        assert conn.wait_closed() == b""
