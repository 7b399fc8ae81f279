"""Record-level codec for magic v2 batches, sans-io.

The produce and fetch paths never decode records.  This module is for the places that
must: the log cleaner (keep the latest record per key), ListOffsets by timestamp, the
broker's own internal topics and the console tools.  Produce-time validation walks the
records without decoding them (record_walk.py).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

import cramjam

from broker.protocol.batch import (
    ATTR_COMPRESSION_MASK,
    ATTR_TIMESTAMP_TYPE,
    HEADER_SIZE,
    MAGIC_V2,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    BatchHeader,
    InvalidBatch,
    compute_crc,
    parse_header,
)

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_HEADER_NO_CRC = struct.Struct(">qiiBIhiqqqhii")


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = field(default=())


# --- varints -------------------------------------------------------------------------


def _read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise InvalidBatch("corrupt", "truncated varint in record")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise InvalidBatch("corrupt", "varint too long in record")


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    raw, pos = _read_uvarint(buf, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def _varint(value: int) -> bytes:
    """Zigzag varint of a signed 64-bit value."""
    if -64 <= value < 64:
        return _SMALL_VARINTS[value + 64]
    if 0 <= value < 8192:  # the lengths of most keys, values and records: two bytes, no loop
        raw = value << 1
        return bytes(((raw & 0x7F) | 0x80, raw >> 7))
    raw = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


# Most varints of a record (attributes, deltas, short lengths, header counts) fit in a byte.
_SMALL_VARINTS = [bytes([((v << 1) ^ (v >> 63)) & 0xFF]) for v in range(-64, 64)]
_NULL = _SMALL_VARINTS[-1 + 64]


def _read_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    length, pos = _read_varint(buf, pos)
    if length < 0:
        return None, pos
    if pos + length > len(buf):
        raise InvalidBatch("corrupt", "record field runs past the batch")
    return bytes(buf[pos : pos + length]), pos + length


# --- compression ---------------------------------------------------------------------


def decompress(codec: int, data: bytes) -> bytes:
    try:
        if codec == 0:
            return data
        if codec == 1:
            return bytes(cramjam.gzip.decompress(data))
        if codec == 2:
            return _snappy_decompress(data)
        if codec == 3:
            return bytes(cramjam.lz4.decompress(data))
        if codec == 4:
            return bytes(cramjam.zstd.decompress(data))
    except (cramjam.DecompressionError, ValueError) as e:
        raise InvalidBatch("corrupt", f"cannot decompress batch: {e}") from e
    raise InvalidBatch("invalid", f"unknown compression codec {codec}")


def compress(codec: int, data: bytes, level: int | None = None) -> bytes:
    """`level` is the codec's (a topic's compression.gzip/lz4/zstd.level); None: its default."""
    if codec == 0:
        return data
    if codec == 1:
        return bytes(cramjam.gzip.compress(data, level=level))
    if codec == 2:
        return _snappy_compress_xerial(data)
    if codec == 3:
        return bytes(cramjam.lz4.compress(data, level=level))
    if codec == 4:
        return bytes(cramjam.zstd.compress(data, level=level))
    raise InvalidBatch("invalid", f"unknown compression codec {codec}")


def _snappy_decompress(data: bytes) -> bytes:
    # The Java client frames snappy the xerial way; librdkafka may send raw snappy.
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    out = bytearray()
    pos = _XERIAL_HEADER.size
    while pos < len(data):
        (length,) = _I32.unpack_from(data, pos)
        pos += 4
        out += cramjam.snappy.decompress_raw(data[pos : pos + length])
        pos += length
    return bytes(out)


def _snappy_compress_xerial(data: bytes) -> bytes:
    out = bytearray(_XERIAL_HEADER.pack(_XERIAL_MAGIC, 1, 1))
    block = 32 * 1024
    for start in range(0, max(len(data), 1), block):
        chunk = bytes(cramjam.snappy.compress_raw(data[start : start + block]))
        out += _I32.pack(len(chunk)) + chunk
    return bytes(out)


# --- records -------------------------------------------------------------------------


def decode_records(batch: bytes | memoryview) -> tuple[BatchHeader, list[Record]]:
    """Decode every record of one complete batch (decompressing as needed)."""
    raw = bytes(batch)
    header = parse_header(raw)
    if header.magic != MAGIC_V2:
        raise InvalidBatch("magic", f"unsupported record batch magic {header.magic}")
    body = decompress(header.compression, raw[HEADER_SIZE:])
    records: list[Record] = []
    pos = 0
    for _ in range(header.records_count):
        length, pos = _read_varint(body, pos)
        end = pos + length
        if end > len(body):
            raise InvalidBatch("corrupt", "record runs past the batch")
        pos += 1  # record attributes: unused in v2
        ts_delta, pos = _read_varint(body, pos)
        offset_delta, pos = _read_varint(body, pos)
        key, pos = _read_bytes(body, pos)
        value, pos = _read_bytes(body, pos)
        count, pos = _read_varint(body, pos)
        headers = []
        for _ in range(count):
            hkey, pos = _read_bytes(body, pos)
            hval, pos = _read_bytes(body, pos)
            headers.append(((hkey or b"").decode("utf-8", "replace"), hval))
        if pos != end:
            raise InvalidBatch("corrupt", "record length does not match its fields")
        timestamp = header.max_timestamp if header.is_log_append_time else header.base_timestamp + ts_delta
        records.append(Record(header.base_offset + offset_delta, timestamp, key, value, tuple(headers)))
    return header, records


def _encode_record(out: bytearray, rec: Record, base_offset: int, base_ts: int) -> None:
    key, value = rec.key, rec.value
    parts = [
        b"\x00",  # attributes
        _varint(rec.timestamp - base_ts),
        _varint(rec.offset - base_offset),
        _NULL if key is None else _varint(len(key)),
        key or b"",
        _NULL if value is None else _varint(len(value)),
        value or b"",
        _varint(len(rec.headers)),
    ]
    for hkey, hval in rec.headers:
        name = hkey.encode()
        parts += (_varint(len(name)), name, _NULL if hval is None else _varint(len(hval)), hval or b"")
    body = b"".join(parts)
    out += _varint(len(body))
    out += body


def build_batch(
    records: list[Record],
    *,
    base_offset: int | None = None,
    last_offset: int | None = None,
    compression: int = 0,
    level: int | None = None,
    log_append_time: bool = False,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    attributes_extra: int = 0,
    partition_leader_epoch: int = 0,
) -> bytes:
    """Encode a v2 batch.  `base_offset`/`last_offset` default to the records' own range;
    the cleaner passes the original batch's range so a filtered batch still spans it."""
    if not records:
        raise ValueError("a batch needs at least one record")
    base = records[0].offset if base_offset is None else base_offset
    last = records[-1].offset if last_offset is None else last_offset
    base_ts = records[0].timestamp
    max_ts = max(r.timestamp for r in records)
    body = bytearray()
    for rec in records:
        _encode_record(body, rec, base, base_ts)
    payload = compress(compression, bytes(body), level)
    attributes = (compression & ATTR_COMPRESSION_MASK) | attributes_extra
    if log_append_time:
        attributes |= ATTR_TIMESTAMP_TYPE
    header = (partition_leader_epoch, attributes, last - base, base_ts, max_ts)
    return _framed(payload, base, header, (producer_id, producer_epoch, base_sequence), len(records))


