"""The catcher's SMTP server: aiosmtpd's protocol served by `loop.create_server` on the caller's
event loop (the aiohttp app's), not aiosmtpd's threaded `Controller`, so the mailbox needs no
locking and the server starts and stops with the app."""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from email.parser import BytesHeaderParser
from email.policy import compat32
from typing import Any

from aiosmtpd.smtp import SMTP, AuthResult, Envelope, Session

from kit import tracing
from kit.logging import get_logger
from services.catcher.store import Mailbox

__all__ = ["MailboxHandler", "start_smtp_server", "stop_smtp_server"]

log = get_logger(__name__)


class MailboxHandler:
    """aiosmtpd handler: every mail accepted goes to the mailbox; the answer names its id
    (``250 OK: queued as <id>``, the id of the copy already held for a duplicate)."""

    def __init__(self, mailbox: Mailbox) -> None:
        self.mailbox = mailbox

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        raw = envelope.original_content or envelope.content or b""
        if isinstance(raw, str):
            raw = raw.encode("utf-8", "surrogateescape")
        # The sender's trace, from the mail's Traceparent header (a malformed one: a new trace).
        traceparent = BytesHeaderParser(policy=compat32).parsebytes(raw).get("Traceparent")
        with tracing.incoming("smtp receive", str(traceparent) if traceparent else None):
            mail, duplicate = self.mailbox.add(raw, envelope.mail_from or "", envelope.rcpt_tos)
            log.info("mail received", mail_id=mail.id, duplicate=duplicate, recipients=len(envelope.rcpt_tos))
        return f"250 OK: queued as {mail.id}"


def _accept_any(server: SMTP, session: Session, envelope: Envelope, mechanism: str, auth_data: Any) -> AuthResult:
    """A catcher takes any credentials (as MailHog does): senders configured for AUTH work."""
    return AuthResult(success=True)


async def start_smtp_server(
    mailbox: Mailbox, host: str, port: int, *, hostname: str, data_size_limit: int
) -> tuple[asyncio.Server, weakref.WeakSet[SMTP]]:
    """Serve SMTP on (host, port) on the running loop; returns the server and its live sessions."""
    loop = asyncio.get_running_loop()
    handler = MailboxHandler(mailbox)
    sessions: weakref.WeakSet[SMTP] = weakref.WeakSet()

    def session() -> SMTP:
        protocol = SMTP(
            handler,
            loop=loop,
            hostname=hostname,
            ident="streamshop catcher",
            data_size_limit=data_size_limit,
            enable_SMTPUTF8=True,
            auth_require_tls=False,
            authenticator=_accept_any,
        )
        sessions.add(protocol)
        return protocol

    server = await loop.create_server(session, host=host, port=port)
    return server, sessions


async def stop_smtp_server(server: asyncio.Server, sessions: weakref.WeakSet[SMTP]) -> None:
    """Stop listening and close open sessions (a sender keeps its connection open between mails,
    and newer Pythons' `wait_closed` waits for every connection)."""
    server.close()
    for protocol in list(sessions):
        transport = protocol.transport
        if transport is not None:
            transport.close()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(server.wait_closed(), 5)
