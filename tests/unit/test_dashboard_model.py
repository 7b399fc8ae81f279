"""The dashboard's arithmetic on observations: rates and lag from two snapshots, rebalances
counted across polls, the bounded chart history, and decoding member assignments."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import pytest
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

from services.dashboard.kafka_reader import decode_assignment
from services.dashboard.model import (
    GroupInfo,
    History,
    MemberInfo,
    Observation,
    PartitionInfo,
    RebalanceCounter,
    TopicInfo,
    cluster_json,
    group_lags,
    groups_json,
    history_point,
    messages_in_rates,
    messages_out_rates,
    rate,
)


def topic(name: str, ends: list[int], starts: list[int] | None = None, *, internal: bool = False) -> TopicInfo:
    starts = starts or [0] * len(ends)
    return TopicInfo(
        name,
        internal,
        tuple(PartitionInfo(p, 1, s, e, size=100 * e) for p, (s, e) in enumerate(zip(starts, ends, strict=True))),
    )


def member(member_id: str, *assignment: tuple[str, tuple[int, ...]]) -> MemberInfo:
    return MemberInfo(member_id, f"client-{member_id}", "127.0.0.1", tuple(assignment))


def group(
    group_id: str,
    members: tuple[MemberInfo, ...] = (),
    committed: Mapping[tuple[str, int], int] | None = None,
    state: str = "Stable",
) -> GroupInfo:
    return GroupInfo(group_id, state, "consumer", "range", members, dict(committed or {}))


def observation(
    mono: float, topics: list[TopicInfo], groups: Sequence[GroupInfo] = (), *, sizes_known: bool = True
) -> Observation:
    return Observation(
        wall=1_700_000_000 + mono,
        mono=mono,
        brokers=(),
        controller_id=1,
        topics={t.name: t for t in topics},
        groups={g.group_id: g for g in groups},
        sizes_known=sizes_known,
    )


def test_rate_is_the_increase_per_second_never_negative_and_unknown_without_two_values() -> None:
    assert rate(10, 40, 2.0) == 15.0
    assert rate(40, 10, 2.0) == 0.0  # topic re-created, offsets reset: no negative traffic
    assert rate(None, 10, 2.0) is None
    assert rate(10, None, 2.0) is None
    assert rate(10, 20, 0.0) is None


def test_messages_in_per_topic_is_the_growth_of_the_summed_end_offsets_between_two_snapshots() -> None:
    before = observation(10.0, [topic("orders", [3, 4, 3])])
    after = observation(12.0, [topic("orders", [13, 14, 13]), topic("new", [5])])
    rates = messages_in_rates(before, after)
    assert rates == {"orders": 15.0, "new": None}  # 30 records in 2 s; a new topic has no rate yet
    assert messages_in_rates(None, after) == {"orders": None, "new": None}


def test_messages_out_per_group_counts_commits_on_partitions_committed_in_both_snapshots_only() -> None:
    before = observation(0.0, [topic("t", [50, 50])], [group("g", committed={("t", 0): 10})])
    after = observation(
        4.0,
        [topic("t", [50, 50])],
        [group("g", committed={("t", 0): 30, ("t", 1): 50}), group("new", committed={("t", 0): 5})],
    )
    # t-0 moved by 20 in 4 s; t-1's first commit (50) is no burst of consumption; "new" has no past.
    assert messages_out_rates(before, after) == {"g": 5.0, "new": None}


def test_lag_is_end_minus_committed_and_for_an_assigned_partition_without_commit_everything_retained() -> None:
    topics = {"t": topic("t", [10, 20, 30], starts=[0, 5, 0])}
    g = group("g", (member("m1", ("t", (0, 1))), member("m2", ("t", (2,)))), committed={("t", 0): 4, ("gone", 0): 7})
    lags = {(p.topic, p.partition): (p.committed, p.end, p.lag) for p in group_lags(g, topics)}
    assert lags == {
        ("gone", 0): (7, None, None),  # its topic was deleted: unknown, not 0
        ("t", 0): (4, 10, 6),
        ("t", 1): (None, 20, 15),  # no commit yet: it will read from the log start (5) to the end
        ("t", 2): (None, 30, 30),
    }
    members = {(p.topic, p.partition): p.member.member_id if p.member else None for p in group_lags(g, topics)}
    assert members == {("gone", 0): None, ("t", 0): "m1", ("t", 1): "m1", ("t", 2): "m2"}
    (row,) = groups_json(observation(0, list(topics.values()), [g]), {"g": 1.5}, {"g": 2})
    assert row["lag"] == 6 + 15 + 30  # unknown lags are left out of the total
    assert row["topics"] == ["t"]
    assert (row["out_rate"], row["rebalances"]) == (1.5, 2)
    assert row["group_type"] is None  # a broker without ListGroups v5 does not say
    (typed,) = groups_json(observation(0, [], [replace(g, group_type="consumer")]), {}, {})
    assert typed["group_type"] == "consumer"


def test_a_group_without_members_lists_the_topics_it_committed() -> None:
    assert group("analytics", committed={("orders", 0): 1, ("logs.app", 2): 3}).topics() == ["logs.app", "orders"]
    assert group("g", (member("m", ("otp.requests", (0, 1))),), committed={("old", 0): 1}).topics() == ["otp.requests"]


def test_rebalances_are_counted_on_entering_a_rebalancing_state_or_on_a_changed_assignment() -> None:
    counter = RebalanceCounter()
    one = (member("a", ("t", (0, 1, 2))),)
    two = (member("a", ("t", (0, 1))), member("b", ("t", (2,))))
    sequence = [
        (group("g", one), 0),  # first sight, stable: nothing seen yet
        (group("g", one), 0),
        (group("g", one, state="PreparingRebalance"), 1),  # b joins
        (group("g", (), state="CompletingRebalance"), 1),  # same rebalance, still going
        (group("g", two), 1),  # ...and done: not counted twice
        (group("g", two), 1),
        (group("g", one), 2),  # b left and the group rebalanced between two polls
    ]
    for seen, expected in sequence:
        assert counter.observe(seen) == expected
    assert counter.observe(group("h", state="PreparingRebalance")) == 1  # first seen mid-rebalance
    counter.forget_missing(["g"])
    assert counter.counts == {"g": 2}


def test_history_keeps_only_the_newest_points() -> None:
    history = History(3)
    for i in range(5):
        history.add({"t": i})
    assert [p["t"] for p in history.points()] == [2, 3, 4]
    assert len(history) == 3
    with pytest.raises(ValueError):
        History(0)


def test_a_history_point_leaves_out_internal_topics_and_unknown_values() -> None:
    obs = observation(
        2.0,
        [topic("orders", [5]), topic("__consumer_offsets", [9], internal=True)],
        [group("g", (member("m", ("orders", (0,))),), committed={("orders", 0): 2})],
    )
    point = history_point(obs, {"orders": 1.25, "__consumer_offsets": 3.0, "x": None}, {"g": None})
    assert point == {"t": 1_700_000_002_000, "messages_in": {"orders": 1.25}, "messages_out": {}, "lag": {"g": 3}}


def test_cluster_totals_skip_internal_topics_and_sizes_are_unknown_when_the_broker_cannot_tell() -> None:
    topics = [topic("orders", [5, 5]), topic("__consumer_offsets", [9], internal=True)]
    known = cluster_json(observation(0, topics), {"orders": 2.0})
    assert [t["name"] for t in known["topics"]] == ["orders", "__consumer_offsets"]  # internal ones last
    orders = known["topics"][0]
    assert (orders["partitions"], orders["start_offset"], orders["end_offset"], orders["size_bytes"]) == (
        2,
        0,
        10,
        1000,
    )
    assert known["totals"] == {
        "topics": 1,
        "partitions": 2,
        "messages": 10,
        "size_bytes": 1000,
        "in_rate": 2.0,
        "under_replicated": 0,
        "offline": 0,
    }
    unknown = cluster_json(observation(0, topics, sizes_known=False), {})
    assert unknown["topics"][0]["size_bytes"] is None
    assert unknown["totals"]["size_bytes"] is None
    assert {p["size_bytes"] for p in unknown["topics"][0]["partition_details"]} == {None}


def test_member_assignments_decode_from_the_consumer_protocol_and_anything_else_is_no_assignment() -> None:
    raw = ConsumerProtocolMemberAssignment(0, [("t", [2, 0]), ("a", [1]), ("t", [1])], b"").encode()
    assert decode_assignment("consumer", raw) == (("a", (1,)), ("t", (0, 1, 2)))
    assert decode_assignment("consumer", b"") == ()  # not assigned yet (mid-rebalance)
    assert decode_assignment("connect", raw) == ()  # another protocol's format
    assert decode_assignment("consumer", b"\x00\x00\x00\x00\x00\x05xx") == ()  # truncated garbage


def test_over_a_window_each_topic_and_group_is_measured_from_the_oldest_observation_that_saw_it() -> None:
    first = observation(0.0, [topic("old", [10])], [])
    second = observation(5.0, [topic("old", [20]), topic("young", [0])], [group("g", committed={("old", 0): 10})])
    now = observation(10.0, [topic("old", [60]), topic("young", [40])], [group("g", committed={("old", 0): 60})])
    assert messages_in_rates([first, second], now) == {"old": 5.0, "young": 8.0}
    assert messages_out_rates([first, second], now) == {"g": 10.0}
    assert messages_out_rates([], now) == {"g": None}


def test_replication_counts_under_replicated_and_offline_partitions_and_names_the_quorum_leader() -> None:
    parts = (
        PartitionInfo(0, 1, 0, 5, replicas=(1, 2, 3), isr=(1, 2, 3)),
        PartitionInfo(1, 2, 0, 5, replicas=(2, 3, 1), isr=(2, 3), offline_replicas=(1,)),
        PartitionInfo(2, -1, None, None, replicas=(3, 1, 2), isr=(3,), offline_replicas=(1, 2)),
    )
    seen = Observation(
        wall=1.0,
        mono=1.0,
        brokers=(),
        controller_id=2,  # what Metadata says: under KRaft a random broker
        topics={"orders": TopicInfo("orders", False, parts)},
        groups={},
        quorum_leader=3,
    )
    shown = cluster_json(seen, {})
    assert (shown["active_controller"], shown["controller_source"]) == (3, "DescribeMetadataQuorum")
    orders = shown["topics"][0]
    assert (orders["replication_factor"], orders["under_replicated"], orders["offline"]) == (3, 2, 1)
    assert [(p["under_replicated"], p["offline"]) for p in orders["partition_details"]] == [
        (False, False),
        (True, False),
        (True, True),
    ]
    assert orders["partition_details"][1]["offline_replicas"] == [1]
    assert (shown["totals"]["under_replicated"], shown["totals"]["offline"]) == (2, 1)

    single = cluster_json(
        observation(1.0, [TopicInfo("t", False, (PartitionInfo(0, 1, 0, 1, replicas=(1,), isr=(1,)),))]), {}
    )
    assert (single["active_controller"], single["controller_source"]) == (1, "Metadata")
    assert (single["totals"]["under_replicated"], single["topics"][0]["replication_factor"]) == (0, 1)
