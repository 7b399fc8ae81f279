"""The stack on PostgreSQL with several instances of every service with state (`streamshop up
--postgres --scale ...`): the patterns where they break.

- Three orders instances behind one port under a paced load (400 orders at 50/s, each then paid
  and shipped), one SIGKILLed, then the instance
  leading the outbox relay: every order answered 201 is on `orders` (Confluent's Avro
  deserializer), each order's events in the order they happened, no event twice in a partition
  beyond one relay batch (the at-least-once window: what a relay published but had not marked
  when it died).
- The PostgreSQL server restarted under load: 503 with Retry-After while it is down, `/readyz`
  says the database is why, every 201 kept, recovery without help.
- 40 OTP requests for one phone number from 20 users through two otp instances: limited exactly
  as one instance limits them.
- And the end-to-end tests of the single-instance stack (tests/integration/test_stack_e2e.py),
  here with two instances of each sender (one SIGKILLed mid-stream: still one SMS and one mail
  per request), two logs indexers (full-text search on PostgreSQL) and the orders' Avro.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from typing import Any

import aiohttp
import pytest
from confluent_kafka import Consumer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.integration import test_stack_e2e as e2e
from tests.integration.test_stack_e2e import bootstrap, eventually, order_body, url
from tests.support.stack import Stack, alive, running_stack

pytestmark = [pytest.mark.stack]

# The same tests as on the single-instance stack, collected here on this module's stack, in this
# order (the logs test looks for the access logs of the orders the first one made).
test_orders_events_are_keyed_avro_that_confluent_kafkas_deserializer_reads = (
    e2e.test_orders_events_are_keyed_avro_that_confluent_kafkas_deserializer_reads
)
test_one_otp_request_yields_one_sms_and_one_email_even_when_a_sender_is_killed_mid_stream = (
    e2e.test_one_otp_request_yields_one_sms_and_one_email_even_when_a_sender_is_killed_mid_stream
)
test_logs_of_every_service_are_searchable_in_the_logs_service = (
    e2e.test_logs_of_every_service_are_searchable_in_the_logs_service
)

SCALE = "orders=3,otp=2,logs=2,sms-sender=2,email-sender=2"
COUNT = 400  # orders of the SIGKILL test, paced at 50/s: the two kills land 2 s and 4 s into 8 s
RELAY_BATCH = 500  # OutboxRelay's batch_size: the most a relay that dies can leave published but unmarked


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(
        tmp_path_factory.mktemp("pg-stack"),
        without=("analytics", "dashboard"),
        args=("--postgres", "--scale", SCALE, "--observability"),
    ) as running:
        yield running


def _relay_leader(stack: Stack, service: str, names: list[str]) -> str | None:
    """The instance of `service` whose log says it took the outbox relay's leadership last."""
    latest: tuple[str, str] | None = None
    for name in names:
        log = stack.data / "output" / f"{name}.log"
        for line in log.read_text(errors="replace").splitlines():
            if '"leadership taken"' in line and f"/{service}" in line:
                stamp = line.split('"timestamp":"', 1)[1][:32] if '"timestamp":"' in line else ""
                if latest is None or stamp > latest[0]:
                    latest = (stamp, name)
    return None if latest is None else latest[1]


def _orders_topic(
    stack: Stack, wanted: Mapping[str, list[str]], within: float = 90
) -> list[tuple[int, dict[str, Any]]]:
    """(partition, value) of every record of `orders`, read with confluent-kafka's AvroDeserializer
    until every order of `wanted` has an event for each of its statuses there."""
    registry = SchemaRegistryClient({"url": url(stack, "registry")})
    deserializer = AvroDeserializer(registry)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap(stack),
            "group.id": f"check-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(["orders"])
    records: list[tuple[int, dict[str, Any]]] = []
    expected = {(order_id, status) for order_id, statuses in wanted.items() for status in statuses}
    seen: set[tuple[str, str]] = set()
    deadline = time.monotonic() + within
    try:
        while not expected <= seen and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            value = deserializer(message.value(), SerializationContext("orders", MessageField.VALUE))
            records.append((int(message.partition() or 0), value))
            seen.add((str(value["order_id"]), "created" if "items" in value else str(value["to_status"])))
    finally:
        consumer.close()
        registry.close()
    return records


