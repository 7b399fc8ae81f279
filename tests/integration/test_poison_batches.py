"""Nothing is stored that a consumer could not read back: a CRC-valid batch whose codec is
unknown, whose payload does not decompress, whose records do not frame it, or which
decompresses to more than `message.max.decompressed.bytes` is refused at produce with the
error code Kafka's validator gives, and the partition keeps serving everything acknowledged
before and after.  Large legitimate batches are opened off the event loop and still keep a
producer's order."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import pytest
import zstandard
from kio.schema.errors import ErrorCode

from broker.protocol.batch import HEADER_SIZE, compute_crc
from broker.protocol.records import Record, build_batch
from tests.support.harness import ThreadBroker
from tests.support.kafka_wire import PRODUCE_V9, KafkaConnection, batch, connect, now_ms, produce_request

_HEADER = struct.Struct(">qiiBIhiqqqhii")


def crafted(payload: bytes, *, codec: int, count: int, producer: tuple[int, int, int] = (-1, -1, -1)) -> bytes:
    """A batch with a valid CRC around any payload and any codec bits."""
    ts = now_ms()
    pid, epoch, seq = producer
    out = bytearray(HEADER_SIZE) + payload
    _HEADER.pack_into(out, 0, 0, len(out) - 12, 0, 2, 0, codec, count - 1, ts, ts, pid, epoch, seq, count)
    struct.pack_into(">I", out, 17, compute_crc(out))
    return bytes(out)


def records_payload(values: list[bytes], keys: list[bytes | None] | None = None) -> bytes:
    keys = keys or [None] * len(values)
    ts = now_ms()
    raw = build_batch([Record(i, ts, k, v) for i, (k, v) in enumerate(zip(keys, values, strict=True))])
    return raw[HEADER_SIZE:]


def _varint(value: int) -> bytes:
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def zero_record_bomb(value_size: int, codec: str) -> bytes:
    """One record whose value is `value_size` zero bytes, compressed as a stream (the
    test never holds the expanded payload)."""
    inner = b"\x00" + _varint(0) + _varint(0) + _varint(-1) + _varint(value_size)
    tail = _varint(0)  # no headers
    length = len(inner) + value_size + len(tail)
    chunks = [_varint(length) + inner, *([bytes(1 << 20)] * (value_size >> 20)), tail]
    if codec == "zstd":
        cobj = zstandard.ZstdCompressor(level=19).compressobj()
        return b"".join(cobj.compress(c) for c in chunks) + cobj.flush()
    gz = zlib.compressobj(9, zlib.DEFLATED, 31)
    return b"".join(gz.compress(c) for c in chunks) + gz.flush()


@pytest.fixture
def stored(broker: ThreadBroker) -> KafkaConnection:
    """A topic with two acknowledged records; the connection is closed by the test's end."""
    conn = connect(broker.bootstrap)
    assert conn.create_topic("t", 1).error_code == ErrorCode.none
    assert conn.produce("t", 0, batch([b"before-1", b"before-2"])).error_code == ErrorCode.none
    return conn


def _assert_serving(conn: KafkaConnection, expected: list[bytes]) -> None:
    assert conn.produce("t", 0, batch([b"after"])).error_code == ErrorCode.none
    assert [r.value for r in conn.read_all("t")] == [*expected, b"after"]


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_an_unknown_codec_is_corrupt_message_and_nothing_is_stored(stored: KafkaConnection, codec: int) -> None:
    with stored:
        result = stored.produce("t", 0, crafted(records_payload([b"x"]), codec=codec, count=1))
        assert result.error_code == ErrorCode.corrupt_message
        assert "codec" in result.error_message
        _assert_serving(stored, [b"before-1", b"before-2"])


@pytest.mark.parametrize(("codec", "name"), [(1, "gzip"), (2, "snappy"), (3, "lz4"), (4, "zstd")])
def test_a_payload_that_does_not_decompress_is_corrupt_message(stored: KafkaConnection, codec: int, name: str) -> None:
    with stored:
        result = stored.produce("t", 0, crafted(b"\x1f\x8b garbage that is no " + name.encode(), codec=codec, count=1))
        assert result.error_code == ErrorCode.corrupt_message
        _assert_serving(stored, [b"before-1", b"before-2"])


def test_records_that_do_not_frame_the_payload_are_corrupt_message(stored: KafkaConnection) -> None:
    payload = records_payload([b"a", b"b", b"c"])
    with stored:
        assert stored.produce("t", 0, crafted(payload, codec=0, count=4)).error_code == ErrorCode.corrupt_message
        assert stored.produce("t", 0, crafted(payload[:-3], codec=0, count=3)).error_code == ErrorCode.corrupt_message
        garbage = b"\x7f" + payload[1:]  # the first record claims 63 bytes
        assert stored.produce("t", 0, crafted(garbage, codec=0, count=3)).error_code == ErrorCode.corrupt_message
        _assert_serving(stored, [b"before-1", b"before-2"])


