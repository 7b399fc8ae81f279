"""The OTP senders end to end, in-process on real parts: a real broker (in a thread), the real
schema registry, the otp service, the sms-sender and email-sender groups (SQLite files, HTTP on
127.0.0.1) and the catcher (SMTP over sockets, the SMS webhook sink).

One request yields exactly one SMS and one mail and an OtpDelivered per channel on
otp.deliveries, carrying the request's trace; the delivered code verifies; a redelivery sends
nothing again, and a sender that lost its database resends copies the provider-side keys
collapse; expired requests and a provider that is down give OtpFailed; poison records go to
otp.requests.dlq without blocking the partition."""

from __future__ import annotations

import argparse
import asyncio
import base64
import dataclasses
import os
import re
import secrets
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition

from kit.ports import free_port
from registry.app import RunningRegistry
from services.common.config import ConfigError
from services.notify.config import EmailSenderConfig, SmsSenderConfig
from services.notify.main import run_sms
from services.otp.app import create_app as create_otp
from services.otp.config import OtpConfig
from services.otp.domain import seal_code
from tests.support.harness import ThreadBroker
from tests.support.kit_processes import CATALOG, kit
from tests.support.notify import (
    Catcher,
    Delivery,
    SenderApp,
    Served,
    decode_deliveries,
    parse_metrics,
    read_topic,
    serve_catcher,
    serve_sender,
    status_server,
    wait_for,
)
from tests.support.registry import ThreadRegistry
from tests.support.services import serve_app

SEAL_KEY = secrets.token_bytes(32)
SEAL_KEY_B64 = base64.b64encode(SEAL_KEY).decode()
BOTH = {"user_id": "user-1", "channels": ["sms", "email"], "phone": "+15550100", "email": "a@example.com"}
CODE = re.compile(r"\b(\d{6})\b")
TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-01$")


@pytest.fixture
def broker(broker_factory: Callable[..., ThreadBroker]) -> ThreadBroker:
    """Short session timeouts allowed, so restarted senders rejoin quickly."""
    return broker_factory(settings={"group.min.session.timeout.ms": "500"})


@dataclasses.dataclass
class Stack:
    """What a test gets: the parts' configs, the catcher and the otp service (senders are started
    by the test, since some tests start them late or twice)."""

    tmp: Path
    broker: ThreadBroker
    registry_url: str
    catcher: Catcher
    otp: Served
    otp_config: OtpConfig

    def sms_config(self, **overrides: Any) -> SmsSenderConfig:
        base: dict[str, Any] = {
            "webhook_url": self.catcher.url + "/sms",
            "database_path": self.tmp / "sms-sender.db",
        }
        return SmsSenderConfig(**self._common(), **{**base, **overrides})

    def email_config(self, **overrides: Any) -> EmailSenderConfig:
        base: dict[str, Any] = {
            "smtp_port": self.catcher.smtp_port,
            "database_path": self.tmp / "email-sender.db",
        }
        return EmailSenderConfig(**self._common(), **{**base, **overrides})

    def _common(self) -> dict[str, Any]:
        return {
            "bootstrap_servers": self.broker.bootstrap,
            "registry_url": self.registry_url,
            "log_shipping": False,
            "seal_key": SEAL_KEY_B64,
            "retry_backoff": 0.02,
            "provider_timeout": 2.0,
            "commit_interval_ms": 100,
            "relay_poll_interval": 0.1,
        }

    async def request(self, body: dict[str, Any] = BOTH) -> str:
        status, created = await self.otp.call("POST", "/otp", body)
        assert status == 202, created
        await self.otp.drained()
        return str(created["request_id"])

    async def deliveries(self, count: int, within: float = 10) -> list[Delivery]:
        records = await read_topic(self.broker.bootstrap, "otp.deliveries", count=count, within=within)
        return await decode_deliveries(self.registry_url, records)


