"""State a client creates by naming itself is bounded: quota measurements per client id expire
after an hour unused and are capped, and a SASL mechanism a client names before authenticating
never becomes a metric label of its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.clock import ManualClock
from broker.config import BrokerConfig
from broker.metadata import MetadataStore
from broker.metrics import BrokerMetrics
from broker.quotas import (
    CONTROLLER_MUTATION_RATE,
    REQUEST_PERCENTAGE,
    SENSOR_EXPIRATION_S,
    Quotas,
    entity_of,
)

C = "client-id"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MetadataStore]:
    store = MetadataStore(BrokerConfig(data_dir=tmp_path), ManualClock(), recover=False)
    yield store
    store.close(clean=True)


def _default_client_quotas(quotas: Quotas) -> None:
    quotas.alter([(entity_of([(C, None)]), {REQUEST_PERCENTAGE: 50.0, CONTROLLER_MUTATION_RATE: 10.0})])


def test_a_client_ids_measurement_expires_after_an_hour_unused_as_kafkas_quota_sensors(
    store: MetadataStore,
) -> None:
    clock = ManualClock()
    quotas = Quotas(store, clock=clock)
    _default_client_quotas(quotas)
    for n in range(100):
        quotas.throttle_ms(REQUEST_PERCENTAGE, "", f"client-{n}", 1.0)
        quotas.mutation("", f"client-{n}")
    assert quotas.tracked == 200

    clock.advance(int(SENSOR_EXPIRATION_S * 1000) - 1000)
    quotas.throttle_ms(REQUEST_PERCENTAGE, "", "client-0", 1.0)  # used again: kept
    assert quotas.tracked == 200

    clock.advance(2000)  # the other 99 rates and every bucket are an hour old
    quotas.throttle_ms(REQUEST_PERCENTAGE, "", "late", 1.0)
    quotas.mutation("", "late")
    assert quotas.tracked == 3  # client-0's rate, late's rate and bucket: client-0's bucket expired


def test_at_most_max_sensors_measurements_are_kept_the_least_recently_used_dropped(store: MetadataStore) -> None:
    clock = ManualClock()
    quotas = Quotas(store, clock=clock, max_sensors=50)
    _default_client_quotas(quotas)
    for n in range(10_000):
        quotas.throttle_ms(REQUEST_PERCENTAGE, "", f"client-{n}", 1.0)
        clock.advance(1)
    assert quotas.tracked == 50
    # The most recent client keeps its measurement: a second request is measured on top of it.
    first = quotas.throttle_ms(REQUEST_PERCENTAGE, "", "heavy", 10_000.0)
    assert first > 0
    for n in range(49):
        quotas.throttle_ms(REQUEST_PERCENTAGE, "", f"other-{n}", 1.0)
    assert quotas.throttle_ms(REQUEST_PERCENTAGE, "", "heavy", 0.0) > 0  # still measured


def test_an_unknown_sasl_mechanism_is_counted_as_other_never_as_its_own_label() -> None:
    metrics = BrokerMetrics()
    for n in range(1000):
        metrics.authentication(f"MECH-{n}", "malformed")
    metrics.authentication("SCRAM-SHA-256", "failed")
    metrics.authentication(None, "malformed")
    samples = [s for m in metrics.authentications.collect() for s in m.samples if s.name.endswith("_total")]
    assert {(s.labels["mechanism"], s.labels["result"]): s.value for s in samples} == {
        ("other", "malformed"): 1000,
        ("SCRAM-SHA-256", "failed"): 1,
        ("none", "malformed"): 1,
    }
