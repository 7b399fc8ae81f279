"""The DescribeLogDirs request the dashboard adds to aiokafka: the version it picks from what a
broker advertises (none: unsupported, which makes sizes unknown), and its wire layout."""

from __future__ import annotations

import pytest
from aiokafka.errors import IncompatibleBrokerVersion

from services.dashboard.kafka_reader import DescribeLogDirsRequest, DescribeLogDirsResponse_v1


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
