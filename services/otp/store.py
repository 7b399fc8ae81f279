"""Persistence of OTP requests (SQLite or PostgreSQL: services.common.db): only the code's keyed
hash, its expiry and an attempts counter are stored.  A request row and its OtpRequested event
are written in one transaction (services.common.outbox); the rate limits are checked in that same
transaction.

Three limits share one window: per user id, per destination (a phone number or an e-mail
address, whoever asks: without it anyone could SMS-bomb a number by varying the user id) and
per client address (without it, by varying both).  Each request leaves one row per destination
and one for its client in `otp_rate_events`; rows older than the window are deleted as requests
come in, so the table holds at most one window of traffic.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from ipaddress import IPv4Network, IPv6Network, ip_address
from typing import Any

from kit.tracing import current_context, kafka_headers
from services.common.db import Database, Migration, Step
from services.common.outbox import Outbox
from services.otp.domain import (
    AlreadyVerified,
    CodeExpired,
    NewOtpRequest,
    RateLimited,
    RequestId,
    TooManyAttempts,
    UnknownRequest,
    WrongCode,
    code_hash,
    code_matches,
    generate_code,
    seal_code,
)

__all__ = ["MIGRATIONS", "OtpPolicy", "OtpStore", "RequestedOtp"]

MIGRATIONS: Sequence[Migration] = (
    Step(
        sqlite="""
        CREATE TABLE otp_requests (
            id TEXT PRIMARY KEY,
            user_id TEXT NOT NULL,
            channels TEXT NOT NULL,
            code_hash TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            expires_at INTEGER NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            verified_at INTEGER
        );
        CREATE INDEX otp_requests_by_user ON otp_requests (user_id, created_at);
        """,
        postgresql="""
        CREATE TABLE otp_requests (
            id TEXT PRIMARY KEY,
            user_id TEXT NOT NULL,
            channels TEXT NOT NULL,
            code_hash TEXT NOT NULL,
            created_at BIGINT NOT NULL,
            expires_at BIGINT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            verified_at BIGINT
        );
        CREATE INDEX otp_requests_by_user ON otp_requests (user_id, created_at);
        """,
    ),
    Step(
        sqlite="""
        CREATE TABLE otp_rate_events (
            scope TEXT NOT NULL,
            subject TEXT NOT NULL,
            created_at INTEGER NOT NULL
        );
        CREATE INDEX otp_rate_events_by_subject ON otp_rate_events (scope, subject, created_at);
        CREATE INDEX otp_rate_events_by_time ON otp_rate_events (created_at);
        """,
        postgresql="""
        CREATE TABLE otp_rate_events (
            scope TEXT NOT NULL,
            subject TEXT NOT NULL,
            created_at BIGINT NOT NULL
        );
        CREATE INDEX otp_rate_events_by_subject ON otp_rate_events (scope, subject, created_at);
        CREATE INDEX otp_rate_events_by_time ON otp_rate_events (created_at);
        """,
    ),
)


@dataclass(frozen=True, slots=True)
class OtpPolicy:
    """Keys and limits of the store (from OtpConfig)."""

    hash_key: bytes
    ttl: timedelta
    max_attempts: int
    rate_limit_max: int
    rate_limit_window: timedelta
    seal_key: bytes | None = None
    destination_limit_max: int = 5
    client_limit_max: int = 50  # 0: no per-client limit
    client_exempt: tuple[IPv4Network | IPv6Network, ...] = ()
    seal_key_id: str = "k1"


@dataclass(frozen=True, slots=True)
class RequestedOtp:
    request_id: RequestId
    user_id: str
    expires_at: datetime
    max_attempts: int
    sealed: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "user_id": self.user_id,
            "expires_at": _iso(self.expires_at),
            "max_attempts": self.max_attempts,
        }


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _now() -> datetime:
    # Millisecond precision: what the events (timestamp-millis) and the database keep.
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


class OtpStore:
    """OTP requests in `db`; OtpRequested events go to `outbox` for `topic`, keyed by user id."""

    def __init__(
        self,
        db: Database,
        outbox: Outbox,
        policy: OtpPolicy,
        *,
        topic: str,
        service: str,
        instance: str,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self.db = db
        self.outbox = outbox
        self.policy = policy
        self.topic = topic
        self._producer = {"service": service, "instance": instance}
        self._clock = clock

    async def setup(self) -> None:
        await self.outbox.setup()
        await self.db.migrate("otp", MIGRATIONS)

    def _envelope(self, occurred_at: datetime) -> dict[str, Any]:
        ctx = current_context()
        return {
            "event_id": str(uuid.uuid4()),
            "occurred_at": occurred_at,
            "producer": dict(self._producer),
            "trace_id": ctx.trace.trace_id if ctx is not None else None,
        }

    def _limited_subjects(self, new: NewOtpRequest, client: str | None) -> list[tuple[str, str, int]]:
        """(scope, subject, limit) of the rate-limit rows this request adds."""
        policy = self.policy
        limit = policy.destination_limit_max
        subjects = [("destination", f"{c.value}:{a.strip().lower()}", limit) for c, a in new.destinations]
        if client is not None and policy.client_limit_max > 0:
            try:
                address = ip_address(client)
            except ValueError:
                address = None
            if address is None or not any(address in net for net in policy.client_exempt):
                subjects.append(("client", client, policy.client_limit_max))
        return subjects

    async def request(self, new: NewOtpRequest, client: str | None = None) -> RequestedOtp:
        """Create a request with a fresh code and write its OtpRequested event; `RateLimited`
        (429) when the user, one of its destinations or the `client` address already reached
        its limit within the window."""
        policy = self.policy
        request_id = RequestId(str(uuid.uuid4()))
        now = self._clock()
        expires_at = now + policy.ttl
        code = generate_code()
        hashed = code_hash(policy.hash_key, request_id, code)
        sealed = (
            seal_code(policy.seal_key, policy.seal_key_id, request_id, code) if policy.seal_key is not None else None
        )
        del code  # only the hash and the sealed form leave this function
        window_start = _ms(now - policy.rate_limit_window)
        limited = self._limited_subjects(new, client)
        async with self.db.transaction() as tx:
            # Instances counting the same user, destination or client one after the other (on
            # PostgreSQL; SQLite's write lock already does it): N instances allow what one does.
            await tx.lock(f"otp.user:{new.user_id}", *(f"otp.{scope}:{subject}" for scope, subject, _ in limited))
            recent = await tx.fetchall(
                "SELECT created_at FROM otp_requests WHERE user_id = ? AND created_at > ? ORDER BY created_at",
                (new.user_id, window_start),
            )
            self._check_limit("user", [r["created_at"] for r in recent], policy.rate_limit_max, window_start)
            await tx.execute("DELETE FROM otp_rate_events WHERE created_at <= ?", (window_start,))
            for scope, subject, limit in limited:
                rows = await tx.fetchall(
                    "SELECT created_at FROM otp_rate_events WHERE scope = ? AND subject = ? AND created_at > ?"
                    " ORDER BY created_at",
                    (scope, subject, window_start),
                )
                self._check_limit(scope, [r["created_at"] for r in rows], limit, window_start)
            await tx.executemany(
                "INSERT INTO otp_rate_events (scope, subject, created_at) VALUES (?, ?, ?)",
                [(scope, subject, _ms(now)) for scope, subject, _ in limited],
            )
            await tx.execute(
                "INSERT INTO otp_requests (id, user_id, channels, code_hash, created_at, expires_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (request_id, new.user_id, ",".join(new.channels), hashed, _ms(now), _ms(expires_at)),
            )
            record = {
                "envelope": self._envelope(now),
                "request_id": request_id,
                "user_id": new.user_id,
                "channels": [c.value for c in new.channels],
                "destinations": [{"channel": c.value, "address": a} for c, a in new.destinations],
                "code_hash": hashed,
                "sealed_code": sealed,
                "expires_at": expires_at,
            }
            await self.outbox.add(tx, self.topic, new.user_id, "OtpRequested", record, kafka_headers())
        return RequestedOtp(request_id, new.user_id, expires_at, policy.max_attempts, sealed is not None)

    def _check_limit(self, scope: str, recent: list[int], limit: int, window_start: int) -> None:
        """`RateLimited` when `recent` (creation times in ms, ascending) already holds `limit`."""
        if len(recent) < limit:
            return
        retry_ms = recent[len(recent) - limit] - window_start  # when the oldest that counts leaves
        window = self.policy.rate_limit_window.total_seconds()
        raise RateLimited(scope, limit, window, max(1, math.ceil(retry_ms / 1000)))

    async def verify(self, request_id: str, code: str) -> None:
        """Accept `code` for `request_id` once.  In this order: `UnknownRequest` (404),
        `AlreadyVerified` (409), `CodeExpired` (410), `TooManyAttempts` (429, locked), and
        `WrongCode` (422, the attempt is counted) when the hash does not match."""
        policy = self.policy
        now = self._clock()
        async with self.db.transaction() as tx:
            await tx.lock(f"otp.request:{request_id}")  # attempts counted one at a time, across instances
            row = await tx.fetchone(
                "SELECT code_hash, expires_at, attempts, verified_at FROM otp_requests WHERE id = ?", (request_id,)
            )
            if row is None:
                raise UnknownRequest(request_id)
            if row["verified_at"] is not None:
                raise AlreadyVerified(details={"request_id": request_id})
            if _ms(now) >= row["expires_at"]:
                raise CodeExpired(details={"request_id": request_id})
            attempts = int(row["attempts"])
            if attempts >= policy.max_attempts:
                raise TooManyAttempts(details={"request_id": request_id, "max_attempts": policy.max_attempts})
            # Compare before branching on anything else about the code: constant time.
            if code_matches(policy.hash_key, request_id, code, row["code_hash"]):
                await tx.execute(
                    "UPDATE otp_requests SET verified_at = ?, attempts = attempts + 1 WHERE id = ?",
                    (_ms(now), request_id),
                )
                return
            await tx.execute("UPDATE otp_requests SET attempts = attempts + 1 WHERE id = ?", (request_id,))
        # Outside the transaction: the counted attempt is committed before the error is raised.
        raise WrongCode(policy.max_attempts - attempts - 1)