@pytest.mark.slow
@pytest.mark.parametrize("codec", ["zstd", "gzip"])
def test_a_small_batch_expanding_to_512_mib_is_refused_as_too_large(
    broker_factory: Callable[..., ThreadBroker], codec: str
) -> None:
    """The 16 KB zstd batch that expands to 512 MiB (and its gzip cousin) on a compacted
    topic, which has to look at every record: MESSAGE_TOO_LARGE, bounded memory."""
    broker = broker_factory()
    bomb = zero_record_bomb(512 << 20, codec)
    assert len(bomb) < 1 << 20
    with connect(broker.bootstrap) as conn:
        assert conn.create_topic("t", 1, {"cleanup.policy": "compact"}).error_code == ErrorCode.none
        assert conn.produce("t", 0, batch([b"k"], keys=[b"k"])).error_code == ErrorCode.none
        code = {"zstd": 4, "gzip": 1}[codec]
        result = conn.produce("t", 0, crafted(bomb, codec=code, count=1))
        assert result.error_code == ErrorCode.message_too_large
        assert "message.max.decompressed.bytes" in result.error_message
        assert conn.produce("t", 0, batch([b"v"], keys=[b"k2"])).error_code == ErrorCode.none
        assert [r.value for r in conn.read_all("t")] == [b"k", b"v"]


def test_message_max_decompressed_bytes_is_a_setting(broker_factory: Callable[..., ThreadBroker]) -> None:
    broker = broker_factory(settings={"message.max.decompressed.bytes": str(2 << 20)})
    ok, big = zero_record_bomb(1 << 20, "zstd"), zero_record_bomb(3 << 20, "zstd")
    with connect(broker.bootstrap) as conn:
        assert conn.create_topic("t", 1).error_code == ErrorCode.none
        assert conn.produce("t", 0, crafted(ok, codec=4, count=1)).error_code == ErrorCode.none
        assert conn.produce("t", 0, crafted(big, codec=4, count=1)).error_code == ErrorCode.message_too_large
        records = conn.read_all("t")
        assert len(records) == 1
        assert records[0].value == bytes(1 << 20)


def test_a_large_compressed_batch_is_opened_off_the_loop_and_a_producers_order_is_kept(broker: ThreadBroker) -> None:
    """Pipelined on one connection: a 6 MiB (decompressed) batch, then a small one, from one
    idempotent producer.  The first is opened in a worker; the second must not overtake it
    (it would be OUT_OF_ORDER_SEQUENCE_NUMBER, or stored first)."""
    with connect(broker.bootstrap) as conn:
        assert conn.create_topic("t", 1, {"max.message.bytes": str(8 << 20)}).error_code == ErrorCode.none
        pid, epoch = conn.init_producer_id()
        big_values = [bytes([i]) * 60_000 for i in range(100)]
        big = build_batch(
            [Record(i, now_ms(), None, v) for i, v in enumerate(big_values)],
            compression=4,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=0,
        )
        small = build_batch(
            [Record(0, now_ms(), None, b"small")], producer_id=pid, producer_epoch=epoch, base_sequence=100
        )
        first = conn.send(produce_request("t", 0, big))
        second = conn.send(produce_request("t", 0, small))
        r1 = conn.receive(*PRODUCE_V9, first).responses[0].partition_responses[0]
        r2 = conn.receive(*PRODUCE_V9, second).responses[0].partition_responses[0]
        assert (r1.error_code, r2.error_code) == (ErrorCode.none, ErrorCode.none)
        assert (r1.base_offset, r2.base_offset) == (0, 100)
        assert [r.value for r in conn.read_all("t")] == [*big_values, b"small"]


def test_a_compacted_topic_refuses_a_keyless_record_in_a_large_batch_too(broker: ThreadBroker) -> None:
    with connect(broker.bootstrap) as conn:
        assert conn.create_topic("c", 1, {"cleanup.policy": "compact"}).error_code == ErrorCode.none
        values = [b"v" * 100 for _ in range(20_000)]
        keys: list[bytes | None] = [b"k%d" % i for i in range(20_000)]
        keys[12_345] = None
        result = conn.produce("c", 0, batch(values, keys=keys, compression=4))
        assert result.error_code == ErrorCode.invalid_record
        assert conn.produce("c", 0, batch([b"ok"], keys=[b"k"])).error_code == ErrorCode.none
