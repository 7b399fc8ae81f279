"""The transaction, offset-commit and share-offset APIs served a step of entries at a time
(broker/handlers/stepped.py) answer what the same entries answer in requests small
enough to be served at once; what must see the whole request (a topic named twice) is still
answered as one; a commit of many offsets is stored as memory holds it."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.alter_share_group_offsets.v0.request import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsRequestPartition,
    AlterShareGroupOffsetsRequestTopic,
)
from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i64
from kio.static.protocol import Entity

from broker.app import RunningBroker, start_broker
from broker.config import BrokerConfig
from broker.cooperative import STEP
from broker.handlers import BY_KEY
from broker.handlers.base import RequestContext, Serial
from broker.protocol.codec import decode_request, encode_body, frame_raw_response
from broker.protocol.fetch_codec import RawResponse
from broker.security.session import Session
from loadtest.bench_loop_stall import generic_request
from tests.support.kafka_wire import decode_response, encode_request

# API key: the request's array of entries, the response's array of their answers.
ARRAYS = {
    24: ("transactions", "results_by_transaction"),  # AddPartitionsToTxn (v4+)
    27: ("markers", "markers"),  # WriteTxnMarkers
    28: ("topics", "topics"),  # TxnOffsetCommit
    8: ("topics", "topics"),  # OffsetCommit
    90: ("groups", "groups"),  # DescribeShareGroupOffsets
    91: ("topics", "responses"),  # AlterShareGroupOffsets
}


def _config(data_dir: Path) -> BrokerConfig:
    return BrokerConfig(data_dir=data_dir, listen=("127.0.0.1", 0), admin_listen=None)


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[RunningBroker]:
    broker = await start_broker(_config(tmp_path))
    try:
        yield broker
    finally:
        await broker.stop()


def _decoded(request: Entity) -> tuple[RequestContext, Entity]:
    header, decoded = decode_request(memoryview(encode_request(request, 1)[4:]).toreadonly(), "127.0.0.1")
    return RequestContext.of(header, Session.open("PLAINTEXT", "PLAINTEXT", "")), decoded


async def _answer(running: RunningBroker, request: Entity, *, in_steps: bool) -> Any:
    """The handler's answer, as kio's entity (an encoded one decoded); `in_steps`: whether it
    is served a step at a time, before the connection's next request (`Serial`)."""
    ctx, decoded = _decoded(request)
    result = BY_KEY[ctx.api_key].handler(running.broker, ctx, decoded)
    assert isinstance(result, Serial) == in_steps
    if isinstance(result, Serial):
        result = result.awaitable
    outcome = await result if inspect.isawaitable(result) else result
    if isinstance(outcome, RawResponse):
        payload = b"".join(bytes(p) for p in frame_raw_response(1, outcome))[4:]  # type: ignore[arg-type]
        return decode_response(ctx.api_key, ctx.api_version, payload)[1]
    return outcome


