"""Two instances of a service drain one topic as a share group (services.common.share_runner,
the e-mail sender's runner); one stops after a batch while the other goes on: every event is
handled once, none twice. The stopping instance's acknowledgements reach the broker with its
final ShareAcknowledge, and only what it had not handled is released to the other one. Real
broker, registry and confluent-kafka ShareConsumers."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable

import pytest

from registry.app import RunningRegistry
from services.common.consumer import Handler, Message
from services.common.share_runner import ShareRunner
from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import create_topic
from tests.support.kit_processes import CATALOG, Kit, kit, order_created

pytestmark = pytest.mark.slow

ORDER_CREATED = CATALOG.schema("OrderCreated")
EVENTS = 60


@pytest.fixture
async def tools(broker: ThreadBroker, running_registry: RunningRegistry) -> AsyncIterator[Kit]:
    async with kit(broker.bootstrap, running_registry.url) as k:
        yield k


async def _wait_for(condition: Callable[[], bool], within: float = 60, what: str = "condition") -> None:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def test_an_instance_stopping_after_a_batch_hands_no_handled_event_to_another(
    broker: ThreadBroker, tools: Kit
) -> None:
    create_topic(broker.bootstrap, "otp-like", 1)
    handled: Counter[str] = Counter()
    by_instance: Counter[str] = Counter()

    def handler_of(name: str) -> Handler:
        async def handle(message: Message) -> None:
            handled[message.event_id] += 1
            by_instance[name] += 1
            await asyncio.sleep(0.01)  # some work: the two take turns

        return handle

    def runner(name: str) -> ShareRunner:
        return ShareRunner(
            {"bootstrap.servers": broker.bootstrap, "client.id": name},
            "senders",
            ["otp-like"],
            handler_of(name),
            deserializer=tools.deserializer,
            producer=tools.producer,
            max_records=10,
        )

    first, second = runner("first"), runner("second")
    await first.start()
    await second.start()
    try:
        ids = []
        for _ in range(EVENTS):
            record = order_created()
            await tools.producer.publish("otp-like", record["order_id"], ORDER_CREATED, record)
            ids.append(record["envelope"]["event_id"])
        await _wait_for(lambda: by_instance["first"] >= 5, what="the first instance to handle a batch")
        await first.stop()
        await _wait_for(lambda: set(handled) >= set(ids), what="every event handled")
        await asyncio.sleep(1)  # anything handed out twice would arrive meanwhile
    finally:
        await first.stop()
        await second.stop()
    assert set(handled) == set(ids)
    assert max(handled.values()) == 1, {i: n for i, n in handled.items() if n > 1}
    assert by_instance["second"] > 0  # the other instance went on with the rest
