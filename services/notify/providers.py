"""Delivery providers of the OTP senders: one interface, three implementations.

    result = await provider.send(OutgoingMessage(request_id, Channel.SMS, "+15550100", body))
    # -> ProviderResult("webhook", "<the provider's message id>"), or raises DeliveryError

`DeliveryError.error_type` classifies a failure the same way for every provider (it becomes
OtpFailed.error_type): ``timeout`` (no answer in time), ``unreachable`` (no connection, or the
provider answered that it cannot take messages now: HTTP 5xx, SMTP 421), ``rejected`` (the
provider refused the message), ``invalid_destination`` (it refused the address).  `retryable`
says whether another attempt may succeed.

Each provider deduplicates on its side, which is what makes a resend after a crash harmless (the
senders record a delivery only after the provider accepted it, see services.notify.sender):

- `SmtpEmailProvider`: the mail's ``Message-ID`` is derived from the request id, so a mailbox that
  collapses duplicates by Message-ID (Gmail does, and so does the catcher) shows one mail.
- `WebhookSmsProvider`: ``Idempotency-Key: <request_id>:sms`` on the POST, as payment and SMS APIs
  take it: a repeated key returns the first answer and sends nothing.
- `FileSinkSmsProvider`: remembers the idempotency keys already in its file.

Nothing here logs a message body: it contains the code.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import formatdate, getaddresses
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import aiosmtplib

from contracts.otp import Channel
from kit import tracing
from kit.tracing import current_context

__all__ = [
    "ERROR_INVALID_DESTINATION",
    "ERROR_REJECTED",
    "ERROR_TIMEOUT",
    "ERROR_UNREACHABLE",
    "DeliveryError",
    "FileSinkSmsProvider",
    "OutgoingMessage",
    "Provider",
    "ProviderResult",
    "SmtpEmailProvider",
    "WebhookSmsProvider",
    "classify_http_response",
    "classify_smtp_error",
    "email_message_id",
]

ERROR_TIMEOUT = "timeout"
ERROR_UNREACHABLE = "unreachable"
ERROR_REJECTED = "rejected"
ERROR_INVALID_DESTINATION = "invalid_destination"

_QUEUED_AS = re.compile(r"queued as\s+<?([^\s>]+)>?", re.IGNORECASE)
_DETAIL_LIMIT = 300


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """One code to deliver on one channel; `body` holds the code, so it is left out of repr()."""

    request_id: str
    channel: Channel
    to: str
    body: str = field(repr=False)
    subject: str = ""

    @property
    def idempotency_key(self) -> str:
        """``<request_id>:<channel>``: the same for every attempt and every redelivery."""
        return f"{self.request_id}:{self.channel.value}"


@dataclass(frozen=True, slots=True)
class ProviderResult:
    """The provider accepted the message: its name and the id it gave the message, if any."""

    provider: str
    message_id: str | None


class DeliveryError(Exception):
    """A provider did not accept the message; see the module docstring for `error_type`."""

    def __init__(self, error_type: str, message: str, *, retryable: bool) -> None:
        self.error_type = error_type
        self.message = message
        self.retryable = retryable
        super().__init__(f"{error_type}: {message}")


class Provider(Protocol):
    """What a sender needs of a provider."""

    @property
    def name(self) -> str: ...

    async def send(self, message: OutgoingMessage) -> ProviderResult:
        """Deliver `message` or raise `DeliveryError`."""
        ...

    async def check(self) -> None:
        """Raise when the provider cannot be reached (a readiness check)."""
        ...

    async def close(self) -> None: ...


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _DETAIL_LIMIT else text[: _DETAIL_LIMIT - 3] + "..."


# -- e-mail over SMTP --------------------------------------------------------------------------


def email_message_id(request_id: str, domain: str = "streamshop.local") -> str:
    """The deterministic Message-ID of a request's mail: every resend carries the same one."""
    return f"<{request_id}.email@{domain}>"


