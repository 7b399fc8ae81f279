"""Client quotas' rules, without a network: which entity holds a client (Kafka's order), which
clients share a measurement, the windowed rate with its young credit, the throttle it gives, the
mutation bucket, and quotas read back from the metadata log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.clock import ManualClock
from broker.config import BrokerConfig
from broker.metadata import MetadataStore
from broker.quotas import (
    MAX_THROTTLE_MS,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    QuotaError,
    Quotas,
    Rate,
    check_value,
    entity_of,
)

U, C = "user", "client-id"


@pytest.fixture
def quotas(tmp_path: Path) -> Iterator[Quotas]:
    store = MetadataStore(BrokerConfig(data_dir=tmp_path), ManualClock(), recover=False)
    yield Quotas(store, windows=2, window_s=1.0)
    store.close(clean=True)


def test_a_client_is_held_to_the_first_entity_in_kafkas_order_that_sets_the_key(quotas: Quotas) -> None:
    order = [
        ((C, "app"), (U, "alice")),
        ((C, None), (U, "alice")),
        ((U, "alice"),),
        ((C, "app"), (U, None)),
        ((C, None), (U, None)),
        ((U, None),),
        ((C, "app"),),
        ((C, None),),
    ]
    quotas.alter([(entity_of(e), {PRODUCER_BYTE_RATE: float(1000 + i)}) for i, e in enumerate(order)])
    for i, entity in enumerate(order):
        found = quotas._applies(PRODUCER_BYTE_RATE, "alice", "app")
        assert found is not None
        assert found[1] == 1000 + i, entity
        quotas.alter([(entity_of(entity), {PRODUCER_BYTE_RATE: None})])
    assert quotas._applies(PRODUCER_BYTE_RATE, "alice", "app") is None
    assert not quotas.entities


def test_a_named_entity_is_shared_and_a_default_is_per_client(quotas: Quotas) -> None:
    quotas.alter([(entity_of([(U, "alice")]), {PRODUCER_BYTE_RATE: 100.0})])
    quotas.alter([(entity_of([(C, None)]), {PRODUCER_BYTE_RATE: 100.0})])
    alice_a = quotas._applies(PRODUCER_BYTE_RATE, "alice", "a")
    alice_b = quotas._applies(PRODUCER_BYTE_RATE, "alice", "b")
    bob_a = quotas._applies(PRODUCER_BYTE_RATE, "bob", "a")
    bob_b = quotas._applies(PRODUCER_BYTE_RATE, "bob", "b")
    assert alice_a is not None and alice_b is not None and bob_a is not None and bob_b is not None  # noqa: PT018
    assert alice_a[0] == alice_b[0]  # both of alice's clients: one measurement
    assert bob_a[0] != bob_b[0]  # the default client id: one per client id


def test_the_rate_gives_a_young_client_credit_and_throttles_in_proportion() -> None:
    rate = Rate(windows=11, window_s=1.0)
    rate.record(5000, now=0.0)
    assert rate.measure(0.0) == pytest.approx(500.0)  # counted as ten windows
    rate.record(5000, now=5.0)
    assert rate.measure(5.0) == pytest.approx(1000.0)
    rate.record(1, now=12.0)  # the first sample is older than the 11 windows, the second is not
    assert rate.measure(12.0) == pytest.approx(500.1)
    rate.record(1, now=17.0)
    assert rate.measure(17.0) == pytest.approx(0.2)


def test_a_byte_rate_throttle_is_the_time_the_rate_needs_to_fall_back_uncapped(quotas: Quotas) -> None:
    quotas.alter([(entity_of([(C, "app")]), {PRODUCER_BYTE_RATE: 1000.0})])
    assert quotas.throttle_ms(PRODUCER_BYTE_RATE, "u", "app", 500) == 0  # within: 500/s over 1 s
    assert 190 <= quotas.throttle_ms(PRODUCER_BYTE_RATE, "u", "app", 700) <= 200  # 1,200/s: 20 % of 1 s
    # 1,800 bytes over 1 s: 0.8 s more to fall back to 1,000/s; not capped at one window
    assert 790 <= quotas.throttle_ms(PRODUCER_BYTE_RATE, "u", "app", 600) <= 800
    # 11,800 bytes over 1 s: 10.8 s, longer than the windows (2 of 1 s), as Kafka's
    assert 10_790 <= quotas.throttle_ms(PRODUCER_BYTE_RATE, "u", "app", 10_000) <= 10_800
    # no longer than throttle_time_ms can say
    assert quotas.throttle_ms(PRODUCER_BYTE_RATE, "u", "app", 1e12) == MAX_THROTTLE_MS
    assert quotas.throttle_ms(PRODUCER_BYTE_RATE, "u", "other", 10_000) == 0  # not this client's


def test_a_request_percentage_throttle_is_at_most_one_window_as_kafkas(quotas: Quotas) -> None:
    quotas.alter([(entity_of([(C, "app")]), {REQUEST_PERCENTAGE: 10.0})])
    assert quotas.throttle_ms(REQUEST_PERCENTAGE, "u", "app", 500.0) == 1000  # 5 s of a thread in 1 s


def test_the_mutation_bucket_lets_one_request_through_and_refills(quotas: Quotas) -> None:
    quotas.alter([(entity_of([(C, "app")]), {"controller_mutation_rate": 5.0})])
    bucket = quotas.mutation("u", "app")
    assert bucket is not None
    assert bucket.tokens == pytest.approx(10.0)  # 5/s over 2 windows of 1 s
    bucket.tokens -= 30
    bucket.refill(bucket.at + 2.0)
    assert bucket.tokens == pytest.approx(-10.0)
    bucket.refill(bucket.at + 100.0)
    assert bucket.tokens == pytest.approx(10.0)


def test_kafkas_refusals(quotas: Quotas) -> None:
    for components in ([], [(U, "a"), (U, "b")], [("ip", "1.2.3.4"), (U, "a")], [("group", "g")], [(U, "")]):
        with pytest.raises(QuotaError):
            entity_of(components)
    entity = entity_of([(U, "a")])
    for key, value in ((PRODUCER_BYTE_RATE, 1.5), (PRODUCER_BYTE_RATE, 0.0), ("nope", 1.0), (PRODUCER_BYTE_RATE, -1)):
        with pytest.raises(QuotaError):
            check_value(entity, key, value)
    check_value(entity, "request_percentage", 12.5)


def test_quotas_are_read_back_from_the_metadata_log(tmp_path: Path) -> None:
    config = BrokerConfig(data_dir=tmp_path)
    store = MetadataStore(config, ManualClock(), recover=False)
    Quotas(store).alter([(entity_of([(U, None), (C, "x")]), {PRODUCER_BYTE_RATE: 10.0, "request_percentage": 5.0})])
    store.close(clean=True)
    again = MetadataStore(config, ManualClock(), recover=False)
    try:
        assert Quotas(again).entities == {((C, "x"), (U, None)): {PRODUCER_BYTE_RATE: 10.0, "request_percentage": 5.0}}
    finally:
        again.close(clean=True)


def test_a_quota_record_that_does_not_decode_is_skipped_and_counted_never_fatal(tmp_path: Path) -> None:
    config = BrokerConfig(data_dir=tmp_path)
    store = MetadataStore(config, ManualClock(), recover=False)
    Quotas(store).alter([(entity_of([(U, "kept")]), {PRODUCER_BYTE_RATE: 10.0})])
    store.write_records(
        [
            (["quota", "not a list of pairs"], {PRODUCER_BYTE_RATE: 1.0}),
            (["quota", [[U, "bad-value"]]], {PRODUCER_BYTE_RATE: -5}),
            (["quota", [[U, "bad-key"]]], {"no_such_key": 1}),
            (["quota", [["group", "g"]]], {PRODUCER_BYTE_RATE: 1}),
        ]
    )
    store.close(clean=True)
    again = MetadataStore(config, ManualClock(), recover=False)
    try:
        assert Quotas(again).entities == {((U, "kept"),): {PRODUCER_BYTE_RATE: 10.0}}
        assert again.skipped.counts[again.meta_log.topic] == 4
    finally:
        again.close(clean=True)
