"""What a SCRAM exchange tells about a user name, over real connections: an unknown name's
made-up salt differs per mechanism as a real user's does, comes from the broker's own secret
(not from its data directory's path), and has the shape of most real credentials."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path

from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialUpsertion,
)
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from broker.protocol.errors import ErrorCode
from broker.security.scram import ScramClient
from streamshop.pki import LocalCA
from tests.support.harness import ThreadBroker
from tests.support.kafka_wire import KafkaConnection
from tests.support.secure import ADMIN, SecureBroker, make_admin_user, secure_settings

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def _start(tmp_path: Path, ca: LocalCA) -> SecureBroker:
    server = ca.issue("broker", hosts=("127.0.0.1",))
    data_dir = tmp_path / "broker"
    if not data_dir.exists():
        make_admin_user(data_dir)
    return SecureBroker(ThreadBroker(data_dir, secure_settings(ca, server)).start(), ca, tmp_path)


def _server_first(secure: SecureBroker, mechanism: str, user: str) -> tuple[int, bytes]:
    """(iterations, salt) of the broker's answer to a SCRAM client-first for `user`."""
    host, port = secure.address("SASL_PLAINTEXT").split(":")
    with KafkaConnection(host, int(port)) as conn:
        assert conn.request(SaslHandshakeRequest(mechanism=mechanism)).error_code == ErrorCode.none
        reply = conn.request(SaslAuthenticateRequest(auth_bytes=ScramClient(mechanism, user, "x").first()))
        assert reply.error_code == ErrorCode.none
    fields = dict(part.split("=", 1) for part in reply.auth_bytes.decode().split(","))
    return int(fields["i"]), base64.b64decode(fields["s"])


def test_an_unknown_names_salt_differs_between_mechanisms_as_a_real_users_does(tmp_path: Path) -> None:
    secure = _start(tmp_path, LocalCA(tmp_path / "pki"))
    try:
        assert _server_first(secure, MECHANISMS[0], ADMIN)[1] != _server_first(secure, MECHANISMS[1], ADMIN)[1]
        assert _server_first(secure, MECHANISMS[0], "nobody")[1] != _server_first(secure, MECHANISMS[1], "nobody")[1]
    finally:
        secure.broker.close()


def test_a_broker_made_anew_at_the_same_path_makes_up_other_salts(tmp_path: Path) -> None:
    """The made-up salts come from a secret of the broker's own, kept across its restarts: a
    second broker whose data directory has the same path (a container's volume) answers an
    unknown name with other salts, so knowing the path computes nothing."""
    ca = LocalCA(tmp_path / "pki")
    first = _start(tmp_path, ca)
    try:
        before = {m: _server_first(first, m, "nobody")[1] for m in MECHANISMS}
        first.broker.stop()
        first.broker.start()
        assert {m: _server_first(first, m, "nobody")[1] for m in MECHANISMS} == before  # restarted: the same
    finally:
        first.broker.close()
    shutil.rmtree(tmp_path / "broker")
    second = _start(tmp_path, ca)
    try:
        for mechanism in MECHANISMS:
            assert _server_first(second, mechanism, "nobody")[1] != before[mechanism]
    finally:
        second.broker.close()


def test_an_unknown_name_has_the_shape_of_most_credentials_not_the_admins(tmp_path: Path) -> None:
    """The admin at 8,192 iterations with a 32-byte salt, two users at 4,096 with the 64-byte
    salts confluent-kafka makes: an unknown name is answered as the users are."""
    secure = _start(tmp_path, LocalCA(tmp_path / "pki"))
    try:
        admin = AdminClient(secure.admin())
        for kind in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
            upserts: list[UserScramCredentialAlteration] = [
                UserScramCredentialUpsertion(user, ScramCredentialInfo(kind, iterations), password)
                for user, iterations, password in (
                    (ADMIN, 8192, b"admin-secret"),
                    ("alice", 4096, b"a"),
                    ("bob", 4096, b"b"),
                )
            ]
            for future in admin.alter_user_scram_credentials(upserts).values():
                future.result(15)
        for mechanism in MECHANISMS:
            assert _server_first(secure, mechanism, ADMIN)[0] == 8192
            iterations, salt = _server_first(secure, mechanism, "alice")
            unknown_iterations, unknown_salt = _server_first(secure, mechanism, "nobody")
            assert iterations == unknown_iterations == 4096
            assert len(unknown_salt) == len(salt) != 32
    finally:
        secure.broker.close()
