"""Share groups (KIP-932): membership (ShareGroupHeartbeat's validation, joins, unknown and fenced
members, the size limit) and the `simple` assignor's properties and examples.

Time is a ManualClock: nothing sleeps.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter
from collections.abc import Mapping

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.coordinator.assignors import Assignment
from broker.protocol.errors import ErrorCode, KafkaError
from broker.share.group import (
    MAX_MEMBER_ID,
    ShareGroup,
    ShareGroupState,
    ShareHeartbeat,
    join_or_beat,
    simple,
    validate,
)
from tests.support.examples import examples
from tests.support.share_coordinator import hb


@pytest.mark.parametrize(
    ("req", "message"),
    [
        (hb(""), "MemberId can't be empty."),
        (hb("m" * (MAX_MEMBER_ID + 1)), f"MemberId is longer than {MAX_MEMBER_ID} characters."),
        (hb(epoch=-2), "MemberEpoch is -2: it must be -1, 0 or positive."),
        (hb(epoch=0, topics=None), "SubscribedTopicNames must be set in first request."),
        (hb(epoch=0, topics=()), "SubscribedTopicNames must be set in first request."),
        (hb(epoch=0, topics=("t", "")), "SubscribedTopicNames contains an empty topic name."),
        (hb(epoch=3, topics=("",)), "SubscribedTopicNames contains an empty topic name."),
    ],
)
def test_validate_errors(req: ShareHeartbeat, message: str) -> None:
    with pytest.raises(KafkaError) as e:
        validate(req)
    assert (e.value.code, e.value.message) == (ErrorCode.invalid_request, message)


@pytest.mark.parametrize(
    "req",
    [hb(), hb("m" * MAX_MEMBER_ID), hb(epoch=-1, topics=None), hb(epoch=4, topics=None), hb(epoch=4, topics=())],
)
def test_validate_accepts(req: ShareHeartbeat) -> None:
    validate(req)


def test_join_and_beat() -> None:
    group = ShareGroup("g")
    empty = group.state
    member, changed = join_or_beat(group, hb(topics=("u", "t", "t")), 100, 5_000, 10)
    assert changed
    assert group.members == {"a": member}
    assert (empty, group.state) == (ShareGroupState.EMPTY, ShareGroupState.STABLE)
    assert (member.topic_names, member.session_deadline_ms, member.client_id) == (("t", "u"), 5_100, "client")
    member.epoch = 3
    same, changed = join_or_beat(group, hb(epoch=3, topics=None, client_id="other"), 200, 5_000, 10)
    assert same is member
    assert not changed
    assert (member.session_deadline_ms, member.client_id) == (5_200, "other")
    _, changed = join_or_beat(group, hb(epoch=3, topics=("u", "t")), 300, 5_000, 10)
    assert not changed  # the same set of topics
    _, changed = join_or_beat(group, hb(epoch=3, topics=("t",)), 400, 5_000, 10)
    assert changed
    assert member.topic_names == ("t",)
    assert sorted(group.subscribed()) == ["t"]  # each name once
    _, changed = join_or_beat(group, hb(epoch=0, topics=("t",)), 500, 5_000, 10)
    assert not changed  # a rejoin under the same id: no fencing
    assert member.epoch == 3


def test_an_unknown_member() -> None:
    group = ShareGroup("g")
    join_or_beat(group, hb("a"), 0, 5_000, 10)
    with pytest.raises(KafkaError) as e:
        join_or_beat(group, hb("b", epoch=1), 0, 5_000, 10)
    assert (e.value.code, e.value.message) == (ErrorCode.unknown_member_id, "Member b is not a member of the group.")
    assert set(group.members) == {"a"}


@pytest.mark.parametrize(
    ("epoch", "message"),
    [
        (
            6,
            "The share group member has a greater member epoch (6) than the one known by the group coordinator (4). "
            "The member must abandon all its partitions and rejoin.",
        ),
        (
            2,
            "The share group member has a smaller member epoch (2) than the one known by the group coordinator (4). "
            "The member must abandon all its partitions and rejoin.",
        ),
    ],
)
def test_a_fenced_member_epoch(epoch: int, message: str) -> None:
    group = ShareGroup("g")
    member, _ = join_or_beat(group, hb(), 0, 5_000, 10)
    member.epoch = 4
    with pytest.raises(KafkaError) as e:
        join_or_beat(group, hb(epoch=epoch, topics=("other",)), 100, 5_000, 10)
    assert (e.value.code, e.value.message) == (ErrorCode.fenced_member_epoch, message)
    assert (member.topic_names, member.session_deadline_ms) == (("t",), 5_000)  # unchanged


def test_the_group_size_limit() -> None:
    group = ShareGroup("g")
    for m in ("a", "b"):
        join_or_beat(group, hb(m), 0, 5_000, 2)
    with pytest.raises(KafkaError) as e:
        join_or_beat(group, hb("c"), 0, 5_000, 2)
    assert (e.value.code, e.value.message) == (
        ErrorCode.group_max_size_reached,
        "The share group has reached its maximum capacity of 2 members.",
    )
    assert set(group.members) == {"a", "b"}
    join_or_beat(group, hb("a"), 0, 5_000, 2)  # a member of a full group may still rejoin


TOPIC_IDS = [uuid.UUID(int=i + 1) for i in range(4)]


@st.composite
def assignor_inputs(draw: st.DrawFn) -> tuple[dict[str, frozenset[uuid.UUID]], dict[uuid.UUID, int]]:
    """Up to 4 topics of up to 10 partitions, up to 8 members, each subscribed to a subset."""
    counts = draw(st.lists(st.integers(0, 10), min_size=1, max_size=4))
    topics = TOPIC_IDS[: len(counts)]
    masks = draw(st.lists(st.integers(0, (1 << len(topics)) - 1), min_size=1, max_size=8))
    members = {f"m{i}": frozenset(t for j, t in enumerate(topics) if mask >> j & 1) for i, mask in enumerate(masks)}
    return members, dict(zip(topics, counts, strict=True))


def owners(out: Mapping[str, Assignment], topic: uuid.UUID) -> Counter[int]:
    return Counter(p for a in out.values() for p in a.get(topic, frozenset()))


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inputs=assignor_inputs(), seed=st.randoms(use_true_random=False))
def test_simple_assignor_properties(
    inputs: tuple[dict[str, frozenset[uuid.UUID]], dict[uuid.UUID, int]], seed: random.Random
) -> None:
    members, partitions = inputs
    out = simple(members, partitions)
    assert set(out) == set(members)
    for m, assigned in out.items():
        assert set(assigned) <= members[m], f"{m} got a topic it does not subscribe to"
        assert all(ps for ps in assigned.values())
        for topic, ps in assigned.items():
            assert ps <= set(range(partitions[topic]))
    for topic, count in partitions.items():
        subscribed = [m for m, topics in members.items() if topic in topics]
        held = owners(out, topic)
        if not subscribed or count == 0:
            assert not held
            continue
        assert set(held) == set(range(count)), "a partition of a subscribed topic is unread"
        loads = [len(out[m].get(topic, frozenset())) for m in subscribed]
        if len(subscribed) <= count:
            assert set(held.values()) == {1}, "a partition is shared though there are enough of them"
            assert max(loads) - min(loads) <= 1
        else:
            assert loads == [1] * len(subscribed), "every member gets exactly one partition of the topic"
            assert max(held.values()) - min(held.values()) <= 1
    # Deterministic: the same for the same input, whatever the order of the members.
    order = list(members)
    seed.shuffle(order)
    assert simple({m: members[m] for m in order}, dict(reversed(list(partitions.items())))) == out


def test_simple_assignor_examples() -> None:
    t, u = TOPIC_IDS[:2]
    assert simple({"a": frozenset({t}), "b": frozenset({t})}, {t: 3}) == {
        "a": {t: frozenset({0, 2})},
        "b": {t: frozenset({1})},
    }
    assert simple({"a": frozenset({t}), "b": frozenset({t}), "c": frozenset({t, u})}, {t: 2, u: 1}) == {
        "a": {t: frozenset({0})},
        "b": {t: frozenset({1})},
        "c": {t: frozenset({0}), u: frozenset({0})},
    }
    assert simple({"a": frozenset()}, {t: 3}) == {"a": {}}
    assert simple({}, {t: 3}) == {}


def test_a_subscription_sorted_in_steps_is_the_names_sorted_once_each() -> None:
    """ShareGroupHeartbeat sorts a large subscription in runs, merged a name a step, before
    the group's one step: the member holds the same names as sorting them at once gives."""
    from broker.handlers.share_groups import _sorted_in_steps
    from broker.handlers.stepped import at_once

    names = {f"topic-{n * 7919 % 10_007}" for n in range(3_000)}
    assert at_once(_sorted_in_steps(names)) == tuple(sorted(names))
