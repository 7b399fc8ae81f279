"""The consumer group protocol's (KIP-848) server-side assignors, uniform and range: their
properties (every partition to exactly one subscriber, determinism, balance, stickiness,
contiguous and co-partitioned ranges) and a few concrete cases.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.coordinator.assignors import ASSIGNORS, Assignment, range_, uniform
from tests.support.consumer_group_harness import load, partitions_of
from tests.support.examples import examples

TOPIC_IDS = [uuid.UUID(int=i + 1) for i in range(4)]


@st.composite
def assignor_inputs(
    draw: st.DrawFn, *, homogeneous: bool = False
) -> tuple[dict[str, frozenset[uuid.UUID]], dict[uuid.UUID, int]]:
    """Up to 4 topics of up to 12 partitions, up to 6 members, each subscribed to a subset
    (a bit mask over the topics; the same non-empty one for all when `homogeneous`)."""
    counts = draw(st.lists(st.integers(0, 12), min_size=1, max_size=4))
    topics = TOPIC_IDS[: len(counts)]
    everything = (1 << len(topics)) - 1
    if homogeneous:
        masks = [draw(st.integers(1, everything))] * draw(st.integers(1, 6))
    else:
        masks = draw(st.lists(st.integers(0, everything), min_size=1, max_size=6))
    members = {f"m{i}": frozenset(t for j, t in enumerate(topics) if mask >> j & 1) for i, mask in enumerate(masks)}
    return members, dict(zip(topics, counts, strict=True))


@st.composite
def any_previous(draw: st.DrawFn, members: Mapping[str, frozenset[uuid.UUID]]) -> dict[str, Assignment]:
    """A previous target that may be inconsistent: partitions twice, gone, or of unsubscribed
    topics, members that are no longer there."""
    ids = [*members, "gone"]
    triples = draw(
        st.lists(st.tuples(st.integers(0, len(ids) - 1), st.integers(0, len(TOPIC_IDS) - 1), st.integers(0, 14)))
    )
    out: dict[str, dict[uuid.UUID, frozenset[int]]] = {}
    for m, t, p in triples:
        topic = TOPIC_IDS[t]
        parts = out.setdefault(ids[m], {})
        parts[topic] = parts.get(topic, frozenset()) | {p}
    return out


def assert_valid(
    members: Mapping[str, frozenset[uuid.UUID]], partitions: Mapping[uuid.UUID, int], out: dict[str, Assignment]
) -> None:
    """Every member has an entry; every partition of a subscribed topic is assigned exactly
    once, to a member subscribed to it; nothing else is assigned."""
    assert set(out) == set(members)
    counts = Counter(tp for a in out.values() for tp in partitions_of(a))
    expected = {(t, p) for t, n in partitions.items() if any(t in s for s in members.values()) for p in range(n)}
    assert set(counts) == expected
    assert all(c == 1 for c in counts.values())
    for m, a in out.items():
        assert set(a) <= members[m], f"{m} got a topic it does not subscribe to"
        assert all(ps for ps in a.values()), "empty partition sets are not listed"


ASSIGNOR_SETTINGS = settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("assignor", sorted(ASSIGNORS))
@ASSIGNOR_SETTINGS
@given(data=st.data())
def test_every_partition_of_a_subscribed_topic_goes_to_exactly_one_subscriber(
    assignor: str, data: st.DataObject
) -> None:
    members, partitions = data.draw(assignor_inputs())
    previous = data.draw(any_previous(members))
    assert_valid(members, partitions, ASSIGNORS[assignor](members, partitions, previous))


@pytest.mark.parametrize("assignor", sorted(ASSIGNORS))
@ASSIGNOR_SETTINGS
@given(data=st.data())
def test_assignors_are_deterministic_whatever_the_order_of_their_input(assignor: str, data: st.DataObject) -> None:
    members, partitions = data.draw(assignor_inputs())
    previous = data.draw(any_previous(members))
    first = ASSIGNORS[assignor](members, partitions, previous)
    rng = random.Random(data.draw(st.integers(0, 1000)))

    def shuffled(d: Mapping[Any, Any]) -> dict[Any, Any]:
        items = list(d.items())
        rng.shuffle(items)
        return dict(items)

    again = ASSIGNORS[assignor](shuffled(members), shuffled(partitions), shuffled(previous))
    assert again == first


@ASSIGNOR_SETTINGS
@given(inputs=assignor_inputs(homogeneous=True), data=st.data())
def test_uniform_is_balanced_and_a_fixed_point_when_subscriptions_are_the_same(
    inputs: tuple[dict[str, frozenset[uuid.UUID]], dict[uuid.UUID, int]], data: st.DataObject
) -> None:
    members, partitions = inputs
    previous = data.draw(any_previous(members))
    out = uniform(members, partitions, previous)
    assert_valid(members, partitions, out)
    loads = [load(a) for a in out.values()]
    assert max(loads) - min(loads) <= 1
    # Sticky: recomputed with nothing changed, nothing moves.
    assert uniform(members, partitions, out) == out


@ASSIGNOR_SETTINGS
@given(inputs=assignor_inputs(homogeneous=True), data=st.data())
def test_uniform_moves_only_the_leaving_members_partitions(
    inputs: tuple[dict[str, frozenset[uuid.UUID]], dict[uuid.UUID, int]], data: st.DataObject
) -> None:
    members, partitions = inputs
    before = uniform(members, partitions, {})
    gone = data.draw(st.sampled_from(sorted(members)))
    rest = {m: s for m, s in members.items() if m != gone}
    after = uniform(rest, partitions, before)
    assert_valid(rest, partitions, after)
    for m in rest:
        assert partitions_of(before[m]) <= partitions_of(after[m]), f"{m} lost partitions when {gone} left"
    loads = [load(a) for a in after.values()] or [0]
    assert max(loads) - min(loads) <= 1


@ASSIGNOR_SETTINGS
@given(inputs=assignor_inputs(homogeneous=True))
def test_uniform_a_member_joining_takes_only_what_it_must(
    inputs: tuple[dict[str, frozenset[uuid.UUID]], dict[uuid.UUID, int]],
) -> None:
    members, partitions = inputs
    before = uniform(members, partitions, {})
    subscribed = next(iter(members.values()))
    grown = {**members, "zz-new": subscribed}
    after = uniform(grown, partitions, before)
    assert_valid(grown, partitions, after)
    total = sum(partitions[t] for t in subscribed)
    assert load(after["zz-new"]) == total // len(grown)
    # The others only give partitions up (to the newcomer), never swap among themselves.
    for m in members:
        assert partitions_of(after[m]) <= partitions_of(before[m])


@ASSIGNOR_SETTINGS
@given(inputs=assignor_inputs())
def test_uniform_leaves_no_member_able_to_take_a_partition_from_one_with_two_more(
    inputs: tuple[dict[str, frozenset[uuid.UUID]], dict[uuid.UUID, int]],
) -> None:
    members, partitions = inputs
    out = uniform(members, partitions, {})
    for giver, a in out.items():
        for t in a:
            takers = [m for m, s in members.items() if t in s and load(out[m]) + 1 < load(a)]
            assert not takers, f"{takers} could take a partition of {t} from {giver}"


def test_uniform_recomputed_with_nothing_changed_moves_nothing_with_different_subscriptions() -> None:
    t1, t2 = TOPIC_IDS[:2]
    members = {"m0": frozenset({t1}), "m1": frozenset({t1}), "m2": frozenset({t1, t2})}
    partitions = {t1: 9, t2: 3}
    first = uniform(members, partitions, {})
    assert uniform(members, partitions, first) == first


@pytest.mark.parametrize(
    ("counts", "expected"),
    [
        (2, {"a": [0], "b": [1], "c": []}),
        (3, {"a": [0], "b": [1], "c": [2]}),
        (7, {"a": [0, 1, 2], "b": [3, 4], "c": [5, 6]}),
        (8, {"a": [0, 1, 2], "b": [3, 4, 5], "c": [6, 7]}),
    ],
)
def test_range_gives_contiguous_ranges_in_member_id_order_the_first_ones_one_more(
    counts: int, expected: dict[str, list[int]]
) -> None:
    t = TOPIC_IDS[0]
    members = {"c": frozenset({t}), "a": frozenset({t}), "b": frozenset({t})}  # not in id order
    out = range_(members, {t: counts}, {})
    assert {m: sorted(out[m].get(t, frozenset())) for m in members} == expected


@ASSIGNOR_SETTINGS
@given(inputs=assignor_inputs())
def test_range_per_topic_ranges_are_contiguous_sized_by_member_order(
    inputs: tuple[dict[str, frozenset[uuid.UUID]], dict[uuid.UUID, int]],
) -> None:
    members, partitions = inputs
    out = range_(members, partitions, {})
    assert_valid(members, partitions, out)
    for t, n in partitions.items():
        subscribers = sorted(m for m, s in members.items() if t in s)
        start = 0
        for i, m in enumerate(subscribers):
            size = n // len(subscribers) + (1 if i < n % len(subscribers) else 0)
            assert sorted(out[m].get(t, frozenset())) == list(range(start, start + size))
            start += size


@ASSIGNOR_SETTINGS
@given(n_members=st.integers(1, 6), count=st.integers(0, 12), n_topics=st.integers(2, 4))
def test_range_co_partitions_topics_of_the_same_size(n_members: int, count: int, n_topics: int) -> None:
    topics = TOPIC_IDS[:n_topics]
    members = {f"m{i}": frozenset(topics) for i in range(n_members)}
    out = range_(members, dict.fromkeys(topics, count), {})
    for m, a in out.items():
        numbers = {t: a.get(t, frozenset()) for t in topics}
        assert len(set(numbers.values())) == 1, f"{m} does not get the same partitions of each topic: {numbers}"


def test_range_ignores_the_previous_target() -> None:
    t = TOPIC_IDS[0]
    members = {"a": frozenset({t}), "b": frozenset({t})}
    assert range_(members, {t: 4}, {"b": {t: frozenset({0, 1})}}) == {
        "a": {t: frozenset({0, 1})},
        "b": {t: frozenset({2, 3})},
    }


def test_uniform_concrete_join_and_leave() -> None:
    t = TOPIC_IDS[0]
    both = {"a": frozenset({t}), "b": frozenset({t})}
    first = uniform(both, {t: 4}, {})
    assert sorted(load(a) for a in first.values()) == [2, 2]
    three = uniform({**both, "c": frozenset({t})}, {t: 4}, first)
    assert load(three["c"]) == 1
    assert sum(len(partitions_of(first[m]) - partitions_of(three[m])) for m in both) == 1
    # The member with no subscription gets an entry and nothing.
    assert uniform({**both, "idle": frozenset()}, {t: 4}, first)["idle"] == {}
