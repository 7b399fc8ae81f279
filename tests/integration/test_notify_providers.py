"""The senders' providers against real servers on 127.0.0.1: how each answer or failure is
classified (error type, retryable), what the webhook sends (Idempotency-Key, bearer token, trace
headers), the SMTP provider's deterministic Message-ID and reconnection, the file sink's
deduplication."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import aiosmtplib
import pytest
from aiohttp import web
from aiosmtpd.smtp import SMTP, Envelope, Session
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from kit.ports import free_port
from kit.tracing import RequestContext, TraceContext, use_context
from services.notify.providers import (
    DeliveryError,
    FileSinkSmsProvider,
    OutgoingMessage,
    ProviderResult,
    SmtpEmailProvider,
    WebhookSmsProvider,
)
from services.otp.domain import Channel
from tests.support.notify import serve_catcher, status_server
from tests.support.spans import hex_trace, named, recorder

SMS = OutgoingMessage("req-1", Channel.SMS, "+15550100", "123456 is your code")
MAIL = OutgoingMessage("req-1", Channel.EMAIL, "a@example.com", "code 123456", "Your code")


async def failure(provider: Any, message: OutgoingMessage) -> DeliveryError:
    with pytest.raises(DeliveryError) as caught:
        await provider.send(message)
    return caught.value


# -- webhook -----------------------------------------------------------------------------------


async def test_webhook_posts_json_with_idempotency_key_token_and_trace_and_returns_the_id() -> None:
    async with status_server(201, {"id": "sms-42"}) as (url, seen):
        provider = WebhookSmsProvider(url, token="tok", timeout=2)
        ctx = RequestContext("req-abc", TraceContext("ab" * 16, "cd" * 8))
        try:
            with use_context(ctx):
                assert await provider.send(SMS) == ProviderResult("webhook", "sms-42")
        finally:
            await provider.close()
    (request,) = seen
    assert request["json"] == {"to": "+15550100", "body": "123456 is your code", "request_id": "req-1"}
    assert request["headers"]["Idempotency-Key"] == "req-1:sms"
    assert request["headers"]["Authorization"] == "Bearer tok"
    assert request["headers"]["traceparent"] == f"00-{'ab' * 16}-{'cd' * 8}-01"
    assert request["headers"]["X-Request-ID"] == "req-abc"


@pytest.mark.parametrize(
    ("status", "body", "error_type", "retryable"),
    [
        (503, {"message": "down"}, "unreachable", True),
        (500, None, "unreachable", True),
        (429, {"error": "slow down"}, "rejected", True),
        (408, None, "timeout", True),
        (401, {"error": "unauthorized"}, "rejected", False),
        (422, {"details": {"fields": {"to": "must be E.164"}}}, "invalid_destination", False),
        (400, {"details": {"fields": {"body": "too long"}}}, "rejected", False),
        (302, None, "rejected", False),
    ],
)
async def test_webhook_answers_are_classified(status: int, body: Any, error_type: str, retryable: bool) -> None:
    async with status_server(status, body) as (url, _):
        provider = WebhookSmsProvider(url, timeout=2)
        try:
            error = await failure(provider, SMS)
        finally:
            await provider.close()
    assert (error.error_type, error.retryable) == (error_type, retryable)
    assert error.message.startswith(f"HTTP {status}")


async def test_webhook_unreachable_and_slow_are_retryable() -> None:
    provider = WebhookSmsProvider(f"http://127.0.0.1:{free_port()}/sms", timeout=1)
    try:
        error = await failure(provider, SMS)
        assert (error.error_type, error.retryable) == ("unreachable", True)
    finally:
        await provider.close()

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(2)
        return web.json_response({"id": "late"})

    async with _http_app(slow) as url:
        provider = WebhookSmsProvider(url, timeout=0.2)
        try:
            error = await failure(provider, SMS)
        finally:
            await provider.close()
    assert (error.error_type, error.retryable) == ("timeout", True)


@asynccontextmanager
async def _http_app(handler: Any) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/sms", handler)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}/sms"
    finally:
        await runner.cleanup()


# -- SMTP --------------------------------------------------------------------------------------


async def test_smtp_delivers_with_a_message_id_derived_from_the_request_and_returns_the_queue_id() -> None:
    async with serve_catcher() as catcher:
        provider = SmtpEmailProvider(host="127.0.0.1", port=catcher.smtp_port, from_address="s <s@x.org>")
        try:
            result = await provider.send(MAIL)
        finally:
            await provider.close()
        (mail,) = await catcher.mails()
    assert result == ProviderResult("smtp", mail["id"])
    assert mail["message_id"] == "<req-1.email@streamshop.local>"
    assert mail["subject"] == "Your code"
    assert mail["text"] == "code 123456\n"


async def test_a_mail_carries_the_senders_trace_to_the_catcher_whose_span_continues_it() -> None:
    """The sender's ``smtp send`` CLIENT span is the current span's child and its context rides
    in the mail's Traceparent header; the catcher's ``smtp receive`` SERVER span is its child.
    A mail whose Traceparent is malformed is received in a trace of its own."""
    spans = recorder()
    async with serve_catcher() as catcher:
        provider = SmtpEmailProvider(host="127.0.0.1", port=catcher.smtp_port, from_address="s <s@x.org>")
        try:
            with trace.get_tracer("test").start_as_current_span("process otp.requests") as outer:
                await provider.send(MAIL)
        finally:
            await provider.close()
        (mail,) = await catcher.mails()
        async with aiohttp.ClientSession() as session, session.get(f"{catcher.url}/messages/{mail['id']}") as r:
            headers = dict((await r.json())["headers"])
        await _send_raw_mail(catcher.smtp_port, b"Traceparent: 00-zz\r\nSubject: x\r\n\r\nbody\r\n")
    (send,) = named(spans.get_finished_spans(), "smtp send")
    received = named(spans.get_finished_spans(), "smtp receive")
    assert len(received) == 2
    assert send.kind == SpanKind.CLIENT
    assert send.parent is not None
    assert send.parent.span_id == outer.get_span_context().span_id
    assert send.context is not None
    ours = TraceContext.of(send.context)
    assert headers["Traceparent"].split("-")[1:3] == [ours.trace_id, ours.span_id]
    assert received[0].parent is not None
    assert received[0].parent.span_id == send.context.span_id
    assert hex_trace(received[0]) == hex_trace(send)
    assert received[1].parent is None  # the malformed header: a new trace, the mail still taken


async def _send_raw_mail(port: int, data: bytes) -> None:
    smtp = aiosmtplib.SMTP(hostname="127.0.0.1", port=port)
    await smtp.connect()
    try:
        await smtp.sendmail("a@x.org", ["b@x.org"], data)
    finally:
        await smtp.quit()


async def test_smtp_reopens_a_kept_connection_the_server_closed_within_the_same_attempt() -> None:
    """The provider keeps its connection open; when the server went away meanwhile (here: the
    catcher restarted on the same port), the next send reconnects instead of failing."""
    port = free_port()
    provider = SmtpEmailProvider(host="127.0.0.1", port=port, from_address="s@x.org", timeout=2)
    try:
        async with serve_catcher(smtp_port=port) as catcher:
            await provider.send(MAIL)
            assert len(await catcher.mails()) == 1
        async with serve_catcher(smtp_port=port) as catcher:
            await provider.send(OutgoingMessage("req-2", Channel.EMAIL, "b@example.com", "x", "s"))
            assert [m["to"] for m in await catcher.mails()] == [["b@example.com"]]
        error = await failure(provider, MAIL)  # nobody listens any more
        assert (error.error_type, error.retryable) == ("unreachable", True)
    finally:
        await provider.close()


@pytest.mark.parametrize(
    "to",
    [
        "a@example.com,postmaster",  # passes the otp service's e-mail pattern (one '@')
        "postmaster,a@example.com",
        "a@example.com\r\nBcc: b@example.com",  # a record written to otp.requests by another tool
    ],
)
async def test_smtp_sends_to_exactly_the_one_address_of_the_request_or_refuses_it(to: str) -> None:
    """The destination comes from the event: it must be one bare address.  A list (or a header
    break) would otherwise widen the envelope, since the recipients are taken from the To: header,
    and mail the code to mailboxes nobody asked for."""
    async with serve_catcher() as catcher:
        provider = SmtpEmailProvider(host="127.0.0.1", port=catcher.smtp_port, from_address="s@x.org", timeout=2)
        try:
            error = await failure(provider, OutgoingMessage("req-9", Channel.EMAIL, to, "code 123456", "Your code"))
        finally:
            await provider.close()
        assert await catcher.mails() == []
    assert (error.error_type, error.retryable) == ("invalid_destination", False)
    assert "123456" not in str(error)


class _Refusing:
    """An SMTP server's handler answering RCPT or DATA with a fixed status line."""

    def __init__(self, rcpt: str | None = None, data: str | None = None) -> None:
        self.rcpt = rcpt
        self.data = data

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        if self.rcpt is not None:
            return self.rcpt
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        return self.data or "250 OK"


