"""Produce, DeleteRecords and Fetch of more than STEP partitions are served a step at a time
(broker/cooperative.py); each entry's answer is the one the same entry gets in a request of
a few hundred, served whole (on a broker of its own with the same history where the
request changes state)."""

from __future__ import annotations

import inspect
import struct
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from kio.schema.delete_records.v2.request import DeleteRecordsPartition, DeleteRecordsRequest, DeleteRecordsTopic
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.produce.v11.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import Records, i8, i16, i32, i64

from broker.app import RunningBroker, start_broker
from broker.config import BrokerConfig
from broker.cooperative import STEP
from broker.handlers import BY_KEY
from broker.handlers import fetch as fetch_handler
from broker.handlers.base import NO_RESPONSE, RequestContext, Serial
from broker.protocol.fetch_codec import RawResponse
from broker.security.session import Session
from tests.support.kafka_wire import batch, decode_response, ms

ENTRIES = 3 * STEP + 7  # four steps
SMALL = 400  # entries of a request served whole


async def _broker(path: Path) -> RunningBroker:
    running = await start_broker(BrokerConfig(data_dir=path, listen=("127.0.0.1", 0), admin_listen=None))
    running.broker.topics.create_topic("orders", 3, {})
    return running


@pytest.fixture
async def twins(tmp_path: Path) -> AsyncIterator[tuple[RunningBroker, RunningBroker]]:
    first, second = await _broker(tmp_path / "a"), await _broker(tmp_path / "b")
    try:
        yield first, second
    finally:
        await first.stop()
        await second.stop()


def _ctx(running: RunningBroker, api_key: int, version: int) -> RequestContext:
    listener = running.broker.security.listeners[0]
    session = Session.open(listener.name, listener.protocol, "")
    return RequestContext(session, session.principal, listener.name, "test", "127.0.0.1", api_key, version, 1)


async def _served(running: RunningBroker, request: Any, *, serial: bool = False) -> Any:
    """The handler's answer, decoded as a client would; `serial`: the connection must read
    nothing else until it is answered."""
    key, version = int(request.__api_key__), int(request.__version__)
    result = BY_KEY[key].handler(running.broker, _ctx(running, key, version), request)
    assert isinstance(result, Serial) or not serial
    if isinstance(result, Serial):
        result = result.awaitable
    outcome = await result if inspect.isawaitable(result) else result
    if not isinstance(outcome, RawResponse):
        return outcome
    body = b"".join(bytes(p) if isinstance(p, bytes | bytearray | memoryview) else _region(p) for p in outcome.parts)
    header = struct.pack(">i", 1) + (b"\x00" if outcome.flexible else b"")
    return decode_response(key, version, header + body)[1]


def _region(region: Any) -> bytes:
    with open(region.segment.log_path, "rb") as f:
        f.seek(region.position)
        return f.read(region.length)


async def _in_small_requests(
    running: RunningBroker, entries: list[Any], request: Callable[[list[Any]], Any]
) -> list[Any]:
    return [await _served(running, request(entries[i : i + SMALL])) for i in range(0, len(entries), SMALL)]


def _topic(i: int) -> str:
    # Mostly the topic, partitions 0-3 (3 does not exist); some unknown, some internal.
    return "missing" if i % 7 == 3 else "__consumer_offsets" if i % 11 == 5 else "orders"


def _produce(entries: list[TopicProduceData], acks: int = -1) -> ProduceRequest:
    return ProduceRequest(transactional_id=None, acks=i16(acks), timeout=ms(10_000), topic_data=tuple(entries))


async def test_produce_answers_each_partition_as_a_small_request_would(
    twins: tuple[RunningBroker, RunningBroker],
) -> None:
    """Appends in request order (offsets), the same errors and messages, a repeated
    partition appended each time; an empty batch is refused where its turn comes."""
    entries = [
        TopicProduceData(
            name=TopicName(_topic(i)),
            partition_data=(
                PartitionProduceData(index=i32(i % 4), records=Records(batch([f"v{i}".encode()])) if i % 13 else None),
            ),
        )
        for i in range(ENTRIES)
    ]
    stepped, whole = twins
    answer = await _served(stepped, _produce(entries), serial=True)
    parts = await _in_small_requests(whole, entries, _produce)

    def flat(responses: list[Any]) -> list[tuple[object, ...]]:
        return [
            (t.name, p.index, p.error_code, p.base_offset, p.log_start_offset, p.error_message)
            for r in responses
            for t in r.responses
            for p in t.partition_responses
        ]

    assert flat([answer]) == flat(parts)
    assert len(flat(parts)) == ENTRIES
    assert {e[2] for e in flat(parts)} == {0, 3, 17, 87}  # none, unknown, invalid topic, invalid record


