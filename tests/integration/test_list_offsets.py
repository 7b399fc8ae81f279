"""ListOffsets through both clients: earliest and latest offsets, and offsets by timestamp."""

from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, TopicPartition

from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import confluent_produce, create_topic

BASE_TS = int(time.time() * 1000) - 600_000  # ten minutes ago: inside the accepted range
COUNT = 20


def _produce_timed(bootstrap: str, topic: str) -> None:
    """Partition 0: record i has timestamp BASE_TS + 1000*i, in four batches of five.
    Partition 1 stays empty."""
    for b in range(4):
        confluent_produce(
            bootstrap,
            topic,
            [
                {"partition": 0, "value": f"r{i}".encode(), "timestamp": BASE_TS + 1000 * i}
                for i in range(5 * b, 5 * b + 5)
            ],
        )


def _consumer(bootstrap: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": "offsets", "enable.auto.commit": False})


# target timestamp -> expected (offset, timestamp of that record), None: no such record
LOOKUPS: dict[int, tuple[int, int] | None] = {
    BASE_TS - 5000: (0, BASE_TS),  # before every record: the first one
    BASE_TS: (0, BASE_TS),  # exact match
    BASE_TS + 2500: (3, BASE_TS + 3000),  # between two records: the next one
    BASE_TS + 7000: (7, BASE_TS + 7000),  # inside the second batch
    BASE_TS + 19_000: (19, BASE_TS + 19_000),  # the last record
    BASE_TS + 19_001: None,  # after every record
}


def test_confluent_watermarks_and_offsets_for_times(broker: ThreadBroker) -> None:
    """get_watermark_offsets gives earliest/latest, and offsets_for_times the first offset
    whose timestamp is at or after the target (-1 when every record is older); an empty
    partition has no offset for any time."""
    create_topic(broker.bootstrap, "timed", 2)
    _produce_timed(broker.bootstrap, "timed")
    consumer = _consumer(broker.bootstrap)
    try:
        assert consumer.get_watermark_offsets(TopicPartition("timed", 0), timeout=10) == (0, COUNT)
        assert consumer.get_watermark_offsets(TopicPartition("timed", 1), timeout=10) == (0, 0)
        for target, expected in LOOKUPS.items():
            [found] = consumer.offsets_for_times([TopicPartition("timed", 0, target)], timeout=10)
            assert found.error is None
            assert found.offset == (expected[0] if expected else -1), target
        [empty] = consumer.offsets_for_times([TopicPartition("timed", 1, BASE_TS)], timeout=10)
        assert empty.offset == -1
    finally:
        consumer.close()


async def test_aiokafka_beginning_end_and_offsets_for_times(broker: ThreadBroker) -> None:
    """beginning_offsets/end_offsets and offsets_for_times (offset and record timestamp,
    None when every record is older or the partition is empty)."""
    create_topic(broker.bootstrap, "timed", 2)
    await asyncio.to_thread(_produce_timed, broker.bootstrap, "timed")
    tp0, tp1 = AioTopicPartition("timed", 0), AioTopicPartition("timed", 1)
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        assert await consumer.beginning_offsets([tp0, tp1]) == {tp0: 0, tp1: 0}
        assert await consumer.end_offsets([tp0, tp1]) == {tp0: COUNT, tp1: 0}
        for target, expected in LOOKUPS.items():
            found = (await consumer.offsets_for_times({tp0: target}))[tp0]
            if expected is None:
                assert found is None, target
            else:
                assert found is not None, target
                assert (found.offset, found.timestamp) == expected, target
        assert (await consumer.offsets_for_times({tp1: BASE_TS}))[tp1] is None
    finally:
        await consumer.stop()


def test_offsets_for_times_returns_the_earliest_offset_when_timestamps_are_out_of_order(
    broker: ThreadBroker,
) -> None:
    """Producers may send timestamps out of order: the answer is the first offset whose
    timestamp is at or after the target, not the record with the closest timestamp."""
    create_topic(broker.bootstrap, "unordered", 1)
    stamps = [BASE_TS + 5000, BASE_TS + 1000, BASE_TS + 9000, BASE_TS + 3000]
    for ts in stamps:  # one batch each
        confluent_produce(broker.bootstrap, "unordered", [{"value": b"x", "timestamp": ts}])
    consumer = _consumer(broker.bootstrap)
    try:
        for target, offset in [(BASE_TS + 2000, 0), (BASE_TS + 6000, 2), (BASE_TS, 0), (BASE_TS + 9001, -1)]:
            [found] = consumer.offsets_for_times([TopicPartition("unordered", 0, target)], timeout=10)
            assert found.offset == offset, target
    finally:
        consumer.close()


def test_consumer_starts_at_the_offset_found_for_a_timestamp(broker: ThreadBroker) -> None:
    """Assigning the offset offsets_for_times returned replays from the first record at
    or after that time."""
    create_topic(broker.bootstrap, "timed", 1)
    _produce_timed(broker.bootstrap, "timed")
    consumer = _consumer(broker.bootstrap)
    try:
        [found] = consumer.offsets_for_times([TopicPartition("timed", 0, BASE_TS + 14_500)], timeout=10)
        consumer.assign([found])
        got: list[tuple[int | None, int]] = []
        deadline = time.monotonic() + 10
        while len(got) < COUNT - 15 and time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                got.append((msg.offset(), msg.timestamp()[1]))
    finally:
        consumer.close()
    assert got == [(i, BASE_TS + 1000 * i) for i in range(15, COUNT)]
