"""Bad input to the consumer-group APIs over raw sockets: every case gets Kafka's error
code, and nothing already stored is corrupted.

Each test starts from a one-member group, formed over the wire (JoinGroup with KIP-394's
MEMBER_ID_REQUIRED round trip, SyncGroup with the leader's assignment), that has committed
offsets for two partitions.  After the bad input, `assert_intact` checks that those
offsets are unchanged, the member still heartbeats in the same generation and the group
is still Stable.

Error codes follow Apache Kafka 4.x (GroupCoordinatorService, GroupMetadataManager,
OffsetMetadataManager, ClassicGroup, KafkaApis).  Where this broker deliberately differs,
the test says so.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest as FindCoordinatorRequestV3
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest as FindCoordinatorRequestV4
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.leave_group.v5.request import LeaveGroupRequest, MemberIdentity
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.offset_commit.v8 import request as commit_v8
from kio.schema.offset_commit.v9 import request as commit_v9
from kio.schema.offset_delete.v0.request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from kio.schema.offset_fetch.v9.request import OffsetFetchRequest, OffsetFetchRequestGroup, OffsetFetchRequestTopics
from kio.schema.sync_group.v5.request import SyncGroupRequest, SyncGroupRequestAssignment
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i8, i32, i64

from broker.coordinator.consumer_protocol import encode_assignment
from tests.support.harness import ThreadBroker
from tests.support.kafka_wire import KafkaConnection, connect, ms

GROUP = "bad-input-group"
TOPIC = "stored"  # 2 partitions; the group subscribes to it
OTHER = "other"  # 1 partition; not subscribed
SESSION_MS = 30_000
GROUP_KEY, TRANSACTION_KEY = 0, 1


def subscription(*topics: str) -> bytes:
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return out + struct.pack(">i", -1)


def join_request(
    group: str,
    member_id: str = "",
    *,
    session_ms: int = SESSION_MS,
    protocol_type: str = "consumer",
    protocols: tuple[tuple[str, bytes], ...] = (("range", subscription(TOPIC)),),
) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=GroupId(group),
        session_timeout=ms(session_ms),
        rebalance_timeout=ms(SESSION_MS),
        member_id=member_id,
        group_instance_id=None,
        protocol_type=protocol_type,
        protocols=tuple(JoinGroupRequestProtocol(name=n, metadata=m) for n, m in protocols),
        reason=None,
    )


def sync_request(
    group: str, generation: int, member_id: str, assignments: dict[str, bytes] | None = None
) -> SyncGroupRequest:
    return SyncGroupRequest(
        group_id=GroupId(group),
        generation_id=i32(generation),
        member_id=member_id,
        group_instance_id=None,
        protocol_type="consumer",
        protocol_name="range",
        assignments=tuple(
            SyncGroupRequestAssignment(member_id=m, assignment=a) for m, a in (assignments or {}).items()
        ),
    )


def heartbeat(conn: KafkaConnection, group: str, generation: int, member_id: str) -> ErrorCode:
    request = HeartbeatRequest(
        group_id=GroupId(group), generation_id=i32(generation), member_id=member_id, group_instance_id=None
    )
    return conn.request(request).error_code


Offsets = dict[tuple[str, int], tuple[int, str | None]]


def commit(
    conn: KafkaConnection,
    group: str,
    offsets: Offsets,
    *,
    generation: int = -1,
    member_id: str = "",
    version: int = 9,
) -> dict[tuple[str, int], ErrorCode]:
    """OffsetCommit of {(topic, partition): (offset, metadata)}; returns each partition's error."""
    schema = commit_v9 if version == 9 else commit_v8
    by_topic: dict[str, list[tuple[int, int, str | None]]] = {}
    for (topic, partition), (offset, metadata) in offsets.items():
        by_topic.setdefault(topic, []).append((partition, offset, metadata))
    request = schema.OffsetCommitRequest(
        group_id=GroupId(group),
        generation_id_or_member_epoch=i32(generation),
        member_id=member_id,
        group_instance_id=None,
        topics=tuple(
            schema.OffsetCommitRequestTopic(
                name=TopicName(topic),
                partitions=tuple(
                    schema.OffsetCommitRequestPartition(
                        partition_index=i32(p), committed_offset=i64(o), committed_metadata=m
                    )
                    for p, o, m in parts
                ),
            )
            for topic, parts in by_topic.items()
        ),
    )
    response = conn.request(request)
    return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}


