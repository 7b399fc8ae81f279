"""Requests the dashboard adds to aiokafka: DescribeLogDirs and ListGroups v5, the version each
picks from what a broker advertises (none: unsupported, which the reader answers with unknown
sizes, or with aiokafka's older ListGroups and unknown group types), and their wire layout,
ListGroups' checked against kio's (generated from Kafka's message schemas)."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from aiokafka.errors import IncompatibleBrokerVersion
from kio.schema.errors import ErrorCode
from kio.schema.list_groups.v5 import ListGroupsRequest as KioRequestV5
from kio.schema.list_groups.v5 import ListGroupsResponse as KioResponseV5
from kio.schema.list_groups.v5.response import ListedGroup
from kio.schema.types import GroupId
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32Timedelta

from services.dashboard.kafka_reader import (
    DescribeLogDirsRequest,
    DescribeLogDirsResponse_v1,
    ListGroupsResponse_v5,
    ListGroupTypesRequest,
)


def test_the_newest_non_flexible_version_the_broker_speaks_is_picked() -> None:
    assert DescribeLogDirsRequest().prepare({35: (1, 4)}).API_VERSION == 1  # Kafka 4: v1..v4
    assert DescribeLogDirsRequest().prepare({35: (0, 1)}).API_VERSION == 1
    assert DescribeLogDirsRequest().prepare({35: (0, 0)}).API_VERSION == 0  # brokers before Kafka 2.0


def test_a_broker_without_describe_log_dirs_is_told_apart_from_a_failure() -> None:
    with pytest.raises(IncompatibleBrokerVersion):
        DescribeLogDirsRequest().prepare({18: (0, 4)})  # not advertised at all
    with pytest.raises(NotImplementedError):
        DescribeLogDirsRequest().prepare({35: (2, 4)})  # only flexible versions


def test_the_request_asks_for_every_topic_and_the_response_decodes_sizes_per_partition() -> None:
    request = DescribeLogDirsRequest().prepare({35: (1, 4)})
    assert request.encode() == b"\xff\xff\xff\xff"  # topics: null, i.e. all of them
    raw = DescribeLogDirsResponse_v1(0, [(0, "/data", [("orders", [(0, 1234, 0, False), (1, 0, 0, False)])])]).encode()
    decoded = DescribeLogDirsResponse_v1.decode(raw).to_object()
    assert decoded["results"][0]["log_dir"] == "/data"
    assert decoded["results"][0]["topics"][0]["partitions"][0] == {
        "partition_index": 0,
        "partition_size": 1234,
        "offset_lag": 0,
        "is_future_key": False,
    }


def test_list_groups_v5_is_asked_only_of_a_broker_that_speaks_it() -> None:
    assert ListGroupTypesRequest().prepare({16: (0, 5)}).API_VERSION == 5
    with pytest.raises(NotImplementedError):
        ListGroupTypesRequest().prepare({16: (0, 4)})  # an older Kafka: the reader falls back
    with pytest.raises(IncompatibleBrokerVersion):
        ListGroupTypesRequest().prepare({18: (0, 4)})


def test_list_groups_v5_asks_for_every_state_and_type_and_decodes_each_group_type() -> None:
    request = ListGroupTypesRequest().prepare({16: (0, 5)})
    assert request.FLEXIBLE_VERSION is True  # header v2
    body = request.encode()
    decoded, size = entity_reader(KioRequestV5)(body, 0)
    assert (decoded, size) == (KioRequestV5(states_filter=(), types_filter=()), len(body))

    groups = (
        ListedGroup(group_id=GroupId("billing"), protocol_type="consumer", group_state="Stable", group_type="classic"),
        ListedGroup(group_id=GroupId("kip848"), protocol_type="consumer", group_state="Empty", group_type="consumer"),
    )
    response = KioResponseV5(throttle_time=i32Timedelta.parse(timedelta(0)), error_code=ErrorCode.none, groups=groups)
    buf = io.BytesIO()
    entity_writer(KioResponseV5)(buf, response)
    raw = io.BytesIO(buf.getvalue())
    answer = ListGroupsResponse_v5.decode(raw).to_object()
    assert raw.tell() == len(buf.getvalue())  # read to the last byte
    assert answer["error_code"] == 0
    assert [(g["group_id"], g["group_state"], g["group_type"]) for g in answer["groups"]] == [
        ("billing", "Stable", "classic"),
        ("kip848", "Empty", "consumer"),
    ]
