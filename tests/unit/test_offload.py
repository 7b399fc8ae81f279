"""Which requests the broker decodes off its event loop, and the APIs it serves a chunk of
entries at a time (broker/offload.py)."""

from __future__ import annotations

import dataclasses
import datetime

import pytest
from kio.schema.find_coordinator.v6.request import FindCoordinatorRequest
from kio.schema.produce.v11.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import TopicName
from kio.static.primitive import Records, i8, i16, i32, i32Timedelta

from broker import offload
from broker.handlers import BY_KEY
from broker.protocol.codec import request_type, response_type
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
