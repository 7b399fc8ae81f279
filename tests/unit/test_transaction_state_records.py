"""A transactional id's record in `__transaction_state` round-trips, and whatever a damaged
record holds is either read as a well-formed state or refused with `Malformed`, never a crash."""

from __future__ import annotations

import contextlib

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.replay import Malformed
from broker.txn.state import TxnMetadata, TxnState, parse_key, record_of
from tests.support.examples import examples

META = TxnMetadata(
    "orders-eos",
    producer_id=12,
    producer_epoch=3,
    timeout_ms=60_000,
    state=TxnState.ONGOING,
    update_ms=1_000,
    start_ms=900,
    last_producer_id=12,
    last_producer_epoch=2,
    next_producer_id=13,
    partitions=frozenset({("otp.deliveries", 0), ("__consumer_offsets", 7)}),
    offsets={"otp-email": {("otp.requests", 1): (41, 0, "")}},
)


def test_a_state_round_trips_through_its_record() -> None:
    key, value = record_of(META, META.transactional_id)
    assert parse_key(key) == "orders-eos"
    assert value is not None
    assert TxnMetadata.from_value("orders-eos", msgpack.unpackb(value)) == META
    assert record_of(None, "orders-eos") == (key, None)


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("pid", "12"),
        ("pid", 2**63),  # msgpack carries it (as a uint64); Kafka's producer ids are int64
        ("epoch", True),
        ("npid", "13"),
        ("state", "Dead"),
        ("state", ["Ongoing"]),  # unhashable: found by the hypothesis test below
        ("parts", [["t", "0"]]),
        ("parts", {"t": 0}),
        ("offsets", {"g": [["t", 0, 1, 0]]}),
        ("offsets", {"g": [["t", 0, 1, 0, 5]]}),
        ("offsets", []),
    ],
)
def test_a_field_of_the_wrong_shape_is_malformed(field: str, bad: object) -> None:
    value = META.value()
    value[field] = bad
    with pytest.raises(Malformed):
        TxnMetadata.from_value("x", value)


_ANY = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8) | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=6),
    max_leaves=20,
)


@settings(max_examples=examples(300), deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(META.value())), _ANY, max_size=10), st.binary(max_size=40))
def test_any_damaged_record_is_read_or_refused(fields: dict[str, object], key: bytes) -> None:
    value = {**META.value(), **fields}
    try:
        meta = TxnMetadata.from_value("x", value)
    except Malformed:
        pass
    else:
        assert TxnMetadata.from_value("x", meta.value()) == meta
    with contextlib.suppress(Malformed, ValueError, msgpack.UnpackException):
        parse_key(key)
