"""The broker's login throttle over real sockets: SCRAM proofs are checked only while the
user's windows are open, however many exchanges were opened before, and a guesser on one
address does not keep the user's owner, on another, out.  Client addresses are distinct
127.x.y.z sources (Linux routes all of 127/8 to the loopback)."""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from broker.protocol.errors import ErrorCode
from broker.security.scram import ScramClient
from streamshop.pki import LocalCA
from tests.support.harness import ThreadBroker
from tests.support.kafka_wire import ConnectionClosed, KafkaConnection
from tests.support.secure import ADMIN, ADMIN_PASSWORD, SecureBroker, make_admin_user, sasl_login, secure_settings

MECHANISM = "SCRAM-SHA-512"


@pytest.fixture
def secure(tmp_path: Path, broker_factory: Callable[..., ThreadBroker]) -> SecureBroker:
    ca = LocalCA(tmp_path / "pki")
    server = ca.issue("broker", hosts=("127.0.0.1",))
    make_admin_user(tmp_path / "broker")
    # Exchanges opened in advance must live until their proofs are sent.
    settings = secure_settings(ca, server, **{"authentication.timeout.ms": "120000"})
    return SecureBroker(broker_factory(settings=settings, name="broker"), ca, tmp_path)


def logins(secure: SecureBroker, result: str) -> float:
    labels = {"mechanism": MECHANISM, "result": result}
    registry = secure.broker.broker.metrics.registry
    return float(registry.get_sample_value("streamshop_authentications_total", labels) or 0)


def connect(secure: SecureBroker, listener: str, source: str | None = None) -> KafkaConnection:
    host, port = secure.address(listener).split(":")
    conn = KafkaConnection(host, int(port), timeout=120, source=source)
    if listener == "SASL_SSL":
        conn.sock = secure.ssl_context().wrap_socket(conn.sock, server_hostname=host)
    return conn


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_proofs_of_exchanges_opened_in_advance_are_checked_only_while_the_user_is_open(
    secure: SecureBroker, listener: str
) -> None:
    """200 exchanges for admin opened first (each answered its server-first), then every proof
    sent at once: 199 wrong ones and the right one.  Only the proofs arriving while admin's
    windows are open are checked (three free failures, then about one per doubling window);
    the rest are refused unchecked."""
    count = 200
    opened: list[tuple[KafkaConnection, bytes]] = []
    try:
        for n in range(count):
            conn = connect(secure, listener)
            opened.append((conn, b""))
            assert conn.request(SaslHandshakeRequest(mechanism=MECHANISM)).error_code == ErrorCode.none
            password = ADMIN_PASSWORD if n == count - 1 else f"guess-{n}"
            client = ScramClient(MECHANISM, ADMIN, password)
            first = conn.request(SaslAuthenticateRequest(auth_bytes=client.first()))
            assert first.error_code == ErrorCode.none
            opened[-1] = (conn, client.final(first.auth_bytes))
        began = time.monotonic()
        sent = [conn.send(SaslAuthenticateRequest(auth_bytes=final)) for conn, final in opened]
        sending_s = time.monotonic() - began
        answers: list[int] = []
        for (conn, _), correlation in zip(opened, sent, strict=True):
            try:
                answer: SaslAuthenticateResponse = conn.receive(36, 2, correlation)
                answers.append(int(answer.error_code))
            except ConnectionClosed:
                answers.append(-1)
        took_s = time.monotonic() - began
    finally:
        for conn, _ in opened:
            conn.close()
    checked, refused = logins(secure, "failed"), logins(secure, "throttled")
    assert checked + refused + logins(secure, "ok") == count, (checked, refused)
    # Three free failures, then one check per window (0.5 s, doubling) while the proofs came in.
    bound = 3 + 2 + math.ceil(math.log2(1 + min(sending_s, took_s) / 0.5))
    assert checked <= bound, (checked, refused, sending_s)
    assert refused >= count - bound
    assert answers.count(int(ErrorCode.sasl_authentication_failed)) >= count - bound - 1


def test_a_guesser_on_one_address_does_not_keep_the_owner_out_on_another(secure: SecureBroker) -> None:
    """A guesser on 127.0.0.2 tries admin's password without pause (each failure answered when
    its window ends, so it is nearly always inside one); admin's owner on 127.0.0.3 signs in at
    the first try, about as fast as a control sign-in before the guessing (from 127.0.0.4)."""

    def sign_in(source: str, password: str) -> tuple[int, float]:
        with connect(secure, "SASL_PLAINTEXT", source) as conn:
            began = time.monotonic()
            code = int(sasl_login(conn, MECHANISM, ADMIN, password).error_code)
            return code, time.monotonic() - began

    code, control_s = sign_in("127.0.0.4", ADMIN_PASSWORD)
    assert code == ErrorCode.none
    stop = threading.Event()
    guesses = [0]

    def guesser() -> None:
        while not stop.is_set():
            with contextlib.suppress(ConnectionClosed):
                sign_in("127.0.0.2", f"guess-{guesses[0]}")
            guesses[0] += 1

    thread = threading.Thread(target=guesser)
    thread.start()
    try:
        deadline = time.monotonic() + 120
        while logins(secure, "failed") < 5:  # past the free failures: windows open from now on
            assert time.monotonic() < deadline, "the guesser made no progress"
            time.sleep(0.01)
        owner = [sign_in("127.0.0.3", ADMIN_PASSWORD) for _ in range(3)]
    finally:
        stop.set()
        thread.join(timeout=120)
    assert not thread.is_alive()
    assert [code for code, _ in owner] == [ErrorCode.none] * 3, owner
    assert max(took for _, took in owner) < 10 * control_s + 2.0, (owner, control_s)
    assert logins(secure, "ok") == 4  # the control and the owner's three: never the guesser
