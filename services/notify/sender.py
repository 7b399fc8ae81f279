"""The senders' handler: one OtpRequested in, at most one delivery per channel out.

For each record of ``otp.requests`` the handler of a sender group (one channel):

1. skips it when its event id is already processed (a redelivery: nothing is sent again);
2. records it as processed and does nothing else when the request does not ask for this channel;
3. publishes a final OtpFailed ``expired`` (provider not called) when the code expired already;
4. opens the sealed code (AES-256-GCM, the request id as associated data).  A request without
   ``sealed_code``, sealed under an unknown key id, or that does not open is a `PermanentError`:
   the runner dead-letters it to ``otp.requests.dlq`` with the failure in headers, and the
   partition moves on.  The senders do not implement sender-side lookup (fetching the code from
   the otp service by request id): the otp service must run with ``OTP_SEAL_KEY``;
5. calls the provider up to `max_attempts` times with exponential backoff.  Each failed attempt
   publishes OtpFailed (``will_retry`` true while another attempt follows); success publishes
   OtpDelivered.  The events go to ``otp.deliveries`` keyed by request id, through the outbox.

Exactly-once visible effects: the provider call happens outside any database transaction (the
SQLite write lock is never held across network I/O).  The outcome is recorded afterwards, in one
transaction: the processed event id, the ``deliveries`` row and the event.  A crash between the
provider's acceptance and that commit re-sends on redelivery; the provider-side keys
(services.notify.providers: the webhook's Idempotency-Key, the mail's deterministic Message-ID)
collapse that copy.  A retried attempt is committed before the next one (row + OtpFailed), so
after a crash the attempt numbers continue where they were instead of starting again at 1.

The published events carry the trace of the request: the incoming record's ``traceparent`` and
``x-request-id`` headers continue (a child span) on the OtpDelivered / OtpFailed records, and
their envelope's ``trace_id`` is the same trace.  The code is never logged, stored or published:
provider error texts are scrubbed of it before they are.
"""

from __future__ import annotations

import asyncio
import math
import re
import secrets
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cryptography.exceptions import InvalidTag

from contracts.otp import CODE_DIGITS, Channel, open_sealed_code
from kit.logging import get_logger
from kit.tracing import (
    REQUEST_ID_HEADER,
    TRACEPARENT_HEADER,
    RequestContext,
    TraceContext,
    current_context,
    kafka_headers,
    use_context,
)
from services.common.consumer import IdempotentHandler, Message, PermanentError
from services.common.db import Database, Migration, Session, Step
from services.common.outbox import Outbox
from services.notify.providers import DeliveryError, OutgoingMessage, Provider, ProviderResult

__all__ = [
    "MIGRATIONS",
    "OTP_REQUESTED",
    "OtpRequest",
    "Sender",
    "SenderPolicy",
    "SenderStats",
    "compose_email",
    "compose_sms",
    "mask_address",
    "open_code",
]

log = get_logger(__name__)

OTP_REQUESTED = "io.streamshop.events.otp.OtpRequested"
RETRYING, DELIVERED, FAILED = "retrying", "delivered", "failed"
ERROR_EXPIRED = "expired"
_TRACE_ID = re.compile(r"^[0-9a-f]{32}$")

MIGRATIONS: Sequence[Migration] = (
    Step(
        sqlite="""
        CREATE TABLE deliveries (
            request_id TEXT NOT NULL,
            channel TEXT NOT NULL,
            user_id TEXT NOT NULL,
            destination TEXT NOT NULL,
            requested_event_id TEXT NOT NULL,
            status TEXT NOT NULL,
            attempts INTEGER NOT NULL,
            provider TEXT NOT NULL,
            provider_message_id TEXT,
            error_type TEXT,
            error TEXT,
            latency_ms INTEGER,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            PRIMARY KEY (request_id, channel)
        ) WITHOUT ROWID;
        """,
        postgresql="""
        CREATE TABLE deliveries (
            request_id TEXT NOT NULL,
            channel TEXT NOT NULL,
            user_id TEXT NOT NULL,
            destination TEXT NOT NULL,
            requested_event_id TEXT NOT NULL,
            status TEXT NOT NULL,
            attempts INTEGER NOT NULL,
            provider TEXT NOT NULL,
            provider_message_id TEXT,
            error_type TEXT,
            error TEXT,
            latency_ms BIGINT,
            created_at BIGINT NOT NULL,
            updated_at BIGINT NOT NULL,
            PRIMARY KEY (request_id, channel)
        );
        """,
    ),
)


