"""Settings of the OTP senders, from ``SMS_SENDER_*`` and ``EMAIL_SENDER_*`` environment variables.

Both senders share `SenderConfig`; `SmsSenderConfig` and `EmailSenderConfig` add their provider's
settings.  The seal key is required: it must be the otp service's ``OTP_SEAL_KEY`` (base64 of 32
bytes), since the code travels to the senders only sealed with it.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from contracts.otp import SEAL_KEY_BYTES, Channel
from services.common.config import DEFAULT_PORTS, ConfigError, ServiceConfig, secret, setting

__all__ = ["EmailSenderConfig", "SenderConfig", "SmsSenderConfig"]

_KEY_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


@dataclass(frozen=True, repr=False)
class SenderConfig(ServiceConfig):
    """What both senders share; subclasses set `channel` and the defaults of `port`,
    `database_path` and `group_id`."""

    channel: ClassVar[Channel]

    group_id: str = setting("sender", help="consumer group (each sender group gets every request)")
    topic: str = setting("otp.requests", help="topic of the OtpRequested events (its DLQ is <topic>.dlq)")
    deliveries_topic: str = setting("otp.deliveries", help="topic of the OtpDelivered / OtpFailed events")
    topic_partitions: int = setting(6, help="partitions of the topics when the sender creates them")
    topic_replication_factor: int = setting(3, help="replicas of the topics it creates, or every broker when fewer")
    seal_key: str | None = secret(help="base64 of the 32-byte AES-256-GCM key: the otp service's OTP_SEAL_KEY")
    seal_key_id: str = setting("k1", help="id of seal_key (the otp service's OTP_SEAL_KEY_ID)")
    retired_seal_keys: str | None = secret(
        help="older keys still accepted while rotating, comma list of <key id>:<base64 key>"
    )
    max_attempts: int = setting(3, help="provider attempts per request and channel")
    retry_backoff: float = setting(0.5, help="seconds before the 2nd attempt, doubling after each failure")
    retry_backoff_max: float = setting(5.0, help="longest wait between two attempts, seconds")
    provider_timeout: float = setting(5.0, help="seconds one provider call may take")
    commit_every: int = setting(100, help="commit offsets every N records (or every commit_interval_ms)")
    commit_interval_ms: int = setting(1000, help="commit offsets at least this often, ms")
    session_timeout_ms: int = setting(10_000, help="group session timeout: how soon a dead member's partitions move")
    heartbeat_interval_ms: int = setting(3000, help="group heartbeat interval, ms (well under session_timeout_ms)")
    group_instance_id: str | None = setting(
        None,
        help="static group membership (KIP-345): a restarted member with the same id takes its partitions back"
        " at once instead of after the session timeout; unique per running instance",
    )
    dedupe_window_s: int = setting(7 * 24 * 3600, help="how long processed event ids are remembered")
    relay_poll_interval: float = setting(1.0, help="seconds between outbox polls when not woken")
    delivery_mode: str = setting(
        "outbox",
        choices=("outbox", "transactional"),
        help="outbox: events through the database's outbox, at least once with idempotent handling; transactional: "
        "deliver, produce the event and commit the offset in one Kafka transaction (exactly once in otp.deliveries)",
    )
    transaction_timeout_ms: int = setting(60_000, help="transactional mode: the broker aborts a longer transaction")
    group_type: str = setting(
        "consumer",
        choices=("consumer", "share"),
        help="consumer: a consumer group, each partition read by one instance; share: a share group (KIP-932), "
        "the instances drain the topic as a queue, each request acknowledged once handled (outbox mode only)",
    )
    brand: str = setting("streamshop", help="the name the messages sign with")

    def seal_keys(self) -> dict[str, bytes]:
        """Key id -> key, the current one first; `ConfigError` naming each bad variable."""
        problems: list[str] = []
        keys: dict[str, bytes] = {}
        if self.seal_key is None or not self.seal_key.strip():
            problems.append(
                f"{self.env_name('seal_key')}: required; set it to the otp service's OTP_SEAL_KEY"
                " (base64 of 32 bytes), which seals the codes for the senders"
            )
        else:
            key = _decode_key(self.seal_key, self.env_name("seal_key"), problems)
            if key is not None:
                keys[self.seal_key_id] = key
        for entry in (self.retired_seal_keys or "").split(","):
            if not entry.strip():
                continue
            key_id, sep, text = entry.strip().partition(":")
            name = self.env_name("retired_seal_keys")
            if not sep or not key_id or not set(key_id) <= _KEY_ID_CHARS:
                problems.append(f"{name}: expected <key id>:<base64 key> entries")
                continue
            key = _decode_key(text, name, problems)
            if key is not None:
                keys.setdefault(key_id, key)
        if problems:
            raise ConfigError(problems)
        return keys

    def problems(self) -> list[str]:
        """Settings that parse but cannot work (besides the seal keys)."""
        out = [
            f"{self.env_name(name)}: must be positive"
            for name, value in (
                ("max_attempts", self.max_attempts),
                ("provider_timeout", self.provider_timeout),
                ("commit_every", self.commit_every),
                ("commit_interval_ms", self.commit_interval_ms),
                ("session_timeout_ms", self.session_timeout_ms),
                ("heartbeat_interval_ms", self.heartbeat_interval_ms),
                ("topic_partitions", self.topic_partitions),
                ("dedupe_window_s", self.dedupe_window_s),
            )
            if value <= 0
        ]
        out += [
            f"{self.env_name(name)}: must not be negative"
            for name, value in (("retry_backoff", self.retry_backoff), ("retry_backoff_max", self.retry_backoff_max))
            if value < 0
        ]
        if not self.seal_key_id or not set(self.seal_key_id) <= _KEY_ID_CHARS:
            out.append(f"{self.env_name('seal_key_id')}: letters, digits, '.', '_' and '-' only")
        if self.group_type == "share" and self.delivery_mode == "transactional":
            # A transaction commits consumer-group offsets; a share group acknowledges records instead.
            out.append(f"{self.env_name('group_type')}: share needs {self.env_name('delivery_mode')}=outbox")
        return out

    def check(self) -> None:
        problems = self.problems()
        try:
            self.seal_keys()
        except ConfigError as e:
            problems = e.problems + problems
        if problems:
            raise ConfigError(problems)

    @property
    def dlq_topic(self) -> str:
        return f"{self.topic}.dlq"

    def topics_to_create(self) -> Mapping[str, int]:
        """The requests topic (so an early sender does not let it be auto-created with the broker's
        default partition count), the deliveries topic and the dead-letter topic."""
        return dict.fromkeys((self.topic, self.deliveries_topic, self.dlq_topic), self.topic_partitions)


def _decode_key(text: str, name: str, problems: list[str]) -> bytes | None:
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        problems.append(f"{name}: expected base64")
        return None
    if len(key) != SEAL_KEY_BYTES:
        problems.append(f"{name}: expected {SEAL_KEY_BYTES} bytes, got {len(key)}")
        return None
    return key


@dataclass(frozen=True, repr=False)
class SmsSenderConfig(SenderConfig):
    """`SmsSenderConfig.from_env()` reads SMS_SENDER_SEAL_KEY, SMS_SENDER_PROVIDER, ..."""

    service_name: ClassVar[str] = "sms-sender"
    channel: ClassVar[Channel] = Channel.SMS

    port: int = setting(DEFAULT_PORTS["sms-sender"], help="HTTP port of /healthz, /readyz, /metrics, /deliveries")
    database_path: Path = setting(Path("data/sms-sender.db"), help="SQLite database file (when no DATABASE_URL)")
    group_id: str = setting("sms-sender", help="consumer group (each sender group gets every request)")
    provider: str = setting("webhook", choices=("webhook", "sink"), help="webhook: HTTP POST; sink: a local file")
    webhook_url: str = setting(
        f"http://127.0.0.1:{DEFAULT_PORTS['catcher']}/sms", help="SMS provider endpoint (default: the catcher's sink)"
    )
    webhook_token: str | None = secret(help="sent as 'Authorization: Bearer <token>' when set")
    sink_path: Path = setting(Path("data/sms-sink.jsonl"), help="JSON lines file of the sink provider")

    def problems(self) -> list[str]:
        out = super().problems()
        if self.provider == "webhook" and not self.webhook_url.startswith(("http://", "https://")):
            out.append(f"{self.env_name('webhook_url')}: must be an http:// or https:// URL")
        return out


@dataclass(frozen=True, repr=False)
class EmailSenderConfig(SenderConfig):
    """`EmailSenderConfig.from_env()` reads EMAIL_SENDER_SEAL_KEY, EMAIL_SENDER_SMTP_HOST, ..."""

    service_name: ClassVar[str] = "email-sender"
    channel: ClassVar[Channel] = Channel.EMAIL

    port: int = setting(DEFAULT_PORTS["email-sender"], help="HTTP port of /healthz, /readyz, /metrics, /deliveries")
    database_path: Path = setting(Path("data/email-sender.db"), help="SQLite database file (when no DATABASE_URL)")
    group_id: str = setting("email-sender", help="consumer group (each sender group gets every request)")
    smtp_host: str = setting("127.0.0.1", help="SMTP server (default: the local catcher)")
    smtp_port: int = setting(DEFAULT_PORTS["smtp"], help="SMTP port")
    smtp_username: str | None = setting(None, help="SMTP AUTH user; unset: no AUTH")
    smtp_password: str | None = secret(help="SMTP AUTH password")
    smtp_starttls: bool = setting(False, help="upgrade the connection with STARTTLS (port 587 style)")
    smtp_use_tls: bool = setting(False, help="connect over TLS from the start (port 465 style)")
    smtp_validate_certs: bool = setting(True, help="verify the SMTP server's TLS certificate")
    from_address: str = setting("streamshop <no-reply@streamshop.local>", help="From: of the mails")
    subject: str = setting("Your streamshop verification code", help="Subject: of the mails")

    def problems(self) -> list[str]:
        out = super().problems()
        if self.smtp_starttls and self.smtp_use_tls:
            out.append(f"{self.env_name('smtp_starttls')}: not together with {self.env_name('smtp_use_tls')}")
        if self.smtp_username and not self.smtp_password:
            out.append(f"{self.env_name('smtp_password')}: required with {self.env_name('smtp_username')}")
        if not 0 < self.smtp_port < 65536:
            out.append(f"{self.env_name('smtp_port')}: must be a TCP port")
        return out
