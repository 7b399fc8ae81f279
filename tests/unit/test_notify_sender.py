"""The senders' pure parts: opening sealed codes (and refusing, without ever showing the code),
message texts that depend on the request alone (so a resend carries the same body), masked
destinations, retry backoff, and the settings' checks."""

from __future__ import annotations

import base64
import secrets
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from services.common.config import ConfigError
from services.common.consumer import PermanentError
from services.notify.config import EmailSenderConfig, SmsSenderConfig
from services.notify.sender import OtpRequest, SenderPolicy, compose_email, compose_sms, mask_address, open_code
from services.otp.domain import Channel, seal_code

KEY = secrets.token_bytes(32)
B64 = base64.b64encode(KEY).decode()


def request(sealed: dict[str, Any] | None, request_id: str | None = None) -> OtpRequest:
    occurred = datetime(2026, 1, 2, 10, 0, 0, tzinfo=UTC)
    return OtpRequest(
        event_id=str(uuid.uuid4()),
        request_id=request_id or str(uuid.uuid4()),
        user_id="u",
        channels=("sms", "email"),
        destinations={"sms": "+15550100", "email": "a@example.com"},
        sealed_code=sealed,
        expires_at=occurred + timedelta(minutes=5),
        occurred_at=occurred,
        trace_id=None,
    )


def test_open_code_opens_the_code_sealed_for_this_request() -> None:
    rid = str(uuid.uuid4())
    assert open_code({"k1": KEY}, request(seal_code(KEY, "k1", rid, "012345"), rid)) == "012345"


def test_open_code_refuses_without_showing_the_code() -> None:
    rid = str(uuid.uuid4())
    good = seal_code(KEY, "k1", rid, "987654")
    cases = {
        "no sealed_code": request(None, rid),
        "unknown key id 'k2'": request({**good, "key_id": "k2"}, rid),
        "does not open": request(seal_code(secrets.token_bytes(32), "k1", rid, "987654"), rid),
    }
    altered = bytearray(good["ciphertext"])
    altered[0] ^= 1
    cases["does not open "] = request({**good, "ciphertext": bytes(altered)}, rid)
    # Sealed for another request: the request id is the associated data.
    cases["does not open  "] = request(seal_code(KEY, "k1", str(uuid.uuid4()), "987654"), rid)
    for expected, req in cases.items():
        with pytest.raises(PermanentError, match=expected.strip()) as caught:
            open_code({"k1": KEY}, req)
        assert "987654" not in str(caught.value)


def test_texts_hold_the_code_and_expiry_and_depend_on_the_request_alone() -> None:
    req = request(None)
    sms = compose_sms("streamshop", "123456", req)
    assert sms == "123456 is your streamshop code, valid until 10:05 UTC. Never share it."
    mail = compose_email("streamshop", "123456", req)
    assert "    123456\n" in mail
    assert "It expires at 2026-01-02 10:05:00 UTC, 5 minutes after it was requested." in mail
    assert compose_email("streamshop", "123456", req) == mail


def test_destinations_are_masked() -> None:
    assert mask_address("+15550100") == "+155***00"
    assert mask_address("+4915123456789") == "+491********89"
    assert mask_address("alice@example.com") == "a***@example.com"


def test_backoff_doubles_up_to_the_cap() -> None:
    policy = SenderPolicy("g", Channel.SMS, {}, retry_backoff=0.5, retry_backoff_max=1.5)
    assert [policy.backoff(n) for n in (1, 2, 3, 4)] == [0.5, 1.0, 1.5, 1.5]


def test_settings_are_read_from_the_prefixed_environment_and_checked() -> None:
    env = {
        "SMS_SENDER_SEAL_KEY": B64,
        "SMS_SENDER_PROVIDER": "SINK",
        "SMS_SENDER_MAX_ATTEMPTS": "5",
        "SMS_SENDER_WEBHOOK_TOKEN": "s3cr3t-token",
    }
    config = SmsSenderConfig.from_env(env)
    config.check()
    assert (config.provider, config.max_attempts, config.group_id, config.port) == ("sink", 5, "sms-sender", 8004)
    assert "s3cr3t-token" not in repr(config)
    assert B64 not in repr(config)
    email = EmailSenderConfig.from_env({"EMAIL_SENDER_SEAL_KEY": B64})
    assert (email.group_id, email.port, email.smtp_port, email.dlq_topic) == (
        "email-sender",
        8005,
        1025,
        "otp.requests.dlq",
    )
    with pytest.raises(ConfigError) as caught:
        EmailSenderConfig(
            seal_key=B64, smtp_starttls=True, smtp_use_tls=True, smtp_username="u", max_attempts=0
        ).check()
    assert caught.value.problems == [
        "EMAIL_SENDER_MAX_ATTEMPTS: must be positive",
        "EMAIL_SENDER_SMTP_STARTTLS: not together with EMAIL_SENDER_SMTP_USE_TLS",
        "EMAIL_SENDER_SMTP_PASSWORD: required with EMAIL_SENDER_SMTP_USERNAME",
    ]
    with pytest.raises(ConfigError, match="RETIRED_SEAL_KEYS: expected <key id>:<base64 key>"):
        SmsSenderConfig(seal_key=B64, retired_seal_keys="nokeyid").check()
