"""The otp service on a real HTTP server (127.0.0.1, OS port), a real broker (in a thread), a
real schema registry and a real SQLite file: the HTTP contract, the OtpRequested events the
outbox relay publishes (keyed by user id, code hashed and sealed, never in clear), verification
(one use, attempts, expiry) and the per-user rate limit."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from schemas.client import RegistryClient
from schemas.serde import AvroDeserializer
from services.common.config import ConfigError
from services.otp.app import create_app
from services.otp.config import OtpConfig
from services.otp.domain import code_hash, open_sealed_code
from services.otp.handlers import STORE_KEY
from tests.support.harness import ThreadBroker
from tests.support.kit_processes import CATALOG, consume_all
from tests.support.registry import ThreadRegistry
from tests.support.services import ServedApp, serve_app

SEAL_KEY = secrets.token_bytes(32)
HASH_KEY = "test-hash-key"
BOTH = {"user_id": "user-1", "channels": ["sms", "email"], "phone": "+15550100", "email": "a@example.com"}


class Service(ServedApp):
    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        async with self.session.request(method, self.url + path, json=body) as r:
            return r.status, await r.json()


@pytest.fixture
def config(tmp_path: Path, broker: ThreadBroker, shared_registry: ThreadRegistry) -> OtpConfig:
    return OtpConfig(
        bootstrap_servers=broker.bootstrap,
        registry_url=shared_registry.url,
        database_path=tmp_path / "otp.db",
        relay_poll_interval=0.2,
        log_shipping=False,
        hash_key=HASH_KEY,
        seal_key=base64.b64encode(SEAL_KEY).decode(),
        max_attempts=3,
        rate_limit_max=3,
    )


@asynccontextmanager
async def serve(config: OtpConfig) -> AsyncIterator[Service]:
    app = create_app(config)
    async with serve_app(app) as (url, session):
        yield Service(url, app, session)


@pytest.fixture
async def service(config: OtpConfig) -> AsyncIterator[Service]:
    async with serve(config) as s:
        yield s


async def events(config: OtpConfig, count: int, within: float = 10) -> list[tuple[str, bytes, dict[str, Any]]]:
    """(key, raw value, decoded value) of the first `count` records of `otp.requests`."""
    records = await consume_all(config.bootstrap_servers, config.topic, count, within, config.topic_partitions)
    async with RegistryClient(config.registry_url) as registry:
        de = AvroDeserializer(registry, reader_schemas=CATALOG.schemas.values())
        out = []
        for r in sorted(records, key=lambda r: (r.partition, r.offset)):
            assert r.key is not None
            assert r.value is not None
            decoded = await de.deserialize(r.value)
            assert decoded.record_name == "io.streamshop.events.otp.OtpRequested"
            value = dict(decoded.value)
            value["request_id"] = str(value["request_id"])  # logicalType uuid decodes to UUID
            out.append((r.key.decode(), r.value, value))
        return out


async def requested_code(service: Service, config: OtpConfig, body: dict[str, Any] = BOTH) -> tuple[str, str]:
    """POST /otp and (request id, code), the code opened from the event as a sender would."""
    status, created = await service.call("POST", "/otp", body)
    assert status == 202, created
    await service.drained()
    for _, _, value in await events(config, 1):
        if value["request_id"] == created["request_id"]:
            return created["request_id"], open_sealed_code(SEAL_KEY, created["request_id"], value["sealed_code"])
    raise AssertionError("no event for the request")


async def test_request_publishes_one_event_keyed_by_user_with_hash_and_sealed_code_never_the_code(
    service: Service, config: OtpConfig
) -> None:
    """POST /otp answers 202 with a request id and expiry; exactly one OtpRequested lands in
    otp.requests, keyed by the user id, decodable through the registry, with both destinations,
    the keyed hash of the code and the code sealed for the senders, and no clear code anywhere."""
    before = datetime.now(UTC)
    status, created = await service.call("POST", "/otp", BOTH)
    assert status == 202, created
    assert set(created) >= {"request_id", "expires_at"}
    assert "code" not in created
    await service.drained()

    got = await events(config, 2, within=2)
    assert len(got) == 1
    key, raw, value = got[0]
    assert key == "user-1"
    assert value["request_id"] == created["request_id"]
    assert value["channels"] == ["sms", "email"]
    assert value["destinations"] == [
        {"channel": "sms", "address": "+15550100"},
        {"channel": "email", "address": "a@example.com"},
    ]
    code = open_sealed_code(SEAL_KEY, created["request_id"], value["sealed_code"])
    assert len(code) == 6
    assert code.isdigit()
    assert value["sealed_code"]["algorithm"] == "AES-256-GCM"
    assert value["sealed_code"]["key_id"] == config.seal_key_id
    assert value["code_hash"] == code_hash(HASH_KEY.encode(), created["request_id"], code)
    assert value["code_hash"].startswith("hmac-sha256:")
    assert code.encode() not in raw
    assert (value["expires_at"] - before).total_seconds() == pytest.approx(config.code_ttl, abs=5)
    assert created["expires_at"].startswith(value["expires_at"].isoformat(timespec="milliseconds")[:19])


async def test_without_seal_key_sealed_code_is_null(config: OtpConfig) -> None:
    """With no OTP_SEAL_KEY the event still carries the hash, and sealed_code is null."""
    async with serve(dataclasses.replace(config, seal_key=None)) as service:
        status, _ = await service.call("POST", "/otp", {"user_id": "u", "channels": ["email"], "email": "b@x.org"})
        assert status == 202
        await service.drained()
    ((_, _, value),) = await events(config, 1)
    assert value["sealed_code"] is None
    assert value["channels"] == ["email"]
    assert value["code_hash"].startswith("hmac-sha256:")


async def test_right_code_verifies_once_then_409(service: Service, config: OtpConfig) -> None:
    """The code the senders receive verifies (200 verified true); a second use is 409."""
    request_id, code = await requested_code(service, config)
    assert await service.call("POST", "/otp/verify", {"request_id": request_id, "code": code}) == (
        200,
        {"verified": True, "request_id": request_id},
    )
    status, err = await service.call("POST", "/otp/verify", {"request_id": request_id, "code": code})
    assert status == 409
    assert err["error"] == "already_verified"


async def test_wrong_codes_count_down_then_lock_even_the_right_code(service: Service, config: OtpConfig) -> None:
    """Each wrong code is a 422 with the attempts remaining; after max_attempts (3) the request is
    locked: even the right code gets 429."""
    request_id, code = await requested_code(service, config)
    wrong = f"{(int(code) + 1) % 1_000_000:06d}"
    for remaining in (2, 1, 0):
        status, err = await service.call("POST", "/otp/verify", {"request_id": request_id, "code": wrong})
        assert status == 422, err
        assert err["error"] == "wrong_code"
        assert err["details"]["attempts_remaining"] == remaining
    status, err = await service.call("POST", "/otp/verify", {"request_id": request_id, "code": code})
    assert status == 429
    assert err["error"] == "too_many_attempts"


async def test_expired_code_is_410(config: OtpConfig) -> None:
    """Past its expiry (a 0.3 s TTL here) even the right code gets 410."""
    short = dataclasses.replace(config, code_ttl=0.3)
    async with serve(short) as service:
        status, created = await service.call("POST", "/otp", BOTH)
        assert status == 202
        await service.drained()
        ((_, _, value),) = await events(short, 1)
        code = open_sealed_code(SEAL_KEY, created["request_id"], value["sealed_code"])
        deadline = time.monotonic() + 5
        while datetime.now(UTC) <= value["expires_at"]:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        status, err = await service.call("POST", "/otp/verify", {"request_id": created["request_id"], "code": code})
        assert status == 410, err
        assert err["error"] == "expired"


async def test_unknown_request_is_404(service: Service) -> None:
    status, err = await service.call("POST", "/otp/verify", {"request_id": "nope", "code": "123456"})
    assert status == 404
    assert err["error"] == "unknown_request"


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({"user_id": "u", "channels": [], "phone": "+15550100"}, {"channels": "must not be empty"}),
        ({"user_id": "u", "channels": ["fax"], "phone": "+15550100"}, {"channels[0]": "must be one of sms, email"}),
        (
            {"user_id": "u", "channels": ["sms", "sms"], "phone": "+15550100"},
            {"channels": "must not contain duplicates"},
        ),
        ({"user_id": "u", "channels": ["sms"]}, {"phone": "is required when channels include sms"}),
        ({"user_id": "u", "channels": ["email"]}, {"email": "is required when channels include email"}),
        (
            {"user_id": "u", "channels": ["sms"], "phone": "5550100"},
            {"phone": "must be an E.164 phone number such as +15550100"},
        ),
        (
            {"user_id": "u", "channels": ["email"], "email": "nope"},
            {"email": "must be an e-mail address such as a@example.com"},
        ),
        (
            {"channels": ["email"], "email": "a@b.co", "extra": 1},
            {"user_id": "is required", "extra": "is not an allowed field"},
        ),
    ],
)
async def test_invalid_request_is_422_naming_each_field(
    service: Service, body: dict[str, Any], fields: dict[str, str]
) -> None:
    status, err = await service.call("POST", "/otp", body)
    assert status == 422
    assert err["error"] == "validation_failed"
    assert err["details"]["fields"] == fields


async def test_invalid_verify_is_422(service: Service) -> None:
    status, err = await service.call("POST", "/otp/verify", {"request_id": "x", "code": "12ab"})
    assert status == 422
    assert err["details"]["fields"] == {"code": "must be 6 digits"}


async def test_rate_limit_per_user_is_429(service: Service) -> None:
    """A user gets rate_limit_max (3) requests per window, then 429 with a retry delay; other users
    are not affected."""
    body = {"user_id": "busy", "channels": ["email"], "email": "c@example.com"}
    for _ in range(3):
        assert (await service.call("POST", "/otp", body))[0] == 202
    async with service.session.post(service.url + "/otp", json=body) as r:
        status, err, retry_after = r.status, await r.json(), r.headers.get("Retry-After")
    assert status == 429
    assert err["error"] == "rate_limited"
    assert err["details"]["retry_after_seconds"] >= 1
    assert retry_after == str(err["details"]["retry_after_seconds"])  # RFC 9110: delay-seconds
    assert (await service.call("POST", "/otp", {**body, "user_id": "calm"}))[0] == 202


async def test_rate_limit_per_destination_stops_bombing_one_number_under_many_user_ids(service: Service) -> None:
    """Twenty users asking codes for one phone number: the first five (the default per-destination
    limit) are sent, the rest refused whoever asks; e-mail addresses count case-insensitively;
    other numbers are not affected."""
    statuses = []
    for i in range(20):
        body = {"user_id": f"bomber-{i}", "channels": ["sms"], "phone": "+15550199"}
        status, answer = await service.call("POST", "/otp", body)
        statuses.append(status)
        if status == 429:
            assert answer["details"]["scope"] == "destination"
            assert "to one phone number or e-mail address" in answer["message"]
    assert statuses == [202] * 5 + [429] * 15
    other = {"user_id": "bomber-x", "channels": ["sms"], "phone": "+15550198"}
    assert (await service.call("POST", "/otp", other))[0] == 202
    # A request naming a limited number is refused as a whole, and records nothing for its e-mail.
    both = {"user_id": "mixed", "channels": ["sms", "email"], "phone": "+15550199", "email": "Victim@Example.com"}
    assert (await service.call("POST", "/otp", both))[0] == 429
    emails = [
        (await service.call("POST", "/otp", {"user_id": f"e{i}", "channels": ["email"], "email": address}))[0]
        for i, address in enumerate(["victim@example.com", "VICTIM@example.com", "victim@EXAMPLE.com"] * 2)
    ]
    assert emails == [202] * 5 + [429]


async def test_rate_limit_per_client_address_with_exempt_networks(config: OtpConfig) -> None:
    """Distinct loopback source addresses are distinct clients: 127.0.0.2 gets four requests (with
    fresh users and numbers each time), then 429; 127.0.0.3 is unaffected; 127.0.0.4, in an exempt
    network, is not limited per client at all."""
    limited = dataclasses.replace(config, rate_limit_client_max=4, rate_limit_client_exempt=("127.0.0.4/32",))
    async with serve(limited) as service:

        async def from_address(source: str, n: int) -> list[int]:
            connector = aiohttp.TCPConnector(local_addr=(source, 0))
            async with aiohttp.ClientSession(connector=connector) as session:
                statuses = []
                for i in range(n):
                    body = {
                        "user_id": f"{source}-{i}",
                        "channels": ["sms"],
                        "phone": f"+1555{secrets.randbelow(10**7):07d}",
                    }
                    async with session.post(service.url + "/otp", json=body) as r:
                        statuses.append(r.status)
                        if r.status == 429:
                            assert (await r.json())["details"]["scope"] == "client"
                            assert int(r.headers["Retry-After"]) >= 1
                return statuses

        assert await from_address("127.0.0.2", 6) == [202] * 4 + [429] * 2
        assert await from_address("127.0.0.3", 1) == [202]
        assert await from_address("127.0.0.4", 6) == [202] * 6


async def test_rate_limit_rows_older_than_the_window_are_deleted(config: OtpConfig) -> None:
    short = dataclasses.replace(config, rate_limit_window=0.5, rate_limit_destination_max=2)
    async with serve(short) as service:
        body = {"user_id": "u", "channels": ["sms", "email"], "phone": "+15550142", "email": "w@example.com"}
        statuses = [(await service.call("POST", "/otp", {**body, "user_id": f"u{i}"}))[0] for i in range(3)]
        assert statuses == [202, 202, 429]
        await asyncio.sleep(0.6)
        assert (await service.call("POST", "/otp", {**body, "user_id": "later"}))[0] == 202  # the window moved on
        store = service.app[STORE_KEY]
        rows = await store.db.fetchall("SELECT scope, subject FROM otp_rate_events ORDER BY scope, subject")
    # Only the last request's rows remain: its two destinations and its client.
    assert [(r["scope"], r["subject"]) for r in rows] == [
        ("client", "127.0.0.1"),
        ("destination", "email:w@example.com"),
        ("destination", "sms:+15550142"),
    ]


def test_bad_rate_limit_settings_are_named() -> None:
    with pytest.raises(ConfigError) as info:
        OtpConfig(rate_limit_client_max=-1, rate_limit_client_exempt=("10.0.0.0/8", "not-a-net")).check()
    assert "OTP_RATE_LIMIT_CLIENT_MAX" in str(info.value)
    assert "'not-a-net' is not an IP network" in str(info.value)
