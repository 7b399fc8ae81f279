"""Compressed record batches (gzip, snappy, lz4, zstd) from either client are stored as
sent and read back by both clients."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import TopicPartition

from broker.protocol.batch import iter_headers
from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import (
    aiokafka_consume,
    aiokafka_produce,
    confluent_consume,
    confluent_produce,
    create_topic,
)
from tests.support.kafka_wire import connect

CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
COUNT = 200


def _records() -> list[dict[str, bytes]]:
    # Repetitive values compress well; the index keeps every value distinct.
    return [{"key": f"k{i % 7}".encode(), "value": f"{i:05d}".encode() + b" order placed " * 20} for i in range(COUNT)]


def _stored_codecs(bootstrap: str, topic: str) -> tuple[set[int], int]:
    """Compression codecs of the batches the broker serves, and the bytes they take."""
    with connect(bootstrap) as conn:
        data = conn.fetch(topic, {0: 0}, partition_max_bytes=1 << 24)[0].records
    return {h.compression for _, h in iter_headers(data)}, len(data)


# librdkafka compresses with lz4 only when the broker advertises FindCoordinator (its
# marker for "Kafka 0.9+"), so this also checks that the broker advertises group support.
PRODUCER_CODECS = [(p, c) for p in ("confluent", "aiokafka") for c in CODECS]


@pytest.mark.parametrize(("producer", "codec"), PRODUCER_CODECS)
async def test_compressed_batches_round_trip_to_both_clients(broker: ThreadBroker, producer: str, codec: str) -> None:
    """A batch compressed by the producer is stored compressed (the broker keeps the
    client's bytes) and both consumers decompress every record intact, in order."""
    create_topic(broker.bootstrap, "zipped", 1)
    records = _records()
    if producer == "confluent":
        await asyncio.to_thread(
            confluent_produce, broker.bootstrap, "zipped", records, {"compression.type": codec, "linger.ms": 20}
        )
    else:
        await aiokafka_produce(broker.bootstrap, "zipped", records, compression_type=codec, linger_ms=20)

    codecs, stored_bytes = await asyncio.to_thread(_stored_codecs, broker.bootstrap, "zipped")
    assert codecs == {CODECS[codec]}
    assert stored_bytes < sum(len(r["value"]) for r in records) // 4

    expected = [(i, r["key"], r["value"]) for i, r in enumerate(records)]
    via_confluent = await asyncio.to_thread(
        confluent_consume, broker.bootstrap, [TopicPartition("zipped", 0, 0)], COUNT
    )
    via_aiokafka = await aiokafka_consume(broker.bootstrap, {("zipped", 0): 0}, COUNT)
    assert [(r.offset, r.key, r.value) for r in via_confluent] == expected
    assert [(r.offset, r.key, r.value) for r in via_aiokafka] == expected


@pytest.mark.parametrize("codec", list(CODECS))
async def test_topic_compression_type_recompresses_uncompressed_batches(broker: ThreadBroker, codec: str) -> None:
    """A topic with compression.type set stores the producer's uncompressed batches in
    that codec, and consumers still read every record."""
    create_topic(broker.bootstrap, "pinned", 1, {"compression.type": codec})
    records = _records()[:50]
    await aiokafka_produce(broker.bootstrap, "pinned", records, linger_ms=20)

    codecs, _ = await asyncio.to_thread(_stored_codecs, broker.bootstrap, "pinned")
    assert codecs == {CODECS[codec]}
    got = await asyncio.to_thread(confluent_consume, broker.bootstrap, [TopicPartition("pinned", 0, 0)], 50)
    assert [(r.offset, r.value) for r in got] == [(i, r["value"]) for i, r in enumerate(records)]
