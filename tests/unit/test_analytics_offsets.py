"""Offsets of the Spark source: stable JSON, parsing, fair read limits, range splitting."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from analytics.offsets import (
    EARLIEST,
    LATEST,
    OffsetRange,
    canonical,
    fair_share,
    flatten,
    parse_offsets_json,
    ranges,
    split_range,
    to_json,
)

_PARTITIONS = st.dictionaries(
    st.tuples(st.sampled_from(["orders", "otp.requests", "logs.app", "a", "b"]), st.integers(0, 40)),
    st.integers(0, 10**12),
    max_size=30,
)


def test_offsets_print_topics_by_name_and_partitions_by_number() -> None:
    positions = {("orders", 10): 5, ("orders", 9): 4, ("logs.app", 0): 1, ("orders", 2): 3}

    assert json.dumps(canonical(positions)) == '{"logs.app": {"0": 1}, "orders": {"2": 3, "9": 4, "10": 5}}'


@given(_PARTITIONS, st.randoms())
def test_the_same_positions_in_any_insertion_order_print_the_same_text(
    positions: dict[tuple[str, int], int], rnd: random.Random
) -> None:
    items = list(positions.items())
    rnd.shuffle(items)

    assert to_json(dict(items)) == to_json(positions)
    assert flatten(json.loads(to_json(positions))) == positions


def test_offsets_json_accepts_numbers_and_the_earliest_latest_sentinels() -> None:
    assert parse_offsets_json('{"t": {"0": 23, "1": -2, "2": -1}}', "startingOffsets") == {
        ("t", 0): 23,
        ("t", 1): EARLIEST,
        ("t", 2): LATEST,
    }


@pytest.mark.parametrize(
    "text",
    ['{"t": {"0": -3}}', '{"t": {"x": 1}}', '{"t": [1]}', "[1]", "nope", '{"t": {"0": true}}', '{"t": {"0": 1.5}}'],
)
def test_malformed_offsets_json_names_the_option(text: str) -> None:
    with pytest.raises(ValueError, match="startingOffsets"):
        parse_offsets_json(text, "startingOffsets")


def test_fair_share_gives_equal_shares_and_hands_back_what_small_partitions_do_not_need() -> None:
    available = {("t", 0): 2, ("t", 1): 100, ("t", 2): 100}

    assert fair_share(available, 30) == {("t", 0): 2, ("t", 1): 14, ("t", 2): 14}
    assert fair_share(available, 31) == {("t", 0): 2, ("t", 1): 15, ("t", 2): 14}
    assert fair_share(available, 1000) == available
    assert fair_share(available, 0) == dict.fromkeys(available, 0)
    # 19 records left for a partition wanting 10 and one wanting 100: 10 and 9 (the found case).
    wanting = {("a", 0): 3, ("a", 1): 2, ("a", 2): 10, ("a", 3): 100, ("a", 4): 1, ("a", 5): 5}
    assert fair_share(wanting, 30) == {**wanting, ("a", 2): 10, ("a", 3): 9}


@given(
    st.dictionaries(st.tuples(st.sampled_from("abc"), st.integers(0, 9)), st.integers(0, 1000)), st.integers(0, 5000)
)
def test_fair_share_never_exceeds_budget_or_availability_and_is_max_min_fair(
    available: dict[tuple[str, int], int], budget: int
) -> None:
    granted = fair_share(available, budget)

    assert sum(granted.values()) == min(budget, sum(available.values()))
    assert all(0 <= granted[tp] <= available[tp] for tp in available)
    # Partitions that did not get all they had differ by at most one record, and none of them
    # got less than a partition that was fully served... minus that one record.
    short = [granted[tp] for tp in available if granted[tp] < available[tp]]
    if short:
        assert max(short) - min(short) <= 1
        assert all(granted[tp] <= max(short) + 1 for tp in available)


def test_ranges_split_by_max_records_and_start_new_partitions_at_zero() -> None:
    assert split_range("t", 0, 5, 5, 2) == []
    assert split_range("t", 0, 3, 8, 2) == [
        OffsetRange("t", 0, 3, 5),
        OffsetRange("t", 0, 5, 7),
        OffsetRange("t", 0, 7, 8),
    ]
    assert split_range("t", 0, 3, 8, None) == [OffsetRange("t", 0, 3, 8)]

    assert ranges({("t", 0): 4}, {("t", 1): 2, ("t", 0): 6}, None) == [
        OffsetRange("t", 0, 4, 6),
        OffsetRange("t", 1, 0, 2),
    ]
