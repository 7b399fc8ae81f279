"""The dashboard's banner: which broker is down and what it leaves under-replicated, a group that
lost its consumers, a job that stopped committing, an unreadable cluster; each since when it was
first seen, and gone once it is fixed."""

from __future__ import annotations

from collections.abc import Sequence

from contracts.commit_note import CommitNote
from services.dashboard.model import BrokerInfo, GroupInfo, MemberInfo, Observation, PartitionInfo, TopicInfo
from services.dashboard.problems import ProblemTracker

BROKERS = (BrokerInfo(1, "127.0.0.1", 19092), BrokerInfo(2, "127.0.0.1", 19093), BrokerInfo(3, "127.0.0.1", 19094))
T0 = 1_800_000_000.0


def orders(live: set[int], ends: Sequence[int] = (10, 10, 10), *, leaderless: int | None = None) -> TopicInfo:
    parts = []
    for p, end in enumerate(ends):
        isr = tuple(n for n in (1, 2, 3) if n in live)
        leader = -1 if p == leaderless else isr[0]
        parts.append(PartitionInfo(p, leader, 0, end, replicas=(1, 2, 3), isr=() if p == leaderless else isr))
    return TopicInfo("orders", False, tuple(parts))


def seen(at: float, live: set[int], groups: Sequence[GroupInfo] = (), **topic: int | None) -> Observation:
    return Observation(
        wall=T0 + at,
        mono=at,
        brokers=tuple(b for b in BROKERS if b.node_id in live),
        controller_id=1,
        topics={"orders": orders(live, leaderless=topic.get("leaderless"))},
        groups={g.group_id: g for g in groups},
    )


def sender(members: int, committed: int = 0) -> GroupInfo:
    member = MemberInfo("m1", "sms-sender-1", "127.0.0.1", (("orders", (0, 1, 2)),))
    return GroupInfo(
        "sms-sender",
        "Stable" if members else "Empty",
        "consumer",
        "range",
        (member,) * members,
        {("orders", p): committed for p in range(3)},
    )


def test_a_broker_that_goes_down_is_named_with_its_address_what_it_leaves_and_since_when() -> None:
    tracker = ProblemTracker()
    assert tracker.observe(seen(0, {1, 2, 3})) == []
    [down] = tracker.observe(seen(2, {1, 3}))
    assert (down.kind, down.subject, down.since) == ("broker", "broker 2", T0 + 2)
    assert down.text == "broker 2 (127.0.0.1:19093) is down: 3 partition(s) under-replicated"
    [still] = tracker.observe(seen(4, {1, 3}))
    assert still.since == T0 + 2  # first seen, not last
    assert tracker.observe(seen(6, {1, 2, 3})) == []
    [again] = tracker.observe(seen(8, {1, 3}))
    assert again.since == T0 + 8  # a new outage


def test_a_broker_down_from_the_start_is_found_through_the_replicas_that_name_it() -> None:
    [down] = ProblemTracker().observe(seen(0, {1, 2}, leaderless=0))
    assert down.text == "broker 3 is down: 2 partition(s) under-replicated, 1 offline"


def test_a_group_that_lost_its_consumers_while_behind_is_a_problem_an_idle_empty_group_is_not() -> None:
    tracker = ProblemTracker()
    assert tracker.observe(seen(0, {1, 2, 3}, [sender(1, committed=10)])) == []
    assert tracker.observe(seen(2, {1, 2, 3}, [sender(0, committed=10)])) == []  # caught up: nothing waits
    never = GroupInfo("replay", "Empty", "consumer", "", (), {("orders", 0): 0})
    [lost] = tracker.observe(seen(4, {1, 2, 3}, [sender(0, committed=4), never]))
    assert (lost.kind, lost.subject) == ("group", "group sms-sender")
    assert lost.text == "group sms-sender has no consumers left (18 behind)"


def test_a_job_that_commits_without_joining_is_a_problem_once_it_stops_committing() -> None:
    def analytics(committed_at: float) -> GroupInfo:
        note = CommitNote("analytics", "host:42", round((T0 + committed_at) * 1000), every_s=5.0)
        return GroupInfo("analytics", "Empty", "consumer", "", (), {("orders", p): 8 for p in range(3)}, note)

    tracker = ProblemTracker()
    assert tracker.observe(seen(10, {1, 2, 3}, [analytics(committed_at=8)])) == []
    [stopped] = tracker.observe(seen(60, {1, 2, 3}, [analytics(committed_at=8)]))
    assert (stopped.kind, stopped.subject, stopped.since) == ("job", "job analytics", T0 + 8)  # its last commit
    assert stopped.text == (
        "the analytics job (host:42) of group analytics stopped committing: last commit 52 s ago, 6 behind"
    )


def test_an_unreadable_cluster_is_one_problem_since_the_first_failed_poll() -> None:
    tracker = ProblemTracker()
    [first] = tracker.unreadable("cannot read the cluster: timed out", T0)
    [later] = tracker.unreadable("cannot read the cluster: refused", T0 + 5)
    assert (later.kind, later.text, later.since) == ("cluster", "cannot read the cluster: refused", first.since)
    assert tracker.observe(seen(10, {1, 2, 3})) == []
    assert tracker.unreadable("x", T0 + 20)[0].since == T0 + 20
    assert first.to_json()["since"].startswith("2027-01-15T")