@asynccontextmanager
async def open_stack(tmp: Path, broker: ThreadBroker, registry: RunningRegistry, **otp: Any) -> AsyncIterator[Stack]:
    """The catcher and the otp service (sealing codes with SEAL_KEY) on real sockets."""
    otp_config = OtpConfig(
        bootstrap_servers=broker.bootstrap,
        registry_url=registry.url,
        database_path=tmp / "otp.db",
        relay_poll_interval=0.1,
        log_shipping=False,
        hash_key="test-hash-key",
        seal_key=SEAL_KEY_B64,
        **otp,
    )
    otp_app = create_otp(otp_config)
    async with serve_catcher() as catcher, serve_app(otp_app) as (url, session):
        yield Stack(tmp, broker, registry.url, catcher, Served(url, otp_app, session), otp_config)


@pytest.fixture
async def stack(tmp_path: Path, broker: ThreadBroker, shared_registry: ThreadRegistry) -> AsyncIterator[Stack]:
    async with open_stack(tmp_path, broker, shared_registry.running) as s:
        yield s


@asynccontextmanager
async def senders(sms: SmsSenderConfig, email: EmailSenderConfig) -> AsyncIterator[tuple[SenderApp, SenderApp]]:
    async with serve_sender(sms) as s, serve_sender(email) as e:
        yield s, e


def code_in(text: str) -> str:
    found = CODE.search(text)
    assert found is not None, "no 6-digit code in the message"
    return found.group(1)


def trace_id(headers: dict[str, bytes]) -> str:
    m = TRACEPARENT.match(headers["traceparent"].decode())
    assert m is not None, headers
    return m.group(1)