def classify_smtp_error(error: BaseException) -> DeliveryError:
    """The `DeliveryError` for an aiosmtplib (or socket) failure."""
    if isinstance(error, aiosmtplib.SMTPRecipientsRefused):
        codes = [r.code for r in error.recipients]
        text = "; ".join(f"{r.code} {r.message}" for r in error.recipients)
        if any(code >= 500 for code in codes):
            return DeliveryError(ERROR_INVALID_DESTINATION, _short(f"recipient refused: {text}"), retryable=False)
        return DeliveryError(ERROR_REJECTED, _short(f"recipient deferred: {text}"), retryable=True)
    if isinstance(error, aiosmtplib.SMTPRecipientRefused):
        if error.code >= 500:
            return DeliveryError(
                ERROR_INVALID_DESTINATION, _short(f"recipient refused: {error.code} {error.message}"), retryable=False
            )
        return DeliveryError(
            ERROR_REJECTED, _short(f"recipient deferred: {error.code} {error.message}"), retryable=True
        )
    if isinstance(error, aiosmtplib.SMTPAuthenticationError):
        return DeliveryError(
            ERROR_REJECTED, _short(f"authentication failed: {error.code} {error.message}"), retryable=False
        )
    if isinstance(error, aiosmtplib.SMTPResponseException):
        detail = _short(f"SMTP {error.code} {error.message}")
        if error.code == 421:  # "service not available, closing channel"
            return DeliveryError(ERROR_UNREACHABLE, detail, retryable=True)
        return DeliveryError(ERROR_REJECTED, detail, retryable=400 <= error.code < 500)
    if isinstance(error, TimeoutError):  # aiosmtplib's timeouts are TimeoutErrors too
        return DeliveryError(ERROR_TIMEOUT, _short(f"SMTP server did not answer in time ({error})"), retryable=True)
    if isinstance(error, (ConnectionError, OSError, aiosmtplib.SMTPConnectError, aiosmtplib.SMTPServerDisconnected)):
        return DeliveryError(ERROR_UNREACHABLE, _short(f"SMTP server unreachable: {error}"), retryable=True)
    if isinstance(error, aiosmtplib.SMTPException):  # e.g. STARTTLS required but not offered: a setting
        return DeliveryError(ERROR_REJECTED, _short(f"SMTP: {error}"), retryable=False)
    return DeliveryError(ERROR_REJECTED, _short(f"{type(error).__name__}: {error}"), retryable=False)


def _single_address(to: str) -> str:
    """`to` when it is exactly one bare address; else `DeliveryError` ``invalid_destination``.

    The address comes from the event, and the otp service's pattern lets through
    ``a@example.com,postmaster``: put in To: as is, it is a list (and the recipients were read
    back from To:), so the code would be mailed to mailboxes nobody asked for; a CR/LF (a record
    from another producer) is a header break.  The text is left out of the error: it is
    published on otp.deliveries, where destinations are personal data."""
    parsed = getaddresses([to])
    if "\r" in to or "\n" in to or len(parsed) != 1 or parsed[0] != ("", to) or "@" not in to:
        raise DeliveryError(
            ERROR_INVALID_DESTINATION, "the destination is not a single e-mail address", retryable=False
        )
    return to