@pytest.mark.parametrize("api_key", sorted(ARRAYS))
async def test_a_request_served_in_steps_answers_as_its_parts_served_at_once(
    running: RunningBroker, api_key: int
) -> None:
    """Byte for byte: a request of entries spanning several steps, and the same entries
    sent as requests of fewer than a step each, their answers joined."""
    entries, answers = ARRAYS[api_key]
    request, count = generic_request(api_key, BY_KEY[api_key].max_version, 3 * STEP * 3 + 21)
    assert count > 2 * STEP
    whole = await _answer(running, request, in_steps=True)
    items = getattr(request, entries)
    parts = [
        await _answer(
            running, dataclasses.replace(request, **{entries: items[start : start + STEP // 3]}), in_steps=False
        )
        for start in range(0, len(items), STEP // 3)
    ]
    joined = dataclasses.replace(parts[0], **{answers: tuple(a for p in parts for a in getattr(p, answers))})
    assert len(getattr(whole, answers)) == count
    assert encode_body(whole) == encode_body(joined)


async def test_a_topic_named_twice_far_apart_is_answered_once(running: RunningBroker) -> None:
    """AlterShareGroupOffsets keys its answer by topic name, as Kafka's: a name repeated
    steps apart is one topic, at its first place, its partitions merged."""
    await running.broker.topics.create_topic_off_loop("orders", 2, {})
    for epoch in (0, -1):  # a share group with no member: its offsets may be altered
        beat = ShareGroupHeartbeatRequest(
            group_id=GroupId("pickers"),
            member_id="picker",
            member_epoch=i32(epoch),
            rack_id=None,
            subscribed_topic_names=(TopicName("orders"),),
        )
        assert (await _answer(running, beat, in_steps=False)).error_code == 0

    def topic(name: str, partition: int) -> AlterShareGroupOffsetsRequestTopic:
        part = AlterShareGroupOffsetsRequestPartition(partition_index=i32(partition), start_offset=i64(0))
        return AlterShareGroupOffsetsRequestTopic(topic_name=TopicName(name), partitions=(part,))

    others = [topic(f"other-{i}", 0) for i in range(2 * STEP)]
    request = AlterShareGroupOffsetsRequest(
        group_id=GroupId("pickers"), topics=(topic("orders", 0), *others, topic("orders", 1), topic("orders", 0))
    )
    response = await _answer(running, request, in_steps=True)
    names = [t.topic_name for t in response.responses]
    assert names == ["orders", *(f"other-{i}" for i in range(2 * STEP))]
    assert [(p.partition_index, p.error_code) for p in response.responses[0].partitions] == [(0, 0), (1, 0)]
    starts = running.broker.shares.start_offsets("pickers")
    assert sorted(p for _, p in starts) == [0, 1]


async def test_a_commit_of_many_offsets_leaves_the_loop_then_changes_memory_with_the_log(tmp_path: Path) -> None:
    """Its batch is built in a worker thread: the loop serves others meanwhile, and the
    offsets are not in memory until the batch is appended.  After a restart the group (made
    by the standalone commit) and every offset are as memory held them."""
    offsets = {(f"topic-{i % 7}", i): (i * 10, -1, f"m{i}") for i in range(3_000)}
    broker = await start_broker(_config(tmp_path))
    coordinator = broker.broker.coordinator
    try:
        commit = asyncio.ensure_future(coordinator.commit("standalone", offsets))
        await asyncio.sleep(0)  # the commit's first step has run
        assert not commit.done()
        assert not coordinator.committed("standalone")
        assert "standalone" not in coordinator.groups
        await commit
        before = dict(coordinator.committed("standalone"))
        assert "standalone" in coordinator.groups
    finally:
        await broker.stop()
    assert {tp: (c.offset, c.leader_epoch, c.metadata) for tp, c in before.items()} == offsets
    again = await start_broker(_config(tmp_path))
    try:
        assert dict(again.broker.coordinator.committed("standalone")) == before
        assert "standalone" in again.broker.coordinator.groups
    finally:
        await again.stop()


async def test_a_transaction_holding_many_offsets_is_stored_off_the_loop(tmp_path: Path) -> None:
    """TxnOffsetCommit of 3,000 offsets: the transaction's record is built in a worker
    thread, under the id's lock, then appended, and the state changes once it is stored; after a restart
    the open transaction holds every offset."""
    offsets = {(f"topic-{i % 7}", i): (i, -1, "") for i in range(3_000)}
    broker = await start_broker(_config(tmp_path))
    txns = broker.broker.transactions
    try:
        pid, epoch = await txns.init_producer_id("payments", 60_000)
        await txns.add_offsets("payments", pid, epoch, "ledger")
        state_log = broker.broker.store.partition_log("__transaction_state", txns.partition_for("payments"))
        assert state_log is not None
        stored = state_log.next_offset
        commit = asyncio.ensure_future(txns.commit_offsets("payments", pid, epoch, "ledger", offsets))
        await asyncio.sleep(0)  # the commit's first step has run
        assert not commit.done()
        assert state_log.next_offset == stored  # nothing appended yet: the record is being built
        assert txns.txns["payments"].offsets["ledger"] == {}
        await commit
        assert txns.txns["payments"].offsets["ledger"] == offsets
    finally:
        await broker.stop()
    again = await start_broker(_config(tmp_path))
    try:
        assert again.broker.transactions.txns["payments"].offsets["ledger"] == offsets
    finally:
        await again.stop()