def _now() -> datetime:
    return datetime.now(UTC)


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def mask_address(address: str) -> str:
    """What a delivery row keeps of the destination (personal data): ``+155***00``,
    ``a***@example.com``."""
    if "@" in address:
        local, _, domain = address.rpartition("@")
        return f"{local[:1]}***@{domain}"
    keep = 4 if len(address) > 8 else 2
    return address[:keep] + "*" * max(0, len(address) - keep - 2) + address[-2:]


# -- the request -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OtpRequest:
    """The parts of an OtpRequested a sender uses."""

    event_id: str
    request_id: str
    user_id: str
    channels: tuple[str, ...]
    destinations: Mapping[str, str]
    sealed_code: Mapping[str, Any] | None = field(repr=False)
    expires_at: datetime
    occurred_at: datetime
    trace_id: str | None

    @classmethod
    def from_message(cls, message: Message) -> OtpRequest:
        """`PermanentError` unless the record is an OtpRequested."""
        if message.record_name != OTP_REQUESTED:
            raise PermanentError(f"{message.record_name} is not an OtpRequested")
        value = message.value
        try:
            envelope = value["envelope"]
            return cls(
                event_id=message.event_id,
                request_id=str(value["request_id"]),
                user_id=str(value["user_id"]),
                channels=tuple(str(c) for c in value["channels"]),
                destinations={str(d["channel"]): str(d["address"]) for d in value["destinations"]},
                sealed_code=value.get("sealed_code"),
                expires_at=_aware(value["expires_at"]),
                occurred_at=_aware(envelope["occurred_at"]),
                trace_id=envelope.get("trace_id"),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise PermanentError(f"malformed OtpRequested: {type(e).__name__}: {e}") from None


def _aware(value: Any) -> datetime:
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise ValueError(f"expected an aware timestamp, got {value!r}")
    return value


def open_code(keys: Mapping[str, bytes], request: OtpRequest) -> str:
    """The code of `request`, opened with the key its sealed code names; `PermanentError` (never
    showing the code) when there is none, the key is unknown or it does not open."""
    sealed = request.sealed_code
    if sealed is None:
        raise PermanentError(
            f"OtpRequested {request.request_id} has no sealed_code (the otp service runs without OTP_SEAL_KEY);"
            " the senders do not look codes up by request id"
        )
    key_id = str(sealed.get("key_id"))
    key = keys.get(key_id)
    if key is None:
        raise PermanentError(
            f"sealed_code of {request.request_id} names unknown key id {key_id!r} (known: {sorted(keys)})"
        )
    try:
        code = open_sealed_code(key, request.request_id, sealed)
    except (InvalidTag, ValueError, KeyError, UnicodeDecodeError):
        raise PermanentError(
            f"sealed_code of {request.request_id} does not open with key {key_id!r}: another key, or altered"
        ) from None
    if len(code) != CODE_DIGITS or not code.isdigit():
        raise PermanentError(f"sealed_code of {request.request_id} does not hold a {CODE_DIGITS}-digit code")
    return code


# The texts are a function of the request alone (no "now"): a resend after a crash carries the
# same body, which an idempotent provider requires (the catcher refuses a key reused with another body).


def _valid_minutes(request: OtpRequest) -> int:
    return max(1, math.ceil((request.expires_at - request.occurred_at).total_seconds() / 60))


def compose_sms(brand: str, code: str, request: OtpRequest) -> str:
    until = request.expires_at.astimezone(UTC).strftime("%H:%M UTC")
    return f"{code} is your {brand} code, valid until {until}. Never share it."


def compose_email(brand: str, code: str, request: OtpRequest) -> str:
    expires = request.expires_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    minutes = _valid_minutes(request)
    return (
        f"Your {brand} verification code is:\n\n"
        f"    {code}\n\n"
        f"It expires at {expires}, {minutes} minute{'s' if minutes != 1 else ''} after it was requested.\n\n"
        "If you did not ask for this code, ignore this mail. Never share the code with anyone.\n"
        f"-- {brand}\n"
    )


@contextmanager
def envelope_trace(message: Message, request: OtpRequest) -> Iterator[None]:
    """The request's trace, for a record without a ``traceparent`` header (written by another
    tool) whose envelope names one: the work below joins it.  With the header, the consumer's
    ``process`` span, the producer's child, is current already."""
    if message.header(TRACEPARENT_HEADER) is not None or not request.trace_id or not _TRACE_ID.match(request.trace_id):
        yield
        return
    request_id = (message.header(REQUEST_ID_HEADER) or b"").decode("utf-8", "replace") or request.trace_id
    with use_context(RequestContext(request_id, TraceContext(request.trace_id, secrets.token_hex(8)))):
        yield


# -- the handler -------------------------------------------------------------------------------


@dataclass(frozen=True)
class SenderPolicy:
    """What a sender group does (from its SenderConfig)."""

    group_id: str
    channel: Channel
    keys: Mapping[str, bytes] = field(repr=False)
    deliveries_topic: str = "otp.deliveries"
    max_attempts: int = 3
    retry_backoff: float = 0.5
    retry_backoff_max: float = 5.0
    service: str = "sender"
    instance: str = "sender-1"
    brand: str = "streamshop"
    subject: str = "Your streamshop verification code"

    def backoff(self, attempt: int) -> float:
        """Seconds to wait after failed attempt `attempt` (1-based)."""
        return min(self.retry_backoff * 2.0 ** (attempt - 1), self.retry_backoff_max)


@dataclass
class SenderStats:
    """Counters read by /metrics (incremented once the outcome is committed)."""

    delivered: Counter[str] = field(default_factory=Counter)  # provider -> deliveries
    failed: Counter[tuple[str, str, bool]] = field(default_factory=Counter)  # (provider, error_type, final)
    skipped: int = 0  # requests not asking for this channel


AttemptObserver = Callable[[str, str, float], None]
"""(provider, outcome ``delivered``/error type, seconds): called after each provider call."""


@dataclass(frozen=True, slots=True)
class _Outcome:
    status: str
    attempt: int
    provider: str
    event_name: str
    event: dict[str, Any]
    message_id: str | None = None
    error_type: str | None = None
    error: str | None = None
    latency_ms: int | None = None


class Sender:
    """The handler of one sender group (see the module docstring)."""

    def __init__(
        self,
        db: Database,
        outbox: Outbox,
        provider: Provider,
        policy: SenderPolicy,
        *,
        clock: Callable[[], datetime] = _now,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        on_attempt: AttemptObserver | None = None,
    ) -> None:
        self.db = db
        self.outbox = outbox
        self.provider = provider
        self.policy = policy
        self.handler = IdempotentHandler(db, policy.group_id, _nothing)
        self.stats = SenderStats()
        self._clock = clock
        self._sleep = sleep
        self._on_attempt = on_attempt

    async def setup(self) -> None:
        await self.outbox.setup()
        await self.handler.setup()
        await self.db.migrate("notify", MIGRATIONS)

    @property
    def duplicates(self) -> int:
        return self.handler.duplicates

    async def __call__(self, message: Message) -> None:
        if await self._seen(message):
            return
        request = OtpRequest.from_message(message)
        with envelope_trace(message, request):
            await self._handle(message, request)

    async def _handle(self, message: Message, request: OtpRequest) -> None:
        channel = self.policy.channel
        if channel.value not in request.channels:
            if await self._mark_done(message):
                self.stats.skipped += 1
            return
        address = request.destinations.get(channel.value)
        if address is None:
            raise PermanentError(f"OtpRequested {request.request_id} asks for {channel.value} but has no destination")
        row = await self.db.fetchone(
            "SELECT status, attempts FROM deliveries WHERE request_id = ? AND channel = ?",
            (request.request_id, channel.value),
        )
        if row is not None and row["status"] != RETRYING:
            await self._mark_done(message)  # finished under another event id: nothing more to do
            return
        attempt = (int(row["attempts"]) if row is not None else 0) + 1
        if self._clock() >= request.expires_at:
            await self._finish(message, request, address, self._expired(request, attempt))
            return
        code = open_code(self.policy.keys, request)
        last = max(self.policy.max_attempts, attempt)  # at least one call, even past a lowered max
        compose = compose_sms if channel is Channel.SMS else compose_email
        outgoing = OutgoingMessage(
            request.request_id, channel, address, compose(self.policy.brand, code, request), self.policy.subject
        )
        while True:
            started = time.perf_counter()
            try:
                result = await self.provider.send(outgoing)
            except DeliveryError as e:
                seconds = time.perf_counter() - started
                self._observe(e.error_type, seconds)
                will_retry = e.retryable and attempt < last
                outcome = self._failed(request, attempt, e, _scrub(e.message, code), seconds, will_retry=will_retry)
                if not will_retry:
                    await self._finish(message, request, address, outcome)
                    return
                await self._record_retry(request, address, outcome)
                log.info(
                    "delivery attempt failed, retrying",
                    request_id=request.request_id,
                    channel=channel.value,
                    attempt=attempt,
                    error_type=e.error_type,
                )
                await self._sleep(self.policy.backoff(attempt))
                attempt += 1
                if self._clock() >= request.expires_at:
                    await self._finish(message, request, address, self._expired(request, attempt))
                    return
                continue
            seconds = time.perf_counter() - started
            self._observe("delivered", seconds)
            await self._finish(message, request, address, self._delivered(request, attempt, result, seconds))
            return

    # -- events ---------------------------------------------------------------------------------

    def _envelope(self, now: datetime) -> dict[str, Any]:
        ctx = current_context()
        return {
            "event_id": str(uuid.uuid4()),
            "occurred_at": now,
            "producer": {"service": self.policy.service, "instance": self.policy.instance},
            "trace_id": ctx.trace.trace_id if ctx is not None else None,
        }

    def _base(self, request: OtpRequest, attempt: int, provider: str, provider_seconds: float) -> dict[str, Any]:
        now = self._clock()
        return {
            "envelope": self._envelope(now),
            "request_id": request.request_id,
            "channel": self.policy.channel.value,
            "provider": provider,
            "attempt": attempt,
            "latency_ms": max(0, _ms(now) - _ms(request.occurred_at)),
            "provider_latency_ms": round(provider_seconds * 1000),
        }

    def _delivered(self, request: OtpRequest, attempt: int, result: ProviderResult, seconds: float) -> _Outcome:
        event = self._base(request, attempt, result.provider, seconds)
        event["provider_message_id"] = result.message_id
        return _Outcome(
            DELIVERED,
            attempt,
            result.provider,
            "OtpDelivered",
            event,
            result.message_id,
            latency_ms=event["latency_ms"],
        )

    def _failed(
        self, request: OtpRequest, attempt: int, error: DeliveryError, text: str, seconds: float, *, will_retry: bool
    ) -> _Outcome:
        event = self._base(request, attempt, self.provider.name, seconds)
        event.update(error_type=error.error_type, error=text, will_retry=will_retry)
        status = RETRYING if will_retry else FAILED
        return _Outcome(
            status, attempt, self.provider.name, "OtpFailed", event, error_type=error.error_type, error=text
        )

    def _expired(self, request: OtpRequest, attempt: int) -> _Outcome:
        event = self._base(request, attempt, self.provider.name, 0.0)
        text = f"the code expired at {_iso(_ms(request.expires_at))} before it could be delivered"
        event.update(error_type=ERROR_EXPIRED, error=text, will_retry=False)
        return _Outcome(FAILED, attempt, self.provider.name, "OtpFailed", event, error_type=ERROR_EXPIRED, error=text)

    def _observe(self, outcome: str, seconds: float) -> None:
        if self._on_attempt is not None:
            self._on_attempt(self.provider.name, outcome, seconds)

    # -- recording ------------------------------------------------------------------------------
    # The four hooks below are where a sender keeps its progress: here its database (processed event ids,
    # rows and the outbox in one transaction); services.notify.transactional keeps it in a Kafka
    # transaction instead.

    async def _seen(self, message: Message) -> bool:
        return await self.handler.already_processed(message)

    async def _mark_done(self, message: Message) -> bool:
        """The record needs no delivery (another channel, or finished): remember it handled."""
        return await self.handler.record(message)

    async def _write(self, tx: Session, request: OtpRequest, address: str, outcome: _Outcome) -> None:
        await self._write_row(tx, request, address, outcome)
        await self.outbox.add(
            tx, self.policy.deliveries_topic, request.request_id, outcome.event_name, outcome.event, kafka_headers()
        )

    async def _write_row(self, tx: Session, request: OtpRequest, address: str, outcome: _Outcome) -> None:
        now = _ms(self._clock())
        await tx.execute(
            "INSERT INTO deliveries (request_id, channel, user_id, destination, requested_event_id, status, attempts,"
            " provider, provider_message_id, error_type, error, latency_ms, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (request_id, channel) DO UPDATE SET status = excluded.status, attempts = excluded.attempts,"
            " provider = excluded.provider, provider_message_id = excluded.provider_message_id,"
            " error_type = excluded.error_type, error = excluded.error, latency_ms = excluded.latency_ms,"
            " updated_at = excluded.updated_at",
            (
                request.request_id,
                self.policy.channel.value,
                request.user_id,
                mask_address(address),
                request.event_id,
                outcome.status,
                outcome.attempt,
                outcome.provider,
                outcome.message_id,
                outcome.error_type,
                outcome.error,
                outcome.latency_ms,
                now,
                now,
            ),
        )

    async def _record_retry(self, request: OtpRequest, address: str, outcome: _Outcome) -> None:
        """A failed attempt another one follows: its row and OtpFailed, but not the event id."""
        async with self.db.transaction() as tx:
            await self._write(tx, request, address, outcome)
            tx.on_commit(lambda: self._count(outcome, final=False))

    async def _finish(self, message: Message, request: OtpRequest, address: str, outcome: _Outcome) -> None:
        """The final outcome, the event and the processed event id in one transaction."""

        async def effect(tx: Session, _: Message) -> None:
            await self._write(tx, request, address, outcome)
            tx.on_commit(lambda: self._count(outcome, final=True))

        if await self.handler.record(message, effect):
            log.info(
                "delivery " + outcome.status,
                request_id=request.request_id,
                channel=self.policy.channel.value,
                attempt=outcome.attempt,
                provider=outcome.provider,
                error_type=outcome.error_type,
            )

    def _count(self, outcome: _Outcome, *, final: bool) -> None:
        if outcome.status == DELIVERED:
            self.stats.delivered[outcome.provider] += 1
        else:
            self.stats.failed[(outcome.provider, outcome.error_type or "unknown", final)] += 1

    # -- reading --------------------------------------------------------------------------------

    async def delivery(self, request_id: str) -> dict[str, Any] | None:
        """This sender's delivery of `request_id` as JSON, or None when it has none (unknown
        request, or a request that did not ask for this channel)."""
        row = await self.db.fetchone(
            "SELECT * FROM deliveries WHERE request_id = ? AND channel = ?", (request_id, self.policy.channel.value)
        )
        if row is None:
            return None
        return {
            "request_id": row["request_id"],
            "channel": row["channel"],
            "user_id": row["user_id"],
            "destination": row["destination"],
            "status": row["status"],
            "attempts": row["attempts"],
            "provider": row["provider"],
            "provider_message_id": row["provider_message_id"],
            "error_type": row["error_type"],
            "error": row["error"],
            "latency_ms": row["latency_ms"],
            "created_at": _iso(row["created_at"]),
            "updated_at": _iso(row["updated_at"]),
        }


async def _nothing(tx: Session, message: Message) -> None:
    """IdempotentHandler's default effect: the sender passes its own to `record`."""


def _scrub(text: str, code: str) -> str:
    """A provider's error text without the code (a provider may echo the message body)."""
    return text.replace(code, "*" * len(code))
