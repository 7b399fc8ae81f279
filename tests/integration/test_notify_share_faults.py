"""The e-mail sender's share consumer under a fault that kills it: when the group is full
(`group.share.max.size`), the broker refuses the sender's member with GROUP_MAX_SIZE_REACHED,
which librdkafka's share consumer treats as fatal: that consumer never fetches again.  The
sender must say so on /readyz (503, the consumer named) and replace the consumer until the
group has room, then be ready and deliver again, without a restart."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ShareConsumer

from registry.app import RunningRegistry
from services.common.share_runner import ShareRunner
from services.notify.app import RUNNER_KEY
from tests.integration.test_notify_senders import code_in, open_stack
from tests.support.harness import ThreadBroker
from tests.support.notify import serve_sender

pytestmark = [pytest.mark.slow]

GROUP = "email-sender"
FULL = 10  # the broker's smallest group.share.max.size (Kafka's bound too)


class Members:
    """`count` share consumers of `group`, polled by a thread of their own (each consumer is
    used by that one thread only, as the client requires)."""

    def __init__(self, bootstrap: str, group: str, count: int) -> None:
        config = {"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0}
        self.consumers = [ShareConsumer(config) for _ in range(count)]
        self.polled = 0
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="share-members", daemon=True)

    def _poll(self) -> None:
        for consumer in self.consumers:
            consumer.subscribe(["otp.requests"])
        while not self._halt.is_set():
            for consumer in self.consumers:
                consumer.poll(0.05)
            self.polled += 1
        for consumer in self.consumers:
            consumer.close()  # leave the group: room for the sender

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._halt.set()
        self._thread.join(60)
        assert not self._thread.is_alive()


async def _eventually(what: str, probe: Callable[[], Awaitable[Any]], within: float = 60) -> Any:
    deadline = time.monotonic() + within
    while True:
        got = await probe()
        if got:
            return got
        assert time.monotonic() < deadline, f"never: {what}"
        await asyncio.sleep(0.1)


async def test_a_share_consumer_refused_for_good_turns_readyz_red_and_is_replaced(
    tmp_path: Path, broker_factory: Callable[..., ThreadBroker], running_registry: RunningRegistry
) -> None:
    broker = broker_factory(settings={"group.share.max.size": str(FULL)})

    def members() -> int:
        group = broker.broker.shares.groups.get(GROUP)
        return len(group.members) if group is not None else 0

    async with open_stack(tmp_path, broker, running_registry) as stack:
        others = Members(broker.bootstrap, GROUP, FULL)
        others.start()
        try:
            await _eventually("the group is full", lambda: asyncio.to_thread(broker.call, lambda: members() == FULL))
            async with serve_sender(stack.email_config(group_type="share")) as sender:

                async def readiness() -> tuple[int, dict[str, Any]]:
                    status, body = await sender.http.call("GET", "/readyz")
                    return status, body

                async def red() -> dict[str, Any] | None:
                    status, body = await readiness()
                    return body if status == 503 else None

                body = await _eventually("/readyz turned 503", red)
                consumer = body["details"]["checks"]["consumer"]
                assert consumer["ok"] is False
                assert "GROUP_MAX_SIZE_REACHED" in consumer["error"] or "maximum size" in consumer["error"]
                assert all(check["ok"] for name, check in body["details"]["checks"].items() if name != "consumer")

                others.stop()  # the group has room again

                async def green() -> bool:
                    return (await readiness())[0] == 200

                await _eventually("/readyz turned 200 again", green)
                request_id = await stack.request(
                    {"user_id": "user-1", "channels": ["email"], "email": "u1@example.com"}
                )
                [delivery] = await stack.deliveries(1, within=60)
                assert (delivery.record_name, delivery.key) == ("OtpDelivered", request_id)
                [mail] = await stack.catcher.mails()
                assert len(code_in(mail["text"])) == 6
                runner = sender.app[RUNNER_KEY]
                assert isinstance(runner, ShareRunner)
                assert runner.replacements >= 1  # the same runner: its consumer replaced, no restart
        finally:
            if not others._halt.is_set():
                others.stop()
