"""The topic handlers served a step of entries at a time (broker/handlers/stepped.py) answer a
request of many entries as they answer its entries sent a few at a time, which they serve at
once; repeated names are judged over the whole request; a request abandoned between steps
leaves no topic name reserved."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from kio.schema.alter_partition_reassignments.v1.request import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
    ReassignableTopic,
)
from kio.schema.create_partitions.v3.request import CreatePartitionsRequest, CreatePartitionsTopic
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.describe_topic_partitions.v0.request import DescribeTopicPartitionsRequest, TopicRequest
from kio.schema.elect_leaders.v2.request import ElectLeadersRequest, TopicPartitions
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i16, i32

from broker.app import RunningBroker, start_broker
from broker.config import BrokerConfig
from broker.cooperative import STEP
from broker.core import Broker
from broker.handlers import BY_KEY
from broker.handlers.base import RequestContext, Serial
from broker.protocol.fetch_codec import RawResponse
from broker.security.session import Session
from tests.support.kafka_wire import ms

MANY = 3 * STEP + 7  # several steps, the last one short
TOPICS = {"orders": 2, "payments": 1, "audit": 3}


async def _start(path: Path) -> RunningBroker:
    running = await start_broker(BrokerConfig(data_dir=path, listen=("127.0.0.1", 0), admin_listen=None))
    for name, partitions in TOPICS.items():
        running.broker.topics.create_topic(name, partitions, {})
    return running


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    running = await _start(tmp_path / "one")
    try:
        yield running.broker
    finally:
        await running.stop()


@pytest.fixture
async def twin(tmp_path: Path) -> AsyncIterator[Broker]:
    """A second broker holding the same topics (under other ids)."""
    running = await _start(tmp_path / "two")
    try:
        yield running.broker
    finally:
        await running.stop()


def _call(broker: Broker, request: Any) -> Any:
    """The handler's result as the server gets it (`Serial` for a request of many entries)."""
    listener = broker.security.listeners[0]
    session = Session.open(listener.name, listener.protocol, "")
    api_key, version = int(request.__api_key__), int(request.__version__)
    ctx = RequestContext(session, session.principal, listener.name, "unit", "127.0.0.1", api_key, version, 1)
    return BY_KEY[api_key].handler(broker, ctx, request)


async def _answer(broker: Broker, request: Any) -> Any:
    result = _call(broker, request)
    if isinstance(result, Serial):
        result = result.awaitable
    return await result if inspect.isawaitable(result) else result


async def _in_pieces(
    broker: Broker, build: Any, entries: Sequence[Any], answers: str, size: int = STEP
) -> tuple[Any, ...]:
    """The answers to `entries` sent `size` at most per request (served at once, but for
    the creation of many partitions, which leaves the loop)."""
    joined: list[Any] = []
    for start in range(0, len(entries), size):
        response = await _answer(broker, build(entries[start : start + size]))
        joined.extend(response.parts[2:-1] if isinstance(response, RawResponse) else getattr(response, answers))
    return tuple(joined)


def _names(count: int) -> list[str]:
    """Known topics spread among unknown names (and an invalid one)."""
    names = [f"t{i}" for i in range(count)]
    for at, name in zip((3, STEP + 1, 2 * STEP + 5), TOPICS, strict=True):
        names[at] = name
    names[STEP - 1] = "not a valid name"
    return names


def _metadata(names: Sequence[str]) -> MetadataRequest:
    return MetadataRequest(
        topics=tuple(MetadataRequestTopic(topic_id=None, name=TopicName(n)) for n in names),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=True,
    )


async def test_metadata_of_many_topics_answers_as_a_few_at_a_time(broker: Broker) -> None:
    names = _names(MANY)
    whole = await _answer(broker, _metadata(names))
    assert isinstance(whole, RawResponse)
    assert tuple(whole.parts[2:-1]) == await _in_pieces(broker, _metadata, names, "topics")


async def test_metadata_answers_a_topic_asked_again_in_a_later_step_once(broker: Broker) -> None:
    names = _names(MANY)
    repeated = [*names[:STEP], "orders", *names[STEP:], "t7", "orders"]
    whole = await _answer(broker, _metadata(repeated))
    assert b"".join(whole.parts) == b"".join((await _answer(broker, _metadata(names))).parts)


