"""The e-mail sender as a share group (`EMAIL_SENDER_GROUP_TYPE=share`, as the stack runs it),
on real parts: two instances drain otp.requests as a queue — every request mailed once, by
whichever instance was free; poison records are dead-lettered once for the group and the
request behind them is mailed; requests written before the group's first fetch are handled
too (the runner starts the group at the earliest records)."""

from __future__ import annotations

import asyncio
import secrets
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services.otp.domain import seal_code
from tests.integration.test_notify_senders import SEAL_KEY, Stack, code_in, open_stack, otp_requested
from tests.support.harness import ThreadBroker
from tests.support.kit_processes import CATALOG, kit
from tests.support.notify import SenderApp, read_topic, serve_sender
from tests.support.registry import ThreadRegistry


@pytest.fixture
async def stack(tmp_path: Path, broker: ThreadBroker, shared_registry: ThreadRegistry) -> AsyncIterator[Stack]:
    async with open_stack(tmp_path, broker, shared_registry.running) as s:
        yield s


async def _handled_by(request_ids: list[str], *senders: SenderApp) -> Counter[int]:
    """How many of `request_ids` each sender (by index) holds a delivery of."""
    counts: Counter[int] = Counter()
    for request_id in request_ids:
        for index, sender in enumerate(senders):
            status, _ = await sender.http.call("GET", f"/deliveries/{request_id}")
            if status == 200:
                counts[index] += 1
    return counts


async def test_two_instances_drain_the_requests_as_a_queue_each_mailed_once(stack: Stack) -> None:
    config = stack.email_config(group_type="share")
    other = stack.email_config(group_type="share", database_path=stack.tmp / "email-sender-2.db", instance_id="2")
    async with serve_sender(config) as first, serve_sender(other) as second:
        request_ids = []
        for i in range(30):
            body = {"user_id": f"user-{i}", "channels": ["email"], "email": f"u{i}@example.com"}
            request_ids.append(await stack.request(body))
            await asyncio.sleep(0.02)  # requests arrive over time, as a queue's work does
        got = await stack.deliveries(30, within=30)
        assert sorted(d.key for d in got) == sorted(request_ids)  # every request delivered once
        mails = await stack.catcher.mails()
        assert len({m["message_id"] for m in mails}) == len(mails) == 30  # none mailed twice
        by_instance = await _handled_by(request_ids, first, second)
        assert sum(by_instance.values()) == 30
        assert len(by_instance) == 2, by_instance  # both instances took their share


async def test_poison_records_are_dead_lettered_once_and_earlier_requests_are_not_skipped(stack: Stack) -> None:
    """Written before any member of the group fetched: a garbage record, one sealed under
    another key, then a good one.  The group dead-letters the two poison records once and
    mails the good one."""
    good_id, wrong_key_id = str(uuid.uuid4()), str(uuid.uuid4())
    async with kit(stack.broker.bootstrap, stack.registry_url) as k:
        schema = CATALOG.schema("OtpRequested")
        await (await k.producer.send_raw("otp.requests", "user-p", b"not avro at all"))
        bad = seal_code(secrets.token_bytes(32), "k1", wrong_key_id, "111111")
        await k.producer.publish("otp.requests", "user-p", schema, otp_requested(wrong_key_id, sealed=bad))
        good = seal_code(SEAL_KEY, "k1", good_id, "333333")
        await k.producer.publish("otp.requests", "user-p", schema, otp_requested(good_id, sealed=good))
    async with serve_sender(stack.email_config(group_type="share")):
        got = await stack.deliveries(1, within=20)
        assert [(d.record_name, d.key) for d in got] == [("OtpDelivered", good_id)]
        assert code_in((await stack.catcher.mails())[0]["text"]) == "333333"
        dead = await read_topic(stack.broker.bootstrap, "otp.requests.dlq", count=2)
        assert len(await read_topic(stack.broker.bootstrap, "otp.requests.dlq", count=3, within=1)) == 2
    assert [dict(r.headers)["dlq.group"] for r in dead] == [b"email-sender", b"email-sender"]
    assert [dict(r.headers)["dlq.error.class"].rsplit(b".", 1)[-1] for r in dead] == [
        b"UnknownMagicByteError",
        b"PermanentError",
    ]
