"""Topic administration and description requests of up to 100,000 entries (request.max.elements)
hold the broker's event loop no longer than a few idle round trips of another client: the
handler works a step of entries at a time.  Each request mixes entries that succeed, fail and
repeat, and every one is answered in order with its own error code, as a request of a few
entries answers it."""

from __future__ import annotations

from collections.abc import Callable
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

from tests.support import loop_stall
from tests.support.harness import BrokerProcess
from tests.support.kafka_wire import connect, ms

pytestmark = pytest.mark.slow

MANY = 100_000  # request.max.elements: array entries in a request, nested ones included
# A case builds the n-th try's request (creating what it needs first) and the check of its answer.
Check = Callable[[Any], None]
Case = Callable[[str, int], tuple[Any, Check]]


def _unknown(count: int) -> list[str]:
    return [f"w{i}" for i in range(count)]


def _delete_topics(bootstrap: str, attempt: int) -> tuple[Any, Check]:
    """Topics deleted among 100,000 names, one of them, named twice, refused (as Kafka)."""
    gone = [f"gone-{attempt}-{k}" for k in range(3)]
    kept = f"kept-{attempt}"
    with connect(bootstrap) as conn:
        ids = {name: conn.create_topic(name, 1).topic_id for name in [*gone, kept]}
    names = _unknown(MANY - 5)
    names[0:0] = [gone[0], kept]
    names.insert(50_000, gone[1])
    names.insert(70_000, kept)
    names.append(gone[2])
    request = DeleteTopicsRequest(
        topics=tuple(DeleteTopicState(name=TopicName(n), topic_id=None) for n in names), timeout=ms(30_000)
    )

    def check(response: Any) -> None:
        answered = [(r.name, r.error_code) for r in response.responses]
        expected = [
            (
                n,
                ErrorCode.none
                if n in gone
                else ErrorCode.invalid_request
                if n == kept
                else ErrorCode.unknown_topic_or_partition,
            )
            for n in dict.fromkeys(names)
        ]
        assert answered == expected
        assert {r.name: r.topic_id for r in response.responses if r.name in gone} == {n: ids[n] for n in gone}
        with connect(bootstrap) as conn:
            left = conn.metadata([*gone, kept]).topics
        assert [(t.name, t.error_code) for t in left] == [
            *((n, ErrorCode.unknown_topic_or_partition) for n in gone),
            (kept, ErrorCode.none),
        ]

    return request, check


def _create_topics(bootstrap: str, attempt: int) -> tuple[Any, Check]:
    """Three topics made among 50,000 entries; a name given twice refused in both; the rest
    ask for no partitions (INVALID_PARTITIONS)."""
    made = [f"made-{attempt}-{k}" for k in range(3)]
    twice = f"twice-{attempt}"
    names = _unknown(50_000 - 5)
    names[10:10] = [made[0], twice]
    names.insert(25_000, twice)
    names.insert(30_000, made[1])
    names.append(made[2])

    def topic(name: str) -> CreatableTopic:
        count = 0 if name.startswith("w") else 1
        return CreatableTopic(
            name=TopicName(name), num_partitions=i32(count), replication_factor=i16(-1), assignments=(), configs=()
        )

    request = CreateTopicsRequest(topics=tuple(topic(n) for n in names), timeout=ms(30_000), validate_only=False)

    def check(response: Any) -> None:
        def code(name: str) -> ErrorCode:
            if name in made:
                return ErrorCode.none
            return ErrorCode.invalid_request if name == twice else ErrorCode.invalid_partitions

        assert [(t.name, t.error_code) for t in response.topics] == [(n, code(n)) for n in names]
        assert {t.name: t.num_partitions for t in response.topics if t.error_code == ErrorCode.none} == dict.fromkeys(
            made, 1
        )
        with connect(bootstrap) as conn:
            assert [t.error_code for t in conn.metadata([*made, twice]).topics] == [
                *(ErrorCode.none for _ in made),
                ErrorCode.unknown_topic_or_partition,
            ]

    return request, check