class SmtpEmailProvider:
    """Mails over SMTP (aiosmtplib), on one connection kept open between messages and opened
    again after any failure.  A kept connection the server closed meanwhile (idle timeout) is
    reopened once within the same attempt instead of failing it."""

    name = "smtp"

    def __init__(
        self,
        *,
        host: str,
        port: int,
        from_address: str,
        username: str | None = None,
        password: str | None = None,
        start_tls: bool = False,
        use_tls: bool = False,
        validate_certs: bool = True,
        timeout: float = 5.0,
        message_id_domain: str = "streamshop.local",
    ) -> None:
        self.host = host
        self.port = port
        self.from_address = from_address
        self.timeout = timeout
        self.message_id_domain = message_id_domain
        self._options: dict[str, Any] = {
            "hostname": host,
            "port": port,
            "username": username,
            "password": password,
            "start_tls": start_tls,
            "use_tls": use_tls,
            "validate_certs": validate_certs,
            "timeout": timeout,
        }
        self._client: aiosmtplib.SMTP | None = None
        self._lock = asyncio.Lock()

    def compose(self, message: OutgoingMessage) -> EmailMessage:
        mail = EmailMessage()
        mail["From"] = self.from_address
        mail["To"] = _single_address(message.to)
        mail["Subject"] = message.subject
        mail["Date"] = formatdate(usegmt=True)
        mail["Message-ID"] = email_message_id(message.request_id, self.message_id_domain)
        mail["Auto-Submitted"] = "auto-generated"  # RFC 3834: no vacation auto-replies to a code
        mail.set_content(message.body)
        return mail

    async def send(self, message: OutgoingMessage) -> ProviderResult:
        mail = self.compose(message)
        async with self._lock:
            # The mail carries the trace on (a Traceparent header, which the catcher reads): a
            # CLIENT span per delivery attempt, as an HTTP call would have.
            with tracing.outgoing("smtp send", **{"server.address": self.host, "server.port": self.port}) as carrier:
                if "traceparent" in carrier:
                    mail["Traceparent"] = carrier["traceparent"]
                try:
                    async with asyncio.timeout(self.timeout):
                        response = await self._send(mail, message.to)
                except Exception as e:
                    self._drop()
                    raise classify_smtp_error(e) from e
        found = _QUEUED_AS.search(response)
        # The server's queue id when it tells one ("250 2.0.0 Ok: queued as 4XyZ1k2Ab3"), else our Message-ID.
        message_id = found.group(1) if found else str(mail["Message-ID"]).strip("<>")
        return ProviderResult(self.name, message_id)

    async def _send(self, mail: EmailMessage, to: str) -> str:
        # The one recipient given, not whatever aiosmtplib would read back out of the headers.
        recipients = [to]
        reused = self._client is not None and self._client.is_connected
        client = await self._connected()
        try:
            _, response = await client.send_message(mail, recipients=recipients)
        except (aiosmtplib.SMTPServerDisconnected, ConnectionError):
            if not reused:
                raise
            self._drop()
            client = await self._connected()
            _, response = await client.send_message(mail, recipients=recipients)
        return response

    async def _connected(self) -> aiosmtplib.SMTP:
        if self._client is not None and self._client.is_connected:
            return self._client
        client = aiosmtplib.SMTP(**self._options)
        await client.connect()
        self._client = client
        return client

    def _drop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()

    async def check(self) -> None:
        """The SMTP port accepts connections (a TCP connect; no SMTP session is opened)."""
        _, writer = await asyncio.open_connection(self.host, self.port)
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()

    async def close(self) -> None:
        async with self._lock:
            client, self._client = self._client, None
            if client is not None and client.is_connected:
                try:
                    async with asyncio.timeout(self.timeout):
                        await client.quit()
                except (aiosmtplib.SMTPException, OSError, TimeoutError):
                    client.close()


# -- SMS over an HTTP webhook ------------------------------------------------------------------


def _names_destination(body: Any) -> bool:
    """Whether an error body blames the ``to`` field (our services' and common API shapes)."""
    if not isinstance(body, dict):
        return False
    details = body.get("details")
    fields = details.get("fields") if isinstance(details, dict) else None
    errors = body.get("errors")
    return any(isinstance(c, dict) and "to" in c for c in (fields, errors)) or body.get("field") == "to"


def classify_http_response(status: int, raw: bytes) -> ProviderResult | DeliveryError:
    """A webhook's answer: accepted (2xx, with the body's ``id`` as message id) or the failure."""
    try:
        body: Any = json.loads(raw) if raw.strip() else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        body = None
    if 200 <= status < 300:
        message_id = body.get("id") if isinstance(body, dict) else None
        return ProviderResult("webhook", None if message_id is None else str(message_id))
    said = (body.get("message") or body.get("error")) if isinstance(body, dict) else None
    detail = _short(f"HTTP {status}" + (f": {said}" if isinstance(said, str) else ""))
    if status >= 500:
        return DeliveryError(ERROR_UNREACHABLE, detail, retryable=True)
    if status == 408:
        return DeliveryError(ERROR_TIMEOUT, detail, retryable=True)
    if status == 429:  # rate limited: later is fine
        return DeliveryError(ERROR_REJECTED, detail, retryable=True)
    if status in (400, 422) and _names_destination(body):
        return DeliveryError(ERROR_INVALID_DESTINATION, detail, retryable=False)
    return DeliveryError(ERROR_REJECTED, detail, retryable=False)


