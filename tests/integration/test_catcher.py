"""The catcher on real sockets: mails sent over SMTP (aiosmtplib) are listed over HTTP, newest
first; a mail whose Message-ID is already held collapses into it; the SMS sink honours
Idempotency-Key and a bearer token; bad input gets the services' JSON errors (400, 413, 415, 422)."""

from __future__ import annotations

import asyncio
from email.message import EmailMessage
from typing import Any

import aiosmtplib
import pytest

from tests.support.notify import Catcher, serve_catcher


def mail(to: str, subject: str, body: str, message_id: str | None = None) -> EmailMessage:
    m = EmailMessage()
    m["From"] = "streamshop <no-reply@streamshop.local>"
    m["To"] = to
    m["Subject"] = subject
    if message_id is not None:
        m["Message-ID"] = message_id
    m.set_content(body)
    return m


async def send(catcher: Catcher, message: EmailMessage, **kw: Any) -> str:
    _, response = await aiosmtplib.send(message, hostname="127.0.0.1", port=catcher.smtp_port, timeout=5, **kw)
    return response


async def test_mails_sent_over_smtp_are_listed_newest_first_filtered_by_recipient_and_readable_by_id() -> None:
    """Two mails over a real SMTP session: GET /messages lists both newest first with sender,
    recipients, subject and text; ?to= filters by recipient (case-insensitively); GET
    /messages/{id} has the headers too; the SMTP answer names the stored id; DELETE empties."""
    async with serve_catcher() as catcher:
        first = await send(catcher, mail("a@example.com", "first", "hello a", "<1@test>"))
        await send(catcher, mail("b@example.com", "second", "hello b\nline 2", "<2@test>"))
        items = await catcher.mails()
        assert [i["subject"] for i in items] == ["second", "first"]
        newest = items[0]
        assert newest["from"] == "streamshop <no-reply@streamshop.local>"
        assert newest["to"] == ["b@example.com"]
        assert newest["text"] == "hello b\nline 2\n"
        assert newest["message_id"] == "<2@test>"
        assert newest["received_at"].endswith("Z")
        assert items[1]["id"] in first  # "OK: queued as <id>"

        assert [i["subject"] for i in await catcher.mails(to="A@Example.com")] == ["first"]
        assert [i["subject"] for i in (await catcher.http.get("/messages?limit=1"))["items"]] == ["second"]
        detail = await catcher.http.get(f"/messages/{items[1]['id']}")
        assert detail["subject"] == "first"
        assert ["Message-ID", "<1@test>"] in detail["headers"]
        assert detail["envelope_from"] == "no-reply@streamshop.local"

        status, missing = await catcher.http.call("GET", "/messages/nope")
        assert status == 404
        assert missing["error"] == "unknown_message"
        assert await catcher.http.call("DELETE", "/messages") == (200, {"deleted": 2})
        assert await catcher.mails() == []


async def test_a_mail_with_a_message_id_already_held_is_collapsed_and_counted() -> None:
    """The same Message-ID twice (a sender's resend) is stored once, the SMTP answer names the
    first copy, and /metrics counts one mail received and one duplicate; mails without a
    Message-ID are never collapsed."""
    async with serve_catcher() as catcher:
        one = await send(catcher, mail("a@example.com", "code", "123456", "<req-1.email@streamshop.local>"))
        two = await send(catcher, mail("a@example.com", "code", "123456", "<req-1.email@streamshop.local>"))
        assert one == two
        assert len(await catcher.mails()) == 1
        no_id = mail("a@example.com", "no id", "x")
        del no_id["Message-ID"]
        await send(catcher, no_id)
        await send(catcher, no_id)
        assert len(await catcher.mails()) == 3
        metrics = await catcher.metrics()
        assert metrics["catcher_mails_received_total"] == 3
        assert metrics["catcher_mail_duplicates_total"] == 1
        assert metrics["catcher_mails_stored"] == 3


async def test_mailbox_keeps_only_the_newest_max_messages_and_readyz_checks_the_smtp_listener() -> None:
    async with serve_catcher(max_messages=2) as catcher:
        for i in range(3):
            await send(catcher, mail("a@example.com", f"m{i}", "x", f"<{i}@test>"))
        assert [m["subject"] for m in await catcher.mails()] == ["m2", "m1"]
        assert (await catcher.metrics())["catcher_mails_evicted_total"] == 1
        status, ready = await catcher.http.call("GET", "/readyz")
        assert status == 200
        assert set(ready["checks"]) == {"smtp"}


async def test_smtp_auth_with_any_credentials_is_accepted() -> None:
    """A sender configured for SMTP AUTH works against the catcher (plain AUTH without TLS)."""
    async with serve_catcher() as catcher:
        await send(catcher, mail("a@example.com", "auth", "x", "<auth@test>"), username="u", password="p")
        assert [m["subject"] for m in await catcher.mails()] == ["auth"]


SMS = {"to": "+15550100", "body": "123456 is your code", "request_id": "r-1"}