# A record of build_plain_batch up to its key: attributes, timestamp delta 0, offset delta.
_PLAIN_HEADS = [b"\x00\x00" + _SMALL_VARINTS[i + 64] for i in range(64)]
_NO_HEADERS = _SMALL_VARINTS[64]
# The varints of lengths below 1,024 (a few dozen KiB), looked up without a call.
_LENGTHS = [_varint(n) for n in range(1024)]


def build_plain_batch(pairs: Sequence[tuple[bytes | None, bytes | None]], timestamp: int) -> bytes:
    """The batch `build_batch` makes of records (key, value) at offsets 0, 1, ..., all at
    `timestamp`, without headers or compression: the broker's own records (the offsets a
    commit writes to `__consumer_offsets`), encoded without a Record object per record or
    the general encoder's per-field work.  tests/unit/test_plain_batch.py checks they agree."""
    if not pairs:
        raise ValueError("a batch needs at least one record")
    parts: list[bytes] = []
    for i, (key, value) in enumerate(pairs):
        body = b"".join(
            (
                _PLAIN_HEADS[i] if i < 64 else b"\x00\x00" + _varint(i),
                _NULL if key is None else (_LENGTHS[len(key)] if len(key) < 1024 else _varint(len(key))),
                key or b"",
                _NULL if value is None else (_LENGTHS[len(value)] if len(value) < 1024 else _varint(len(value))),
                value or b"",
                _NO_HEADERS,
            )
        )
        parts += (_LENGTHS[len(body)] if len(body) < 1024 else _varint(len(body)), body)
    header = (0, 0, len(pairs) - 1, timestamp, timestamp)
    return _framed(b"".join(parts), 0, header, (NO_PRODUCER_ID, -1, NO_SEQUENCE), len(pairs))


def _framed(
    payload: bytes, base: int, header: tuple[int, int, int, int, int], producer: tuple[int, int, int], count: int
) -> bytes:
    """`payload` behind its batch header; `header` is (partition leader epoch, attributes,
    last offset delta, base timestamp, max timestamp), `producer` (id, epoch, base sequence)."""
    leader_epoch, attributes, last_delta, base_ts, max_ts = header
    out = bytearray(HEADER_SIZE) + payload
    _HEADER_NO_CRC.pack_into(
        out,
        0,
        base,
        len(out) - 12,
        leader_epoch,
        MAGIC_V2,
        0,
        attributes,
        last_delta,
        base_ts,
        max_ts,
        *producer,
        count,
    )
    _U32.pack_into(out, 17, compute_crc(out))
    return bytes(out)
