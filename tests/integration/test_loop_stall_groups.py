"""Requests of 100,000 entries (request.max.elements) to the transaction, offset-commit and
share-group APIs leave the broker's event loop to other clients between steps: another
client's ApiVersions round trips stay within a bound taken from the idle broker
(tests/support/loop_stall.py), and every entry is answered, in order, as Kafka answers it.

The requests are `python -m loadtest.bench_loop_stall`'s: each entry a distinct name `w0`,
`w1`, ... (or topic id), naming nothing the broker has."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest
from kio.schema.types import GroupId

from broker.handlers import BY_KEY
from loadtest.bench_loop_stall import MAX_ELEMENTS, generic_request
from tests.support import loop_stall
from tests.support.harness import BrokerProcess
from tests.support.kafka_wire import connect
from tests.support.share_wire import heartbeat

pytestmark = pytest.mark.slow

UNKNOWN = ErrorCode.unknown_topic_or_partition


def _add_partitions(request: Any, response: Any) -> None:
    """Batched (v4+): each transaction answered in order, its unknown topic refused."""
    assert response.error_code == ErrorCode.none
    answers = response.results_by_transaction
    assert [a.transactional_id for a in answers] == [t.transactional_id for t in request.transactions]
    assert [[t.name for t in a.topic_results] for a in answers] == [
        [t.name for t in txn.topics] for txn in request.transactions
    ]
    errors = {p.partition_error_code for a in answers for t in a.topic_results for p in t.results_by_partition}
    assert errors == {UNKNOWN}


def _txn_offset_commit(request: Any, response: Any) -> None:
    """Group `w0` does not exist: the member's generation is refused for every partition."""
    assert [t.name for t in response.topics] == [t.name for t in request.topics]
    assert {p.error_code for t in response.topics for p in t.partitions} == {ErrorCode.group_id_not_found}
    assert all(len(t.partitions) == 1 for t in response.topics)


def _write_txn_markers(request: Any, response: Any) -> None:
    assert [m.producer_id for m in response.markers] == [m.producer_id for m in request.markers]
    assert [[t.name for t in m.topics] for m in response.markers] == [
        [t.name for t in m.topics] for m in request.markers
    ]
    assert {p.error_code for m in response.markers for t in m.topics for p in t.partitions} == {UNKNOWN}


def _offset_commit(request: Any, response: Any) -> None:
    """By topic id (v10): group `w0` does not exist, which every partition answers."""
    assert [t.topic_id for t in response.topics] == [t.topic_id for t in request.topics]
    assert {p.error_code for t in response.topics for p in t.partitions} == {ErrorCode.group_id_not_found}
    assert all(len(t.partitions) == 1 for t in response.topics)


def _describe_share_offsets(request: Any, response: Any) -> None:
    """Each group answered, its unknown topic without a start offset."""
    assert [g.group_id for g in response.groups] == [g.group_id for g in request.groups]
    assert {g.error_code for g in response.groups} == {ErrorCode.none}
    assert [[t.topic_name for t in g.topics] for g in response.groups] == [
        [t.topic_name for t in g.topics] for g in request.groups
    ]
    partitions = [p for g in response.groups for t in g.topics for p in t.partitions]
    assert {(p.start_offset, p.error_code) for p in partitions} == {(-1, ErrorCode.none)}


def _alter_share_offsets(request: Any, response: Any) -> None:
    assert response.error_code == ErrorCode.none
    assert [t.topic_name for t in response.responses] == [t.topic_name for t in request.topics]
    assert {p.error_code for t in response.responses for p in t.partitions} == {UNKNOWN}


APIS = [
    pytest.param(24, _add_partitions, id="AddPartitionsToTxn"),
    pytest.param(28, _txn_offset_commit, id="TxnOffsetCommit"),
    pytest.param(27, _write_txn_markers, id="WriteTxnMarkers"),
    pytest.param(8, _offset_commit, id="OffsetCommit"),
    pytest.param(90, _describe_share_offsets, id="DescribeShareGroupOffsets"),
    pytest.param(91, _alter_share_offsets, id="AlterShareGroupOffsets"),
]


@pytest.mark.parametrize(("api_key", "check"), APIS)
def test_a_request_of_100000_entries_does_not_stall_other_clients(
    broker_process_factory: Callable[..., BrokerProcess], api_key: int, check: Callable[[Any, Any], None]
) -> None:
    broker = broker_process_factory()
    request, count = generic_request(api_key, BY_KEY[api_key].max_version, MAX_ELEMENTS)
    assert count >= 30_000
    response, stall, idle = loop_stall.within_bound(broker.bootstrap, lambda _: request)
    check(request, response)
    assert stall < loop_stall.bound(idle), f"stalled {stall:.3f}s; idle round trips took at most {idle:.4f}s"


def test_a_share_member_subscribing_to_100000_topics_does_not_stall_other_clients(
    broker_process_factory: Callable[..., BrokerProcess],
) -> None:
    """Each distinct name authorized and looked up a step at a time; the member joins with
    every name (as ShareGroupDescribe tells).  The share state topic is made first, by a
    member of another group: its creation is once per broker, not per entry."""
    broker = broker_process_factory()
    with connect(broker.bootstrap) as conn:
        assert heartbeat(conn, "warm-up", "warm-up-member", 0, ["orders"]).error_code == ErrorCode.none
    request, count = generic_request(76, BY_KEY[76].max_version, MAX_ELEMENTS)
    assert count == MAX_ELEMENTS
    response, stall, idle = loop_stall.within_bound(broker.bootstrap, lambda _: request)
    assert response.error_code == ErrorCode.none
    assert response.member_epoch >= 1
    with connect(broker.bootstrap, timeout=120) as conn:
        described = conn.request(
            ShareGroupDescribeRequest(group_ids=(GroupId("w0"),), include_authorized_operations=False)
        )
    members = described.groups[0].members
    assert [m.member_id for m in members] == [request.member_id]
    assert sorted(members[0].subscribed_topic_names) == sorted(request.subscribed_topic_names)
    assert stall < loop_stall.bound(idle), f"stalled {stall:.3f}s; idle round trips took at most {idle:.4f}s"


def test_deleting_the_start_offsets_of_100000_topics_of_an_empty_share_group_does_not_stall_other_clients(
    broker_process_factory: Callable[..., BrokerProcess],
) -> None:
    """The group is looked at (it exists and is empty), so every name is answered: with this
    request's names, none a topic of the broker, UNKNOWN_TOPIC_OR_PARTITION each, in order."""
    broker = broker_process_factory()
    delete, count = generic_request(92, BY_KEY[92].max_version, MAX_ELEMENTS)
    assert count == MAX_ELEMENTS
    with connect(broker.bootstrap) as conn:
        assert heartbeat(conn, delete.group_id, "leaver", 0, ["orders"]).error_code == ErrorCode.none
        assert heartbeat(conn, delete.group_id, "leaver", -1, ["orders"]).error_code == ErrorCode.none
    response, stall, idle = loop_stall.within_bound(broker.bootstrap, lambda _: delete)
    assert response.error_code == ErrorCode.none
    assert [t.topic_name for t in response.responses] == [t.topic_name for t in delete.topics]
    assert {t.error_code for t in response.responses} == {UNKNOWN}
    assert stall < loop_stall.bound(idle), f"stalled {stall:.3f}s; idle round trips took at most {idle:.4f}s"
