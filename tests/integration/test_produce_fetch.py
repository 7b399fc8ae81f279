"""Produce and Fetch through real clients (confluent-kafka and aiokafka) over real sockets:
partitioning, headers, timestamps, seeking, long polls and fetch size limits."""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import Callable

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from broker.protocol.batch import iter_headers
from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import (
    Got,
    aiokafka_consume,
    aiokafka_produce,
    by_partition,
    confluent_consume,
    confluent_produce,
    create_topic,
    from_confluent,
)
from tests.support.kafka_wire import connect

KEYS = [f"customer-{i}".encode() for i in range(24)]


def _all_partitions(topic: str, count: int, offset: int = 0) -> list[TopicPartition]:
    return [TopicPartition(topic, p, offset) for p in range(count)]


def _assert_one_partition_per_key(records: list[Got], expected: Callable[[bytes], int]) -> None:
    partitions_of: dict[bytes, set[int]] = {}
    for rec in records:
        assert rec.key is not None
        partitions_of.setdefault(rec.key, set()).add(rec.partition)
    assert set(partitions_of) == set(KEYS)
    for key, partitions in partitions_of.items():
        assert partitions == {expected(key)}, key
    assert len({p for ps in partitions_of.values() for p in ps}) > 1, "keys should spread over partitions"


def _assert_key_order(records: list[Got]) -> None:
    """Within a key, records come back in the order they were produced."""
    per_key: dict[bytes | None, list[bytes | None]] = {}
    for rec in sorted(records, key=lambda r: (r.partition, r.offset)):
        per_key.setdefault(rec.key, []).append(rec.value)
    for key, values in per_key.items():
        assert values == [key + f"#{n}".encode() for n in range(len(values))]  # type: ignore[operator]


# --- keyed, null-keyed and explicit partitioning ---------------------------------------


def test_confluent_keyed_records_all_land_in_the_partition_of_their_key(broker: ThreadBroker) -> None:
    """librdkafka's default partitioner (consistent_random: CRC32 of the key) sends every
    record of a key to one partition, and the broker stores it there."""
    create_topic(broker.bootstrap, "keyed", 6)
    records = [{"key": k, "value": k + f"#{n}".encode()} for n in range(4) for k in KEYS]
    reports = confluent_produce(broker.bootstrap, "keyed", records)
    assert all(m.partition() == zlib.crc32(m.key() or b"") % 6 for m in reports)

    got = confluent_consume(broker.bootstrap, _all_partitions("keyed", 6), len(records))
    assert len(got) == len(records)
    _assert_one_partition_per_key(got, lambda key: zlib.crc32(key) % 6)
    _assert_key_order(got)


async def test_aiokafka_and_confluent_murmur2_agree_on_the_partition_of_each_key(broker: ThreadBroker) -> None:
    """aiokafka's default partitioner and librdkafka's murmur2_random (both Java-compatible
    murmur2) put a key's records in the same partition, so both clients can share a topic."""
    create_topic(broker.bootstrap, "keyed", 6)
    murmur = DefaultPartitioner()

    def expected(key: bytes) -> int:
        return int(murmur(key, list(range(6)), list(range(6))))

    aio_meta = await aiokafka_produce(
        broker.bootstrap, "keyed", [{"key": k, "value": k + f"#{n}".encode()} for n in range(2) for k in KEYS]
    )
    await asyncio.to_thread(
        confluent_produce,
        broker.bootstrap,
        "keyed",
        [{"key": k, "value": k + f"#{n}".encode()} for n in range(2, 4) for k in KEYS],
        {"partitioner": "murmur2_random"},
    )
    assert len(aio_meta) == 2 * len(KEYS)

    got = await aiokafka_consume(broker.bootstrap, {("keyed", p): 0 for p in range(6)}, 4 * len(KEYS))
    assert len(got) == 4 * len(KEYS)
    _assert_one_partition_per_key(got, expected)
    _assert_key_order(got)


@pytest.mark.parametrize("client", ["confluent", "aiokafka"])
async def test_null_key_records_spread_over_every_partition(broker: ThreadBroker, client: str) -> None:
    """Records without a key are spread across partitions (librdkafka with stickiness off,
    aiokafka's random choice), and every one is stored exactly once."""
    create_topic(broker.bootstrap, "nulls", 3)
    records = [{"value": f"v{i}".encode()} for i in range(90)]
    if client == "confluent":
        await asyncio.to_thread(
            confluent_produce, broker.bootstrap, "nulls", records, {"sticky.partitioning.linger.ms": 0}
        )
    else:
        await aiokafka_produce(broker.bootstrap, "nulls", records)

    got = await asyncio.to_thread(confluent_consume, broker.bootstrap, _all_partitions("nulls", 3), 90)
    assert sorted(r.value or b"" for r in got) == sorted(f"v{i}".encode() for i in range(90))
    assert all(r.key is None for r in got)
    assert set(by_partition(got)) == {0, 1, 2}