def fetch_groups(
    conn: KafkaConnection, groups: dict[str, dict[str, list[int]] | None]
) -> dict[str, tuple[ErrorCode, Offsets]]:
    """OffsetFetch v9 (the multi-group form): {group: {topic: partitions} or None for all}.
    Returns {group: (error, {(topic, partition): (offset, metadata)})}, leaving out
    partitions without a committed offset (-1)."""
    request = OffsetFetchRequest(
        groups=tuple(
            OffsetFetchRequestGroup(
                group_id=GroupId(g),
                topics=None
                if topics is None
                else tuple(
                    OffsetFetchRequestTopics(name=TopicName(t), partition_indexes=tuple(i32(p) for p in ps))
                    for t, ps in topics.items()
                ),
            )
            for g, topics in groups.items()
        ),
        require_stable=False,
    )
    out = {}
    for group in conn.request(request).groups:
        offsets = {}
        for t in group.topics:
            for p in t.partitions:
                assert p.error_code == ErrorCode.none
                if p.committed_offset >= 0:
                    offsets[(t.name, p.partition_index)] = (int(p.committed_offset), p.metadata)
        out[group.group_id] = (group.error_code, offsets)
    return out


def fetch(conn: KafkaConnection, group: str) -> Offsets:
    error, offsets = fetch_groups(conn, {group: None})[group]
    assert error == ErrorCode.none
    return offsets


def describe(conn: KafkaConnection, *groups: str) -> list[object]:
    return list(
        conn.request(
            DescribeGroupsRequest(groups=tuple(GroupId(g) for g in groups), include_authorized_operations=False)
        ).groups
    )


