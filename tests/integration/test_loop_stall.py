"""No small request holds the broker's event loop for everyone: while one client's request
naming a resource thousands of times, auto-creating hundreds of topics, or holding 100,000
entries (request.max.elements) is served, another client's ApiVersions round trips stay
within a bound taken from the same round trips on the idle broker (tests/support/loop_stall.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName
from kio.static.primitive import i8

from broker.handlers import BY_KEY
from loadtest.bench_loop_stall import MAX_ELEMENTS, generic_request, share_fetch_request
from tests.support import loop_stall
from tests.support.harness import BrokerProcess
from tests.support.kafka_wire import connect

pytestmark = pytest.mark.slow

BROKER, TOPIC = 4, 2


def _describe(resource_type: int, name: str, times: int) -> DescribeConfigsRequest:
    resource = DescribeConfigsResource(resource_type=i8(resource_type), resource_name=name, configuration_keys=None)
    return DescribeConfigsRequest(resources=(resource,) * times, include_synonyms=True, include_documentation=True)


def test_describe_configs_naming_the_broker_1000_times_does_not_stall_other_clients(
    broker_process_factory: Callable[..., BrokerProcess],
) -> None:
    """Each repeat is answered, as Kafka answers it, but described once: about 5 KB of request
    asking for a 10 MB answer holds the loop no longer than a few idle round trips."""
    broker = broker_process_factory()
    response, stall, idle = loop_stall.within_bound(broker.bootstrap, lambda _: _describe(BROKER, "1", 1000))
    assert len(response.results) == 1000
    assert all(r == response.results[0] for r in response.results)
    assert response.results[0].error_code == ErrorCode.none
    assert len(response.results[0].configs) > 100
    assert stall < loop_stall.bound(idle), f"stalled {stall:.3f}s; idle round trips took at most {idle:.4f}s"


def test_describe_configs_naming_one_topic_2000_times_does_not_stall_other_clients(
    broker_process_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_process_factory()
    with connect(broker.bootstrap) as conn:
        conn.create_topic("orders", 1)
    response, stall, idle = loop_stall.within_bound(broker.bootstrap, lambda _: _describe(TOPIC, "orders", 2000))
    assert len(response.results) == 2000
    assert {(r.resource_name, r.error_code) for r in response.results} == {("orders", ErrorCode.none)}
    assert stall < loop_stall.bound(idle), f"stalled {stall:.3f}s; idle round trips took at most {idle:.4f}s"


def test_metadata_auto_creating_500_topics_creates_them_off_the_event_loop(
    broker_process_factory: Callable[..., BrokerProcess],
) -> None:
    """Every topic is created and answered, its partitions made in a worker thread."""
    broker = broker_process_factory()

    def names(attempt: int) -> list[str]:  # each try creates topics of its own
        return [f"auto-{attempt}-{i}" for i in range(500)]

    def request(attempt: int) -> MetadataRequest:
        return MetadataRequest(
            topics=tuple(MetadataRequestTopic(topic_id=None, name=TopicName(n)) for n in names(attempt)),
            allow_auto_topic_creation=True,
            include_topic_authorized_operations=False,
        )

    response, stall, idle = loop_stall.within_bound(broker.bootstrap, request)
    assert sorted(t.name for t in response.topics) in [sorted(names(n)) for n in range(3)]
    assert {t.error_code for t in response.topics} == {ErrorCode.none}
    assert stall < loop_stall.bound(idle), f"stalled {stall:.3f}s; idle round trips took at most {idle:.4f}s"


def test_metadata_answers_a_topic_named_many_times_once(broker_process_factory: Callable[..., BrokerProcess]) -> None:
    """As Kafka, which takes the names asked as a set."""
    broker = broker_process_factory()
    with connect(broker.bootstrap) as conn:
        conn.create_topic("orders", 2)
        response = conn.metadata(["orders"] * 50 + ["missing"] * 50)
    assert sorted((t.name, t.error_code) for t in response.topics) == [
        ("missing", ErrorCode.unknown_topic_or_partition),
        ("orders", ErrorCode.none),
    ]


def test_share_fetch_naming_50000_partitions_answers_each(broker_process_factory: Callable[..., BrokerProcess]) -> None:
    """Each partition is answered in order (all but the topic's one with
    UNKNOWN_TOPIC_OR_PARTITION), though alike answers share one encoding."""
    broker = broker_process_factory()
    with connect(broker.bootstrap) as conn:
        conn.create_topic("orders", 1)
    request = share_fetch_request(broker.bootstrap, 50_000)
    with connect(broker.bootstrap, timeout=300) as conn:
        response = conn.request(request)
    assert response.error_code == ErrorCode.none
    partitions = response.responses[0].partitions
    assert [p.partition_index for p in partitions] == list(range(50_000))
    assert partitions[0].error_code == ErrorCode.none
    assert {p.error_code for p in partitions[1:]} == {ErrorCode.unknown_topic_or_partition}


# Requests of 100,000 entries (request.max.elements) as `python -m loadtest.bench_loop_stall`
# builds them: each entry a distinct name `w0`, `w1`, ...; what names the entries in the
# request and in the answer, which answers each in order.
MANY = [
    pytest.param(10, "coordinator_keys", "coordinators", "key", id="FindCoordinator"),
    pytest.param(15, "groups", "groups", "group_id", id="DescribeGroups"),
    pytest.param(9, "groups", "groups", "group_id", id="OffsetFetch"),
    pytest.param(13, "members", "members", "member_id", id="LeaveGroup"),
    pytest.param(2, "topics", "topics", "name", id="ListOffsets"),
]


@pytest.mark.parametrize(("api_key", "entries", "answers", "name"), MANY)
def test_a_request_of_100000_entries_does_not_stall_other_clients(
    broker_process_factory: Callable[..., BrokerProcess], api_key: int, entries: str, answers: str, name: str
) -> None:
    """Decoded and encoded in a worker thread, handled a chunk of entries at a time; every
    entry answered, in order."""
    broker = broker_process_factory()
    request, _ = generic_request(api_key, BY_KEY[api_key].max_version, MAX_ELEMENTS)
    asked = [e if isinstance(e, str) else getattr(e, name) for e in getattr(request, entries)]
    assert len(asked) >= 30_000
    response, stall, idle = loop_stall.within_bound(broker.bootstrap, lambda _: request)
    assert [getattr(a, name) for a in getattr(response, answers)] == asked
    assert stall < loop_stall.bound(idle), f"stalled {stall:.3f}s; idle round trips took at most {idle:.4f}s"
