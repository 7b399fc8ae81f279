"""Settings of the otp service, from ``OTP_*`` environment variables."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from ipaddress import IPv4Network, IPv6Network, ip_network
from pathlib import Path
from typing import ClassVar

from contracts.otp import SEAL_KEY_BYTES
from services.common.config import DEFAULT_PORTS, ConfigError, OutboxServiceConfig, secret, setting

__all__ = ["SEAL_KEY_BYTES", "OtpConfig"]


@dataclass(frozen=True, repr=False)
class OtpConfig(OutboxServiceConfig):
    """`OtpConfig.from_env()` reads OTP_PORT, OTP_HASH_KEY, OTP_SEAL_KEY, OTP_CODE_TTL..."""

    service_name: ClassVar[str] = "otp"

    port: int = setting(DEFAULT_PORTS["otp"], help="HTTP port")
    database_path: Path = setting(Path("data/otp.db"), help="SQLite database file (when no DATABASE_URL)")
    topic: str = setting("otp.requests", help="topic of the OtpRequested events")
    code_ttl: float = setting(300.0, help="seconds a code is accepted after it was requested")
    max_attempts: int = setting(5, help="verification attempts per request before it is locked")
    rate_limit_max: int = setting(5, help="OTP requests per user within rate_limit_window")
    rate_limit_window: float = setting(600.0, help="seconds of the window of every OTP rate limit")
    rate_limit_destination_max: int = setting(
        5, help="OTP requests per phone number and per e-mail address within rate_limit_window, whoever asks"
    )
    rate_limit_client_max: int = setting(
        50, help="OTP requests per client (IP) address within rate_limit_window; 0: no per-client limit"
    )
    rate_limit_client_exempt: tuple[str, ...] = setting(
        (), help="client networks (CIDR, comma list) without a per-client limit, e.g. a load generator's"
    )
    hash_key: str | None = secret(
        help="HMAC-SHA256 key of the stored and published code hashes; unset: a random key per process"
    )
    seal_key: str | None = secret(
        help="base64 of a 32-byte AES-256-GCM key shared with the senders; unset: sealed_code is null"
    )
    seal_key_id: str = setting("k1", help="id of seal_key, published with each sealed code (key rotation)")

    def client_exempt_networks(self) -> tuple[IPv4Network | IPv6Network, ...]:
        return tuple(ip_network(n, strict=False) for n in self.rate_limit_client_exempt)

    def seal_key_bytes(self) -> bytes | None:
        """The decoded `seal_key`, None when unset; `ConfigError` unless it is 32 bytes of base64."""
        if self.seal_key is None or not self.seal_key.strip():
            return None
        try:
            key = base64.b64decode(self.seal_key.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise ConfigError([f"{self.env_name('seal_key')}: expected base64"]) from None
        if len(key) != SEAL_KEY_BYTES:
            raise ConfigError([f"{self.env_name('seal_key')}: expected {SEAL_KEY_BYTES} bytes, got {len(key)}"])
        return key

    def check(self) -> None:
        """`ConfigError` for settings that parse but cannot work together."""
        problems = [
            f"{self.env_name(name)}: must be positive"
            for name, value in (
                ("code_ttl", self.code_ttl),
                ("max_attempts", self.max_attempts),
                ("rate_limit_max", self.rate_limit_max),
                ("rate_limit_window", self.rate_limit_window),
                ("rate_limit_destination_max", self.rate_limit_destination_max),
            )
            if value <= 0
        ]
        if self.rate_limit_client_max < 0:
            problems.append(f"{self.env_name('rate_limit_client_max')}: must be 0 (off) or positive")
        for network in self.rate_limit_client_exempt:
            try:
                ip_network(network, strict=False)
            except ValueError:
                problems.append(f"{self.env_name('rate_limit_client_exempt')}: {network!r} is not an IP network")
        if problems:
            raise ConfigError(problems)
        self.seal_key_bytes()