@pytest.mark.parametrize("client", ["confluent", "aiokafka"])
async def test_explicit_partitions_get_consecutive_offsets_from_zero(broker: ThreadBroker, client: str) -> None:
    """A record sent to an explicit partition is stored there; each partition's offsets
    run 0, 1, 2... in send order."""
    create_topic(broker.bootstrap, "explicit", 4)
    records = [{"partition": i % 4, "value": f"p{i % 4}-{i // 4}".encode()} for i in range(40)]
    if client == "confluent":
        reports = await asyncio.to_thread(confluent_produce, broker.bootstrap, "explicit", records)
        acked = {(m.partition(), m.offset()) for m in reports}
    else:
        metas = await aiokafka_produce(broker.bootstrap, "explicit", records)
        acked = {(m.partition, m.offset) for m in metas}
    assert acked == {(p, o) for p in range(4) for o in range(10)}

    got = await aiokafka_consume(broker.bootstrap, {("explicit", p): 0 for p in range(4)}, 40)
    for partition, recs in by_partition(got).items():
        recs.sort(key=lambda r: r.offset)
        assert [r.offset for r in recs] == list(range(10))
        assert [r.value for r in recs] == [f"p{partition}-{n}".encode() for n in range(10)]
    assert len(got) == 40


# --- headers and timestamps ------------------------------------------------------------

HEADERS: list[tuple[str, bytes | None]] = [
    ("trace-id", b"4bf92f3577b34da6"),
    ("dup", b"first"),
    ("dup", b"second"),  # repeated names keep their order
    ("empty", b""),
    ("binary", bytes(range(256))),
]


@pytest.mark.parametrize("producer", ["confluent", "aiokafka"])
async def test_headers_and_create_time_timestamps_round_trip_to_both_clients(
    broker: ThreadBroker, producer: str
) -> None:
    """Headers (repeated, empty, binary) and producer-chosen CreateTime timestamps come
    back unchanged to both consumers."""
    create_topic(broker.bootstrap, "stamped", 1)
    base_ts = int(time.time() * 1000) - 3_600_000
    count = 5
    if producer == "confluent":
        records = [
            {"key": b"k", "value": f"v{i}".encode(), "headers": HEADERS, "timestamp": base_ts + 1000 * i}
            for i in range(count)
        ]
        await asyncio.to_thread(confluent_produce, broker.bootstrap, "stamped", records)
    else:
        records = [
            {"key": b"k", "value": f"v{i}".encode(), "headers": HEADERS, "timestamp_ms": base_ts + 1000 * i}
            for i in range(count)
        ]
        await aiokafka_produce(broker.bootstrap, "stamped", records)

    expected = [
        Got("stamped", 0, i, b"k", f"v{i}".encode(), base_ts + 1000 * i, False, tuple(HEADERS)) for i in range(count)
    ]
    via_confluent = await asyncio.to_thread(
        confluent_consume, broker.bootstrap, [TopicPartition("stamped", 0, 0)], count
    )
    via_aiokafka = await aiokafka_consume(broker.bootstrap, {("stamped", 0): 0}, count)
    assert via_confluent == expected
    assert via_aiokafka == expected


async def test_log_append_time_topic_stamps_records_with_the_broker_time(broker: ThreadBroker) -> None:
    """On a message.timestamp.type=LogAppendTime topic the broker replaces the producer's
    timestamp with its own clock, reports it in the produce response and serves it."""
    create_topic(broker.bootstrap, "appended", 1, {"message.timestamp.type": "LogAppendTime"})
    ancient = 1_000_000_000_000  # 2001: the broker must not keep this
    before = int(time.time() * 1000)
    reports = await asyncio.to_thread(
        confluent_produce,
        broker.bootstrap,
        "appended",
        [{"value": b"c", "timestamp": ancient}],
    )
    metas = await aiokafka_produce(broker.bootstrap, "appended", [{"value": b"a", "timestamp_ms": ancient}])
    after = int(time.time() * 1000)

    ts_type, confluent_ts = reports[0].timestamp()
    assert ts_type == 2  # TIMESTAMP_LOG_APPEND_TIME, from the produce response
    assert before <= confluent_ts <= after
    assert metas[0].timestamp_type == 1
    assert before <= metas[0].timestamp <= after

    for got in (
        await asyncio.to_thread(confluent_consume, broker.bootstrap, [TopicPartition("appended", 0, 0)], 2),
        await aiokafka_consume(broker.bootstrap, {("appended", 0): 0}, 2),
    ):
        assert [r.value for r in got] == [b"c", b"a"]
        assert all(r.log_append_time for r in got)
        assert got[0].timestamp == confluent_ts
        assert got[1].timestamp == metas[0].timestamp


