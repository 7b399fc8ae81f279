"""Retention deletes whole old segments: the log start offset advances (and survives a
restart), consumers start there, reads below it are out of range, and the files go."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.errors import OffsetOutOfRangeError
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from broker.clock import ManualClock
from broker.metadata import partition_dir
from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import confluent_consume, confluent_produce, create_topic

VALUE = b"v" * 200


def _segment_bases(broker: ThreadBroker, topic: str) -> list[int]:
    directory = partition_dir(broker.data_dir, topic, 0)
    return sorted(int(p.name.split(".")[0]) for p in directory.glob("*.log"))


def _segment_files(broker: ThreadBroker, topic: str, base: int) -> list[Path]:
    """The .log, .index and .timeindex files of the segment starting at `base`."""
    directory = partition_dir(broker.data_dir, topic, 0)
    paths = [directory / f"{base:020d}{ext}" for ext in (".log", ".index", ".timeindex")]
    return [p for p in paths if p.exists()]


def _watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "marks"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return int(low), int(high)
    finally:
        consumer.close()


def _run_retention(broker: ThreadBroker) -> int:
    return int(broker.call(broker.broker.run_retention))


@pytest.fixture
def clock() -> ManualClock:
    # Start at the real time: producers stamp records with it (CreateTime is checked
    # against the broker clock).
    return ManualClock(int(time.time() * 1000))


@pytest.fixture
def trimmed(broker_factory: Callable[..., ThreadBroker], clock: ManualClock) -> tuple[ThreadBroker, int]:
    """A topic of 40 single-record batches in ~1 KB segments, with retention.bytes=3000
    applied once.  Returns the broker and the new log start offset."""
    broker = broker_factory(clock=clock)
    create_topic(broker.bootstrap, "trim", 1, {"segment.bytes": "1000", "retention.bytes": "3000"})
    confluent_produce(broker.bootstrap, "trim", [{"value": VALUE} for _ in range(40)], flush_each=True)
    bases = _segment_bases(broker, "trim")
    assert len(bases) > 5

    deleted = _run_retention(broker)

    remaining = _segment_bases(broker, "trim")
    assert deleted == len(bases) - len(remaining) > 0
    assert remaining == bases[deleted:]
    return broker, remaining[0]


def test_retention_bytes_deletes_the_oldest_segments_and_their_files(trimmed: tuple[ThreadBroker, int]) -> None:
    """The oldest whole segments go until the partition is within retention.bytes; their
    .log, .index and .timeindex files are removed; ListOffsets earliest reports the new start."""
    broker, log_start = trimmed
    directory = partition_dir(broker.data_dir, "trim", 0)
    for base in range(log_start):
        assert not _segment_files(broker, "trim", base)
    sizes = [p.stat().st_size for p in sorted(directory.glob("*.log"))]
    assert sum(sizes) >= 3000  # no segment more than needed was deleted...
    assert sum(sizes[1:]) < 3000  # ...and deleting one more would go below retention.bytes
    assert _watermarks(broker.bootstrap, "trim") == (log_start, 40)


def test_consumer_from_earliest_starts_at_the_new_log_start(trimmed: tuple[ThreadBroker, int]) -> None:
    """OFFSET_BEGINNING resolves to the advanced log start offset; nothing before it is served."""
    broker, log_start = trimmed
    got = confluent_consume(broker.bootstrap, [TopicPartition("trim", 0, OFFSET_BEGINNING)], 40 - log_start)
    assert [r.offset for r in got] == list(range(log_start, 40))


def test_confluent_fetch_of_a_deleted_offset_resets_to_the_log_start_with_earliest(
    trimmed: tuple[ThreadBroker, int],
) -> None:
    """Fetching offset 0 after it was deleted is OFFSET_OUT_OF_RANGE; with
    auto.offset.reset=earliest the consumer continues from the log start offset."""
    broker, log_start = trimmed
    got = confluent_consume(
        broker.bootstrap, [TopicPartition("trim", 0, 0)], 40 - log_start, {"auto.offset.reset": "earliest"}
    )
    assert [r.offset for r in got] == list(range(log_start, 40))


def test_confluent_fetch_of_a_deleted_offset_resets_to_the_log_end_with_latest(
    trimmed: tuple[ThreadBroker, int],
) -> None:
    """With auto.offset.reset=latest the consumer of a deleted offset jumps to the log end:
    it re-reads nothing and receives the next record produced."""
    broker, _ = trimmed
    tp = TopicPartition("trim", 0, 0)
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "late",
            "enable.auto.commit": False,
            "auto.offset.reset": "latest",
        }
    )
    try:
        consumer.assign([tp])
        deadline = time.monotonic() + 10
        # Once reset, the consumer long-polls at the log end (the broker parks its Fetch).
        while not broker.call(lambda: broker.broker.long_polls() > 0):
            assert time.monotonic() < deadline, "the consumer never reset to the log end"
            assert consumer.poll(0.05) is None, "a deleted or old record was served"
        confluent_produce(broker.bootstrap, "trim", [{"value": b"new"}])
        msg = None
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(0.05)
    finally:
        consumer.close()
    assert msg is not None
    assert msg.error() is None
    assert (msg.offset(), msg.value()) == (40, b"new")


def test_confluent_fetch_of_a_deleted_offset_without_reset_policy_is_an_error(
    trimmed: tuple[ThreadBroker, int],
) -> None:
    """With auto.offset.reset=error the out-of-range fetch surfaces to the application."""
    broker, _ = trimmed
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "strict",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
        }
    )
    error = None
    try:
        consumer.assign([TopicPartition("trim", 0, 0)])
        deadline = time.monotonic() + 10
        while error is None and time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is not None:
                assert msg.error() is not None, f"served deleted offset {msg.offset()}"
                error = msg.error()
    finally:
        consumer.close()
    assert error is not None
    assert error.code() == KafkaError._AUTO_OFFSET_RESET


async def test_aiokafka_fetch_of_a_deleted_offset_resets_or_raises(trimmed: tuple[ThreadBroker, int]) -> None:
    """aiokafka resets a deleted position to the log start with auto_offset_reset=earliest
    and raises OffsetOutOfRangeError with auto_offset_reset=none."""
    broker, log_start = trimmed
    tp = AioTopicPartition("trim", 0)
    for policy in ("earliest", "none"):
        consumer = AIOKafkaConsumer(
            bootstrap_servers=broker.bootstrap, enable_auto_commit=False, auto_offset_reset=policy
        )
        await consumer.start()
        try:
            consumer.assign([tp])
            consumer.seek(tp, 0)
            if policy == "earliest":
                record = await consumer.getone(tp)
                assert record.offset == log_start
            else:
                with pytest.raises(OffsetOutOfRangeError):
                    await consumer.getmany(tp, timeout_ms=5000)
        finally:
            await consumer.stop()


def test_retention_ms_deletes_segments_older_than_the_limit_on_the_injected_clock(
    broker_factory: Callable[..., ThreadBroker], clock: ManualClock
) -> None:
    """A segment goes once its newest record is older than retention.ms by the broker's
    clock, not before; when everything expired the log is empty and offsets continue.
    The advanced log start offset survives a restart."""
    broker = broker_factory(clock=clock)
    create_topic(broker.bootstrap, "aging", 1, {"retention.ms": "60000", "segment.ms": "10000"})

    def produce(values: range) -> None:
        now = clock.now_ms()
        confluent_produce(broker.bootstrap, "aging", [{"value": f"r{i}".encode(), "timestamp": now} for i in values])

    produce(range(10))
    clock.advance(30_000)
    produce(range(10, 20))  # segment.ms passed: this goes into a new segment
    assert _segment_bases(broker, "aging") == [0, 10]

    assert _run_retention(broker) == 0  # 30 s old: not yet
    assert _watermarks(broker.bootstrap, "aging") == (0, 20)

    clock.advance(40_000)  # first segment 70 s old, second 40 s
    assert _run_retention(broker) == 1
    assert _segment_bases(broker, "aging") == [10]
    assert not _segment_files(broker, "aging", 0)
    assert _watermarks(broker.bootstrap, "aging") == (10, 20)
    got = confluent_consume(broker.bootstrap, [TopicPartition("aging", 0, OFFSET_BEGINNING)], 10)
    assert [r.value for r in got] == [f"r{i}".encode() for i in range(10, 20)]

    broker.restart()
    assert _watermarks(broker.bootstrap, "aging") == (10, 20)

    clock.advance(60_000)  # now everything is older than retention.ms
    assert _run_retention(broker) == 1
    assert _watermarks(broker.bootstrap, "aging") == (20, 20)
    assert not _segment_files(broker, "aging", 10)
    produce(range(20, 21))
    got = confluent_consume(broker.bootstrap, [TopicPartition("aging", 0, OFFSET_BEGINNING)], 1)
    assert [(r.offset, r.value) for r in got] == [(20, b"r20")]
