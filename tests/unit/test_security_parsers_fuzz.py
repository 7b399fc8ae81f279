"""Property tests of everything security parses from a caller: SASL PLAIN and SCRAM messages
(arbitrary bytes and mutations of valid ones), HTTP basic and bearer headers, session cookies,
and the users and API-key files.  Each either accepts or refuses with its own error type,
never another exception, and a mutated proof never authenticates."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.security.scram import (
    AuthenticationFailed,
    ScramClient,
    ScramServer,
    make_credential,
    parse_plain,
)
from kit.api_keys import ApiKeys, ApiKeysError, key_line
from kit.users import Users, UsersFileError, hash_password, parse_basic
from registry.auth import required_role
from services.dashboard.login import Sessions
from tests.support.examples import examples

MECHANISM = "SCRAM-SHA-256"
CREDENTIAL = make_credential(MECHANISM, "right", 4096)
FAST = settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def lookup(name: str):  # type: ignore[no-untyped-def]
    return CREDENTIAL if name == "alice" else None


@FAST
@given(st.binary(max_size=600))
def test_plain_messages_parse_or_fail_cleanly(message: bytes) -> None:
    try:
        user, password = parse_plain(message)
    except AuthenticationFailed:
        return
    assert user
    assert password


@FAST
@given(st.binary(max_size=600))
def test_scram_client_first_messages_parse_or_fail_cleanly(message: bytes) -> None:
    server = ScramServer(MECHANISM, lookup, b"k" * 32)
    try:
        reply = server.first(message)
    except AuthenticationFailed:
        return
    assert reply.startswith(b"r=")


@FAST
@given(st.binary(max_size=400), st.integers(min_value=0, max_value=400))
def test_a_mutated_client_final_message_never_authenticates(noise: bytes, at: int) -> None:
    server = ScramServer(MECHANISM, lookup, b"k" * 32)
    client = ScramClient(MECHANISM, "alice", "right")
    final = bytearray(client.final(server.first(client.first())))
    at %= len(final)
    mutated = bytes(final[:at]) + noise + bytes(final[at + len(noise) :])
    if mutated == bytes(final):
        return
    try:
        server.final(mutated)
    except AuthenticationFailed:
        return
    raise AssertionError(f"a mutated client-final message authenticated: {mutated!r}")


@FAST
@given(st.text(max_size=300))
def test_basic_headers_parse_or_are_refused(header: str) -> None:
    parsed = parse_basic(header)
    assert parsed is None or len(parsed) == 2
    b64 = "Basic " + base64.b64encode(header.encode()).decode()
    parsed = parse_basic(b64)
    if ":" in header:
        assert parsed == tuple(header.split(":", 1))
    else:
        assert parsed is None


@FAST
@given(st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD"]), st.text(max_size=100))
def test_every_request_needs_a_known_role(method: str, path: str) -> None:
    assert required_role(method, path) in ("read", "write", "admin")


@FAST
@given(st.text(max_size=2000))
def test_users_files_load_or_are_refused_by_line(text: str) -> None:
    try:
        users = Users.parse(text)
    except UsersFileError as e:
        refused = str(e)
    else:
        assert asyncio.run(users.authenticate("nobody-\x00", "x")) is None
        return
    assert refused.startswith("line ")


def test_a_users_file_authenticates_only_the_right_password() -> None:
    users = Users.parse(f"ops: {hash_password('pw', iterations=1000)},admin\nplain: secret,read,write\n")
    assert asyncio.run(users.authenticate("ops", "pw")) == "admin"
    assert asyncio.run(users.authenticate("ops", "pw ")) is None
    assert asyncio.run(users.authenticate("plain", "secret")) == "write"
    assert asyncio.run(users.authenticate("nobody", "pw")) is None


@FAST
@given(st.text(max_size=2000))
def test_api_key_files_load_or_are_refused_by_line(text: str) -> None:
    try:
        keys = ApiKeys.parse(text)
    except ApiKeysError:
        return
    assert keys.caller("Bearer not-a-key") is None


@FAST
@given(st.text(max_size=700))
def test_authorization_headers_name_a_caller_only_with_its_key(header: str) -> None:
    keys = ApiKeys.parse(key_line("svc", "the-key") + "\n")
    caller = keys.caller(header)
    assert caller in (None, "svc")
    if caller == "svc":
        assert header.strip().lower().startswith("bearer ")
        assert header.strip().endswith("the-key")
    assert keys.caller("Bearer the-key") == "svc"
    assert keys.caller(f"Bearer the-key{header}") is None or header.strip() == ""


@FAST
@given(st.text(max_size=1200))
def test_session_cookies_are_valid_only_when_signed(token: str) -> None:
    sessions = Sessions(b"s" * 32, 3600)
    assert sessions.user(token) is None
    assert sessions.user(sessions.issue(token[:100] or "u")) == (token[:100] or "u")


def test_users_and_key_files_that_cannot_be_used_are_refused_naming_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    large = tmp_path / "large"
    large.write_bytes(b"#" * (1024 * 1024 + 1))
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe: x,read\n")
    for path, problem in ((missing, "cannot read"), (large, "larger than"), (binary, "not UTF-8")):
        with pytest.raises(UsersFileError, match=problem):
            Users.load(path)
        with pytest.raises(ApiKeysError, match=problem):
            ApiKeys.load(path)
