"""Topic changes cannot brick or stall the broker: Kafka's cap on partitions per request,
max.partitions in total, big creations and deletions off the event loop, and a topic's
record written only once its partitions exist."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.create_partitions.v3.request import CreatePartitionsRequest, CreatePartitionsTopic
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32

from tests.support.harness import BrokerProcess, ThreadBroker
from tests.support.kafka_wire import batch, connect, ms


def _create(*topics: tuple[str, int], validate_only: bool = False) -> CreateTopicsRequest:
    return CreateTopicsRequest(
        topics=tuple(
            CreatableTopic(
                name=TopicName(name), num_partitions=i32(n), replication_factor=i16(-1), assignments=(), configs=()
            )
            for name, n in topics
        ),
        timeout=ms(60_000),
        validate_only=validate_only,
    )


def _grow(name: str, count: int) -> CreatePartitionsRequest:
    return _grow_many((name, count))


def _grow_many(*topics: tuple[str, int]) -> CreatePartitionsRequest:
    return CreatePartitionsRequest(
        topics=tuple(
            CreatePartitionsTopic(name=TopicName(name), count=i32(count), assignments=None) for name, count in topics
        ),
        timeout=ms(60_000),
        validate_only=False,
    )


def test_one_create_topics_of_25000_partitions_is_a_policy_violation_and_nothing_is_written(
    broker_process_factory: Callable[..., BrokerProcess],
) -> None:
    """Kafka's controller refuses more than 10,000 partitions in one request, every entry
    of it.  Nothing reaches the disk or the metadata log; the broker restarts."""
    proc = broker_process_factory()
    with connect(f"127.0.0.1:{proc.port}") as c:
        response = c.request(_create(("huge", 25_000)))
        assert [(t.error_code, t.error_message) for t in response.topics] == [
            (ErrorCode.policy_violation, "Excessively large number of partitions per request.")
        ]
        response = c.request(_create(("a", 6_000), ("b", 6_000)))
        assert {t.error_code for t in response.topics} == {ErrorCode.policy_violation}
    assert not list(proc.data_dir.glob("huge-*"))
    proc.kill()
    proc.start()
    with connect(f"127.0.0.1:{proc.port}") as c:
        assert c.metadata(None).topics == ()
        assert c.create_topic("after", 1).error_code == ErrorCode.none


@pytest.mark.slow  # ten thousand partitions on disk
def test_a_10000_partition_topic_is_created_off_the_event_loop(broker: ThreadBroker) -> None:
    """While the partitions are being made, another client is answered (the loop is free),
    and the creating connection's next request waits for the creation (ten thousand directories
    take seconds on an idle disk, minutes on a busy one: the creator waits as long)."""
    with connect(broker.bootstrap, timeout=600) as creator, connect(broker.bootstrap) as other:
        created = creator.send(_create(("wide", 10_000)))
        after = creator.send(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        time.sleep(0.05)
        assert broker.call(lambda: "wide" in broker.broker.topics.pending_topics)
        assert other.api_versions().error_code == ErrorCode.none
        assert broker.call(lambda: "wide" in broker.broker.topics.pending_topics)  # answered meanwhile
        response = creator.receive(19, 7, created)
        assert response.topics[0].error_code == ErrorCode.none
        assert response.topics[0].num_partitions == 10_000
        creator.receive(18, 3, after)
        assert creator.produce("wide", 9_999, batch([b"last"])).error_code == ErrorCode.none
        assert [r.value for r in creator.read_all("wide", 9_999)] == [b"last"]


def test_max_partitions_bounds_the_total_and_auto_creation(broker_factory: Callable[..., ThreadBroker]) -> None:
    broker = broker_factory(settings={"max.partitions": "10", "num.partitions": "3"})
    with connect(broker.bootstrap) as c:
        assert c.create_topic("a", 8).error_code == ErrorCode.none
        refused = c.request(_create(("b", 3)))
        assert refused.topics[0].error_code == ErrorCode.policy_violation
        assert "max.partitions=10" in refused.topics[0].error_message
        assert c.request(_grow("a", 11)).results[0].error_code == ErrorCode.policy_violation
        assert c.request(_grow("a", 10)).results[0].error_code == ErrorCode.none
        topic = c.metadata(["auto"], allow_auto_create=True).topics[0]
        assert topic.error_code == ErrorCode.unknown_topic_or_partition
        assert [t.name for t in c.metadata(None).topics] == ["a"]


def test_max_partitions_counts_each_topic_of_one_request_once(broker_factory: Callable[..., ThreadBroker]) -> None:
    """Topics created, and partitions added, by one request reach max.partitions exactly: an
    entry's reserved partitions are not counted a second time for the entries after it."""
    broker = broker_factory(settings={"max.partitions": "10"})
    with connect(broker.bootstrap) as c:
        for validate_only in (True, False):
            answer = c.request(_create(("a", 4), ("b", 4), ("c", 2), validate_only=validate_only))
            assert [t.error_code for t in answer.topics] == [ErrorCode.none] * 3
        assert c.request(_create(("d", 1))).topics[0].error_code == ErrorCode.policy_violation
        gone = DeleteTopicState(name=TopicName("c"), topic_id=uuid.UUID(int=0))
        assert c.request(DeleteTopicsRequest(topics=(gone,), timeout=ms(30_000))).responses[0].error_code == 0
        grown = c.request(_grow_many(("a", 5), ("b", 5)))
        assert [r.error_code for r in grown.results] == [ErrorCode.none] * 2


def test_a_topic_whose_partitions_cannot_be_made_is_not_recorded(
    broker_process_factory: Callable[..., BrokerProcess],
) -> None:
    """A file where partition 5's directory must go: CreateTopics answers KAFKA_STORAGE_ERROR,
    partitions 0-4 are removed again, and after a restart the topic does not exist."""
    proc = broker_process_factory()
    (proc.data_dir / "blocked-5").write_text("in the way")
    with connect(f"127.0.0.1:{proc.port}") as c:
        result = c.request(_create(("blocked", 8))).topics[0]
        assert result.error_code == ErrorCode.kafka_storage_error
        assert c.metadata(None).topics == ()
    assert sorted(p.name for p in proc.data_dir.glob("blocked-*")) == ["blocked-5"]
    proc.kill()
    proc.start()
    with connect(f"127.0.0.1:{proc.port}") as c:
        assert c.metadata(None).topics == ()
        (proc.data_dir / "blocked-5").unlink()
        assert c.create_topic("blocked", 8).error_code == ErrorCode.none


def test_a_deleted_big_topics_name_is_reused_only_once_its_files_are_gone(broker: ThreadBroker) -> None:
    with connect(broker.bootstrap) as c:
        assert c.request(_create(("big", 2_000))).topics[0].error_code == ErrorCode.none
        assert c.produce("big", 0, batch([b"old"])).error_code == ErrorCode.none
        deleted = c.request(
            DeleteTopicsRequest(
                topics=(DeleteTopicState(name=TopicName("big"), topic_id=uuid.UUID(int=0)),), timeout=ms(30_000)
            )
        )
        assert deleted.responses[0].error_code == ErrorCode.none
        deadline = time.monotonic() + 30
        while (code := c.create_topic("big", 1).error_code) == ErrorCode.topic_already_exists:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert code == ErrorCode.none
        assert c.read_all("big", 0) == []
        assert not (broker.data_dir / "big-1").exists()
