"""The consumer group protocol (KIP-848): ConsumerGroupHeartbeat's validation with Kafka's error
messages, errors against an existing group, the assignor chosen by most members, and the
member check of offset commits.

Time is the `now` argument throughout: nothing sleeps.  The store is a real MetadataStore in a
temporary directory (topics are created on disk, and each creation bumps `store.version`).
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

import pytest

from broker.coordinator.assignors import range_
from broker.coordinator.consumer_groups import ConsumerGroupConfig, Heartbeat
from broker.metadata import MetadataStore
from broker.protocol.errors import ErrorCode, KafkaError
from tests.support.consumer_group_harness import Harness

JOIN: dict[str, Any] = {
    "group_id": "g",
    "member_id": "m",
    "member_epoch": 0,
    "instance_id": None,
    "rack_id": None,
    "rebalance_timeout_ms": 60_000,
    "topic_names": ("t",),
    "topic_regex": None,
    "server_assignor": None,
    "owned": {},
    "client_id": "c",
    "client_host": "h",
}
T = uuid.UUID(int=7)


@pytest.mark.parametrize(
    ("changes", "code", "message"),
    [
        ({"group_id": ""}, ErrorCode.invalid_request, "GroupId can't be empty."),
        ({"member_id": ""}, ErrorCode.invalid_request, "MemberId can't be empty."),
        ({"member_id": "", "member_epoch": 1}, ErrorCode.invalid_request, "MemberId can't be empty."),
        ({"instance_id": ""}, ErrorCode.invalid_request, "InstanceId can't be empty."),
        ({"rack_id": ""}, ErrorCode.invalid_request, "RackId can't be empty."),
        (
            {"rebalance_timeout_ms": -1},
            ErrorCode.invalid_request,
            "RebalanceTimeoutMs must be provided in first request.",
        ),
        ({"owned": None}, ErrorCode.invalid_request, "TopicPartitions must be empty when (re-)joining."),
        ({"owned": {T: frozenset({0})}}, ErrorCode.invalid_request, "TopicPartitions must be empty when (re-)joining."),
        (
            {"topic_names": None},
            ErrorCode.invalid_request,
            "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.",
        ),
        ({"member_epoch": -2}, ErrorCode.invalid_request, "InstanceId can't be null."),
        ({"member_epoch": -3}, ErrorCode.invalid_request, "MemberEpoch is invalid."),
        ({"member_epoch": 1, "rebalance_timeout_ms": -2}, ErrorCode.invalid_request, "RebalanceTimeoutMs is invalid."),
        (
            {"server_assignor": "sticky"},
            ErrorCode.unsupported_assignor,
            "ServerAssignor sticky is not supported. Supported assignors: uniform, range.",
        ),
        (
            {"topic_regex": "a[", "topic_names": None},
            ErrorCode.invalid_regular_expression,
            None,  # RE2's own description follows the prefix
        ),
        ({"member_epoch": 1}, ErrorCode.group_id_not_found, "consumer group g not found"),
        ({"member_epoch": -1}, ErrorCode.group_id_not_found, "consumer group g not found"),
    ],
)
def test_invalid_heartbeats_are_refused_with_kafkas_messages_and_change_nothing(
    h: Harness, changes: dict[str, Any], code: ErrorCode, message: str | None
) -> None:
    with pytest.raises(KafkaError) as e:
        h.groups.heartbeat(Heartbeat(**{**JOIN, **changes}), h.now)
    assert e.value.code == code
    if message is not None:
        assert e.value.message == message
    else:
        assert (e.value.message or "").startswith("SubscribedTopicRegex `a[` is not a valid regular expression: ")
    assert h.groups.groups == {}


def test_the_valid_join_of_the_table_above_is_accepted(h: Harness) -> None:
    result, records = h.groups.heartbeat(Heartbeat(**JOIN), h.now)
    assert (result.member_id, result.member_epoch, result.assignment) == ("m", 1, {})
    assert records


def test_a_v0_member_without_an_id_is_named_by_the_broker(h: Harness) -> None:
    r = h.heartbeat("", 0, topic_names=("t",), rebalance_timeout_ms=1_000, owned={}, generated_member_id=True)
    assert uuid.UUID(r.member_id)
    assert set(h.group().members) == {r.member_id}


def test_errors_against_an_existing_group(store: MetadataStore) -> None:
    h = Harness(store, ConsumerGroupConfig(max_size=2))
    store.create_topic("t", 2, {})
    h.join("a", ("t",))
    h.join("b", ("t",))
    snapshot = copy.deepcopy(h.groups.groups)
    written = len(h.log)
    cases: list[tuple[dict[str, Any], ErrorCode, str]] = [
        (
            {"member_id": "c"},
            ErrorCode.group_max_size_reached,
            "The consumer group has reached its maximum capacity of 2 members.",
        ),
        (
            {"member_id": "c", "member_epoch": 1, "owned": None},
            ErrorCode.unknown_member_id,
            "Member c is not a member of group g.",
        ),
        ({"member_id": "c", "member_epoch": -1}, ErrorCode.unknown_member_id, "Member c is not a member of group g."),
    ]
    for changes, code, message in cases:
        with pytest.raises(KafkaError) as e:
            h.groups.heartbeat(Heartbeat(**{**JOIN, **changes}), h.now)
        assert (e.value.code, e.value.message) == (code, message)
    assert h.groups.groups == snapshot
    assert len(h.log) == written


def test_the_assignor_most_members_ask_for_is_used(store: MetadataStore, h: Harness) -> None:
    t = store.create_topic("t", 4, {}).topic_id
    h.join("b", ("t",), server_assignor="range")
    h.join("a", ("t",), server_assignor="range")
    h.join("c", ("t",), server_assignor="uniform")
    assert h.groups.assignor_of(h.group()) == "range"
    g = h.group()
    assert g.target == range_({m: frozenset({t}) for m in ("a", "b", "c")}, {t: 4}, {})


def test_validate_member_for_offset_commits(store: MetadataStore, h: Harness) -> None:
    store.create_topic("t", 1, {})
    h.join("a", ("t",))
    g = h.group()
    h.groups.validate_member(g, "a", 1)
    with pytest.raises(KafkaError) as e:
        h.groups.validate_member(g, "a", 0)
    assert e.value.code == ErrorCode.stale_member_epoch
    with pytest.raises(KafkaError) as e:
        h.groups.validate_member(g, "zz", 1)
    assert e.value.code == ErrorCode.unknown_member_id
