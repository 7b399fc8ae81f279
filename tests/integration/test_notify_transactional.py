"""The senders' exactly-once variant (delivery_mode=transactional) on real parts: deliveries and
the consumed offsets commit in one Kafka transaction, so otp.deliveries read at read_committed
holds one outcome per request and channel, also when the sender is SIGKILLed in the middle of a
transaction (its events written, not committed); the re-sent SMS carries the same
Idempotency-Key, which is how the provider collapses it."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition

from kit.ports import free_port
from services.notify.app import LOOP_KEY
from services.otp.domain import seal_code
from tests.integration import test_notify_senders as senders
from tests.integration.test_notify_senders import BOTH, SEAL_KEY, SEAL_KEY_B64, Stack, code_in, otp_requested
from tests.support.harness import REPO
from tests.support.kit_processes import CATALOG, kit
from tests.support.notify import Delivery, decode_deliveries, serve_sender, wait_for

# The senders' stack and its fixtures, shared.
broker = senders.broker
stack = senders.stack


async def read_committed(bootstrap: str, topic: str, *, within: float) -> list[Any]:
    """Every record of `topic` a read_committed consumer gets within `within` seconds."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False)
    await consumer.start()
    got: list[Any] = []
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(6)])
        await consumer.seek_to_beginning()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while loop.time() < deadline:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                got.extend(records)
    finally:
        await consumer.stop()
    return got


async def committed_deliveries(stack: Stack, within: float = 3) -> list[Delivery]:
    return await decode_deliveries(
        stack.registry_url, await read_committed(stack.broker.bootstrap, "otp.deliveries", within=within)
    )


async def test_transactional_senders_deliver_once_and_commit_offsets_in_the_transaction(stack: Stack) -> None:
    sms = stack.sms_config(delivery_mode="transactional", database_path=stack.tmp / "sms-eos.db")
    email = stack.email_config(delivery_mode="transactional", database_path=stack.tmp / "email-eos.db")
    async with serve_sender(sms) as s, serve_sender(email) as e:
        first = await stack.request()
        second = await stack.request({**BOTH, "user_id": "user-2"})

        async def both_sent() -> bool:
            return len(await stack.catcher.sms()) >= 2 and len(await stack.catcher.mails()) >= 2

        await wait_for(both_sent, what="two SMS and two mails")
        got = await committed_deliveries(stack)
        assert sorted((d.key, d.value["channel"], d.record_name) for d in got) == sorted(
            (r, c, "OtpDelivered") for r in (first, second) for c in ("sms", "email")
        )
        for app in (s, e):
            loop = app.app[LOOP_KEY]
            assert loop.committed_transactions >= 1
            status, row = await app.http.call("GET", f"/deliveries/{first}")
            assert status == 200
            assert row["status"] == "delivered"
        # The consumed offsets were committed by the transactions: two requests, read once.
        committed = stack.broker.call(lambda: stack.broker.broker.coordinator.committed("sms-sender"))
        assert sum(c.offset for c in committed.values()) == 2
    codes = {code_in(m["text"]) for m in await stack.catcher.mails()}
    assert len(codes) == 2


# -- a SIGKILL in the middle of a transaction ---------------------------------------------------


@asynccontextmanager
async def webhook(block: asyncio.Event, reached: asyncio.Event) -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """An SMS webhook that records every call; while `block` is set, the second distinct
    request it sees is held (and `reached` set) so the sender can be killed mid-transaction."""
    calls: list[dict[str, Any]] = []

    async def handle(request: web.Request) -> web.Response:
        body = await request.json()
        calls.append({"key": request.headers.get("Idempotency-Key"), "body": body})
        distinct = {c["key"] for c in calls}
        if block.is_set() and len(distinct) == 2:
            reached.set()
            while block.is_set():  # held until the test killed the sender
                await asyncio.sleep(0.05)
        return web.json_response({"id": f"sms-{len(calls)}"})

    app = web.Application()
    app.router.add_post("/sms", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        yield f"http://127.0.0.1:{port}/sms", calls
    finally:
        await runner.cleanup()


async def _in_log(stack: Stack) -> bool:
    return len(await stack.deliveries(1, within=0.5)) == 1


async def start_sender(stack: Stack, url: str, database: Path) -> asyncio.subprocess.Process:
    env = {
        **os.environ,
        "SMS_SENDER_BOOTSTRAP_SERVERS": stack.broker.bootstrap,
        "SMS_SENDER_REGISTRY_URL": stack.registry_url,
        "SMS_SENDER_SEAL_KEY": SEAL_KEY_B64,
        "SMS_SENDER_WEBHOOK_URL": url,
        "SMS_SENDER_DATABASE_PATH": str(database),
        "SMS_SENDER_PORT": str(free_port()),
        "SMS_SENDER_LOG_SHIPPING": "false",
        "SMS_SENDER_DELIVERY_MODE": "transactional",
        "SMS_SENDER_SESSION_TIMEOUT_MS": "1500",
        "SMS_SENDER_HEARTBEAT_INTERVAL_MS": "300",
    }
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "streamshop.cli", "sms-sender", cwd=REPO, env=env, stderr=asyncio.subprocess.DEVNULL
    )


@pytest.mark.slow
async def test_a_sender_killed_mid_transaction_publishes_each_outcome_once(stack: Stack) -> None:
    requests = [str(uuid.uuid4()) for _ in range(2)]
    async with kit(stack.broker.bootstrap, stack.registry_url) as k:
        schema = CATALOG.schema("OtpRequested")
        for request_id in requests:  # one user: one partition, one run, one transaction
            sealed = seal_code(SEAL_KEY, "k1", request_id, "424242")
            record = otp_requested(request_id, user_id="user-k", sealed=sealed)
            record["channels"] = ["sms"]
            await k.producer.publish("otp.requests", "user-k", schema, record)
    block, reached = asyncio.Event(), asyncio.Event()
    block.set()
    async with webhook(block, reached) as (url, calls):
        first = await start_sender(stack, url, stack.tmp / "killed.db")
        try:
            await asyncio.wait_for(reached.wait(), 60)  # request 1 delivered, request 2 at the provider
            await wait_for(lambda: _in_log(stack), within=30, what="request 1's OtpDelivered in the log, not committed")
        finally:
            first.kill()  # SIGKILL: the transaction holding request 1's OtpDelivered never commits
            await first.wait()
        block.clear()
        second = await start_sender(stack, url, stack.tmp / "killed.db")
        try:
            deadline = asyncio.get_running_loop().time() + 60
            got: list[Delivery] = []
            while asyncio.get_running_loop().time() < deadline:
                got = await committed_deliveries(stack, within=1)
                if len(got) >= 2:
                    break
        finally:
            second.terminate()
            await second.wait()
    # Exactly one outcome per request at read_committed; request 1 was sent twice with one key.
    assert sorted(d.key for d in got) == sorted(requests)
    assert {d.record_name for d in got} == {"OtpDelivered"}
    keys = [c["key"] for c in calls]
    assert len(set(keys)) == 2
    assert keys.count(keys[0]) == 2  # the re-send after the abort: same Idempotency-Key
    uncommitted = await stack.deliveries(3, within=3)
    assert len(uncommitted) == 3  # the aborted transaction's event is in the log, never committed