def offset_delete(conn: KafkaConnection, group: str, partitions: dict[str, list[int]]) -> tuple[ErrorCode, dict]:
    response = conn.request(
        OffsetDeleteRequest(
            group_id=GroupId(group),
            topics=tuple(
                OffsetDeleteRequestTopic(
                    name=TopicName(t),
                    partitions=tuple(OffsetDeleteRequestPartition(partition_index=i32(p)) for p in ps),
                )
                for t, ps in partitions.items()
            ),
        )
    )
    return response.error_code, {
        (t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions
    }


@dataclass
class Group:
    """A one-member group with committed offsets, and the connection its member uses."""

    broker: ThreadBroker
    conn: KafkaConnection
    member_id: str
    generation: int
    assignment: bytes
    committed: Offsets

    def assert_intact(self) -> None:
        assert fetch(self.conn, GROUP) == self.committed
        assert heartbeat(self.conn, GROUP, self.generation, self.member_id) == ErrorCode.none
        [described] = describe(self.conn, GROUP)
        assert described.group_state == "Stable"  # type: ignore[attr-defined]
        assert [m.member_id for m in described.members] == [self.member_id]  # type: ignore[attr-defined]


def form_group(conn: KafkaConnection, group: str) -> tuple[str, int, bytes]:
    """Join (KIP-394 round trip), become leader, assign both partitions to ourselves."""
    first = conn.request(join_request(group))
    assert first.error_code == ErrorCode.member_id_required
    assert first.member_id
    joined = conn.request(join_request(group, first.member_id))  # answered after the initial delay
    assert joined.error_code == ErrorCode.none
    assert joined.leader == joined.member_id == first.member_id
    assignment = encode_assignment({TOPIC: [0, 1]})
    synced = conn.request(sync_request(group, joined.generation_id, joined.member_id, {joined.member_id: assignment}))
    assert synced.error_code == ErrorCode.none
    assert synced.assignment == assignment
    return joined.member_id, int(joined.generation_id), assignment


@pytest.fixture
def group(broker: ThreadBroker) -> Iterator[Group]:
    with connect(broker.bootstrap) as conn:
        assert conn.create_topic(TOPIC, 2).error_code == ErrorCode.none
        assert conn.create_topic(OTHER, 1).error_code == ErrorCode.none
        member_id, generation, assignment = form_group(conn, GROUP)
        committed: Offsets = {(TOPIC, 0): (10, "m0"), (TOPIC, 1): (20, "m1")}
        errors = commit(conn, GROUP, committed, generation=generation, member_id=member_id)
        assert set(errors.values()) == {ErrorCode.none}
        g = Group(broker, conn, member_id, generation, assignment, committed)
        g.assert_intact()
        yield g


# --- OffsetCommit ---------------------------------------------------------------------------


def test_commit_for_unknown_topics_and_partitions_fails_per_partition_and_stores_the_rest(group: Group) -> None:
    g = group
    errors = commit(
        g.conn,
        GROUP,
        {("no-such-topic", 0): (1, ""), (TOPIC, 2): (1, ""), (TOPIC, -1): (1, ""), (TOPIC, 0): (11, "ok")},
        generation=g.generation,
        member_id=g.member_id,
    )
    assert errors == {
        ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition,
        (TOPIC, 2): ErrorCode.unknown_topic_or_partition,
        (TOPIC, -1): ErrorCode.unknown_topic_or_partition,
        (TOPIC, 0): ErrorCode.none,
    }
    g.committed[(TOPIC, 0)] = (11, "ok")
    g.assert_intact()
    with connect(g.broker.bootstrap) as conn:  # the commit did not auto-create the topic
        assert conn.metadata(["no-such-topic"], allow_auto_create=False).topics[0].error_code == (
            ErrorCode.unknown_topic_or_partition
        )


def test_commit_with_a_stale_or_future_generation_is_illegal_generation(group: Group) -> None:
    g = group
    for generation in (g.generation - 1, g.generation + 1):
        errors = commit(g.conn, GROUP, {(TOPIC, 0): (99, "")}, generation=generation, member_id=g.member_id)
        assert errors == {(TOPIC, 0): ErrorCode.illegal_generation}
    g.assert_intact()


def test_commit_from_an_unknown_member_is_unknown_member_id(group: Group) -> None:
    g = group
    errors = commit(g.conn, GROUP, {(TOPIC, 0): (99, "")}, generation=g.generation, member_id="stranger")
    assert errors == {(TOPIC, 0): ErrorCode.unknown_member_id}
    # A "simple consumer" commit (generation -1, no member id) is refused while the group
    # has members.
    errors = commit(g.conn, GROUP, {(TOPIC, 0): (99, "")})
    assert errors == {(TOPIC, 0): ErrorCode.unknown_member_id}
    g.assert_intact()


@pytest.mark.parametrize(
    ("version", "expected"), [(9, ErrorCode.group_id_not_found), (8, ErrorCode.illegal_generation)]
)
def test_commit_with_a_generation_to_a_missing_group_is_group_id_not_found_from_v9(
    group: Group, version: int, expected: ErrorCode
) -> None:
    """Kafka: GROUP_ID_NOT_FOUND from OffsetCommit v9, ILLEGAL_GENERATION before; the
    group is not created."""
    g = group
    errors = commit(g.conn, "missing", {(TOPIC, 0): (1, "")}, generation=3, member_id="m", version=version)
    assert errors == {(TOPIC, 0): expected}
    assert fetch_groups(g.conn, {"missing": None})["missing"] == (ErrorCode.none, {})
    assert "missing" not in g.broker.call(lambda: set(g.broker.broker.coordinator.groups))
    g.assert_intact()


def test_commit_metadata_larger_than_the_limit_is_refused_for_that_partition_only(group: Group) -> None:
    g = group
    limit = 4096  # offset.metadata.max.bytes
    errors = commit(
        g.conn,
        GROUP,
        {(TOPIC, 0): (12, "x" * (limit + 1)), (TOPIC, 1): (21, "y" * limit)},
        generation=g.generation,
        member_id=g.member_id,
    )
    assert errors == {(TOPIC, 0): ErrorCode.offset_metadata_too_large, (TOPIC, 1): ErrorCode.none}
    g.committed[(TOPIC, 1)] = (21, "y" * limit)
    g.assert_intact()


def test_empty_group_id_is_invalid_group_id(group: Group) -> None:
    """JoinGroup, SyncGroup, Heartbeat and LeaveGroup answer INVALID_GROUP_ID, as Kafka does.
    OffsetCommit too: stricter than Kafka, which accepts "" for commits (and fetches) for
    backwards compatibility; this broker refuses it and stores nothing."""
    g = group
    c = g.conn
    assert c.request(join_request("")).error_code == ErrorCode.invalid_group_id
    assert c.request(sync_request("", g.generation, g.member_id)).error_code == ErrorCode.invalid_group_id
    assert heartbeat(c, "", g.generation, g.member_id) == ErrorCode.invalid_group_id
    leave = c.request(LeaveGroupRequest(group_id=GroupId(""), members=(MemberIdentity(member_id=g.member_id),)))
    assert leave.error_code == ErrorCode.invalid_group_id
    assert commit(c, "", {(TOPIC, 0): (5, "")}) == {(TOPIC, 0): ErrorCode.invalid_group_id}
    assert offset_delete(c, "", {TOPIC: [0]})[0] == ErrorCode.invalid_group_id
    assert fetch_groups(c, {"": None})[""][1] == {}
    g.assert_intact()


def test_group_id_longer_than_249_characters_is_invalid_group_id(group: Group) -> None:
    """This broker's limit (a group id is a key of __consumer_offsets): Kafka itself has no
    length limit on group ids.  249 characters still work."""
    g = group
    too_long, longest = "g" * 250, "g" * 249
    assert g.conn.request(join_request(too_long)).error_code == ErrorCode.invalid_group_id
    assert commit(g.conn, too_long, {(TOPIC, 0): (5, "")}) == {(TOPIC, 0): ErrorCode.invalid_group_id}
    assert heartbeat(g.conn, too_long, 1, "m") == ErrorCode.invalid_group_id
    assert commit(g.conn, longest, {(TOPIC, 0): (5, "")}) == {(TOPIC, 0): ErrorCode.none}
    assert fetch(g.conn, longest) == {(TOPIC, 0): (5, "")}
    g.assert_intact()


# --- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ----------------------------------------


def test_heartbeat_and_sync_with_a_wrong_generation_or_unknown_member_are_refused(group: Group) -> None:
    g = group
    c = g.conn
    assert heartbeat(c, GROUP, g.generation + 1, g.member_id) == ErrorCode.illegal_generation
    assert heartbeat(c, GROUP, g.generation - 1, g.member_id) == ErrorCode.illegal_generation
    assert heartbeat(c, GROUP, g.generation, "stranger") == ErrorCode.unknown_member_id
    assert heartbeat(c, "no-such-group", 1, g.member_id) == ErrorCode.unknown_member_id
    stale = c.request(sync_request(GROUP, g.generation + 1, g.member_id, {g.member_id: b"evil"}))
    assert stale.error_code == ErrorCode.illegal_generation
    stranger = c.request(sync_request(GROUP, g.generation, "stranger", {"stranger": b"evil"}))
    assert stranger.error_code == ErrorCode.unknown_member_id
    # The assignment the leader sent is still the member's.
    again = c.request(sync_request(GROUP, g.generation, g.member_id))
    assert (again.error_code, again.assignment) == (ErrorCode.none, g.assignment)
    g.assert_intact()


def test_join_with_an_invalid_session_timeout_is_invalid_session_timeout(group: Group) -> None:
    g = group
    for session_ms in (6_000 - 1, 1_800_000 + 1):  # group.min/max.session.timeout.ms
        response = g.conn.request(join_request(GROUP, session_ms=session_ms))
        assert response.error_code == ErrorCode.invalid_session_timeout
    g.assert_intact()


def test_join_with_an_inconsistent_protocol_is_inconsistent_group_protocol(group: Group) -> None:
    g = group
    for request in (
        join_request(GROUP, protocol_type="connect"),
        join_request(GROUP, protocols=(("roundrobin", subscription(TOPIC)),)),  # no protocol in common
        join_request(GROUP, protocols=()),
    ):
        assert g.conn.request(request).error_code == ErrorCode.inconsistent_group_protocol
    g.assert_intact()
    # An empty protocol type is inconsistent even for a group with no members yet.
    assert g.conn.request(join_request("fresh", protocol_type="")).error_code == ErrorCode.inconsistent_group_protocol
    with connect(g.broker.bootstrap) as conn:  # a new group can still take any protocol type
        assert conn.request(join_request("connect-group", protocol_type="connect")).error_code == (
            ErrorCode.member_id_required
        )


def test_join_with_a_member_id_the_group_never_handed_out_is_unknown_member_id(group: Group) -> None:
    g = group
    assert g.conn.request(join_request(GROUP, "made-up")).error_code == ErrorCode.unknown_member_id
    assert g.conn.request(join_request("no-such-group", "made-up")).error_code == ErrorCode.unknown_member_id
    assert "no-such-group" not in g.broker.call(lambda: set(g.broker.broker.coordinator.groups))
    g.assert_intact()


def test_leave_group_answers_each_member_and_only_the_known_one_leaves(group: Group) -> None:
    g = group
    response = g.conn.request(
        LeaveGroupRequest(
            group_id=GroupId(GROUP),
            members=(MemberIdentity(member_id="stranger"), MemberIdentity(member_id=g.member_id)),
        )
    )
    assert response.error_code == ErrorCode.none
    assert [(m.member_id, m.error_code) for m in response.members] == [
        ("stranger", ErrorCode.unknown_member_id),
        (g.member_id, ErrorCode.none),
    ]
    [described] = describe(g.conn, GROUP)
    assert (described.group_state, described.members) == ("Empty", ())
    assert fetch(g.conn, GROUP) == g.committed  # leaving keeps the offsets
    # Empty now: a simple-consumer commit is accepted.
    assert commit(g.conn, GROUP, {(TOPIC, 0): (12, "")}) == {(TOPIC, 0): ErrorCode.none}


# --- FindCoordinator ------------------------------------------------------------------------


def test_find_coordinator_answers_groups_and_transactions_and_refuses_other_key_types(group: Group) -> None:
    g = group
    node_id = g.broker.broker.node_id
    ok = g.conn.request(FindCoordinatorRequestV3(key=GROUP, key_type=i8(GROUP_KEY)))
    assert (ok.error_code, ok.node_id, ok.host, ok.port) == (ErrorCode.none, node_id, "127.0.0.1", g.broker.port)
    txn = g.conn.request(FindCoordinatorRequestV3(key="txn-id", key_type=i8(TRANSACTION_KEY)))
    assert (txn.error_code, txn.node_id, txn.port) == (ErrorCode.none, node_id, g.broker.port)
    empty = g.conn.request(FindCoordinatorRequestV3(key="", key_type=i8(TRANSACTION_KEY)))
    assert (empty.error_code, empty.node_id) == (ErrorCode.invalid_request, -1)
    # Kafka's answer to an unknown key type (CoordinatorType.forId) is INVALID_REQUEST.
    unknown = g.conn.request(FindCoordinatorRequestV3(key=GROUP, key_type=i8(7)))
    assert (unknown.error_code, unknown.node_id) == (ErrorCode.invalid_request, -1)
    g.assert_intact()


def test_find_coordinator_v4_answers_every_batched_key(group: Group) -> None:
    g = group
    node_id = g.broker.broker.node_id
    keys = (GROUP, "second-group", "third-group")
    batched = g.conn.request(FindCoordinatorRequestV4(key_type=i8(GROUP_KEY), coordinator_keys=keys))
    assert [(c.key, c.error_code, c.node_id, c.host, c.port) for c in batched.coordinators] == [
        (k, ErrorCode.none, node_id, "127.0.0.1", g.broker.port) for k in keys
    ]
    txns = g.conn.request(FindCoordinatorRequestV4(key_type=i8(TRANSACTION_KEY), coordinator_keys=("a", "")))
    assert [(c.key, c.error_code, c.node_id) for c in txns.coordinators] == [
        ("a", ErrorCode.none, node_id),
        ("", ErrorCode.invalid_request, -1),
    ]
    refused = g.conn.request(FindCoordinatorRequestV4(key_type=i8(7), coordinator_keys=keys[:2]))
    assert [(c.key, c.error_code, c.node_id) for c in refused.coordinators] == [
        (k, ErrorCode.invalid_request, -1) for k in keys[:2]
    ]
    g.assert_intact()


# --- DescribeGroups / ListGroups / DeleteGroups / OffsetDelete / OffsetFetch ---------------


def test_describe_groups_reports_members_states_and_unknown_groups_as_dead(group: Group) -> None:
    g = group
    assert commit(g.conn, "simple", {(TOPIC, 0): (1, "")}) == {(TOPIC, 0): ErrorCode.none}
    stable, simple, unknown = describe(g.conn, GROUP, "simple", "never-seen")
    assert (stable.error_code, stable.group_state, stable.protocol_type, stable.protocol_data) == (
        ErrorCode.none,
        "Stable",
        "consumer",
        "range",
    )
    [member] = stable.members
    assert member.member_id == g.member_id
    assert member.member_metadata == subscription(TOPIC)
    assert member.member_assignment == g.assignment
    assert (simple.error_code, simple.group_state, simple.members) == (ErrorCode.none, "Empty", ())
    # DescribeGroups before v6: an unknown group is reported Dead, without an error.
    assert (unknown.error_code, unknown.group_state, unknown.members) == (ErrorCode.none, "Dead", ())
    g.assert_intact()


def test_list_groups_filters_by_state_and_type(group: Group) -> None:
    g = group
    assert commit(g.conn, "simple", {(TOPIC, 0): (1, "")}) == {(TOPIC, 0): ErrorCode.none}

    def listed(states: tuple[str, ...] = (), types: tuple[str, ...] = ()) -> dict[str, str]:
        response = g.conn.request(ListGroupsRequest(states_filter=states, types_filter=types))
        assert response.error_code == ErrorCode.none
        return {x.group_id: x.group_state for x in response.groups}

    assert listed() == {GROUP: "Stable", "simple": "Empty"}
    assert listed(states=("Empty",)) == {"simple": "Empty"}
    assert listed(states=("Stable", "Empty")) == {GROUP: "Stable", "simple": "Empty"}
    assert listed(types=("classic",)) == {GROUP: "Stable", "simple": "Empty"}
    assert listed(types=("consumer",)) == {}  # KIP-848 groups: this broker has none
    g.assert_intact()


def test_delete_groups_refuses_missing_and_non_empty_groups_and_deletes_empty_ones(group: Group) -> None:
    g = group
    assert commit(g.conn, "simple", {(TOPIC, 0): (1, "")}) == {(TOPIC, 0): ErrorCode.none}
    response = g.conn.request(
        DeleteGroupsRequest(groups_names=(GroupId("never-seen"), GroupId(GROUP), GroupId("simple")))
    )
    assert [(r.group_id, r.error_code) for r in response.results] == [
        ("never-seen", ErrorCode.group_id_not_found),
        (GROUP, ErrorCode.non_empty_group),
        ("simple", ErrorCode.none),
    ]
    assert fetch(g.conn, "simple") == {}
    [gone] = describe(g.conn, "simple")
    assert gone.group_state == "Dead"
    again = g.conn.request(DeleteGroupsRequest(groups_names=(GroupId("simple"),)))
    assert again.results[0].error_code == ErrorCode.group_id_not_found
    g.assert_intact()


def test_offset_delete_refuses_subscribed_topics_and_missing_groups(group: Group) -> None:
    g = group
    errors = commit(g.conn, GROUP, {(OTHER, 0): (7, "")}, generation=g.generation, member_id=g.member_id)
    assert errors == {(OTHER, 0): ErrorCode.none}

    assert offset_delete(g.conn, "never-seen", {TOPIC: [0]}) == (ErrorCode.group_id_not_found, {})
    top, parts = offset_delete(g.conn, GROUP, {TOPIC: [0, 1], OTHER: [0], "no-such-topic": [0]})
    assert top == ErrorCode.none
    assert parts == {
        (TOPIC, 0): ErrorCode.group_subscribed_to_topic,  # the member consumes it
        (TOPIC, 1): ErrorCode.group_subscribed_to_topic,
        (OTHER, 0): ErrorCode.none,  # not subscribed: deleted
        ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition,
    }
    g.assert_intact()  # the subscribed offsets are untouched, the other one is gone


def test_offset_delete_in_an_empty_group_deletes_any_topic(group: Group) -> None:
    g = group
    assert commit(g.conn, "simple", {(TOPIC, 0): (1, ""), (TOPIC, 1): (2, "")}) == {
        (TOPIC, 0): ErrorCode.none,
        (TOPIC, 1): ErrorCode.none,
    }
    assert offset_delete(g.conn, "simple", {TOPIC: [0]}) == (ErrorCode.none, {(TOPIC, 0): ErrorCode.none})
    assert fetch(g.conn, "simple") == {(TOPIC, 1): (2, "")}
    g.assert_intact()


def test_offset_fetch_answers_several_groups_in_one_request(group: Group) -> None:
    g = group
    assert commit(g.conn, "simple", {(OTHER, 0): (3, "s")}) == {(OTHER, 0): ErrorCode.none}
    answers = fetch_groups(g.conn, {GROUP: {TOPIC: [0, 1]}, "simple": None, "never-seen": {TOPIC: [0]}})
    assert answers == {
        GROUP: (ErrorCode.none, g.committed),
        "simple": (ErrorCode.none, {(OTHER, 0): (3, "s")}),
        "never-seen": (ErrorCode.none, {}),
    }
    g.assert_intact()
