"""The catcher's in-memory stores: the mailbox and the SMS list, each bounded (oldest evicted).

Duplicates collapse on purpose, so a sender's resend after a crash shows as one message:

- **Mailbox**: a mail whose ``Message-ID`` the mailbox already holds is not stored again (Gmail
  does the same); it is counted in `duplicates` and the SMTP answer names the first copy's id.
  Mails without a Message-ID are always stored.
- **SMS**: a POST with an ``Idempotency-Key`` already seen returns the first answer and stores
  nothing (`replayed` counts them), as payment and SMS APIs do; the same key with another body is
  refused (`IdempotencyConflict`).  A key is remembered as long as its SMS is kept.
"""

from __future__ import annotations

import email
import email.policy
import hashlib
import json
import secrets
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import EmailMessage
from typing import Any

__all__ = ["IdempotencyConflict", "Mail", "Mailbox", "Sms", "SmsBox", "parse_mail"]


def _now() -> datetime:
    return datetime.now(UTC)


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _new_id() -> str:
    return secrets.token_hex(8)


@dataclass(frozen=True, slots=True)
class Mail:
    id: str
    message_id: str | None
    envelope_from: str
    sender: str
    to: tuple[str, ...]
    subject: str
    text: str
    html: str | None
    headers: tuple[tuple[str, str], ...]
    size: int
    received_at: datetime

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "message_id": self.message_id,
            "from": self.sender,
            "to": list(self.to),
            "subject": self.subject,
            "text": self.text,
            "received_at": _iso(self.received_at),
        }

    def detail(self) -> dict[str, Any]:
        return {
            **self.summary(),
            "envelope_from": self.envelope_from,
            "html": self.html,
            "headers": [[name, value] for name, value in self.headers],
            "size": self.size,
        }


def _lines(text: str) -> str:
    """Body text with the wire's CRLF line ends as plain newlines."""
    return text.replace("\r\n", "\n")


def parse_mail(
    raw: bytes, envelope_from: str, recipients: Iterable[str], *, mail_id: str, received_at: datetime
) -> Mail:
    """A `Mail` of the raw message; lenient (what a catcher receives is whatever the client sent)."""
    message: EmailMessage = email.message_from_bytes(raw, policy=email.policy.default)
    text, html = "", None
    try:
        plain = message.get_body(preferencelist=("plain",))
        if plain is not None:
            text = _lines(str(plain.get_content()))
        rich = message.get_body(preferencelist=("html",))
        if rich is not None:
            html = _lines(str(rich.get_content()))
    except (LookupError, ValueError):  # unknown charset or broken transfer encoding: keep the raw text
        text = _lines(raw.decode("utf-8", "replace"))
    message_id = message.get("Message-ID")
    return Mail(
        id=mail_id,
        message_id=str(message_id).strip() if message_id else None,
        envelope_from=envelope_from,
        sender=str(message.get("From", envelope_from)),
        to=tuple(recipients),
        subject=str(message.get("Subject", "")),
        text=text,
        html=html,
        headers=tuple((name, str(value)) for name, value in message.items()),
        size=len(raw),
        received_at=received_at,
    )


class Mailbox:
    """At most `capacity` mails, newest last; duplicates by Message-ID collapsed."""

    def __init__(self, capacity: int, *, clock: Callable[[], datetime] = _now) -> None:
        self.capacity = capacity
        self._clock = clock
        self._mails: OrderedDict[str, Mail] = OrderedDict()
        self._by_message_id: dict[str, str] = {}
        self.received = 0  # stored mails, since start
        self.duplicates = 0  # mails collapsed into one already held
        self.evicted = 0

    def add(self, raw: bytes, envelope_from: str, recipients: Iterable[str]) -> tuple[Mail, bool]:
        """Store a received mail; (the mail held, True when it was a duplicate of it)."""
        mail = parse_mail(raw, envelope_from, recipients, mail_id=_new_id(), received_at=self._clock())
        if mail.message_id is not None:
            held = self._by_message_id.get(mail.message_id)
            if held is not None:
                self.duplicates += 1
                return self._mails[held], True
            self._by_message_id[mail.message_id] = mail.id
        self._mails[mail.id] = mail
        self.received += 1
        while len(self._mails) > self.capacity:
            _, old = self._mails.popitem(last=False)
            if old.message_id is not None:
                self._by_message_id.pop(old.message_id, None)
            self.evicted += 1
        return mail, False

    def list(self, *, to: str | None = None, limit: int = 50) -> list[Mail]:
        """Newest first; `to` matches any recipient, case-insensitively."""
        wanted = to.lower() if to is not None else None
        out: list[Mail] = []
        for mail in reversed(self._mails.values()):
            if wanted is None or any(r.lower() == wanted for r in mail.to):
                out.append(mail)
                if len(out) >= limit:
                    break
        return out

    def get(self, mail_id: str) -> Mail | None:
        return self._mails.get(mail_id)

    def clear(self) -> int:
        count = len(self._mails)
        self._mails.clear()
        self._by_message_id.clear()
        return count

    def __len__(self) -> int:
        return len(self._mails)


@dataclass(frozen=True, slots=True)
class Sms:
    id: str
    to: str
    body: str
    request_id: str | None
    idempotency_key: str | None
    received_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "to": self.to,
            "body": self.body,
            "request_id": self.request_id,
            "idempotency_key": self.idempotency_key,
            "received_at": _iso(self.received_at),
        }


class IdempotencyConflict(Exception):
    """The idempotency key was used before with another request body."""


class SmsBox:
    """At most `capacity` SMS, newest last; repeated idempotency keys replayed."""

    def __init__(self, capacity: int, *, clock: Callable[[], datetime] = _now) -> None:
        self.capacity = capacity
        self._clock = clock
        self._sms: OrderedDict[str, Sms] = OrderedDict()
        self._keys: dict[str, tuple[str, str]] = {}  # idempotency key -> (request fingerprint, sms id)
        self.received = 0
        self.replayed = 0
        self.evicted = 0

    def add(self, to: str, body: str, request_id: str | None, idempotency_key: str | None) -> tuple[Sms, bool]:
        """Store an SMS; (the SMS held, True when the key was seen: nothing stored).
        `IdempotencyConflict` when the key came with another body."""
        fingerprint = hashlib.sha256(
            json.dumps([to, body, request_id], ensure_ascii=False).encode(), usedforsecurity=False
        ).hexdigest()
        if idempotency_key is not None:
            seen = self._keys.get(idempotency_key)
            if seen is not None:
                if seen[0] != fingerprint:
                    raise IdempotencyConflict(idempotency_key)
                self.replayed += 1
                return self._sms[seen[1]], True
        sms = Sms(_new_id(), to, body, request_id, idempotency_key, self._clock())
        self._sms[sms.id] = sms
        if idempotency_key is not None:
            self._keys[idempotency_key] = (fingerprint, sms.id)
        self.received += 1
        while len(self._sms) > self.capacity:
            _, old = self._sms.popitem(last=False)
            if old.idempotency_key is not None:
                self._keys.pop(old.idempotency_key, None)
            self.evicted += 1
        return sms, False

    def list(self, *, to: str | None = None, limit: int = 50) -> list[Sms]:
        out: list[Sms] = []
        for sms in reversed(self._sms.values()):
            if to is None or sms.to == to:
                out.append(sms)
                if len(out) >= limit:
                    break
        return out

    def clear(self) -> int:
        """Forget every SMS and every idempotency key."""
        count = len(self._sms)
        self._sms.clear()
        self._keys.clear()
        return count

    def __len__(self) -> int:
        return len(self._sms)