async def test_sms_with_a_repeated_idempotency_key_returns_the_first_answer_and_stores_nothing_new() -> None:
    """POST /sms stores the SMS (201 with its id); the same Idempotency-Key again answers the same
    201 body marked Idempotent-Replayed and stores nothing; the key with another body is 422;
    another key is another SMS.  GET /sms lists newest first and filters by ?to=."""
    async with serve_catcher() as catcher:
        http = catcher.http
        headers = {"Idempotency-Key": "r-1:sms"}
        async with http.session.post(http.url + "/sms", json=SMS, headers=headers) as r:
            assert r.status == 201
            first = await r.json()
            assert "Idempotent-Replayed" not in r.headers
        assert first["id"]
        assert {k: first[k] for k in SMS} == SMS
        async with http.session.post(http.url + "/sms", json=SMS, headers=headers) as r:
            assert r.status == 201
            assert r.headers["Idempotent-Replayed"] == "true"
            assert await r.json() == first
        status, err = await http.call("POST", "/sms", {**SMS, "body": "other"}, headers=headers)
        assert status == 422
        assert err["error"] == "idempotency_key_reused"
        status, other = await http.call("POST", "/sms", {**SMS, "to": "+15550199"}, headers={"Idempotency-Key": "k2"})
        assert status == 201
        assert other["id"] != first["id"]

        assert [s["id"] for s in await catcher.sms()] == [other["id"], first["id"]]
        assert [s["id"] for s in (await http.get("/sms?to=%2B15550100"))["items"]] == [first["id"]]
        metrics = await catcher.metrics()
        assert metrics["catcher_sms_received_total"] == 2
        assert metrics["catcher_sms_duplicates_total"] == 1
        assert await http.call("DELETE", "/sms") == (200, {"deleted": 2})
        assert await catcher.sms() == []


async def test_sms_token_is_required_when_configured() -> None:
    async with serve_catcher(sms_token="s3cret") as catcher:
        http = catcher.http
        status, err = await http.call("POST", "/sms", SMS)
        assert status == 401
        assert err["error"] == "unauthorized"
        status, _ = await http.call("POST", "/sms", SMS, headers={"Authorization": "Bearer wrong"})
        assert status == 401
        status, _ = await http.call("POST", "/sms", SMS, headers={"Authorization": "Bearer s3cret"})
        assert status == 201


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({"to": "5550100", "body": "x"}, {"to": "must be an E.164 phone number such as +15550100"}),
        ({"to": "+15550100", "body": ""}, {"body": "must not be empty"}),
        ({"body": "x", "extra": 1}, {"to": "is required", "extra": "is not an allowed field"}),
        ({"to": "+15550100", "body": "x" * 1601}, {"body": "must be at most 1600 characters"}),
        ({"to": "+15550100", "body": "x", "request_id": 5}, {"request_id": "must be a string"}),
    ],
)
async def test_invalid_sms_is_422_naming_each_field(body: dict[str, Any], fields: dict[str, str]) -> None:
    async with serve_catcher() as catcher:
        status, err = await catcher.http.call("POST", "/sms", body)
        assert status == 422
        assert err["error"] == "validation_failed"
        assert err["details"]["fields"] == fields


async def test_malformed_requests_get_400_413_415_and_bad_listing_parameters_422() -> None:
    async with serve_catcher(client_max_size=1024) as catcher:
        http = catcher.http
        url = http.url + "/sms"
        json_type = {"Content-Type": "application/json"}
        async with http.session.post(url, data=b"{not json", headers=json_type) as r:
            assert r.status == 400
            assert (await r.json())["error"] == "invalid_json"
        async with http.session.post(url, data=b"to=+15550100", headers={"Content-Type": "text/plain"}) as r:
            assert r.status == 415
        async with http.session.post(url, data=b'{"body": "' + b"x" * 2000 + b'"}', headers=json_type) as r:
            assert r.status == 413
            assert (await r.json())["error"] == "payload_too_large"
        status, err = await http.call("POST", "/sms", SMS, headers={"Idempotency-Key": "x" * 300})
        assert status == 400
        status, err = await http.call("GET", "/messages?limit=0&color=red")
        assert status == 422
        assert err["details"]["fields"] == {
            "limit": "must be between 1 and 1000",
            "color": "is not an allowed parameter (allowed: to, limit)",
        }
        assert (await http.call("GET", "/sms?limit=x"))[0] == 422


async def test_an_open_smtp_session_does_not_hold_up_shutdown() -> None:
    """A sender keeps its SMTP connection open between mails: stopping the catcher closes it."""
    async with serve_catcher() as catcher:
        client = aiosmtplib.SMTP(hostname="127.0.0.1", port=catcher.smtp_port, timeout=5)
        await client.connect()
        await client.send_message(mail("a@example.com", "kept", "x", "<kept@test>"))
        port = catcher.smtp_port
    assert not client.is_connected or await _closed(client)
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)


async def _closed(client: aiosmtplib.SMTP) -> bool:
    try:
        await client.noop()
    except aiosmtplib.SMTPServerDisconnected:
        return True
    return False