async def test_elect_leaders_of_many_topics_answers_as_a_few_at_a_time(broker: Broker) -> None:
    asked = [TopicPartitions(topic=TopicName(n), partitions=(i32(0), i32(2))) for n in _names(MANY)]

    def build(entries: Sequence[TopicPartitions]) -> ElectLeadersRequest:
        return ElectLeadersRequest(election_type=i8(0), topic_partitions=tuple(entries), timeout=ms(1000))

    whole = await _answer(broker, build(asked))
    assert whole.replica_election_results == await _in_pieces(
        broker, build, asked, "replica_election_results", size=STEP // 3
    )
    assert [p.error_code for p in whole.replica_election_results[3].partition_result] == [
        ErrorCode.election_not_needed,
        ErrorCode.unknown_topic_or_partition,
    ]


async def test_alter_reassignments_of_many_topics_answers_as_a_few_at_a_time(broker: Broker) -> None:
    node = (BrokerId(broker.node_id),)
    asked = [
        ReassignableTopic(
            name=TopicName(n),
            partitions=(
                ReassignablePartition(partition_index=i32(0), replicas=node),
                ReassignablePartition(partition_index=i32(1), replicas=None),
            ),
        )
        for n in _names(MANY)
    ]

    def build(entries: Sequence[ReassignableTopic]) -> AlterPartitionReassignmentsRequest:
        return AlterPartitionReassignmentsRequest(
            timeout=ms(1000), allow_replication_factor_change=True, topics=tuple(entries)
        )

    whole = await _answer(broker, build(asked))
    assert whole.responses == await _in_pieces(broker, build, asked, "responses", size=STEP // 3)


async def test_describe_topic_partitions_of_many_topics_answers_them_in_name_order(broker: Broker) -> None:
    """Sorted in runs merged step by step: the answer is in name order, each topic as a request
    of a few of them (in order) answers it."""
    names = _names(MANY)

    def build(entries: Sequence[str]) -> DescribeTopicPartitionsRequest:
        return DescribeTopicPartitionsRequest(
            topics=tuple(TopicRequest(name=TopicName(n)) for n in entries),
            response_partition_limit=i32(2000),
            cursor=None,
        )

    whole = await _answer(broker, build([*reversed(names), "orders", "t9"]))
    assert [t.name for t in whole.topics] == sorted(names)
    assert whole.topics == await _in_pieces(broker, build, sorted(names), "topics")


def _creatable(name: str, partitions: int) -> CreatableTopic:
    return CreatableTopic(
        name=TopicName(name), num_partitions=i32(partitions), replication_factor=i16(-1), assignments=(), configs=()
    )


def _create(entries: Sequence[CreatableTopic], validate_only: bool = False) -> CreateTopicsRequest:
    return CreateTopicsRequest(topics=tuple(entries), timeout=ms(1000), validate_only=validate_only)


def _identified(results: Sequence[Any], broker: Broker, field: str = "topic_id") -> list[Any]:
    """`results` with each topic id replaced by whether it is the id the broker gave the topic."""
    ids = {t.topic_id: t.name for t in broker.store.topics.values()}
    return [(r.name, r.error_code, r.error_message, ids.get(getattr(r, field)) == r.name) for r in results]


async def test_create_topics_of_many_entries_answers_as_a_few_at_a_time(broker: Broker, twin: Broker) -> None:
    """Created ones (with their configs), existing, invalid and partitionless ones."""
    entries = [_creatable(n, 0 if n.startswith("t") and int(n[1:]) % 3 else 1) for n in _names(MANY)]
    whole = await _answer(broker, _create(entries))
    pieces = await _in_pieces(twin, _create, entries, "topics")
    assert _identified(whole.topics, broker) == _identified(pieces, twin)
    assert [(t.num_partitions, t.configs) for t in whole.topics] == [(t.num_partitions, t.configs) for t in pieces]
    assert {t.error_code for t in whole.topics} >= {ErrorCode.none, ErrorCode.invalid_partitions}
    assert broker.store.partition_count() == twin.store.partition_count()
    assert not broker.topics.pending_topics


async def test_create_topics_refuses_a_name_repeated_steps_apart_in_each_entry(broker: Broker) -> None:
    entries = [_creatable(f"new{i}", 1) for i in range(MANY)]
    entries[-1] = entries[1]
    whole = await _answer(broker, _create(entries, validate_only=True))
    assert [t.error_code for t in whole.topics] == [
        ErrorCode.invalid_request if i in (1, MANY - 1) else ErrorCode.none for i in range(MANY)
    ]


async def test_create_partitions_of_many_entries_answers_as_a_few_at_a_time(broker: Broker, twin: Broker) -> None:
    asked = [CreatePartitionsTopic(name=TopicName(n), count=i32(4), assignments=None) for n in _names(MANY)]

    def build(entries: Sequence[CreatePartitionsTopic]) -> CreatePartitionsRequest:
        return CreatePartitionsRequest(topics=tuple(entries), timeout=ms(1000), validate_only=False)

    whole = await _answer(broker, build(asked))
    assert whole.results == await _in_pieces(twin, build, asked, "results")
    assert {name: broker.store.topics[name].partitions for name in TOPICS} == dict.fromkeys(TOPICS, 4)


def _delete(names: Sequence[str]) -> DeleteTopicsRequest:
    return DeleteTopicsRequest(
        topics=tuple(DeleteTopicState(name=TopicName(n), topic_id=None) for n in names), timeout=ms(1000)
    )


async def test_delete_topics_of_many_entries_answers_as_a_few_at_a_time(broker: Broker, twin: Broker) -> None:
    names = _names(MANY)
    before = {t.topic_id: t.name for t in broker.store.topics.values()}
    whole = await _answer(broker, _delete(names))
    pieces = await _in_pieces(twin, _delete, names, "responses")
    assert [(r.name, r.error_code, before.get(r.topic_id)) for r in whole.responses] == [
        (r.name, r.error_code, r.name if r.name in TOPICS else None) for r in pieces
    ]
    assert [r.error_message for r in whole.responses] == [r.error_message for r in pieces]
    assert not set(TOPICS) & set(broker.store.topics)


@pytest.mark.parametrize("count", [5, MANY], ids=["at-once", "stepped"])
async def test_delete_topics_refuses_a_repeated_name_once_and_deletes_none_of_it(broker: Broker, count: int) -> None:
    """As Kafka's controller: INVALID_REQUEST, where the name first comes; an id repeated
    likewise, with a null name."""
    orders_id = broker.store.topics["orders"].topic_id
    names = [f"t{i}" for i in range(count)]
    names[1] = names[-2] = "orders"
    repeated_id = DeleteTopicState(name=None, topic_id=broker.store.topics["audit"].topic_id)
    request = _delete(names)
    request = DeleteTopicsRequest(topics=(*request.topics[:-1], repeated_id, repeated_id), timeout=ms(1000))
    whole = await _answer(broker, request)
    answered = [(r.name, r.error_code, r.error_message) for r in whole.responses]
    assert answered[1] == ("orders", ErrorCode.invalid_request, "Duplicate topic name.")
    assert answered[-1] == (None, ErrorCode.invalid_request, "Duplicate topic id.")
    assert whole.responses[-1].topic_id == broker.store.topics["audit"].topic_id
    assert len(answered) == count - 1  # each of the two repeated once answered once
    assert {code for _, code, _ in answered[2:-1]} | {answered[0][1]} == {ErrorCode.unknown_topic_or_partition}
    assert broker.store.topics["orders"].topic_id == orders_id


async def test_a_create_topics_abandoned_between_steps_leaves_no_name_reserved(broker: Broker) -> None:
    result = _call(broker, _create([_creatable(f"new{i}", 1) for i in range(MANY)]))
    assert isinstance(result, Serial)
    task = asyncio.ensure_future(result.awaitable)
    while not broker.topics.pending_topics:  # some entries reserved, the rest not yet judged
        await asyncio.sleep(0)
    assert len(broker.topics.pending_topics) < MANY
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not broker.topics.pending_topics
    # and no partition counted as pending: the whole budget is free
    broker.topics.check_partition_budget(broker.config.values.max_partitions - broker.store.partition_count())
    assert not {f"new{i}" for i in range(MANY)} & set(broker.store.topics)


async def test_the_partition_count_follows_creations_growths_and_deletions(tmp_path: Path) -> None:
    """Kept as topics change, and counted again from the metadata log on start."""
    running = await _start(tmp_path)
    try:
        broker = running.broker
        counted = broker.store.partition_count()
        broker.topics.create_topic("more", 5, {})
        broker.topics.add_partitions("orders", 6)
        broker.topics.delete_topic("payments")
        assert broker.store.partition_count() == counted + 5 + 4 - 1
        assert broker.store.partition_count() == sum(t.partitions for t in broker.store.topics.values())
        await broker.sync_metadata()
    finally:
        await running.stop()
    restarted = await start_broker(BrokerConfig(data_dir=tmp_path, listen=("127.0.0.1", 0), admin_listen=None))
    try:
        assert restarted.broker.store.partition_count() == counted + 8
    finally:
        await restarted.stop()
