"""The bundled broker against requests naming unknown topics, partitions or topic ids (Produce,
Fetch, ListOffsets, Metadata) and invalid topic names: Kafka's error codes, nothing created.

Each test seeds a topic with records, opens a bystander connection, sends the bad input
on its own connection, then `assert_survived` checks: the bystander connection still gets
answers, a fresh connection can produce, and every record stored before is still readable.
"""

from __future__ import annotations

import datetime
import uuid

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v13.request import FetchPartition as FetchPartitionV13
from kio.schema.fetch.v13.request import FetchRequest as FetchRequestV13
from kio.schema.fetch.v13.request import FetchTopic as FetchTopicV13
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from tests.support.bad_input import TOPIC, Stored, assert_survived
from tests.support.kafka_wire import (
    batch,
    connect,
)


@pytest.mark.parametrize(("topic", "partition"), [("no-such-topic", 0), (TOPIC, 1), (TOPIC, 999), (TOPIC, -1)])
def test_produce_to_unknown_topic_or_partition_gets_unknown_topic_or_partition(
    stored: Stored, topic: str, partition: int
) -> None:
    """Produce to a topic or partition that does not exist: UNKNOWN_TOPIC_OR_PARTITION (3)."""
    with connect(stored.broker.bootstrap) as client:
        result = client.produce(topic, partition, batch([b"nowhere"]))
        assert result.error_code == ErrorCode.unknown_topic_or_partition
        assert result.base_offset == -1
    assert_survived(stored)


@pytest.mark.parametrize(("topic", "partition"), [("no-such-topic", 0), (TOPIC, 1), (TOPIC, -1)])
def test_fetch_from_unknown_topic_or_partition_gets_unknown_topic_or_partition(
    stored: Stored, topic: str, partition: int
) -> None:
    """Fetch (v12, by name) of a topic or partition that does not exist: error 3, no records."""
    with connect(stored.broker.bootstrap) as client:
        part = client.fetch_partition(topic, partition, 0)
        assert part.error_code == ErrorCode.unknown_topic_or_partition
        assert not part.records
    assert_survived(stored)


def test_fetch_by_unknown_topic_id_gets_unknown_topic_id(stored: Stored) -> None:
    """Fetch v13+ addresses topics by id: an unknown id is UNKNOWN_TOPIC_ID (100)."""
    with connect(stored.broker.bootstrap) as client:
        response = client.request(
            FetchRequestV13(
                max_wait=datetime.timedelta(0),
                min_bytes=0,
                topics=(
                    FetchTopicV13(
                        topic_id=uuid.uuid4(),
                        partitions=(FetchPartitionV13(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),),
                    ),
                ),
                forgotten_topics_data=(),
            )
        )
        assert response.responses[0].partitions[0].error_code == ErrorCode.unknown_topic_id
    assert_survived(stored)


@pytest.mark.parametrize(("topic", "partition"), [("no-such-topic", 0), (TOPIC, 3)])
@pytest.mark.parametrize("timestamp", [-1, -2, 0])
def test_list_offsets_of_unknown_topic_or_partition_gets_unknown_topic_or_partition(
    stored: Stored, topic: str, partition: int, timestamp: int
) -> None:
    """ListOffsets (latest, earliest, by time) for a missing topic or partition: error 3."""
    with connect(stored.broker.bootstrap) as client:
        part = client.list_offsets(topic, partition, timestamp)
        assert part.error_code == ErrorCode.unknown_topic_or_partition
        assert part.offset == -1
    assert_survived(stored)


def test_metadata_for_unknown_topic_without_auto_creation_gets_unknown_topic_or_partition(stored: Stored) -> None:
    """Metadata with allow_auto_topic_creation=false does not create the topic: error 3."""
    with connect(stored.broker.bootstrap) as client:
        response = client.metadata(["not-there"], allow_auto_create=False)
        assert [(t.name, t.error_code) for t in response.topics] == [
            ("not-there", ErrorCode.unknown_topic_or_partition)
        ]
        listed = {t.name for t in client.metadata(None).topics}
        assert "not-there" not in listed
    assert_survived(stored)


# --- topic names ---------------------------------------------------------------------

INVALID_NAMES = ["", ".", "..", "x" * 250, "has space", "slash/name", "colon:name", "umlaut-ü", "star*", "tab\tname"]


@pytest.mark.parametrize("name", INVALID_NAMES, ids=lambda n: repr(n)[:20])
def test_create_topics_with_invalid_name_gets_invalid_topic_exception(stored: Stored, name: str) -> None:
    """Kafka's topic-name rules (non-empty, not '.'/'..', at most 249 of [a-zA-Z0-9._-]):
    anything else is INVALID_TOPIC_EXCEPTION (17) and nothing is created."""
    with connect(stored.broker.bootstrap) as client:
        result = client.create_topic(name, 1)
        assert result.error_code == ErrorCode.invalid_topic_exception
        assert result.error_message
        assert {t.name for t in client.metadata(None).topics} == {TOPIC}
    assert_survived(stored)


def test_topic_name_of_249_allowed_characters_is_accepted(stored: Stored) -> None:
    """The boundary of the name rules: 249 characters of letters, digits, '.', '_', '-'."""
    name = ("aZ09._-" * 36)[:249]
    with connect(stored.broker.bootstrap) as client:
        assert client.create_topic(name, 1).error_code == ErrorCode.none
        assert name in {t.name for t in client.metadata(None).topics}
    assert_survived(stored)


@pytest.mark.parametrize("name", ["has space", "..", "x" * 250, "umlaut-ü"], ids=lambda n: repr(n)[:20])
def test_metadata_with_invalid_topic_name_gets_invalid_topic_exception_and_creates_nothing(
    stored: Stored, name: str
) -> None:
    """Metadata for an invalid name, even with auto-creation allowed, is
    INVALID_TOPIC_EXCEPTION (17) and creates nothing; valid names in the same request
    are still answered."""
    with connect(stored.broker.bootstrap) as client:
        response = client.request(
            MetadataRequest(
                topics=(
                    MetadataRequestTopic(topic_id=None, name=name),
                    MetadataRequestTopic(topic_id=None, name=TOPIC),
                ),
                allow_auto_topic_creation=True,
                include_topic_authorized_operations=False,
            )
        )
        by_name = {t.name: t for t in response.topics}
        assert by_name[name].error_code == ErrorCode.invalid_topic_exception
        assert by_name[name].partitions == ()
        assert by_name[TOPIC].error_code == ErrorCode.none
        assert len(by_name[TOPIC].partitions) == 1
        assert {t.name for t in client.metadata(None).topics} == {TOPIC}
    assert_survived(stored)
