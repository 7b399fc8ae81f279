"""The consumer runner: offsets are committed only after processing (a consumer SIGKILLed
mid-batch re-processes, and the processed-ids table keeps effects exactly-once), transient
failures are retried with backoff, poison messages and handlers that keep failing go to
`<topic>.dlq` with the failure in headers, graceful shutdown commits and leaves the group,
and lag is log end minus position.  Real broker, registry, SQLite and child processes."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition

from services.common.consumer import ConsumerRunner, Handler, Message, PermanentError
from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import create_topic
from tests.support.kit_processes import (
    CATALOG,
    Kit,
    consume_all,
    count_effects,
    kit,
    order_created,
    read_line,
    spawn,
)
from tests.support.registry import ThreadRegistry

ORDER_CREATED = CATALOG.schema("OrderCreated")


@pytest.fixture
def broker(broker_factory: Callable[..., ThreadBroker]) -> ThreadBroker:
    """A broker that allows short session timeouts, so a SIGKILLed member is noticed quickly."""
    return broker_factory(settings={"group.min.session.timeout.ms": "500"})


@pytest.fixture
async def tools(broker: ThreadBroker, shared_registry: ThreadRegistry) -> AsyncIterator[Kit]:
    async with kit(broker.bootstrap, shared_registry.url) as k:
        yield k


async def publish_orders(tools: Kit, topic: str, count: int) -> list[str]:
    """`count` OrderCreated events, keyed by order id; returns their event ids."""
    ids = []
    for _ in range(count):
        record = order_created()
        await tools.producer.publish(topic, record["order_id"], ORDER_CREATED, record)
        ids.append(record["envelope"]["event_id"])
    return ids


def runner(broker: ThreadBroker, tools: Kit, group: str, topic: str, handler: Handler, **kw: Any) -> ConsumerRunner:
    return ConsumerRunner(
        broker.bootstrap, group, [topic], handler, deserializer=tools.deserializer, producer=tools.producer, **kw
    )


async def wait_for(condition: Callable[[], bool], within: float = 20, what: str = "condition") -> None:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int | None]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        return {p: await consumer.committed(TopicPartition(topic, p)) for p in range(partitions)}
    finally:
        await consumer.stop()


def headers_of(record: Any) -> dict[str, str]:
    return {k: v.decode() for k, v in record.headers}


@pytest.mark.slow
async def test_consumer_sigkilled_mid_batch_reprocesses_uncommitted_records_and_applies_each_effect_once(
    tmp_path: Path, broker: ThreadBroker, shared_registry: ThreadRegistry, tools: Kit
) -> None:
    """A child consumer (commit every 25 records) SIGKILLs itself right after its 40th effect: 25
    offsets are committed, 15 are not.  Restarted, it gets those 15 again (at-least-once), skips
    them by event id, and the 60 events have exactly 60 effects."""
    create_topic(broker.bootstrap, "orders", 3)
    event_ids = await publish_orders(tools, "orders", 60)
    db = tmp_path / "consumer.db"
    spec = {
        "bootstrap": broker.bootstrap,
        "registry": shared_registry.url,
        "db": str(db),
        "group": "crashy",
        "topic": "orders",
        "commit_every": 25,
        # Long enough that a loaded machine does not rebalance the group mid-batch (a commit that
        # fails in a rebalance drops its offsets, by design): the second member then waits for
        # the killed one's session to end.
        "consumer_config": {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500},
    }
    first = await spawn("consumer", {**spec, "kill_after": 40})
    assert await read_line(first) == "started"
    assert await asyncio.wait_for(first.wait(), 30) == -signal.SIGKILL
    assert count_effects(db) == (40, 40)
    with sqlite3.connect(db) as conn:
        applied = {r[0] for r in conn.execute("SELECT event_id FROM effects")}
    offsets = await committed(broker.bootstrap, "crashy", "orders", 3)
    assert sum(o or 0 for o in offsets.values()) == 25  # committed after processing, not before

    second = await spawn("consumer", spec)
    assert await read_line(second) == "started"
    lines: list[str] = []
    while len(lines) < 35:  # the 15 uncommitted ones again, then the 20 never seen
        line = await read_line(second)
        assert line.startswith("delivered")
        lines.append(line.split()[1])
    second.send_signal(signal.SIGTERM)
    assert await read_line(second) == "stopped duplicates=15"
    assert await asyncio.wait_for(second.wait(), 30) == 0
    assert len(set(lines)) == 35
    assert set(lines) - applied == set(event_ids) - applied  # every event not applied before the crash
    assert len(set(lines) & applied) == 15  # redelivered, skipped by event id
    assert count_effects(db) == (60, 60)
    assert sum(o or 0 for o in (await committed(broker.bootstrap, "crashy", "orders", 3)).values()) == 60


async def test_bad_magic_byte_is_dead_lettered_with_failure_headers_and_the_partition_moves_on(
    broker: ThreadBroker, tools: Kit
) -> None:
    """Between two valid events sits a value that is not Confluent-framed: it goes to
    `poison.dlq` unchanged (same key and bytes) with the error and its origin in headers, after
    one attempt; the event behind it is processed and all three offsets are committed."""
    create_topic(broker.bootstrap, "poison", 1)
    first = await publish_orders(tools, "poison", 1)
    await (await tools.producer.send_raw("poison", "k-bad", b'{"not": "avro"}', {"traceparent": "t1"}, traced=False))
    second = await publish_orders(tools, "poison", 1)
    seen: list[str] = []

    async def handle(message: Message) -> None:
        seen.append(message.event_id)

    consumer = runner(broker, tools, "poison-group", "poison", handle)
    await consumer.start()
    await wait_for(lambda: len(seen) == 2 and consumer.stats.dead_lettered == 1, what="2 processed, 1 DLQ")
    await consumer.stop()

    assert seen == first + second
    [dead] = await consume_all(broker.bootstrap, "poison.dlq", 1, partitions=3)
    assert (dead.key, dead.value) == (b"k-bad", b'{"not": "avro"}')
    headers = headers_of(dead)
    assert headers["dlq.error.class"] == "schemas.serde.UnknownMagicByteError"
    assert "unknown magic byte 0x7b" in headers["dlq.error.message"]
    assert headers["dlq.original.topic"] == "poison"
    assert headers["dlq.original.partition"] == "0"
    assert headers["dlq.original.offset"] == "1"
    assert int(headers["dlq.original.timestamp"]) > 0
    assert int(headers["dlq.failed.at"]) >= int(headers["dlq.original.timestamp"])
    assert headers["dlq.attempts"] == "1"
    assert headers["dlq.group"] == "poison-group"
    assert headers["traceparent"] == "t1"  # original headers kept
    assert await committed(broker.bootstrap, "poison-group", "poison", 1) == {0: 3}


async def test_failing_handler_is_retried_with_backoff_then_dead_lettered_and_permanent_errors_are_not_retried(
    broker: ThreadBroker, tools: Kit
) -> None:
    """Four events: one fails once then succeeds (retried), one always fails (3 retries, then the
    DLQ with 4 attempts), one raises PermanentError (DLQ at once), one succeeds; in order."""
    create_topic(broker.bootstrap, "flaky", 1)
    transient, always, permanent, fine = await publish_orders(tools, "flaky", 4)
    attempts: dict[str, list[float]] = {}
    done: list[str] = []

    async def handle(message: Message) -> None:
        tries = attempts.setdefault(message.event_id, [])
        tries.append(time.monotonic())
        if message.event_id == transient and len(tries) == 1:
            raise ConnectionError("smtp server busy")
        if message.event_id == always:
            raise RuntimeError("cannot process this one")
        if message.event_id == permanent:
            raise PermanentError("unknown channel 'fax'")
        done.append(message.event_id)

    consumer = runner(broker, tools, "flaky-group", "flaky", handle, backoff_initial=0.05, max_retries=3)
    await consumer.start()
    await wait_for(lambda: fine in done, what="the last event")
    await consumer.stop()

    assert done == [transient, fine]
    assert [len(attempts[e]) for e in (transient, always, permanent, fine)] == [2, 4, 1, 1]
    gaps = [b - a for a, b in zip(attempts[always], attempts[always][1:], strict=False)]
    assert all(gap >= least for gap, least in zip(gaps, (0.04, 0.08, 0.16), strict=True))  # exponential backoff
    assert consumer.stats.retries == 4
    assert consumer.stats.dead_lettered == 2
    dead = sorted(
        await consume_all(broker.bootstrap, "flaky.dlq", 2, partitions=3),
        key=lambda r: headers_of(r)["dlq.original.offset"],
    )
    assert [headers_of(r)["dlq.original.offset"] for r in dead] == ["1", "2"]
    assert headers_of(dead[0])["dlq.error.class"] == "builtins.RuntimeError"
    assert headers_of(dead[0])["dlq.error.message"] == "cannot process this one"
    assert headers_of(dead[0])["dlq.attempts"] == "4"
    assert headers_of(dead[1])["dlq.error.class"] == "services.common.consumer.PermanentError"
    assert headers_of(dead[1])["dlq.attempts"] == "1"
    assert await committed(broker.bootstrap, "flaky-group", "flaky", 1) == {0: 4}


async def test_graceful_shutdown_commits_and_leaves_the_group_so_another_member_takes_over_at_once(
    broker: ThreadBroker, tools: Kit
) -> None:
    """Member A (30 s session timeout, no commit until shutdown) processes 30 events; member B
    joins; A stops: its offsets are committed and it leaves the group, so B owns all 3 partitions
    within seconds (not after 30 s) and processes only the 10 new events, none of A's again."""
    create_topic(broker.bootstrap, "handover", 3)
    await publish_orders(tools, "handover", 30)
    got: dict[str, list[str]] = {"a": [], "b": []}

    def collect(name: str) -> Handler:
        async def handle(message: Message) -> None:
            got[name].append(message.event_id)

        return handle

    slow = {"session_timeout_ms": 30_000, "heartbeat_interval_ms": 200, "commit_every": 1000}
    a = runner(broker, tools, "handover-group", "handover", collect("a"), commit_interval_ms=60_000, **slow)
    await a.start()
    await wait_for(lambda: len(got["a"]) == 30, what="A to process 30")
    b = runner(broker, tools, "handover-group", "handover", collect("b"), **slow)
    await b.start()
    await wait_for(lambda: bool(b.assignment()) and bool(a.assignment()), what="A and B to share the partitions")

    started = time.monotonic()
    await a.stop()
    await wait_for(lambda: len(b.assignment()) == 3, within=10, what="B to own every partition")
    assert time.monotonic() - started < 5
    fresh = await publish_orders(tools, "handover", 10)
    await wait_for(lambda: len(got["b"]) == 10, what="B to process the new events")
    await asyncio.sleep(0.3)
    await b.stop()
    assert sorted(got["b"]) == sorted(fresh)
    assert len(got["a"]) == 30


