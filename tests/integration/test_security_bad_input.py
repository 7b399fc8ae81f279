"""Hostile bytes on the secured listeners: malformed SASL frames, wrong SCRAM proofs,
replayed nonces, requests before authentication, TLS garbage and half-open handshakes.
Each closes that one connection cleanly, is counted in a metric, and the broker goes on
serving everyone else."""

from __future__ import annotations

import base64
import contextlib
import logging
import socket
import ssl
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from broker.protocol.errors import ErrorCode
from broker.security.scram import ScramClient
from streamshop.pki import LocalCA
from tests.support.harness import ThreadBroker
from tests.support.kafka_wire import ConnectionClosed, KafkaConnection
from tests.support.secure import (
    ADMIN,
    ADMIN_PASSWORD,
    SecureBroker,
    make_admin_user,
    sasl_login,
    secure_settings,
    tls_connection,
)


@pytest.fixture
def secure(tmp_path: Path, broker_factory: Callable[..., ThreadBroker]) -> SecureBroker:
    return _secure(tmp_path, broker_factory)


def _secure(tmp_path: Path, broker_factory: Callable[..., ThreadBroker], **extra: str) -> SecureBroker:
    ca = LocalCA(tmp_path / "pki")
    server = ca.issue("broker", hosts=("127.0.0.1",))
    make_admin_user(tmp_path / "broker")
    settings = secure_settings(
        ca,
        server,
        **{
            "authentication.timeout.ms": "500",
            "sasl.server.max.receive.size": "1024",
            "connection.failed.authentication.delay.ms": "0",
            **extra,
        },
    )
    return SecureBroker(broker_factory(settings=settings, name="broker"), ca, tmp_path)


def metric(secure: SecureBroker, name: str, **labels: str) -> float:
    return float(secure.broker.broker.metrics.registry.get_sample_value(name, labels) or 0)


def raw(secure: SecureBroker, listener: str = "SASL_PLAINTEXT") -> KafkaConnection:
    host, port = secure.address(listener).split(":")
    return KafkaConnection(host, int(port))


def still_serves(secure: SecureBroker) -> None:
    admin = AdminClient(secure.admin())
    assert admin.list_topics(timeout=10).brokers


def authenticate_fails(conn: KafkaConnection, token: bytes) -> None:
    response = conn.request(SaslAuthenticateRequest(auth_bytes=token))
    assert response.error_code == ErrorCode.sasl_authentication_failed
    assert conn.wait_closed() == b""


def test_a_request_before_authentication_closes_the_connection(secure: SecureBroker) -> None:
    before = metric(
        secure,
        "streamshop_connections_closed_authentication_total",
        reason="request before SASL authentication completed",
    )
    with raw(secure) as conn:
        conn.send(
            MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        )
        assert conn.wait_closed() == b""
    assert (
        metric(
            secure,
            "streamshop_connections_closed_authentication_total",
            reason="request before SASL authentication completed",
        )
        == before + 1
    )
    still_serves(secure)