async def reset_offsets(bootstrap: str, group: str, topic: str = "otp.requests", partitions: int = 6) -> None:
    """Commit offset 0 on every partition for `group` (which has no members now): a redelivery."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.commit(dict.fromkeys(tps, 0))
    finally:
        await consumer.stop()


def redelivered(app: SenderApp) -> Callable[[], bool]:
    """True once the sender skipped a request it had processed already."""
    return lambda: app.sender.duplicates >= 1


def otp_requested(
    request_id: str, *, user_id: str = "user-p", sealed: dict[str, Any] | None = None, ttl: float = 300
) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {
        "envelope": {
            "event_id": str(uuid.uuid4()),
            "occurred_at": now,
            "producer": {"service": "otp", "instance": "test"},
            "trace_id": None,
        },
        "request_id": request_id,
        "user_id": user_id,
        "channels": ["sms", "email"],
        "destinations": [
            {"channel": "sms", "address": "+15550123"},
            {"channel": "email", "address": "p@example.com"},
        ],
        "code_hash": "hmac-sha256:" + "0" * 64,
        "sealed_code": sealed,
        "expires_at": now + timedelta(seconds=ttl),
    }


# -- the tests ---------------------------------------------------------------------------------


async def test_one_request_is_delivered_once_per_channel_with_the_trace_and_a_code_that_verifies(
    stack: Stack,
) -> None:
    """POST /otp for sms and email: the catcher gets exactly one SMS and one mail (Message-ID
    derived from the request id) with the same code, which POST /otp/verify accepts;
    otp.deliveries gets one OtpDelivered per channel keyed by the request id, continuing the
    request's trace (traceparent, x-request-id, envelope trace id) and never holding the code;
    GET /deliveries/{id} and /metrics of each sender show the delivery."""
    async with senders(stack.sms_config(), stack.email_config()) as (sms, email):
        status, created = await stack.otp.call(
            "POST", "/otp", BOTH, headers={"X-Request-ID": "req-abc", "traceparent": f"00-{'ab' * 16}-{'cd' * 8}-01"}
        )
        assert status == 202
        request_id = created["request_id"]
        await stack.otp.drained()
        got = await stack.deliveries(2)
        mails, texts = await stack.catcher.mails(), await stack.catcher.sms()
        assert len(mails) == 1
        assert len(texts) == 1
        (mail,), (text,) = mails, texts
        assert mail["to"] == ["a@example.com"]
        assert mail["message_id"] == f"<{request_id}.email@streamshop.local>"
        assert mail["subject"] == "Your streamshop verification code"
        assert text["to"] == "+15550100"
        assert text["request_id"] == request_id
        assert text["idempotency_key"] == f"{request_id}:sms"
        code = code_in(mail["text"])
        assert code_in(text["body"]) == code

        by_channel = {d.value["channel"]: d for d in got}
        assert sorted(by_channel) == ["email", "sms"]
        assert {d.record_name for d in got} == {"OtpDelivered"}
        assert by_channel["sms"].value["provider"] == "webhook"
        assert by_channel["sms"].value["provider_message_id"] == text["id"]
        assert by_channel["email"].value["provider"] == "smtp"
        assert by_channel["email"].value["provider_message_id"] == mail["id"]
        for d in got:
            assert d.key == request_id
            assert d.value["request_id"] == request_id
            assert d.value["attempt"] == 1
            assert d.value["latency_ms"] >= d.value["provider_latency_ms"] >= 0
            assert d.value["envelope"]["producer"]["service"] in ("sms-sender", "email-sender")
            assert trace_id(d.headers) == "ab" * 16
            assert d.value["envelope"]["trace_id"] == "ab" * 16
            assert d.headers["x-request-id"] == b"req-abc"
            assert code.encode() not in d.raw

        assert await stack.otp.call("POST", "/otp/verify", {"request_id": request_id, "code": code}) == (
            200,
            {"verified": True, "request_id": request_id},
        )

        row = await sms.http.get(f"/deliveries/{request_id}")
        assert {k: row[k] for k in ("channel", "status", "attempts", "provider", "destination")} == {
            "channel": "sms",
            "status": "delivered",
            "attempts": 1,
            "provider": "webhook",
            "destination": "+155***00",
        }
        assert (await email.http.get(f"/deliveries/{request_id}"))["destination"] == "a***@example.com"
        status, err = await email.http.call("GET", f"/deliveries/{uuid.uuid4()}")
        assert status == 404
        assert err["error"] == "unknown_delivery"
        status, ready = await email.http.call("GET", "/readyz")
        assert status == 200, ready
        assert set(ready["checks"]) == {"broker", "registry", "database", "smtp", "consumer"}
        async with sms.http.session.get(sms.http.url + "/metrics") as r:
            metrics = parse_metrics(await r.text())
        assert metrics['otp_sender_delivered_total{channel="sms",provider="webhook"}'] == 1


async def test_a_request_for_one_channel_is_skipped_by_the_other_sender(stack: Stack) -> None:
    """An email-only request: one mail, no SMS; the sms-sender records it as processed and
    publishes nothing (only the email's OtpDelivered reaches otp.deliveries)."""
    async with senders(stack.sms_config(), stack.email_config()) as (sms, _):
        request_id = await stack.request({"user_id": "u2", "channels": ["email"], "email": "b@example.com"})
        got = await stack.deliveries(1)
        await wait_for(lambda: sms.sender.stats.skipped == 1, what="the sms-sender to skip the request")
        assert [(d.record_name, d.value["channel"]) for d in got] == [("OtpDelivered", "email")]
        assert len(await stack.deliveries(2, within=0.5)) == 1
        assert await stack.catcher.sms() == []
        assert len(await stack.catcher.mails()) == 1
        assert (await sms.http.call("GET", f"/deliveries/{request_id}"))[0] == 404


async def test_redelivery_sends_nothing_again_and_a_resend_after_lost_state_is_collapsed_by_the_provider(
    stack: Stack,
) -> None:
    """After delivery, both groups' offsets are reset to 0 and the senders restart on the same
    databases: they see the request again and skip it (no SMS, no mail, no event).  Restarted
    on fresh databases (as after a crash between the provider call and the commit) they do send
    again, with the same Idempotency-Key and Message-ID, and the catcher collapses both copies:
    still one SMS and one mail."""
    sms_config, email_config = stack.sms_config(), stack.email_config()
    async with senders(sms_config, email_config):
        request_id = await stack.request()
        first = await stack.deliveries(2)
    for group in ("sms-sender", "email-sender"):
        await reset_offsets(stack.broker.bootstrap, group)

    async with senders(sms_config, email_config) as (sms, email):
        for app in (sms, email):
            await wait_for(redelivered(app), what="the redelivered request")
    assert len(await stack.catcher.mails()) == 1
    assert len(await stack.catcher.sms()) == 1
    assert len(await stack.deliveries(3, within=0.5)) == 2
    metrics = await stack.catcher.metrics()
    assert metrics["catcher_mail_duplicates_total"] == 0
    assert metrics["catcher_sms_duplicates_total"] == 0

    for group in ("sms-sender", "email-sender"):
        await reset_offsets(stack.broker.bootstrap, group)
    fresh = {"database_path": stack.tmp / "fresh-sms.db"}, {"database_path": stack.tmp / "fresh-email.db"}
    async with senders(stack.sms_config(**fresh[0]), stack.email_config(**fresh[1])):
        again = await stack.deliveries(4)
    metrics = await stack.catcher.metrics()
    assert metrics["catcher_mail_duplicates_total"] == 1
    assert metrics["catcher_sms_duplicates_total"] == 1
    assert len(await stack.catcher.mails()) == 1
    assert len(await stack.catcher.sms()) == 1
    ids = {d.value["channel"]: d.value["provider_message_id"] for d in first}
    seen = {f.value["envelope"]["event_id"] for f in first}
    resent = [d for d in again if d.value["envelope"]["event_id"] not in seen]
    assert {d.value["channel"]: d.value["provider_message_id"] for d in resent} == ids
    assert all(d.key == request_id for d in again)


async def test_an_expired_request_gives_a_final_otp_failed_without_calling_the_provider(
    tmp_path: Path, broker: ThreadBroker, shared_registry: ThreadRegistry
) -> None:
    """Requested with a 0.2 s TTL and picked up after it: OtpFailed expired for each channel,
    attempt 1, provider latency 0, will_retry false; nothing reaches the catcher."""
    async with open_stack(tmp_path, broker, shared_registry.running, code_ttl=0.2) as stack:
        request_id = await stack.request()
        await asyncio.sleep(0.3)  # past the expiry before any sender runs
        async with senders(stack.sms_config(), stack.email_config()) as (sms, _):
            got = await stack.deliveries(2)
            assert {d.record_name for d in got} == {"OtpFailed"}
            assert sorted(d.value["channel"] for d in got) == ["email", "sms"]
            for d in got:
                assert d.key == request_id
                assert d.value["error_type"] == "expired"
                assert d.value["will_retry"] is False
                assert d.value["attempt"] == 1
                assert d.value["provider_latency_ms"] == 0
            row = await sms.http.get(f"/deliveries/{request_id}")
            assert (row["status"], row["error_type"]) == ("failed", "expired")
        assert await stack.catcher.mails() == []
        assert await stack.catcher.sms() == []


async def test_a_provider_that_is_down_gives_otp_failed_per_attempt_then_a_final_one(stack: Stack) -> None:
    """The SMS webhook answers 503 and the SMTP port is closed: with max_attempts 3, each channel
    publishes OtpFailed for attempts 1, 2, 3 with will_retry true, true, false; every webhook
    attempt carries the same Idempotency-Key and the bearer token; the deliveries end failed."""
    async with status_server(503, {"error": "unavailable", "message": "try later"}) as (url, seen):
        sms_config = stack.sms_config(webhook_url=url, webhook_token="tok")
        email_config = stack.email_config(smtp_port=free_port())
        async with senders(sms_config, email_config) as (sms, email):
            request_id = await stack.request()
            got = await stack.deliveries(6)
            for channel, error_type in (("sms", "unreachable"), ("email", "unreachable")):
                mine = sorted((d for d in got if d.value["channel"] == channel), key=lambda d: d.value["attempt"])
                assert [d.record_name for d in mine] == ["OtpFailed"] * 3
                assert [d.value["attempt"] for d in mine] == [1, 2, 3]
                assert [d.value["will_retry"] for d in mine] == [True, True, False]
                assert {d.value["error_type"] for d in mine} == {error_type}
            sms_errors = {d.value["error"] for d in got if d.value["channel"] == "sms"}
            assert sms_errors == {"HTTP 503: try later"}
            for s in (sms, email):
                row = await s.http.get(f"/deliveries/{request_id}")
                assert (row["status"], row["attempts"]) == ("failed", 3)
        assert len(seen) == 3
        assert {r["headers"]["Idempotency-Key"] for r in seen} == {f"{request_id}:sms"}
        assert {r["headers"]["Authorization"] for r in seen} == {"Bearer tok"}


async def test_poison_records_go_to_the_dlq_and_the_record_behind_them_is_delivered(stack: Stack) -> None:
    """On one partition (one user id): garbage bytes, an OtpRequested without sealed_code, one
    sealed under another key, one naming an unknown key id, then a good one.  Each group
    dead-letters the four poison records to otp.requests.dlq (failure in headers, never the
    code) and delivers the good one: one SMS and one mail."""
    other_key = secrets.token_bytes(32)
    good_id, wrong_key_id, unknown_id, unsealed_id = (str(uuid.uuid4()) for _ in range(4))
    async with kit(stack.broker.bootstrap, stack.registry_url) as k:
        schema = CATALOG.schema("OtpRequested")
        await (await k.producer.send_raw("otp.requests", "user-p", b"not avro at all"))
        records = [
            otp_requested(unsealed_id),
            otp_requested(wrong_key_id, sealed=seal_code(other_key, "k1", wrong_key_id, "111111")),
            otp_requested(unknown_id, sealed=seal_code(SEAL_KEY, "k9", unknown_id, "222222")),
            otp_requested(good_id, sealed=seal_code(SEAL_KEY, "k1", good_id, "333333")),
        ]
        for record in records:
            await k.producer.publish("otp.requests", "user-p", schema, record)
    async with senders(stack.sms_config(), stack.email_config()):
        got = await stack.deliveries(2)
        assert {(d.record_name, d.key) for d in got} == {("OtpDelivered", good_id)}
        assert code_in((await stack.catcher.mails())[0]["text"]) == "333333"
        assert code_in((await stack.catcher.sms())[0]["body"]) == "333333"
        dead = await read_topic(stack.broker.bootstrap, "otp.requests.dlq", count=8)
    assert len(dead) == 8
    by_group: dict[str, list[dict[str, str]]] = {}
    for record in sorted(dead, key=lambda r: r.offset):
        found = {k: v.decode() for k, v in record.headers}
        by_group.setdefault(found["dlq.group"], []).append(found)
        assert record.key == b"user-p"
    assert sorted(by_group) == ["email-sender", "sms-sender"]
    for headers in by_group.values():
        assert [h["dlq.error.class"].rsplit(".", 1)[-1] for h in headers] == [
            "UnknownMagicByteError",
            "PermanentError",
            "PermanentError",
            "PermanentError",
        ]
        messages = [h["dlq.error.message"] for h in headers[1:]]
        assert "no sealed_code" in messages[0]
        assert "does not open" in messages[1]
        assert "unknown key id 'k9'" in messages[2]
        assert not any(code in m for m in messages for code in ("111111", "222222"))


def test_a_sender_refuses_to_start_without_the_seal_key(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    """The seal key must be the otp service's OTP_SEAL_KEY: without it (or with a wrong one)
    the settings are invalid and `streamshop sms-sender` exits with 2, saying so."""
    with pytest.raises(ConfigError, match="OTP_SEAL_KEY"):
        SmsSenderConfig().check()
    with pytest.raises(ConfigError, match="expected 32 bytes"):
        EmailSenderConfig(seal_key=base64.b64encode(b"short").decode()).check()
    for name in [n for n in os.environ if n.startswith("SMS_SENDER_")]:
        monkeypatch.delenv(name)
    assert run_sms(argparse.Namespace(port=None, database=None)) == 2
    assert "SMS_SENDER_SEAL_KEY: required" in capsys.readouterr().err
    rotated = SmsSenderConfig(seal_key=SEAL_KEY_B64, retired_seal_keys=f"k0:{base64.b64encode(bytes(32)).decode()}")
    assert list(rotated.seal_keys()) == ["k1", "k0"]
