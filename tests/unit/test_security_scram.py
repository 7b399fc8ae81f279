"""SCRAM and PLAIN as the broker speaks them: RFC 7677's worked example byte for byte, and
every way a client-final message can be wrong."""

from __future__ import annotations

import base64

import pytest

from broker.security.scram import (
    MAX_MESSAGE,
    AuthenticationFailed,
    ScramClient,
    ScramServer,
    check_password,
    make_credential,
    parse_plain,
)

SECRET = b"k" * 32


def _server(mechanism: str, users: dict[str, str], nonce: str | None = None) -> ScramServer:
    creds = {u: make_credential(mechanism, p) for u, p in users.items()}
    return ScramServer(mechanism, creds.get, SECRET, nonce)


def test_rfc7677_example_exchange() -> None:
    """SCRAM-SHA-256 with RFC 7677's user, password, salt, nonces: the server's messages and
    signature are the RFC's."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cred = make_credential("SCRAM-SHA-256", "pencil", 4096, salt)
    server = ScramServer("SCRAM-SHA-256", {"user": cred}.get, SECRET, "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first = server.first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = server.final(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.user == "user"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_client_and_server_agree(mechanism: str) -> None:
    server = _server(mechanism, {"alice": "s3cret"})
    client = ScramClient(mechanism, "alice", "s3cret")
    final = server.final(client.final(server.first(client.first())))
    assert client.verify(final)


def _fails(server: ScramServer, client_final: bytes) -> str:
    with pytest.raises(AuthenticationFailed) as e:
        server.final(client_final)
    return str(e.value)


def test_wrong_password_fails_at_the_proof() -> None:
    server = _server("SCRAM-SHA-512", {"alice": "right"})
    client = ScramClient("SCRAM-SHA-512", "alice", "wrong")
    assert "invalid credentials" in _fails(server, client.final(server.first(client.first())))


def test_unknown_user_gets_a_stable_made_up_salt_and_fails_at_the_proof() -> None:
    """The exchange does not reveal which users exist: the same unknown name always gets
    the same salt, and the failure comes only at the proof, worded as a bad password."""
    salts = set()
    for _ in range(2):
        server = _server("SCRAM-SHA-256", {})
        client = ScramClient("SCRAM-SHA-256", "mallory", "x")
        server_first = server.first(client.first())
        salts.add(server_first.split(b",s=")[1])
        assert "invalid credentials" in _fails(server, client.final(server_first))
    assert len(salts) == 1


def _salt(server: ScramServer, user: str) -> bytes:
    fields = dict(f.split(b"=", 1) for f in server.first(ScramClient(server.mechanism, user, "x").first()).split(b","))
    return base64.b64decode(fields[b"s"])


def test_an_unknown_users_salt_differs_between_mechanisms() -> None:
    """A real user's SCRAM-SHA-256 and SCRAM-SHA-512 credentials have salts of their own; an
    unknown name's made-up ones must differ too, or asking under both would tell it apart."""
    assert _salt(_server("SCRAM-SHA-256", {}), "mallory") != _salt(_server("SCRAM-SHA-512", {}), "mallory")


def test_a_made_up_salt_longer_than_one_digest_does_not_repeat() -> None:
    """A 128-byte made-up salt is not one 64-byte block twice (a real random salt never is)."""
    server = ScramServer("SCRAM-SHA-512", lambda _: None, SECRET, decoy=(4096, 128))
    salt = _salt(server, "mallory")
    assert len(salt) == 128
    assert salt[:64] != salt[64:]


def test_another_secret_makes_up_other_salts() -> None:
    """The made-up salt is keyed by the broker's secret alone: another secret, another salt."""
    other = ScramServer("SCRAM-SHA-256", lambda _: None, b"o" * 32)
    assert _salt(_server("SCRAM-SHA-256", {}), "mallory") != _salt(other, "mallory")


def test_replayed_client_final_fails_on_a_new_exchange() -> None:
    """A captured client-final names the old server nonce: a new exchange refuses it."""
    users = {"alice": "pw"}
    creds = {u: make_credential("SCRAM-SHA-256", p) for u, p in users.items()}
    first_server = ScramServer("SCRAM-SHA-256", creds.get, SECRET)
    client = ScramClient("SCRAM-SHA-256", "alice", "pw")
    captured_first = client.first()
    captured_final = client.final(first_server.first(captured_first))
    first_server.final(captured_final)
    replay = ScramServer("SCRAM-SHA-256", creds.get, SECRET)
    replay.first(captured_first)
    assert "nonce" in _fails(replay, captured_final)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda m: m.replace(b"c=biws", b"c=eSws"),  # channel binding header changed
        lambda m: m.replace(b",p=", b",x=1,p="),  # an attribute after the nonce is fine, proof then wrong
        lambda m: m[: m.index(b",p=")] + b",p=!!!!",  # proof not base64
        lambda m: m[: m.index(b",p=")] + b",p=" + base64.b64encode(b"short"),  # proof of the wrong length
        lambda m: m[: m.index(b",p=")],  # no proof
        lambda m: b"\xff\xfe" + m,  # not UTF-8
        lambda m: m + b"," * MAX_MESSAGE,  # too long
        lambda m: b"garbage",
    ],
)
def test_malformed_client_final_is_refused(mutate: object) -> None:
    server = _server("SCRAM-SHA-256", {"alice": "pw"})
    client = ScramClient("SCRAM-SHA-256", "alice", "pw")
    final = client.final(server.first(client.first()))
    with pytest.raises(AuthenticationFailed):
        server.final(mutate(final))  # type: ignore[operator]


@pytest.mark.parametrize(
    "first",
    [
        b"y,,n=alice,r=abc",  # channel binding requested
        b"p=tls-unique,,n=alice,r=abc",
        b"n,,r=abc",  # no user
        b"n,,n=alice",  # no nonce
        b"n,,n=alice,r=",
        b"n,,n=,r=abc",
        b"n,,n=al=ice,r=abc",  # bad escape
        b"n,a=bob,n=alice,r=abc",  # authzid differs
        b"n,,m=ext,n=alice,r=abc",
        b"n,,n=alice,n=alice,r=abc",  # attribute twice
        b"",
        b"\x00" * 10,
    ],
)
def test_malformed_client_first_is_refused(first: bytes) -> None:
    with pytest.raises(AuthenticationFailed):
        _server("SCRAM-SHA-256", {"alice": "pw"}).first(first)


def test_escaped_user_names() -> None:
    server = _server("SCRAM-SHA-256", {"a,b=c": "pw"})
    client = ScramClient("SCRAM-SHA-256", "a,b=c", "pw")
    assert client.verify(server.final(client.final(server.first(client.first()))))
    assert server.user == "a,b=c"


def test_plain_messages() -> None:
    assert parse_plain(b"\x00alice\x00pw") == ("alice", "pw")
    assert parse_plain(b"alice\x00alice\x00pw") == ("alice", "pw")
    for bad in (
        b"alice\x00pw",
        b"bob\x00alice\x00pw",
        b"\x00\x00pw",
        b"\x00alice\x00",
        b"\xff\x00a\x00b",
        b"a\x00b\x00c\x00d",
    ):
        with pytest.raises(AuthenticationFailed):
            parse_plain(bad)


def test_plain_passwords_check_against_scram_credentials() -> None:
    cred = make_credential("SCRAM-SHA-512", "pw", 4096)
    assert check_password("SCRAM-SHA-512", cred, "pw")
    assert not check_password("SCRAM-SHA-512", cred, "pw ")
