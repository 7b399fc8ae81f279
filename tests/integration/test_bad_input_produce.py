"""The bundled broker against bad produce requests: batches with a wrong CRC or magic, records
that are not whole batches, batches over the message size limits, and acks=0 produce that
fails (the connection closed) or succeeds (no response).

Each test seeds a topic with records, opens a bystander connection, sends the bad input
on its own connection, then `assert_survived` checks: the bystander connection still gets
answers, a fresh connection can produce, and every record stored before is still readable.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from kio.schema.errors import ErrorCode

from tests.support.bad_input import TOPIC, Stored, assert_survived, seed
from tests.support.harness import ThreadBroker
from tests.support.kafka_wire import (
    batch,
    connect,
)


def flip(data: bytes, position: int, mask: int = 0x01) -> bytes:
    out = bytearray(data)
    out[position] ^= mask
    return bytes(out)


def set_byte(data: bytes, position: int, value: int) -> bytes:
    out = bytearray(data)
    out[position] = value
    return bytes(out)


def batch_of_size(size: int, rng: random.Random) -> tuple[bytes, bytes]:
    """A one-record batch of exactly `size` bytes (incompressible value) and its value."""
    value_len = size - len(batch([b""]))
    for _ in range(5):
        value = rng.randbytes(value_len)
        data = batch([value])
        if len(data) == size:
            return data, value
        value_len -= len(data) - size
    raise AssertionError(f"cannot build a batch of {size} bytes")


# Positions inside the CRC-covered region (21..end) of a batch: attributes, last offset
# delta, base timestamp, producer id, records count, and the record bytes; and the CRC
# field itself.
CRC_POSITIONS = {
    "crc": 17,
    "attributes": 22,
    "last-offset-delta": 26,
    "base-timestamp": 34,
    "producer-id": 50,
    "records-count": 60,
    "record-body": -1,
}


@pytest.mark.parametrize("where", list(CRC_POSITIONS))
@pytest.mark.parametrize("acks", [1, -1])
def test_batch_with_wrong_crc_is_rejected_with_corrupt_message(stored: Stored, where: str, acks: int) -> None:
    """A batch whose CRC32C does not match its bytes gets CORRUPT_MESSAGE (2) and is not
    stored; the connection stays usable."""
    good = batch([b"will-be-corrupted", b"second"])
    bad_batch = flip(good, CRC_POSITIONS[where] % len(good), 0x10)
    with connect(stored.broker.bootstrap) as client:
        result = client.produce(TOPIC, 0, bad_batch, acks=acks)
        assert result.error_code == ErrorCode.corrupt_message
        assert result.base_offset == -1
        assert client.list_offsets(TOPIC, 0, -1).offset == len(stored.values)
    assert_survived(stored)


@pytest.mark.parametrize("magic", [0, 1, 3, 255])
def test_batch_with_wrong_magic_is_rejected_with_invalid_record(stored: Stored, magic: int) -> None:
    """Produce v3+ accepts only magic v2 batches: any other magic byte is INVALID_RECORD (87)."""
    bad_batch = set_byte(batch([b"wrong-magic"]), 16, magic)
    with connect(stored.broker.bootstrap) as client:
        result = client.produce(TOPIC, 0, bad_batch)
        assert result.error_code == ErrorCode.invalid_record
        assert client.list_offsets(TOPIC, 0, -1).offset == len(stored.values)
    assert_survived(stored)


def test_records_field_that_is_not_whole_batches_is_rejected_with_corrupt_message(stored: Stored) -> None:
    """A records field cut short (batch length pointing past the end) or shorter than a
    batch header is CORRUPT_MESSAGE; nothing is stored."""
    good = batch([b"truncated-in-request"] * 3)
    with connect(stored.broker.bootstrap) as client:
        for records in (good[:-5], good[:40], good + good[:30]):
            result = client.produce(TOPIC, 0, records)
            assert result.error_code == ErrorCode.corrupt_message
        assert client.list_offsets(TOPIC, 0, -1).offset == len(stored.values)
    assert_survived(stored)


def test_batch_larger_than_max_message_bytes_is_rejected_with_message_too_large(stored: Stored) -> None:
    """A batch above the topic's max.message.bytes gets MESSAGE_TOO_LARGE (10) and is not
    stored; one of exactly max.message.bytes is accepted."""
    limit = 1000
    rng = random.Random(1)
    with connect(stored.broker.bootstrap) as client:
        assert client.create_topic("limited", 1, {"max.message.bytes": str(limit)}).error_code == ErrorCode.none
        exact, exact_value = batch_of_size(limit, rng)
        too_big, _ = batch_of_size(limit + 1, rng)
        result = client.produce("limited", 0, too_big)
        assert result.error_code == ErrorCode.message_too_large
        assert client.list_offsets("limited", 0, -1).offset == 0
        result = client.produce("limited", 0, exact)
        assert result.error_code == ErrorCode.none
        assert [r.value for r in client.read_all("limited")] == [exact_value]
    assert_survived(stored)


def test_batch_larger_than_broker_message_max_bytes_is_rejected(broker_factory: Callable[..., ThreadBroker]) -> None:
    """The broker-wide default (message.max.bytes) applies to topics without an override."""
    s = seed(broker_factory(settings={"message.max.bytes": "2000"}, name="limited"))
    try:
        with connect(s.broker.bootstrap) as client:
            result = client.produce(TOPIC, 0, batch([b"z" * 3000]))
            assert result.error_code == ErrorCode.message_too_large
        assert_survived(s)
    finally:
        s.bystander.close()


# --- acks=0 --------------------------------------------------------------------------


def test_successful_acks_0_produce_gets_no_response_and_keeps_the_connection(stored: Stored) -> None:
    """The control for the failure cases: acks=0 that succeeds sends nothing back, and
    the next request on the same connection is answered."""
    with connect(stored.broker.bootstrap) as client:
        client.produce(TOPIC, 0, batch([b"fire-and-forget"]), acks=0)
        assert client.api_versions().error_code == ErrorCode.none  # the next frame is this answer
        stored.values.append(b"fire-and-forget")
    assert_survived(stored)


@pytest.mark.parametrize("case", ["wrong-crc", "wrong-magic", "unknown-topic", "unknown-partition", "truncated-batch"])
def test_failed_acks_0_produce_closes_the_connection(stored: Stored, case: str) -> None:
    """acks=0 has no response to carry an error, so Kafka closes the connection to let
    the client notice; nothing is stored."""
    good = batch([b"acks-0-failure"])
    topic, partition, records = TOPIC, 0, good
    if case == "wrong-crc":
        records = flip(good, len(good) - 1)
    elif case == "wrong-magic":
        records = set_byte(good, 16, 1)
    elif case == "unknown-topic":
        topic = "no-such-topic"
    elif case == "unknown-partition":
        partition = 7
    else:
        records = good[:-3]
    with connect(stored.broker.bootstrap) as client:
        client.produce(topic, partition, records, acks=0)
        assert client.wait_closed() == b""
    assert_survived(stored)