async def test_lag_is_log_end_minus_position_and_drops_to_zero_when_caught_up(broker: ThreadBroker, tools: Kit) -> None:
    """While the handler is stuck on the first of 20 records the partition's lag is 20; once it
    is released and everything is processed the lag is 0 (also in the `last_lag` snapshot)."""
    create_topic(broker.bootstrap, "lagging", 1)
    await publish_orders(tools, "lagging", 20)
    release = asyncio.Event()
    entered = asyncio.Event()

    async def handle(message: Message) -> None:
        entered.set()
        await release.wait()

    consumer = runner(broker, tools, "lag-group", "lagging", handle)
    await consumer.start()
    await asyncio.wait_for(entered.wait(), 20)
    tp = TopicPartition("lagging", 0)
    assert await consumer.lag() == {tp: 20}
    release.set()
    await wait_for(lambda: consumer.stats.processed == 20, what="20 processed")
    assert await consumer.lag() == {tp: 0}
    await wait_for(lambda: consumer.last_lag == {tp: 0}, within=5, what="the lag snapshot")
    await consumer.stop()


async def test_a_batch_handler_gets_runs_in_order_and_a_failing_run_is_replayed_record_by_record(
    broker: ThreadBroker, tools: Kit
) -> None:
    """A handler with `handle_batch` gets the decodable runs of a partition; an undecodable value
    splits the run (it is dead-lettered in place, order kept); a run whose batch call fails is
    replayed through the handler one record at a time, so only the record at fault is
    dead-lettered.  Every offset is committed."""
    create_topic(broker.bootstrap, "batched", 1)
    good = await publish_orders(tools, "batched", 3)
    await (await tools.producer.send_raw("batched", "k-bad", b"garbage", {}))
    rest = await publish_orders(tools, "batched", 3)
    poison = rest[1]

    class Batching:
        def __init__(self) -> None:
            self.batches: list[list[str]] = []
            self.singles: list[str] = []

        async def __call__(self, message: Message) -> None:
            if message.event_id == poison:
                raise PermanentError("not this one")
            self.singles.append(message.event_id)

        async def handle_batch(self, messages: list[Message]) -> None:
            ids = [m.event_id for m in messages]
            if poison in ids:
                raise PermanentError("a record of the batch is bad")
            self.batches.append(ids)

    handler = Batching()
    consumer = runner(broker, tools, "batch-group", "batched", handler)
    await consumer.start()
    await wait_for(lambda: consumer.stats.dead_lettered == 2 and len(handler.singles) == 2, what="batch and replay")
    await consumer.stop()

    assert handler.batches == [good]  # one call for the run before the undecodable value
    assert handler.singles == [rest[0], rest[2]]  # the failed run, replayed around the poison
    assert consumer.stats.processed == 5
    assert await committed(broker.bootstrap, "batch-group", "batched", 1) == {0: 7}
    dead = await consume_all(broker.bootstrap, "batched.dlq", 2, partitions=3)
    assert sorted(headers_of(d)["dlq.original.offset"] for d in dead) == ["3", "5"]