def _create_partitions(bootstrap: str, attempt: int) -> tuple[Any, Check]:
    grown = f"grown-{attempt}"
    with connect(bootstrap) as conn:
        conn.create_topic(grown, 1)
    names = _unknown(MANY // 2)
    names.insert(30_000, grown)
    request = CreatePartitionsRequest(
        topics=tuple(CreatePartitionsTopic(name=TopicName(n), count=i32(2), assignments=None) for n in names),
        timeout=ms(30_000),
        validate_only=False,
    )

    def check(response: Any) -> None:
        assert [(r.name, r.error_code) for r in response.results] == [
            (n, ErrorCode.none if n == grown else ErrorCode.unknown_topic_or_partition) for n in names
        ]
        with connect(bootstrap) as conn:
            assert len(conn.metadata([grown]).topics[0].partitions) == 2

    return request, check


def _metadata(names: list[str], auto: bool) -> MetadataRequest:
    return MetadataRequest(
        topics=tuple(MetadataRequestTopic(topic_id=None, name=TopicName(n)) for n in names),
        allow_auto_topic_creation=auto,
        include_topic_authorized_operations=False,
    )


def _metadata_described(bootstrap: str, attempt: int) -> tuple[Any, Check]:
    """100,000 names, `orders` among them three times: each name answered once."""
    names = _unknown(MANY - 3)
    for at in (5, 40_000, MANY - 4):
        names.insert(at, "orders")

    def check(response: Any) -> None:
        assert [(t.name, t.error_code) for t in response.topics] == [
            (n, ErrorCode.none if n == "orders" else ErrorCode.unknown_topic_or_partition) for n in dict.fromkeys(names)
        ]
        assert [len(t.partitions) for t in response.topics if t.name == "orders"] == [2]

    return _metadata(names, auto=False), check


def _metadata_auto_creating(bootstrap: str, attempt: int) -> tuple[Any, Check]:
    """600 topics auto-created (their partitions made off the loop) among 100,000 names,
    the others not valid names."""
    made = [f"auto-{attempt}-{k}" for k in range(600)]
    names = [f"bad name {i}" for i in range(MANY - len(made))]
    for k, name in enumerate(made):
        names.insert(k * 150, name)

    def check(response: Any) -> None:
        assert [(t.name, t.error_code) for t in response.topics] == [
            (n, ErrorCode.none if n in made else ErrorCode.invalid_topic_exception) for n in names
        ]
        assert {len(t.partitions) for t in response.topics if t.name in made} == {3}  # num.partitions

    return _metadata(names, auto=True), check


def _elect_leaders(bootstrap: str, attempt: int) -> tuple[Any, Check]:
    names = _unknown(MANY // 2 - 2)
    asked = [TopicPartitions(topic=TopicName("orders"), partitions=(i32(0), i32(1), i32(7)))]
    asked += [TopicPartitions(topic=TopicName(n), partitions=(i32(0),)) for n in names]
    request = ElectLeadersRequest(election_type=i8(0), topic_partitions=tuple(asked), timeout=ms(30_000))

    def check(response: Any) -> None:
        assert response.error_code == ErrorCode.none
        answered = [
            (r.topic, [(p.partition_id, p.error_code) for p in r.partition_result])
            for r in response.replica_election_results
        ]
        assert answered[0] == (
            "orders",
            [
                (0, ErrorCode.election_not_needed),
                (1, ErrorCode.election_not_needed),
                (7, ErrorCode.unknown_topic_or_partition),
            ],
        )
        assert answered[1:] == [(n, [(0, ErrorCode.unknown_topic_or_partition)]) for n in names]

    return request, check


def _alter_reassignments(bootstrap: str, attempt: int) -> tuple[Any, Check]:
    with connect(bootstrap) as conn:
        node = conn.metadata(["orders"]).brokers[0].node_id
    names = _unknown(MANY // 3 - 2)
    keep = (BrokerId(node),)
    topics = [
        ReassignableTopic(
            name=TopicName("orders"),
            partitions=(
                ReassignablePartition(partition_index=i32(0), replicas=keep),
                ReassignablePartition(partition_index=i32(1), replicas=None),
            ),
        )
    ]
    topics += [
        ReassignableTopic(name=TopicName(n), partitions=(ReassignablePartition(partition_index=i32(0), replicas=keep),))
        for n in names
    ]
    request = AlterPartitionReassignmentsRequest(
        timeout=ms(30_000), allow_replication_factor_change=True, topics=tuple(topics)
    )

    def check(response: Any) -> None:
        assert response.error_code == ErrorCode.none
        answered = [(r.name, [(p.partition_index, p.error_code) for p in r.partitions]) for r in response.responses]
        assert answered[0] == ("orders", [(0, ErrorCode.none), (1, ErrorCode.no_reassignment_in_progress)])
        assert answered[1:] == [(n, [(0, ErrorCode.unknown_topic_or_partition)]) for n in names]

    return request, check


def _describe_topic_partitions(bootstrap: str, attempt: int) -> tuple[Any, Check]:
    """Every name answered, in name order: unknown ones take no room in the page."""
    names = [*_unknown(MANY - 1), "orders"]
    request = DescribeTopicPartitionsRequest(
        topics=tuple(TopicRequest(name=TopicName(n)) for n in names), response_partition_limit=i32(2000), cursor=None
    )

    def check(response: Any) -> None:
        assert response.next_cursor is None
        assert [(t.name, t.error_code) for t in response.topics] == [
            (n, ErrorCode.none if n == "orders" else ErrorCode.unknown_topic_or_partition) for n in sorted(names)
        ]
        assert [len(t.partitions) for t in response.topics if t.name == "orders"] == [2]

    return request, check


CASES = [
    pytest.param(_delete_topics, id="DeleteTopics"),
    pytest.param(_create_topics, id="CreateTopics"),
    pytest.param(_create_partitions, id="CreatePartitions"),
    pytest.param(_metadata_described, id="Metadata"),
    pytest.param(_metadata_auto_creating, id="Metadata-auto-create"),
    pytest.param(_elect_leaders, id="ElectLeaders"),
    pytest.param(_alter_reassignments, id="AlterPartitionReassignments"),
    pytest.param(_describe_topic_partitions, id="DescribeTopicPartitions"),
]


@pytest.mark.parametrize("case", CASES)
def test_a_topic_request_of_100000_entries_is_answered_whole_without_stalling_other_clients(
    broker_process_factory: Callable[..., BrokerProcess], case: Case
) -> None:
    broker = broker_process_factory()
    with connect(broker.bootstrap) as conn:
        assert conn.create_topic("orders", 2).error_code == ErrorCode.none
    checks: list[Check] = []

    def request(attempt: int) -> Any:
        built, check = case(broker.bootstrap, attempt)
        checks.append(check)
        return built

    response, stall, idle = loop_stall.within_bound(broker.bootstrap, request)
    checks[-1](response)
    assert stall < loop_stall.bound(idle), f"stalled {stall:.3f}s; idle round trips took at most {idle:.4f}s"