async def test_produce_acks_0_of_many_partitions_appends_without_an_answer(
    twins: tuple[RunningBroker, RunningBroker],
) -> None:
    stepped, _ = twins
    entries = [
        TopicProduceData(
            name=TopicName("orders"),
            partition_data=(PartitionProduceData(index=i32(i % 3), records=Records(batch([b"v"]))),),
        )
        for i in range(ENTRIES)
    ]
    assert await _served(stepped, _produce(entries, acks=0), serial=True) is NO_RESPONSE
    logs = [stepped.broker.store.partition_log("orders", p) for p in range(3)]
    assert sum(plog.next_offset for plog in logs if plog is not None) == ENTRIES


async def test_delete_records_answers_each_partition_as_a_small_request_would(
    twins: tuple[RunningBroker, RunningBroker],
) -> None:
    """Each log start moves where its entry's turn comes (later entries see it moved)."""
    for running in twins:
        for partition in range(3):
            plog = running.broker.store.partition_log("orders", partition)
            assert plog is not None
            for n in range(40):
                plog.append(batch([f"r{n}".encode()]))
    entries = [
        DeleteRecordsTopic(
            name=TopicName(_topic(i)),
            partitions=(DeleteRecordsPartition(partition_index=i32(i % 4), offset=i64((i * 7) % 45 - 1)),),
        )
        for i in range(ENTRIES)
    ]

    def request(part: list[DeleteRecordsTopic]) -> DeleteRecordsRequest:
        return DeleteRecordsRequest(topics=tuple(part), timeout=ms(10_000))

    stepped, whole = twins
    answer = await _served(stepped, request(entries), serial=True)
    parts = await _in_small_requests(whole, entries, request)

    def flat(responses: list[Any]) -> list[tuple[object, ...]]:
        return [
            (t.name, p.partition_index, p.error_code, p.low_watermark)
            for r in responses
            for t in r.topics
            for p in t.partitions
        ]

    assert flat([answer]) == flat(parts)
    assert {e[2] for e in flat(parts)} == {0, 1, 3}  # none, offset out of range, unknown


async def test_fetch_answers_as_the_whole_fetch(twins: tuple[RunningBroker, RunningBroker]) -> None:
    """Within fetch.max.bytes, a partition named twice answered once where first named (the
    later entry's offset), the same records, errors and watermarks as the fetch served
    whole (a fetch changes nothing, so both are served by one broker)."""
    running, _ = twins
    for partition in range(3):
        plog = running.broker.store.partition_log("orders", partition)
        assert plog is not None
        for n in range(5):
            plog.append(batch([f"r{n}".encode() * 50]))
    entries = [
        FetchTopic(
            topic=TopicName(_topic(i)),
            partitions=(
                FetchPartition(
                    partition=i32(i % 4),
                    current_leader_epoch=i32(-1),
                    fetch_offset=i64(i % 5),
                    last_fetched_epoch=i32(-1),
                    log_start_offset=i64(-1),
                    partition_max_bytes=i32(300),
                ),
            ),
        )
        for i in range(ENTRIES)
    ]
    request = FetchRequest(
        cluster_id=None,
        replica_id=BrokerId(-1),
        max_wait=ms(0),
        min_bytes=i32(1),
        max_bytes=i32(2_000),
        isolation_level=i8(1),
        session_id=i32(0),
        session_epoch=i32(-1),
        topics=tuple(entries),
        forgotten_topics_data=(),
        rack_id="",
    )
    ctx = _ctx(running, 1, 12)
    slots = fetch_handler._resolve(running.broker, ctx, request)
    fetch_handler._gather(running.broker, slots, 2_000, True)
    whole = fetch_handler._response(running.broker, 12, slots)
    stepped = await fetch_handler._in_steps(running.broker, ctx, request)
    assert [_bytes(p) for p in stepped.parts] == [_bytes(p) for p in whole.parts]
    answer = await _served(running, request)
    assert [t.topic for t in answer.responses] == ["orders", "missing", "__consumer_offsets"]
    assert sum(len(p.records or b"") for t in answer.responses for p in t.partitions) > 0


def _bytes(part: Any) -> bytes:
    return bytes(part) if isinstance(part, bytes | bytearray | memoryview) else _region(part)
