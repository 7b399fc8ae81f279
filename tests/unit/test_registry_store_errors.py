"""Which broker errors the schema store waits out: those that pass by themselves, including the
client's own metadata not yet knowing a topic the cluster just created (a first start of the
registry on a fresh Apache Kafka cluster), and not those that never will."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from registry.store import _passing


@pytest.mark.parametrize(
    "code",
    [
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
    ],
)
def test_conditions_that_pass_by_themselves_are_waited_out(code: int) -> None:
    assert _passing(KafkaError(code))


@pytest.mark.parametrize(
    "code", [KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError.INVALID_CONFIG]
)
def test_conditions_that_never_pass_are_not(code: int) -> None:
    assert not _passing(KafkaError(code))