def test_sasl_state_errors(secure: SecureBroker) -> None:
    with raw(secure) as conn:  # SaslAuthenticate before SaslHandshake
        response = conn.request(SaslAuthenticateRequest(auth_bytes=b"x"))
        assert response.error_code == ErrorCode.illegal_sasl_state
        assert conn.wait_closed() == b""
    with raw(secure) as conn:  # a mechanism the broker does not offer
        response = conn.request(SaslHandshakeRequest(mechanism="GSSAPI"))
        assert response.error_code == ErrorCode.unsupported_sasl_mechanism
        assert set(response.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
        assert conn.wait_closed() == b""
    with raw(secure) as conn:  # a second handshake while one is open
        assert conn.request(SaslHandshakeRequest(mechanism="PLAIN")).error_code == ErrorCode.none
        assert conn.request(SaslHandshakeRequest(mechanism="PLAIN")).error_code == ErrorCode.illegal_sasl_state
        assert conn.wait_closed() == b""
    with raw(secure, "PLAINTEXT") as conn:  # SASL on a listener without it
        assert conn.request(SaslHandshakeRequest(mechanism="PLAIN")).error_code == ErrorCode.illegal_sasl_state
    still_serves(secure)


@pytest.mark.parametrize(
    "token",
    [
        b"",
        b"\x00",
        b"garbage",
        b"n,,n=admin",  # no nonce
        b"y,,n=admin,r=abc",  # channel binding
        b"\xff" * 100,
        b"n,,n=admin,r=" + b"a" * 2000,  # over sasl.server.max.receive.size
    ],
)
def test_malformed_scram_first_messages(secure: SecureBroker, token: bytes) -> None:
    before = metric(secure, "streamshop_authentications_total", mechanism="SCRAM-SHA-256", result="failed")
    before += metric(secure, "streamshop_authentications_total", mechanism="SCRAM-SHA-256", result="malformed")
    with raw(secure) as conn:
        assert conn.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-256")).error_code == ErrorCode.none
        authenticate_fails(conn, token)
    after = metric(secure, "streamshop_authentications_total", mechanism="SCRAM-SHA-256", result="failed")
    after += metric(secure, "streamshop_authentications_total", mechanism="SCRAM-SHA-256", result="malformed")
    assert after == before + 1


@pytest.mark.parametrize("token", [b"", b"admin", b"\x00admin", b"a\x00b\x00c\x00d", b"\x00admin\x00wrong"])
def test_malformed_and_wrong_plain_messages(secure: SecureBroker, token: bytes) -> None:
    with raw(secure) as conn:
        assert conn.request(SaslHandshakeRequest(mechanism="PLAIN")).error_code == ErrorCode.none
        authenticate_fails(conn, token)


def test_a_wrong_scram_proof_and_a_replayed_nonce_fail(secure: SecureBroker) -> None:
    client = ScramClient("SCRAM-SHA-512", ADMIN, ADMIN_PASSWORD)
    with raw(secure) as conn:
        assert conn.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-512")).error_code == ErrorCode.none
        first = client.first()
        server_first = conn.request(SaslAuthenticateRequest(auth_bytes=first)).auth_bytes
        final = client.final(server_first)
        response = conn.request(SaslAuthenticateRequest(auth_bytes=final))
        assert response.error_code == ErrorCode.none
        assert client.verify(response.auth_bytes)
    # the captured exchange, replayed on a new connection: the server nonce differs
    with raw(secure) as conn:
        assert conn.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-512")).error_code == ErrorCode.none
        assert conn.request(SaslAuthenticateRequest(auth_bytes=first)).error_code == ErrorCode.none
        authenticate_fails(conn, final)
    # a proof made with the wrong password
    wrong = ScramClient("SCRAM-SHA-512", ADMIN, "not it")
    with raw(secure) as conn:
        assert conn.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-512")).error_code == ErrorCode.none
        server_first = conn.request(SaslAuthenticateRequest(auth_bytes=wrong.first())).auth_bytes
        authenticate_fails(conn, wrong.final(server_first))
    still_serves(secure)


def _tls_failures(secure: SecureBroker) -> float:
    samples = secure.broker.broker.metrics.registry.collect()
    return sum(
        s.value
        for family in samples
        if family.name == "streamshop_tls_handshake_failures"
        for s in family.samples
        if s.name.endswith("_total")
    )


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x00\x00\x00\x10" + b"\x00" * 16,  # a Kafka frame where a ClientHello belongs
        b"GET / HTTP/1.1\r\n\r\n",
        b"\x16\x03\x01\x00\x05\x01\x00\x00\x01\x00",  # a truncated, malformed ClientHello
        b"\x16\x03\x03" + b"\xff" * 300,
    ],
)
def test_tls_garbage_closes_the_connection_and_is_counted(secure: SecureBroker, garbage: bytes) -> None:
    before = _tls_failures(secure)
    host, port = secure.address("SASL_SSL").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(garbage)
        sock.settimeout(5)
        received = b""
        while True:
            try:
                chunk = sock.recv(4096)
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
        assert not received.startswith(b"\x00\x00")  # never a Kafka response; at most a TLS alert
    deadline = time.monotonic() + 5
    while _tls_failures(secure) < before + 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _tls_failures(secure) == before + 1
    still_serves(secure)


