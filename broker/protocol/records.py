"""Record-level codec for magic v2 batches, sans-io.

The produce and fetch paths never decode records.  This module is for the places that
must: the log cleaner (keep the latest record per key), ListOffsets by timestamp, the
broker's own internal topics and the console tools.  Produce-time validation walks the
records without decoding them (`check_records`, `frame_records`).
"""

from __future__ import annotations

import struct
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


def _write_varint(out: bytearray, value: int) -> None:
    raw = (value << 1) ^ (value >> 63)
    raw &= 0xFFFFFFFFFFFFFFFF
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def _read_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    length, pos = _read_varint(buf, pos)
    if length < 0:
        return None, pos
    if pos + length > len(buf):
        raise InvalidBatch("corrupt", "record field runs past the batch")
    return bytes(buf[pos : pos + length]), pos + length


def _write_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        _write_varint(out, -1)
    else:
        _write_varint(out, len(value))
        out += value


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


def compress(codec: int, data: bytes) -> bytes:
    if codec == 0:
        return data
    if codec == 1:
        return bytes(cramjam.gzip.compress(data))
    if codec == 2:
        return _snappy_compress_xerial(data)
    if codec == 3:
        return bytes(cramjam.lz4.compress(data))
    if codec == 4:
        return bytes(cramjam.zstd.compress(data))
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
    body = bytearray(b"\x00")
    _write_varint(body, rec.timestamp - base_ts)
    _write_varint(body, rec.offset - base_offset)
    _write_bytes(body, rec.key)
    _write_bytes(body, rec.value)
    _write_varint(body, len(rec.headers))
    for hkey, hval in rec.headers:
        _write_bytes(body, hkey.encode())
        _write_bytes(body, hval)
    _write_varint(out, len(body))
    out += body