class WebhookSmsProvider:
    """SMS through an HTTP provider: ``POST url`` with JSON ``{"to", "body", "request_id"}``,
    ``Idempotency-Key: <request_id>:sms``, the request's ``traceparent`` and ``X-Request-ID`` and,
    with a token, ``Authorization: Bearer <token>``.  Redirects are not followed (a POST must
    reach the configured URL)."""

    name = "webhook"

    def __init__(self, url: str, *, token: str | None = None, timeout: float = 5.0) -> None:
        self.url = url
        self.timeout = timeout
        self._token = token
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
        return self._session

    async def send(self, message: OutgoingMessage) -> ProviderResult:
        headers = {"Idempotency-Key": message.idempotency_key}
        ctx = current_context()
        if ctx is not None:  # the request's trace continues into the provider's logs
            headers["traceparent"] = ctx.trace.traceparent()
            headers["X-Request-ID"] = ctx.request_id
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        payload = {"to": message.to, "body": message.body, "request_id": message.request_id}
        try:
            async with self._client().post(self.url, json=payload, headers=headers, allow_redirects=False) as r:
                raw = await r.read()
                status = r.status
        except TimeoutError as e:
            raise DeliveryError(
                ERROR_TIMEOUT, f"webhook did not answer within {self.timeout:g} s", retryable=True
            ) from e
        except aiohttp.ClientError as e:
            raise DeliveryError(ERROR_UNREACHABLE, _short(f"webhook unreachable: {e}"), retryable=True) from e
        outcome = classify_http_response(status, raw)
        if isinstance(outcome, DeliveryError):
            raise outcome
        return ProviderResult(self.name, outcome.message_id)

    async def check(self) -> None:
        """Not probed: a real SMS provider's endpoint takes POSTs, not health checks."""

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


# -- SMS into a local file ---------------------------------------------------------------------


class FileSinkSmsProvider:
    """SMS appended to a JSON lines file (``{"id", "to", "body", "request_id", "idempotency_key",
    "received_at"}``), for running without any HTTP sink.  The file stands in for the phone, so
    it holds the codes in clear: keep it local.  A key already in the file is not written again
    (the keys are read once, on the first send)."""

    name = "sink"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._ids: dict[str, str] | None = None
        self._lock = asyncio.Lock()

    def _load(self) -> dict[str, str]:
        ids: dict[str, str] = {}
        if not self.path.exists():
            return ids
        with self.path.open(encoding="utf-8") as lines:
            for line in lines:
                try:
                    entry = json.loads(line)
                    ids[str(entry["idempotency_key"])] = str(entry["id"])
                except (ValueError, KeyError, TypeError):
                    continue  # a line cut short by a crash
        return ids

    def _append(self, line: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as out:
            out.write(line + "\n")

    async def send(self, message: OutgoingMessage) -> ProviderResult:
        async with self._lock:
            try:
                if self._ids is None:
                    self._ids = await asyncio.to_thread(self._load)
                known = self._ids.get(message.idempotency_key)
                if known is not None:
                    return ProviderResult(self.name, known)
                message_id = uuid.uuid4().hex
                entry = {
                    "id": message_id,
                    "to": message.to,
                    "body": message.body,
                    "request_id": message.request_id,
                    "idempotency_key": message.idempotency_key,
                    "received_at": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                }
                await asyncio.to_thread(self._append, json.dumps(entry, ensure_ascii=False))
            except OSError as e:
                raise DeliveryError(ERROR_UNREACHABLE, _short(f"sink file {self.path}: {e}"), retryable=True) from e
            self._ids[message.idempotency_key] = message_id
            return ProviderResult(self.name, message_id)

    async def check(self) -> None:
        """Nothing to reach."""

    async def close(self) -> None:
        return None
