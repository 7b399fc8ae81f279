"""Helpers of the bad-input tests: a topic seeded with records, the check that the broker
survived bad input (a bystander connection still answered, a fresh one can produce, every
record stored before still readable), and builders of corrupted frames and batches.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from tests.support.harness import ThreadBroker
from tests.support.kafka_wire import (
    KafkaConnection,
    batch,
    connect,
)

TOPIC = "stored"
SEED_BATCHES = 4


@dataclass
class Stored:
    """A broker with records already stored, and a connection opened before the bad input."""

    broker: ThreadBroker
    bystander: KafkaConnection
    values: list[bytes] = field(default_factory=list)

    def malformed_closes(self) -> float:
        value = self.broker.broker.metrics.registry.get_sample_value("streamshop_connections_closed_malformed_total")
        return float(value or 0.0)


def seed(broker: ThreadBroker) -> Stored:
    with connect(broker.bootstrap) as c:
        assert c.create_topic(TOPIC, 1).error_code == ErrorCode.none
        values = []
        for i in range(SEED_BATCHES):
            chunk = [f"seed-{i}-{j}".encode() for j in range(3)]
            result = c.produce(TOPIC, 0, batch(chunk))
            assert result.error_code == ErrorCode.none
            values += chunk
        assert [r.value for r in c.read_all(TOPIC)] == values
    return Stored(broker, connect(broker.bootstrap), values)


def assert_survived(stored: Stored) -> None:
    """The broker still serves an old and a new connection, and lost nothing."""
    assert stored.bystander.api_versions().error_code == ErrorCode.none
    with connect(stored.broker.bootstrap) as fresh:
        assert fresh.api_versions().error_code == ErrorCode.none
        value = f"after-{len(stored.values)}".encode()
        result = fresh.produce(TOPIC, 0, batch([value]))
        assert result.error_code == ErrorCode.none
        assert result.base_offset == len(stored.values), "offsets moved: something was appended or lost"
        stored.values.append(value)
        assert [r.value for r in fresh.read_all(TOPIC)] == stored.values
        assert [r.offset for r in fresh.read_all(TOPIC)] == list(range(len(stored.values)))
    # The old connection reads the same thing.
    assert [r.value for r in stored.bystander.read_all(TOPIC)] == stored.values
