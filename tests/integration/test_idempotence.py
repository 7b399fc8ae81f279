"""Idempotent producers: retried batches are stored once.

Real clients are made to retry by a proxy that cuts the connection right after the
broker answered a Produce (the write happened, the client never heard); raw requests
check the de-duplication rules and error codes byte for byte."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from broker.protocol.batch import iter_headers
from broker.protocol.records import decode_records
from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import aiokafka_produce, create_topic
from tests.support.kafka_wire import FaultProxy, KafkaConnection, batch, connect, parse_bootstrap

PRODUCE = 0
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
COUNT = 60


def _stored_values(broker: ThreadBroker, topic: str, partition: int = 0) -> list[bytes | None]:
    """Every record value in the partition, in offset order, straight from Fetch."""
    with connect(broker.bootstrap) as conn:
        part = conn.fetch(topic, {partition: 0}, partition_max_bytes=1 << 24)[partition]
    assert part.error_code == 0
    data = part.records or b""
    values: list[bytes | None] = []
    for pos, header in iter_headers(data):
        _, records = decode_records(data[pos : pos + header.size])
        values.extend(r.value for r in records)
    assert len(values) == part.high_watermark
    return values


@pytest.fixture
def proxied(broker: ThreadBroker) -> Iterator[tuple[ThreadBroker, FaultProxy]]:
    """The broker behind a FaultProxy, which it advertises as its address."""
    host, port = parse_bootstrap(broker.bootstrap)
    with FaultProxy(host, port) as proxy:
        broker.call(lambda: setattr(broker.broker, "advertised", ("127.0.0.1", proxy.port)))
        yield broker, proxy


def _confluent_produce_through(proxy: FaultProxy, idempotent: bool) -> list[tuple[int, bytes]]:
    """Produce COUNT records via the proxy; returns (offset, value) of each delivery report."""
    delivered: list[tuple[int, bytes]] = []
    errors: list[object] = []

    def report(err: object, msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append((msg.offset(), msg.value()))  # type: ignore[attr-defined]

    producer = Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{proxy.port}",
            "enable.idempotence": idempotent,
            "acks": "all",
            "linger.ms": 5,
            "retry.backoff.ms": 50,
        }
    )
    for i in range(COUNT):
        producer.produce("retried", value=f"v{i}".encode(), on_delivery=report)
        if i % 20 == 19:
            producer.poll(0.05)  # a few batches, so several can be in flight
    assert producer.flush(30) == 0
    assert errors == []
    return delivered


def test_confluent_idempotent_producer_retries_store_each_record_once(
    proxied: tuple[ThreadBroker, FaultProxy],
) -> None:
    """librdkafka with enable.idempotence=true re-sends batches whose responses were lost;
    the broker recognises them by producer id and sequence: no duplicates, no gaps, and
    each record is acknowledged with the offset it has in the log."""
    broker, proxy = proxied
    create_topic(broker.bootstrap, "retried", 1)
    proxy.drop_responses(PRODUCE, 2)

    delivered = _confluent_produce_through(proxy, idempotent=True)

    assert proxy.dropped == [PRODUCE, PRODUCE], "the proxy should have cut two produce responses"
    expected = [f"v{i}".encode() for i in range(COUNT)]
    assert _stored_values(broker, "retried") == expected
    assert sorted(delivered) == list(enumerate(expected))


def test_without_idempotence_the_same_lost_responses_duplicate_records(
    proxied: tuple[ThreadBroker, FaultProxy],
) -> None:
    """The control experiment for the test above: the same fault with a plain producer
    stores retried records twice, so the idempotent test does exercise retries."""
    broker, proxy = proxied
    create_topic(broker.bootstrap, "retried", 1)
    proxy.drop_responses(PRODUCE, 1)

    _confluent_produce_through(proxy, idempotent=False)

    assert proxy.dropped == [PRODUCE]
    stored = _stored_values(broker, "retried")
    assert len(stored) > COUNT
    assert set(stored) == {f"v{i}".encode() for i in range(COUNT)}


async def test_aiokafka_idempotent_producer_retries_store_each_record_once(
    proxied: tuple[ThreadBroker, FaultProxy],
) -> None:
    """aiokafka with enable_idempotence=True: the same lost responses, still exactly once."""
    broker, proxy = proxied
    create_topic(broker.bootstrap, "retried", 1)
    proxy.drop_responses(PRODUCE, 2)

    metas = await aiokafka_produce(
        f"127.0.0.1:{proxy.port}",
        "retried",
        [{"value": f"v{i}".encode()} for i in range(COUNT)],
        enable_idempotence=True,
        linger_ms=5,
        max_batch_size=512,  # several batches
        retry_backoff_ms=50,
    )

    assert proxy.dropped == [PRODUCE, PRODUCE]
    expected = [f"v{i}".encode() for i in range(COUNT)]
    assert await asyncio.to_thread(_stored_values, broker, "retried") == expected
    assert [m.offset for m in metas] == list(range(COUNT))


# --- raw protocol: the de-duplication rules --------------------------------------------


def _batch(values: list[bytes], producer_id: int, epoch: int, sequence: int) -> bytes:
    return batch(values, producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence)


@pytest.fixture
def conn(broker: ThreadBroker) -> Iterator[KafkaConnection]:
    create_topic(broker.bootstrap, "raw", 1)
    with connect(broker.bootstrap) as connection:
        yield connection


def test_resent_idempotent_batch_gets_its_original_offset_and_is_stored_once(
    broker: ThreadBroker, conn: KafkaConnection
) -> None:
    """Re-sending a batch with the same producer id, epoch and sequence (the last one or an
    earlier one still cached) succeeds with the offset it was first written at, and writes
    nothing; this survives a broker restart (producer state is rebuilt from the log)."""
    pid, epoch = conn.init_producer_id()
    first = _batch([b"a0", b"a1", b"a2"], pid, epoch, 0)
    second = _batch([b"b0", b"b1"], pid, epoch, 3)
    written = conn.produce("raw", 0, first)
    assert (written.error_code, written.base_offset) == (0, 0)
    written = conn.produce("raw", 0, second)
    assert (written.error_code, written.base_offset) == (0, 3)

    again = conn.produce("raw", 0, second)
    assert (again.error_code, again.base_offset) == (0, 3)
    again = conn.produce("raw", 0, first)
    assert (again.error_code, again.base_offset) == (0, 0)
    assert _stored_values(broker, "raw") == [b"a0", b"a1", b"a2", b"b0", b"b1"]

    broker.restart()
    with connect(broker.bootstrap) as fresh:
        again = fresh.produce("raw", 0, second)
        assert (again.error_code, again.base_offset) == (0, 3)
        assert fresh.produce("raw", 0, _batch([b"c0"], pid, epoch, 5)).base_offset == 5
    assert _stored_values(broker, "raw") == [b"a0", b"a1", b"a2", b"b0", b"b1", b"c0"]


def test_sequence_gap_is_out_of_order_sequence_number_and_writes_nothing(
    broker: ThreadBroker, conn: KafkaConnection
) -> None:
    """A batch whose sequence skips ahead of the last one is rejected with
    OUT_OF_ORDER_SEQUENCE_NUMBER (45); the producer can go on with the right sequence."""
    pid, epoch = conn.init_producer_id()
    assert conn.produce("raw", 0, _batch([b"a0", b"a1"], pid, epoch, 0)).error_code == 0

    gap = conn.produce("raw", 0, _batch([b"lost"], pid, epoch, 5))
    assert gap.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert _stored_values(broker, "raw") == [b"a0", b"a1"]

    resumed = conn.produce("raw", 0, _batch([b"a2"], pid, epoch, 2))
    assert (resumed.error_code, resumed.base_offset) == (0, 2)


def test_older_producer_epoch_is_invalid_producer_epoch_and_writes_nothing(
    broker: ThreadBroker, conn: KafkaConnection
) -> None:
    """Once a producer id has written with a newer epoch, a batch from an older epoch is
    fenced with INVALID_PRODUCER_EPOCH (47); a new epoch must start at sequence 0."""
    pid, epoch = conn.init_producer_id()
    assert conn.produce("raw", 0, _batch([b"old"], pid, epoch, 0)).error_code == 0
    bad_start = conn.produce("raw", 0, _batch([b"new-bad"], pid, epoch + 1, 7))
    assert bad_start.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert conn.produce("raw", 0, _batch([b"new"], pid, epoch + 1, 0)).error_code == 0

    fenced = conn.produce("raw", 0, _batch([b"zombie"], pid, epoch, 1))
    assert fenced.error_code == INVALID_PRODUCER_EPOCH
    assert _stored_values(broker, "raw") == [b"old", b"new"]


def test_init_producer_id_hands_out_distinct_ids(broker: ThreadBroker, conn: KafkaConnection) -> None:
    """Every idempotent producer gets its own id (epoch 0), also after a restart."""
    ids = {conn.init_producer_id() for _ in range(3)}
    broker.restart()
    with connect(broker.bootstrap) as fresh:
        ids |= {fresh.init_producer_id() for _ in range(3)}
    assert len(ids) == 6
    assert {epoch for _, epoch in ids} == {0}
    assert all(pid >= 0 for pid, _ in ids)