def build_batch(
    records: list[Record],
    *,
    base_offset: int | None = None,
    last_offset: int | None = None,
    compression: int = 0,
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
    payload = compress(compression, bytes(body))
    attributes = (compression & ATTR_COMPRESSION_MASK) | attributes_extra
    if log_append_time:
        attributes |= ATTR_TIMESTAMP_TYPE
    out = bytearray(HEADER_SIZE) + payload
    _HEADER_NO_CRC.pack_into(
        out,
        0,
        base,
        len(out) - 12,
        partition_leader_epoch,
        MAGIC_V2,
        0,
        attributes,
        last - base,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    _U32.pack_into(out, 17, compute_crc(out))
    return bytes(out)


# --- walking records without decoding them (produce-time validation) -----------------
#
# These run for every batch produced, once per record, so they index a `bytes` copy of the
# records (several times cheaper than a memoryview) and decode the one- and two-byte varints
# inline.  A read past the end raises IndexError, which means a truncated record.


_FAR = 1 << 62  # a position past any batch: the record goes to the general reader


def _keyless() -> InvalidBatch:
    return InvalidBatch("invalid", "a compacted topic cannot accept a record without a key")


def _walk_varint(data: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint of at most 10 bytes; IndexError when it runs past the data."""
    raw = shift = 0
    while True:
        b = data[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise InvalidBatch("corrupt", "varint too long in a record: the batch is corrupt")


def _check_record(data: bytes, pos: int, index: int, need_keys: bool) -> int:
    """Read one record field by field, as a consumer does; returns where the next starts.

    Record: length, attributes (one byte), timestamp delta, offset delta, key, value (each
    a varint length, negative for null, then the bytes), header count, and per header a key
    (never null, UTF-8) and a value."""
    try:
        length, start = _walk_varint(data, pos)
        if data[start] & 0x80:
            # One byte, unused in v2, that Kafka reads as an int8; Python clients read it as a
            # varint, and would read the rest of such a record wrong.
            raise InvalidBatch("corrupt", f"record {index} has attributes {data[start]:#x}: the batch is corrupt")
        p = start + 1
        _, p = _walk_varint(data, p)  # timestamp delta
        _, p = _walk_varint(data, p)  # offset delta
        key_length, p = _walk_varint(data, p)
        p += max(key_length, 0)
        value_length, p = _walk_varint(data, p)
        p += max(value_length, 0)
        count, p = _walk_varint(data, p)
        if count < 0:
            raise InvalidBatch("corrupt", f"record {index} has {count} headers: the batch is corrupt")
        for _ in range(count):
            size, p = _walk_varint(data, p)
            if size < 0:
                raise InvalidBatch("corrupt", f"record {index} has a header key of size {size}: the batch is corrupt")
            if p + size > len(data):
                raise IndexError
            data[p : p + size].decode()  # a consumer decodes header keys: they must be UTF-8
            p += size
            size, p = _walk_varint(data, p)
            p += max(size, 0)
        if p > len(data):
            raise IndexError
    except IndexError:
        raise InvalidBatch("corrupt", f"record {index} runs past the end of the batch") from None
    except UnicodeDecodeError:
        raise InvalidBatch("corrupt", f"record {index} has a header key that is not UTF-8") from None
    if p - start != length:
        raise InvalidBatch(
            "corrupt", f"record {index} claims {length} bytes but its fields take {p - start}: the batch is corrupt"
        )
    if need_keys and key_length < 0:
        raise _keyless()
    return p


def check_records(data: bytes, count: int, *, need_keys: bool) -> None:
    """Every record's fields must add up to its length, the records must number `count` and
    fill `data` exactly, header keys must be UTF-8, and with `need_keys` each record needs a
    key.  Raises InvalidBatch ("corrupt", or "invalid" for a missing key).

    The loop reads the common shape of a record inline: every varint of one or two bytes,
    a key under 64 bytes.  Any other record, a malformed one included, is read again by
    `_check_record`, which reads every shape and says what is wrong.  (A read past the end,
    IndexError, sends the record there too; so does a position set past any batch, `_FAR`.)"""
    pos, end = 0, len(data)
    null_key = -1 if need_keys else 1  # the key length byte of a null key, when that is fine
    for index in range(count):
        try:
            b = data[pos]  # record length
            if b < 0x80:
                p = pos + 1
                stop = p + (b >> 1)
            else:
                c = data[pos + 1]
                p = pos + 2
                stop = p + ((c << 6) | ((b & 0x7F) >> 1))
                if c >= 0x80:
                    b = 1  # three bytes or more
            if not b & 1:  # (a negative length has the low bit set)
                # attributes (one byte, below 0x80: see `_check_record`) and the timestamp
                # delta, then the offset delta
                if data[p] & 0x80:
                    p = _FAR
                p += 2 if data[p + 1] < 0x80 else 3 if data[p + 2] < 0x80 else _FAR
                p += 1 if data[p] < 0x80 else 2 if data[p + 1] < 0x80 else _FAR
                b = data[p]  # key length
                if b < 0x80 and not b & 1:
                    p += 1 + (b >> 1)
                else:
                    p += 1 if b == null_key else _FAR
                b = data[p]  # value length
                if b < 0x80:
                    p += 1 if b & 1 else 1 + (b >> 1)
                else:
                    c = data[p + 1]
                    p += (2 if b & 1 else 2 + ((c << 6) | ((b & 0x7F) >> 1))) if c < 0x80 else _FAR
                b = data[p]  # header count
                if not b:
                    if p + 1 == stop:
                        pos = stop
                        continue
                elif b < 0x80 and not b & 1 and _headers(data, p + 1, b >> 1) == stop <= end:
                    pos = stop
                    continue
        except (IndexError, UnicodeDecodeError):
            pass
        pos = _check_record(data, pos, index, need_keys)
    if pos != end:
        raise InvalidBatch("corrupt", f"{end - pos} bytes follow the batch's {count} records")


def _headers(data: bytes, p: int, count: int) -> int:
    """`check_records`' inline reading of `count` headers whose keys are under 64 bytes and
    values under 8 KiB; where they end, or _FAR for any other shape."""
    for _ in range(count):
        b = data[p]  # key length: never null
        if b & 0x81:
            return _FAR
        p += 1 + (b >> 1)
        data[p - (b >> 1) : p].decode()  # UnicodeDecodeError: the general reader says so
        b = data[p]  # value length
        if b < 0x80:
            p += 1 if b & 1 else 1 + (b >> 1)
        else:
            c = data[p + 1]
            if c >= 0x80:
                return _FAR
            p += 2 if b & 1 else 2 + ((c << 6) | ((b & 0x7F) >> 1))
    return p


def frame_records(data: bytes, count: int, *, need_keys: bool) -> None:
    """The records' lengths must frame `data` exactly and number `count`; with `need_keys`,
    each must have a key.  Raises InvalidBatch.  (What a compressed batch's payload gets.)"""
    pos, end, seen = 0, len(data), 0
    while pos < end:
        b = data[pos]
        if b < 0x80:
            length = (b >> 1) ^ -(b & 1)
            pos += 1
        elif pos + 1 < end and data[pos + 1] < 0x80:
            raw = (b & 0x7F) | (data[pos + 1] << 7)
            length = (raw >> 1) ^ -(raw & 1)
            pos += 2
        else:
            length, pos = _bounded_varint(data, pos, end)
        if length <= 0 or length > end - pos:
            raise InvalidBatch("corrupt", f"record {seen} has length {length}: the batch is corrupt")
        if need_keys:
            field = pos + 1  # attributes
            _, field = _bounded_varint(data, field, pos + length)  # timestamp delta
            _, field = _bounded_varint(data, field, pos + length)  # offset delta
            key_length, _ = _bounded_varint(data, field, pos + length)
            if key_length < 0:
                raise _keyless()
        pos += length
        seen += 1
    if seen != count:
        raise InvalidBatch("corrupt", f"the batch holds {seen} records, its header says {count}")


def _bounded_varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """A zigzag varint of at most 10 bytes that must end before `end`."""
    raw = shift = 0
    while True:
        if pos >= end:
            raise InvalidBatch("corrupt", "truncated varint in a record: the batch is corrupt")
        b = data[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise InvalidBatch("corrupt", "varint too long in a record: the batch is corrupt")
