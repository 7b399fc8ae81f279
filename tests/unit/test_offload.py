"""Which requests the broker decodes off its event loop, and the APIs it serves a chunk of
entries at a time (broker/offload.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import inspect
import sys
from pathlib import Path

import pytest
from kio.schema.find_coordinator.v6.request import FindCoordinatorRequest
from kio.schema.leave_group.v5.request import LeaveGroupRequest, MemberIdentity
from kio.schema.produce.v11.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import Records, i8, i16, i32, i32Timedelta
from kio.static.protocol import Entity

from broker import offload
from broker.app import start_broker
from broker.config import BrokerConfig
from broker.core import Broker
from broker.handlers import BY_KEY
from broker.handlers.base import Handler, Outcome, RequestContext, Serial, Signal
from broker.protocol.codec import decode_request, encode_body, request_type, response_type
from broker.protocol.fetch_codec import RawResponse
from broker.security.session import Session
from loadtest.bench_loop_stall import generic_request
from tests.support.kafka_wire import encode_request


def _frame(request: object) -> memoryview:
    return memoryview(encode_request(request, 1)[4:]).toreadonly()


def _keys(n: int) -> FindCoordinatorRequest:
    return FindCoordinatorRequest(key_type=i8(0), coordinator_keys=tuple(f"group-{i:06}" for i in range(n)))


def test_a_request_of_many_entries_is_large() -> None:
    request = _keys(5_000)
    assert offload.is_large(_frame(request), 10, 6)


def test_a_request_of_few_entries_is_not_however_many_bytes() -> None:
    """A Produce of one 1 MB batch: its records are one bytes field, cheap to decode."""
    partition = PartitionProduceData(index=i32(0), records=Records.parse(b"\x00" * 1_000_000))
    request = ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        topic_data=(TopicProduceData(name=TopicName("orders"), partition_data=(partition,)),),
    )
    frame = _frame(request)
    assert len(frame) > offload.MIN_BYTES
    assert not offload.is_large(frame, 0, 11)
    assert not offload.is_large(_frame(_keys(offload.MANY_ELEMENTS - 10)), 10, 6)


@pytest.mark.parametrize("api_key", sorted(offload.SPLITS))
def test_each_split_names_arrays_its_messages_have(api_key: int) -> None:
    """In every version from `since`, the request holds the array of entries and the
    response the array of their answers."""
    split = offload.SPLITS[api_key]
    api = BY_KEY[api_key]
    for version in range(max(split.since, api.min_version), api.max_version + 1):
        assert split.entries in {f.name for f in dataclasses.fields(request_type(api_key, version))}
        assert split.answers in {f.name for f in dataclasses.fields(response_type(api_key, version))}


async def _whole(handler: Handler, broker: Broker, ctx: RequestContext, request: Entity) -> Outcome:
    result = handler(broker, ctx, request)
    if isinstance(result, Serial):
        result = result.awaitable
    return await result if inspect.isawaitable(result) else result


async def test_an_answer_served_in_chunks_is_the_answer_served_whole(tmp_path: Path) -> None:
    """Byte for byte, for each split API, with entries spanning several chunks (what the
    handler answers whole for them, on a broker of its own)."""
    running = await start_broker(BrokerConfig(data_dir=tmp_path, listen=("127.0.0.1", 0), admin_listen=None))
    try:
        listener = running.broker.security.listeners[0]
        for api_key in sorted(offload.SPLITS):
            api = BY_KEY[api_key]
            built, count = generic_request(api_key, api.max_version, 3 * offload.CHUNK + 7)
            assert count > offload.CHUNK
            header, request = decode_request(_frame(built), "127.0.0.1")
            ctx = RequestContext.of(header, Session.open(listener.name, listener.protocol, ""))
            whole = await _whole(api.handler, running.broker, ctx, request)
            chunked = await offload.handled(api.handler, running.broker, ctx, request)
            assert not isinstance(whole, RawResponse | Signal)
            assert not isinstance(chunked, RawResponse | Signal)
            assert encode_body(chunked) == encode_body(whole), api.name
    finally:
        await running.stop()


def test_release_frees_every_entry_of_a_large_request_a_step_at_a_time() -> None:
    """The big arrays are emptied CHUNK entries at a time, the loop free between the steps;
    afterwards nothing keeps an entry alive."""
    members = tuple(
        MemberIdentity(member_id=f"m{n}", group_instance_id=None, reason=None) for n in range(3 * offload.CHUNK + 7)
    )
    kept = members[-1]
    owned: list[Entity] = [LeaveGroupRequest(group_id=GroupId("g"), members=members)]
    del members
    steps = 0

    async def count_steps() -> None:
        nonlocal steps
        while True:
            steps += 1
            await asyncio.sleep(0)

    async def run() -> None:
        counter = asyncio.ensure_future(count_steps())
        await asyncio.sleep(0)
        await offload.release(owned)
        counter.cancel()

    asyncio.run(run())
    assert owned == []
    assert steps >= 4  # a step per CHUNK of entries freed
    assert sys.getrefcount(kept) == 2  # `kept` and getrefcount's argument: the request is gone