# --- seek and replay -------------------------------------------------------------------

SEEK_TARGETS = [0, 5, 13, 24, 39]


def _produce_in_batches(bootstrap: str, topic: str, batches: int, per_batch: int) -> None:
    """Several multi-record batches, so that seeks land in the middle of a batch."""
    for b in range(batches):
        confluent_produce(bootstrap, topic, [{"value": f"r{b * per_batch + i}".encode()} for i in range(per_batch)])


def test_confluent_consumer_replays_from_any_offset_after_seek(broker: ThreadBroker) -> None:
    """Seeking to any offset, including one in the middle of a stored batch, replays from
    exactly that record to the end of the partition."""
    create_topic(broker.bootstrap, "replay", 1)
    _produce_in_batches(broker.bootstrap, "replay", 5, 8)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "seeker", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("replay", 0, 40)])
        for target in SEEK_TARGETS:
            consumer.seek(TopicPartition("replay", 0, target))
            got: list[Got] = []
            deadline = time.monotonic() + 10
            while len(got) < 40 - target and time.monotonic() < deadline:
                msg = consumer.poll(0.1)
                if msg is None:
                    continue
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                got.append(from_confluent(msg))
            assert [r.offset for r in got] == list(range(target, 40)), target
            assert [r.value for r in got] == [f"r{i}".encode() for i in range(target, 40)]
    finally:
        consumer.close()


async def test_aiokafka_consumer_replays_from_any_offset_after_seek(broker: ThreadBroker) -> None:
    """aiokafka seek() and seek_to_beginning() replay from the chosen record on."""
    create_topic(broker.bootstrap, "replay", 1)
    await asyncio.to_thread(_produce_in_batches, broker.bootstrap, "replay", 5, 8)
    tp = AioTopicPartition("replay", 0)
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([tp])
        for target in [*SEEK_TARGETS, "beginning"]:
            if target == "beginning":
                await consumer.seek_to_beginning(tp)
                start = 0
            else:
                assert isinstance(target, int)
                consumer.seek(tp, target)
                start = target
            offsets: list[int] = []
            async with asyncio.timeout(10):
                while len(offsets) < 40 - start:
                    batch = await consumer.getmany(tp, timeout_ms=100)
                    offsets.extend(r.offset for r in batch.get(tp, []))
            assert offsets == list(range(start, 40)), target
    finally:
        await consumer.stop()


# --- long poll -------------------------------------------------------------------------


def _fetch_is_waiting(broker: ThreadBroker) -> bool:
    return bool(broker.call(lambda: broker.broker.long_polls() > 0))


def _wait_until_a_fetch_waits(broker: ThreadBroker, pump: Callable[[], object]) -> None:
    deadline = time.monotonic() + 10
    while not _fetch_is_waiting(broker):
        assert time.monotonic() < deadline, "no fetch request is long-polling on the broker"
        pump()


def test_fetch_on_an_empty_partition_waits_max_wait_then_answers_empty(broker: ThreadBroker) -> None:
    """With min_bytes=1 and nothing to read, Fetch holds the request for max_wait
    instead of answering at once (a long poll, not a busy loop)."""
    create_topic(broker.bootstrap, "quiet", 1)
    with connect(broker.bootstrap) as conn:
        started = time.monotonic()
        parts = conn.fetch("quiet", {0: 0}, max_wait_ms=400, min_bytes=1)
        elapsed = time.monotonic() - started
    assert parts[0].error_code == 0
    assert not parts[0].records
    assert 0.35 <= elapsed < 10  # answered at max_wait, not long after


def test_confluent_consumer_waiting_in_a_long_poll_gets_a_new_record_at_once(broker: ThreadBroker) -> None:
    """A consumer whose Fetch is parked (fetch.wait.max.ms=30 s) receives a record produced
    meanwhile within a fraction of that wait: the append wakes the long poll."""
    create_topic(broker.bootstrap, "live", 1)
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "live",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 30_000,
        }
    )
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    try:
        consumer.assign([TopicPartition("live", 0, 0)])
        _wait_until_a_fetch_waits(broker, lambda: consumer.poll(0.05))
        started = time.monotonic()
        producer.produce("live", value=b"wake up")
        assert producer.flush(10) == 0
        msg = None
        while msg is None and time.monotonic() - started < 30:
            msg = consumer.poll(0.05)
        elapsed = time.monotonic() - started
    finally:
        consumer.close()
    assert msg is not None
    assert msg.error() is None
    assert msg.value() == b"wake up"
    assert elapsed < 10, f"record took {elapsed:.2f}s: the long poll was not woken by the append"