@asynccontextmanager
async def _smtp_server(handler: _Refusing) -> AsyncIterator[int]:
    loop = asyncio.get_running_loop()
    sessions: list[SMTP] = []

    def factory() -> SMTP:
        sessions.append(SMTP(handler, loop=loop, hostname="test"))
        return sessions[-1]

    server = await loop.create_server(factory, "127.0.0.1", 0)
    try:
        yield int(server.sockets[0].getsockname()[1])
    finally:
        server.close()
        for s in sessions:
            if s.transport is not None:
                s.transport.close()
        await server.wait_closed()


@pytest.mark.parametrize(
    ("handler", "error_type", "retryable"),
    [
        (_Refusing(rcpt="550 5.1.1 no such user"), "invalid_destination", False),
        (_Refusing(rcpt="451 4.3.0 try again later"), "rejected", True),
        (_Refusing(data="554 5.7.1 spam"), "rejected", False),
        (_Refusing(data="421 4.3.2 shutting down"), "unreachable", True),
    ],
)
async def test_smtp_refusals_are_classified(handler: _Refusing, error_type: str, retryable: bool) -> None:
    async with _smtp_server(handler) as port:
        provider = SmtpEmailProvider(host="127.0.0.1", port=port, from_address="s@x.org", timeout=2)
        try:
            error = await failure(provider, MAIL)
        finally:
            await provider.close()
    assert (error.error_type, error.retryable) == (error_type, retryable)


async def test_smtp_readiness_check_fails_when_the_port_is_closed() -> None:
    provider = SmtpEmailProvider(host="127.0.0.1", port=free_port(), from_address="s@x.org")
    with pytest.raises(OSError):
        await provider.check()
    async with serve_catcher() as catcher:
        await SmtpEmailProvider(host="127.0.0.1", port=catcher.smtp_port, from_address="s@x.org").check()


# -- file sink ---------------------------------------------------------------------------------


async def test_file_sink_writes_one_line_per_idempotency_key_even_across_restarts(tmp_path: Path) -> None:
    path = tmp_path / "sink" / "sms.jsonl"
    first = await FileSinkSmsProvider(path).send(SMS)
    again = await FileSinkSmsProvider(path).send(SMS)  # a new process reads the keys back
    other = await FileSinkSmsProvider(path).send(OutgoingMessage("req-2", Channel.SMS, "+15550199", "x"))
    assert first == again
    assert first.provider == "sink"
    assert other.message_id != first.message_id
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(line["request_id"], line["idempotency_key"]) for line in lines] == [
        ("req-1", "req-1:sms"),
        ("req-2", "req-2:sms"),
    ]
    assert lines[0]["body"] == "123456 is your code"
