"""EndTxn is answered once its decision is durable, one fsync round, as Kafka answers it once the
decision is written: the markers and the offsets follow in the background, and the id's next
request waits for them.  A real confluent-kafka producer against the broker, with the
coordinator's fsyncs of anything but its own state log held back until the test lets them go."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer

from broker.log.partition_log import PartitionLog
from broker.txn.coordinator import TRANSACTION_TOPIC
from broker.txn.state import TxnState
from tests.support.harness import ThreadBroker
from tests.support.kafka_wire import connect

TOPIC = "ends"


class MarkerGate:
    """Holds the transaction coordinator's syncs of the partitions its markers went to."""

    def __init__(self, broker: ThreadBroker) -> None:
        self.broker = broker
        self.coordinator = broker.broker.transactions
        self._sync = self.coordinator._sync
        self.opened = asyncio.Event()
        self.held = 0
        self.coordinator._sync = self.sync

    async def sync(self, logs: Iterable[PartitionLog]) -> None:
        logs = list(logs)
        if any(plog.topic != TRANSACTION_TOPIC for plog in logs):
            self.held += 1
            await self.opened.wait()
        await self._sync(logs)

    def open(self) -> None:
        self.broker.loop.call_soon_threadsafe(self.opened.set)

    def state(self, transactional_id: str) -> TxnState:
        return self.broker.call(lambda: self.coordinator.txns[transactional_id].state)  # type: ignore[no-any-return]


def _lso(broker: ThreadBroker) -> int:
    return broker.call(lambda: broker.broker.store.partition_log(TOPIC, 0).last_stable_offset)  # type: ignore[no-any-return]


def _read_committed(bootstrap: str, expected: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "ends-reader",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([TOPIC])
    values: list[bytes] = []
    try:
        for _ in range(120):
            message: Any = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
            if len(values) >= expected:
                break
    finally:
        consumer.close()
    return values


def test_the_commit_is_answered_before_its_markers_are_on_disk_and_the_next_transaction_waits_for_them(
    broker: ThreadBroker,
) -> None:
    with connect(broker.bootstrap) as c:
        c.create_topic(TOPIC, 1)
    gate = MarkerGate(broker)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "t-end", "acks": "all"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(TOPIC, b"one", partition=0)
    producer.commit_transaction(30)

    # Answered with the decision durable and the marker's fsync still held: decided, not complete.
    # The marker is written (a single node serves what it wrote, as Kafka with one replica), so
    # the last stable offset is past it.
    assert broker.call(lambda: gate.held) == 1
    assert gate.state("t-end") == TxnState.PREPARE_COMMIT
    assert _lso(broker) == 2

    # The next transaction's AddPartitionsToTxn waits for the completion: its record stays queued.
    producer.begin_transaction()
    producer.produce(TOPIC, b"two", partition=0)
    assert producer.flush(1.0) == 1
    assert gate.state("t-end") == TxnState.PREPARE_COMMIT

    gate.open()
    producer.commit_transaction(30)
    assert gate.state("t-end") in (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT)
    assert _read_committed(broker.bootstrap, 2) == [b"one", b"two"]
    assert gate.state("t-end") == TxnState.COMPLETE_COMMIT
    assert broker.call(lambda: gate.held) == 2


def test_a_commit_is_not_answered_before_its_decision_is_on_disk(broker: ThreadBroker) -> None:
    """The one round EndTxn waits for: the decision's fsync."""
    with connect(broker.bootstrap) as c:
        c.create_topic(TOPIC, 1)
    coordinator = broker.broker.transactions
    sync = coordinator._sync
    opened = asyncio.Event()
    decisions = 0

    async def held(logs: Iterable[PartitionLog]) -> None:
        nonlocal decisions
        logs = list(logs)
        txn = coordinator.txns.get("t-decide")
        # The state log's fsync while the transaction is ongoing: its one partition was added
        # already, so this is the decision (the state becomes current once it is durable).
        if txn is not None and txn.state == TxnState.ONGOING and logs[0].topic == TRANSACTION_TOPIC:
            decisions += 1
            await opened.wait()
        await sync(logs)

    coordinator._sync = held
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "t-decide", "acks": "all"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(TOPIC, b"one", partition=0)
    producer.flush(30)
    with pytest.raises(KafkaException, match=r"(?i)timed out"):  # its answer waits for the held fsync
        producer.commit_transaction(1.0)
    assert broker.call(lambda: decisions) == 1
    broker.loop.call_soon_threadsafe(opened.set)
    producer.commit_transaction(30)  # the same commit, retried, completes
    assert _read_committed(broker.bootstrap, 1) == [b"one"]