@pytest.mark.parametrize("sent", [b"", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"])
def test_a_half_open_tls_handshake_is_closed_after_the_authentication_timeout(
    secure: SecureBroker, sent: bytes
) -> None:
    before = metric(secure, "streamshop_tls_handshake_failures_total", reason="timeout")
    host, port = secure.address("SSL").split(":")
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(sent)
        assert sock.recv(10) == b""  # closed by the broker
    waited = time.monotonic() - started
    assert 0.4 < waited < 5
    assert metric(secure, "streamshop_tls_handshake_failures_total", reason="timeout") == before + 1


def test_a_sasl_connection_that_never_authenticates_is_closed(secure: SecureBroker) -> None:
    with tls_connection(secure) as conn:
        assert conn.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-256")).error_code == ErrorCode.none
        started = time.monotonic()
        assert conn.wait_closed() == b""
        assert time.monotonic() - started < 5
    reason = "authentication did not finish within authentication.timeout.ms"
    assert metric(secure, "streamshop_connections_closed_authentication_total", reason=reason) >= 1


def test_a_client_that_does_not_trust_the_broker_fails_its_handshake(secure: SecureBroker) -> None:
    host, port = secure.address("SASL_SSL").split(":")
    with (
        socket.create_connection((host, int(port)), timeout=5) as sock,
        pytest.raises(ssl.SSLCertVerificationError),
    ):
        ssl.create_default_context().wrap_socket(sock, server_hostname=host)
    still_serves(secure)


def test_a_corrupt_user_or_acl_record_is_skipped_at_start(tmp_path: Path) -> None:
    """A record of the security store that does not decode is skipped and counted; the
    broker starts and the other users and ACLs are intact."""
    ca = LocalCA(tmp_path / "pki")
    server = ca.issue("broker", hosts=("127.0.0.1",))
    make_admin_user(tmp_path / "b")
    settings = secure_settings(ca, server)
    broker = ThreadBroker(tmp_path / "b", settings).start()
    meta = broker.broker.store
    broker.call(
        lambda: meta.write_records(
            [
                (["scram", "eve", "SCRAM-SHA-256"], {"salt": "not bytes"}),
                (["acl", [2, "t", 3, "User:x", "*", 99, 3]], 1),  # operation 99
                (["acl", "not a list"], 1),
                (["scram", "", "SCRAM-SHA-256"], None),
            ]
        )
    )
    broker.stop()
    broker.start()
    try:
        assert broker.broker.store.skipped.counts["__cluster_metadata"] == 4
        assert set(broker.broker.security.store.users) == {ADMIN}
        secure = SecureBroker(broker, ca, tmp_path)
        still_serves(secure)
    finally:
        broker.close()


def _server_first(secure: SecureBroker, mechanism: str, user: str) -> tuple[str, bytes]:
    """(iterations, salt) of the broker's answer to a SCRAM client-first for `user`."""
    with raw(secure) as conn:
        assert conn.request(SaslHandshakeRequest(mechanism=mechanism)).error_code == ErrorCode.none
        reply = conn.request(SaslAuthenticateRequest(auth_bytes=ScramClient(mechanism, user, "x").first()))
        assert reply.error_code == ErrorCode.none
    fields = dict(part.split("=", 1) for part in reply.auth_bytes.decode().split(","))
    return fields["i"], base64.b64decode(fields["s"])


def test_an_unknown_user_is_answered_as_most_real_users_are(secure: SecureBroker) -> None:
    """Iterations and salt length as most users' (admin has 4,096 iterations, two more users
    8,192), and the same made-up salt each time (a fresh one per attempt would give it away)."""
    admin = AdminClient(secure.admin())
    for user in ("alice", "bob"):
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
            upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, 8192), b"their-secret")
            for future in admin.alter_user_scram_credentials([upsert]).values():
                future.result(15)
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        iterations, salt = _server_first(secure, mechanism, "alice")
        unknown_iterations, unknown_salt = _server_first(secure, mechanism, "nobody")
        assert iterations == unknown_iterations == "8192"
        assert len(unknown_salt) == len(salt)  # the salt length the clients chose (64 bytes here)
        assert _server_first(secure, mechanism, "nobody")[1] == unknown_salt


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_password_guessing_is_logged_and_slowed_down_then_refused_unchecked(
    secure: SecureBroker, mechanism: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Three wrong passwords cost the usual 100 ms each; the fourth opens a 0.5 s window (doubling
    with each further failure) and is answered when it ends, and an attempt inside it, on another
    connection, is refused unchecked, even with the right password; after it the right password
    works.  Each checked failure is logged with the client's address and principal, as Kafka
    logs them."""
    caplog.set_level(logging.INFO)

    def attempt(password: str) -> tuple[ErrorCode, str | None, float]:
        with raw(secure) as conn:
            began = time.monotonic()
            answer = sasl_login(conn, mechanism, ADMIN, password)
            return answer.error_code, answer.error_message, time.monotonic() - began

    for _ in range(3):
        code, _, took = attempt("wrong")
        assert code == ErrorCode.sasl_authentication_failed
        assert took < 0.45
    with ThreadPoolExecutor(1) as pool:
        fourth = pool.submit(attempt, "wrong")
        deadline = time.monotonic() + 5
        while len([r for r in caplog.records if "failed authentication" in r.getMessage()]) < 4:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        code, message, _ = attempt(ADMIN_PASSWORD)  # inside the fourth's window
        assert code == ErrorCode.sasl_authentication_failed
        assert "too many failed attempts" in (message or "")
        code, _, took = fourth.result()
        assert code == ErrorCode.sasl_authentication_failed
        assert took >= 0.45  # answered when its window ended
    time.sleep(0.6)
    assert attempt(ADMIN_PASSWORD)[0] == ErrorCode.none
    failed = [r for r in caplog.records if "failed authentication" in r.getMessage()]
    assert len(failed) == 4
    assert "127.0.0.1" in failed[0].getMessage()
    assert f"User:{ADMIN}" in failed[0].getMessage()
    assert metric(secure, "streamshop_authentications_total", mechanism=mechanism, result="throttled") == 1


def test_a_plain_guessing_flood_does_not_stall_other_clients(
    tmp_path: Path, broker_factory: Callable[..., ThreadBroker]
) -> None:
    """PLAIN hashes each password (PBKDF2) off the event loop: 32 connections guessing as
    fast as they can (the throttle off, as against a guesser with many addresses) leave another
    client's ApiVersions answered about as fast as before."""
    secure = _secure(tmp_path, broker_factory, **{"authentication.failure.throttle.max.ms": "0"})
    host, port = secure.address("PLAINTEXT").split(":")
    admin = AdminClient(secure.admin())
    upsert = UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 16384), b"pw")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(15)

    def answers_ms(probe: KafkaConnection, count: int = 60) -> list[float]:
        took = []
        for _ in range(count):
            began = time.perf_counter()
            probe.api_versions()
            took.append((time.perf_counter() - began) * 1000)
            time.sleep(0.005)
        return took

    stop = threading.Event()
    guesses = [0] * 32

    def guesser(n: int) -> None:
        while not stop.is_set():
            # A guess still queued for hashing when authentication.timeout.ms (500 ms here) runs
            # out is closed unanswered: part of the flood too.
            with raw(secure) as conn, contextlib.suppress(ConnectionClosed):
                answer = sasl_login(conn, "PLAIN", "carol", f"guess-{n}")
                assert answer.error_code == ErrorCode.sasl_authentication_failed
            guesses[n] += 1

    with KafkaConnection(host, int(port)) as probe:
        quiet = statistics.median(answers_ms(probe))
        with ThreadPoolExecutor(32) as pool:
            running = [pool.submit(guesser, n) for n in range(32)]
            try:
                # Measured while the flood makes progress, however fast this machine lets it:
                # probes go on until the guessers have made 50 guesses since they began.
                deadline = time.monotonic() + 120
                while sum(guesses) < 8 and time.monotonic() < deadline:
                    time.sleep(0.01)
                before = sum(guesses)
                samples = answers_ms(probe)
                while sum(guesses) - before < 50 and time.monotonic() < deadline:
                    samples += answers_ms(probe, 20)
                during = sum(guesses) - before
                flooded = statistics.median(samples)
            finally:
                stop.set()
            for each in running:
                each.result()
    assert during >= 50, during  # the flood ran while the probe measured
    # Here: 0.3 -> 0.4 ms; with the hashing on the event loop, 0.3 -> 5.8 ms.
    assert flooded < max(3.0, 5 * quiet), (quiet, flooded)


def test_concurrent_guesses_are_checked_one_at_a_time_and_stop_at_the_window(secure: SecureBroker) -> None:
    """Eight wrong PLAIN passwords sent at once: checked one after the other, so the fourth
    failure closes the name before the rest are checked (queued together they would all have
    been checked)."""

    def attempt(n: int) -> int:
        with raw(secure) as conn:
            return int(sasl_login(conn, "PLAIN", ADMIN, f"at-once-{n}").error_code)

    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(attempt, range(8)))
    assert set(codes) == {ErrorCode.sasl_authentication_failed}
    checked = metric(secure, "streamshop_authentications_total", mechanism="PLAIN", result="failed")
    refused = metric(secure, "streamshop_authentications_total", mechanism="PLAIN", result="throttled")
    assert checked + refused == 8
    assert checked <= 5  # three free, the fourth opens a 0.5 s window (a fifth if one came late)
