"""Kafka 4.1's tools that ask the KRaft APIs: `kafka-topics --describe` pages through the
partitions with DescribeTopicPartitions, and `kafka-metadata-quorum describe` reads the quorum
with DescribeQuorum, which the broker answers as one combined KRaft node."""

from __future__ import annotations

import pytest

from tests.support import kafka_tools as kt
from tests.support.api_recorder import record_versions
from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import create_topic

pytestmark = [pytest.mark.kafka, pytest.mark.xdist_group("kafka-tools")]


def _fields(line: str) -> dict[str, str]:
    """`Key: value<TAB>Key: value` as printed by kafka-topics."""
    pairs = (item.split(":", 1) for item in line.strip().split("\t") if ":" in item)
    return {key.strip(): value.strip() for key, value in pairs}


def test_topics_describe_pages_through_partitions_with_describe_topic_partitions(
    broker: ThreadBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = broker.bootstrap
    create_topic(b, "kraft.described", 5)
    create_topic(b, "kraft.other", 1)
    seen = record_versions(monkeypatch)
    # Two partitions an answer: the tool follows the cursor over three requests.
    out = kt.run("kafka-topics", "--bootstrap-server", b, "--describe", "--topic", "kraft.described",
                 "--partition-size-limit-per-response", "2")  # fmt: skip
    assert seen["DescribeTopicPartitions"] == {0}
    lines = [_fields(line) for line in out.splitlines() if line.strip()]
    head, *partitions = lines
    assert (head["Topic"], head["PartitionCount"], head["ReplicationFactor"]) == ("kraft.described", "5", "1")
    assert [p["Partition"] for p in partitions] == ["0", "1", "2", "3", "4"]
    assert all((p["Leader"], p["Replicas"], p["Isr"]) == ("1", "1", "1") for p in partitions)


def test_metadata_quorum_describe_status_and_replication_show_this_node_as_leader_and_voter(
    broker: ThreadBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = broker.bootstrap
    create_topic(b, "kraft.quorum", 1)
    seen = record_versions(monkeypatch)
    status = kt.run("kafka-metadata-quorum", "--bootstrap-server", b, "describe", "--status")
    assert seen["DescribeQuorum"] == {2}
    fields = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in status.splitlines() if ":" in line)}
    meta_log = broker.broker.store.meta_log
    assert fields["ClusterId"] == broker.broker.cluster_id
    assert fields["LeaderId"] == "1"
    assert int(fields["HighWatermark"]) == meta_log.high_watermark > 0
    assert fields["MaxFollowerLag"] == "0"
    assert fields["CurrentVoters"].startswith('[{"id": 1')
    assert fields["CurrentObservers"] == "[]"
    replication = kt.run("kafka-metadata-quorum", "--bootstrap-server", b, "describe", "--replication")
    head, *rows = [line.split() for line in replication.splitlines() if line.strip()]
    assert head[:3] == ["NodeId", "DirectoryId", "LogEndOffset"]
    assert len(rows) == 1
    assert (rows[0][0], int(rows[0][2]), rows[0][-1]) == ("1", meta_log.next_offset, "Leader")