async def _paced_orders(
    session: aiohttp.ClientSession, target: str, count: int, rate: float
) -> tuple[dict[str, list[str]], int]:
    """`count` orders at `rate` per second, each then paid and shipped; (order id -> the statuses
    it was acknowledged in, in order), and how many requests failed (an instance killed under them)."""
    acknowledged: dict[str, list[str]] = {}
    failures = 0

    async def one(n: int) -> None:
        nonlocal failures
        try:
            async with session.post(f"{target}/orders", json=order_body(n)) as response:
                if response.status != 201:
                    failures += 1
                    return
                order_id = (await response.json())["order_id"]
            acknowledged[order_id] = ["created"]
            for status in ("paid", "shipped"):
                async with session.post(f"{target}/orders/{order_id}/status", json={"status": status}) as response:
                    if response.status != 200:
                        failures += 1
                        return
                acknowledged[order_id].append(status)
        except (aiohttp.ClientError, TimeoutError):
            failures += 1

    tasks = []
    began = time.monotonic()
    for n in range(count):
        tasks.append(asyncio.create_task(one(n)))
        await asyncio.sleep(max(0.0, began + (n + 1) / rate - time.monotonic()))
    await asyncio.gather(*tasks)
    return acknowledged, failures


async def test_the_relay_of_whichever_instance_leads_continues_the_trace_of_the_request_another_took(
    stack: Stack,
) -> None:
    """Orders placed through the three instances (the kernel spreads the connections), each with
    a trace of its own: in Zipkin, each request's SERVER span and the ``send orders`` of its
    event, its child, published by the instance leading the relay, which for some is another
    instance than the one that took the request: the context travelled in the outbox row."""
    orders, traces = url(stack, "orders"), url(stack, "traces")
    trace_ids = [uuid.uuid4().hex for _ in range(12)]
    async with aiohttp.ClientSession() as session:
        for i, trace_id in enumerate(trace_ids):
            headers = {"traceparent": f"00-{trace_id}-{uuid.uuid4().hex[:16]}-01", "Connection": "close"}
            async with session.post(f"{orders}/orders", json=order_body(i), headers=headers) as r:
                assert r.status == 201

        async def both(trace_id: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
            async with session.get(f"{traces}/api/v2/trace/{trace_id}") as r:
                spans = await r.json() if r.status == 200 else []
            server = [s for s in spans if s["name"] == "post /orders" and s.get("kind") == "SERVER"]
            send = [s for s in spans if s["name"] == "send orders" and s.get("kind") == "PRODUCER"]
            return (server[0], send[0]) if server and send else None

        pairs = [await e2e.eventually(f"trace {t}", lambda t=t: both(t), within=180, every=1) for t in trace_ids]
    instances = []
    for server, send in pairs:
        assert send["parentId"] == server["id"]
        assert server["localEndpoint"]["serviceName"] == send["localEndpoint"]["serviceName"] == "orders"
        instances.append((server["tags"]["service.instance.id"], send["tags"]["service.instance.id"]))
    assert len({took for took, _ in instances}) > 1, instances  # the kernel spread the requests
    assert any(took != sent for took, sent in instances), instances  # another instance's relay sent it


async def test_orders_through_three_instances_lose_nothing_when_an_instance_and_the_relay_are_killed(
    stack: Stack,
) -> None:
    target = url(stack, "orders")
    instances = ["orders", "orders-2", "orders-3"]
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        load = asyncio.create_task(_paced_orders(session, target, count=COUNT, rate=50))
        await asyncio.sleep(2)
        victim = stack.child("orders-2")
        os.kill(victim["pid"], signal.SIGKILL)
        await asyncio.sleep(2)
        leader = _relay_leader(stack, "orders", instances)
        assert leader is not None, "no orders instance leads the outbox relay"
        leader_pid = stack.child(leader)["pid"]
        os.kill(leader_pid, signal.SIGKILL)
        acknowledged, failures = await load
    assert not alive(leader_pid)
    # Requests in flight to a killed instance fail, and a loaded machine times some out: what
    # matters is that whatever was acknowledged is kept, in order; half is enough to show it.
    assert len(acknowledged) >= COUNT // 2, f"only {len(acknowledged)} orders acknowledged ({failures} failed)"

    records = await asyncio.to_thread(_orders_topic, stack, acknowledged)
    by_order: dict[str, list[tuple[str, str]]] = defaultdict(list)
    per_partition: Counter[tuple[int, str]] = Counter()
    for partition, value in records:
        event_id = str(value["envelope"]["event_id"])
        per_partition[(partition, event_id)] += 1
        status = "created" if "items" in value else str(value["to_status"])
        by_order[str(value["order_id"])].append((event_id, status))
    missing = set(acknowledged) - set(by_order)
    assert not missing, f"{len(missing)} acknowledged orders not on the topic"
    for order_id, statuses in acknowledged.items():
        first_seen: list[str] = []
        seen: set[str] = set()
        for event_id, status in by_order[order_id]:
            if event_id not in seen:
                seen.add(event_id)
                first_seen.append(status)
        # Every acknowledged change is there, in the order it happened (a change whose answer was
        # lost with its instance may be there too, after them).
        assert first_seen[: len(statuses)] == statuses, (order_id, first_seen, statuses)
    duplicates = sum(n - 1 for n in per_partition.values())
    assert duplicates <= 2 * RELAY_BATCH, f"{duplicates} duplicate events: more than the relays' window"


async def test_a_postgres_restart_under_load_answers_503_meanwhile_and_loses_nothing(stack: Stack) -> None:
    target = url(stack, "orders")
    server = stack.child("postgres")
    acknowledged: set[str] = set()
    unavailable: list[tuple[int, str | None, dict[str, Any]]] = []
    readyz_down: list[dict[str, Any]] = []
    stop = asyncio.Event()

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as session:

        async def load() -> None:
            n = 0
            while not stop.is_set():
                n += 1
                try:
                    async with session.post(f"{target}/orders", json=order_body(n)) as response:
                        body = await response.json()
                        if response.status == 201:
                            acknowledged.add(body["order_id"])
                        elif response.status == 503:
                            unavailable.append((response.status, response.headers.get("Retry-After"), body))
                    if response.status == 503:
                        async with session.get(f"{target}/readyz") as ready:
                            if ready.status == 503:
                                readyz_down.append(await ready.json())
                except (aiohttp.ClientError, TimeoutError):
                    pass
                await asyncio.sleep(0.02)

        loader = asyncio.create_task(load())
        await eventually("orders flowing", lambda: _count_at_least(acknowledged, 20), within=90)
        os.kill(server["pid"], signal.SIGTERM)  # a fast shutdown; the supervisor starts it again
        await eventually("a 503 while the database is down", lambda: _count_at_least(unavailable, 1), within=90)
        before = len(acknowledged)
        await eventually("orders acknowledged again", lambda: _count_at_least(acknowledged, before + 20), within=90)
        stop.set()
        await loader

    _, retry_after, body = unavailable[0]
    assert retry_after is not None, unavailable[0]
    assert retry_after.isdigit(), unavailable[0]
    assert body["error"] == "database_unavailable"
    assert readyz_down, "GET /readyz was never 503 while the database was down"
    database = readyz_down[0]["details"]["checks"]["database"]
    assert not database["ok"]
    assert "PostgreSQL at 127.0.0.1:" in database["error"], database
    restarted = stack.child("postgres")
    assert restarted["pid"] != server["pid"]
    records = await asyncio.to_thread(_orders_topic, stack, {key: ["created"] for key in acknowledged})
    assert acknowledged <= {str(v["order_id"]) for _, v in records if "items" in v}


async def _count_at_least(items: Any, n: int) -> bool:
    return len(items) >= n


async def test_forty_requests_for_one_phone_through_two_otp_instances_are_limited_as_by_one(stack: Stack) -> None:
    target = url(stack, "otp")
    phone = f"+1555{uuid.uuid4().int % 10_000_000:07d}"
    run = uuid.uuid4().hex[:8]

    async with aiohttp.ClientSession() as session:

        async def request(n: int) -> int:
            body = {"user_id": f"{run}-{n % 20}", "channels": ["sms"], "phone": phone}
            async with session.post(f"{target}/otp", json=body) as response:
                return response.status

        statuses = Counter(await asyncio.gather(*(request(n) for n in range(40))))
    assert statuses == {202: 5, 429: 35}, statuses


async def test_the_logs_service_sees_each_instance_and_the_kernel_spread_the_requests(stack: Stack) -> None:
    """What the dashboard's instance table shows, from the logs of the tests above: every
    instance of every scaled service logged, and the shared port's connections went to more
    than one orders instance."""
    expected = {
        (service, name)
        for service, n in (pair.split("=") for pair in SCALE.split(","))
        for name in [service, *(f"{service}-{i}" for i in range(2, int(n) + 1))]
    }

    async def instances() -> list[dict[str, Any]] | None:
        async with aiohttp.ClientSession() as session, session.get(url(stack, "logs") + "/logs/instances?since=0") as r:
            assert r.status == 200
            items: list[dict[str, Any]] = (await r.json())["items"]
        return items if expected <= {(i["service"], i["instance"]) for i in items} else None

    items = await eventually("a log line of every instance", instances, within=180)
    served = [i["instance"] for i in items if i["service"] == "orders" and i["requests"] > 0]
    assert len(served) >= 2, items