async def test_aiokafka_consumer_waiting_in_a_long_poll_gets_a_new_record_at_once(broker: ThreadBroker) -> None:
    """Same with aiokafka (fetch_max_wait_ms=30 s)."""
    create_topic(broker.bootstrap, "live", 1)
    tp = AioTopicPartition("live", 0)
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, fetch_max_wait_ms=30_000)
    await consumer.start()
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        receive = asyncio.ensure_future(consumer.getone(tp))
        async with asyncio.timeout(10):
            while not await asyncio.to_thread(_fetch_is_waiting, broker):
                await asyncio.sleep(0.02)
        started = time.monotonic()
        await aiokafka_produce(broker.bootstrap, "live", [{"value": b"wake up"}])
        async with asyncio.timeout(30):
            record = await receive
        elapsed = time.monotonic() - started
    finally:
        await consumer.stop()
    assert record.value == b"wake up"
    assert elapsed < 10, f"record took {elapsed:.2f}s: the long poll was not woken by the append"


# --- fetch size limits -----------------------------------------------------------------

BIG = 20_000


def _produce_big_then_small(bootstrap: str, topic: str) -> None:
    """Partition 0: one 20 KB record, then four small ones (each its own batch)."""
    confluent_produce(
        bootstrap,
        topic,
        [{"partition": 0, "value": b"B" * BIG}] + [{"partition": 0, "value": f"s{i}".encode()} for i in range(4)],
        flush_each=True,
    )


def test_fetch_returns_a_batch_larger_than_every_limit_whole_and_nothing_after_it(broker: ThreadBroker) -> None:
    """max_bytes and partition_max_bytes bound a Fetch, except that the first batch is
    served whole even when it alone exceeds them (KIP-74): the consumer always progresses.
    Other partitions get nothing once the response is over budget."""
    create_topic(broker.bootstrap, "limits", 2)
    _produce_big_then_small(broker.bootstrap, "limits")
    confluent_produce(broker.bootstrap, "limits", [{"partition": 1, "value": b"other"}])
    with connect(broker.bootstrap) as conn:
        parts = conn.fetch("limits", {0: 0, 1: 0}, max_bytes=1000, partition_max_bytes=1000)
        batches = list(iter_headers(parts[0].records))
        assert len(batches) == 1
        assert batches[0][1].size == len(parts[0].records) > BIG
        assert parts[0].high_watermark == 5
        assert not parts[1].records

        # From offset 1, a partition limit of 2.5 small batches returns 2 whole batches.
        small = conn.fetch("limits", {0: 1}, partition_max_bytes=100_000)[0].records
        sizes = [h.size for _, h in iter_headers(small)]
        assert len(sizes) == 4
        limit = sizes[0] + sizes[1] + sizes[2] // 2
        limited = conn.fetch("limits", {0: 1}, partition_max_bytes=limit)[0].records
        assert [h.base_offset for _, h in iter_headers(limited)] == [1, 2]
        assert len(limited) == sizes[0] + sizes[1]

        # The request-wide max_bytes bounds the sum over partitions too.
        both = conn.fetch("limits", {1: 0, 0: 1}, max_bytes=sizes[0] * 2, partition_max_bytes=100_000)
        assert both[1].records
        assert len(both[1].records) + len(both[0].records) <= sizes[0] * 2


@pytest.mark.parametrize("client", ["confluent", "aiokafka"])
async def test_consumer_with_small_fetch_limits_still_receives_a_larger_record(
    broker: ThreadBroker, client: str
) -> None:
    """A consumer whose fetch limits (1 KB) are smaller than a 20 KB record still gets it,
    and the small records behind it, in order."""
    create_topic(broker.bootstrap, "limits", 1)
    await asyncio.to_thread(_produce_big_then_small, broker.bootstrap, "limits")
    if client == "confluent":
        got = await asyncio.to_thread(
            confluent_consume,
            broker.bootstrap,
            [TopicPartition("limits", 0, 0)],
            5,
            {"fetch.max.bytes": 1024, "max.partition.fetch.bytes": 1024, "message.max.bytes": 1000},
        )
    else:
        got = await aiokafka_consume(
            broker.bootstrap, {("limits", 0): 0}, 5, fetch_max_bytes=1024, max_partition_fetch_bytes=1024
        )
    assert [r.offset for r in got] == [0, 1, 2, 3, 4]
    assert got[0].value == b"B" * BIG
    assert [r.value for r in got[1:]] == [b"s0", b"s1", b"s2", b"s3"]
