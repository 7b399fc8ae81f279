"""Produce-time validation of a batch's records, as Kafka's `LogValidator` does it: nothing
is stored that a consumer could not read back.

The header and CRC are checked by `batch.validate_batch`.  Here the payload:

- a compression codec Kafka does not define, or a payload that does not decompress, is
  `CORRUPT_MESSAGE`;
- a payload that decompresses to more than `message.max.decompressed.bytes` is
  `MESSAGE_TOO_LARGE` (a 16 KB zstd batch can claim 512 MiB);
- the records must frame the payload exactly, as many as the header counts
  (`CORRUPT_MESSAGE` otherwise);
- on a compacted topic every record needs a key (`INVALID_RECORD`, as Kafka).

Decompression writes into a bounded buffer (cramjam releases the GIL while it works).  The
caller decides where it runs: small payloads on the event loop, large ones in a worker
thread (`needs_worker`), so no single request holds the loop for long.
"""

from __future__ import annotations

import threading

import cramjam
from aiokafka.record.default_records import DefaultRecordBatch

from broker.protocol.batch import HEADER_SIZE, BatchHeader
from broker.protocol.errors import ErrorCode, KafkaError

INLINE_BYTES = 1 << 20  # decompressed bytes handled on the event loop
DEFAULT_LIMIT = 64 << 20  # message.max.decompressed.bytes
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16
_CODECS = {1: cramjam.gzip, 3: cramjam.lz4, 4: cramjam.zstd}
_OVERFLOW = "failed to write whole buffer"  # cramjam's message when the output is too small


class PayloadTooLarge(Exception):
    """The payload decompresses to more than the buffer it was given."""


class _Scratch(threading.local):
    """One reusable output buffer per thread and size."""

    def __init__(self) -> None:
        self.buffers: dict[int, bytearray] = {}

    def get(self, size: int) -> bytearray:
        buf = self.buffers.get(size)
        if buf is None:
            buf = self.buffers[size] = bytearray(size)
        return buf


_scratch = _Scratch()


def payload(header: BatchHeader, batch: memoryview, limit: int) -> memoryview:
    """The batch's records, decompressed into at most `limit` bytes.  The view is into a
    per-thread buffer: use it before the next call on the same thread.  Raises KafkaError,
    or PayloadTooLarge when more than `limit` bytes would come out."""
    body = batch[HEADER_SIZE:]
    codec = header.compression
    if codec == 0:
        return body
    out = _scratch.get(limit)
    try:
        if codec == 2:
            n = _snappy_into(body, out)
        elif codec in _CODECS:
            n = _CODECS[codec].decompress_into(body, out)
        else:
            raise KafkaError(ErrorCode.corrupt_message, f"unknown compression codec {codec}")
    except cramjam.DecompressionError as e:
        if _OVERFLOW in str(e):
            raise PayloadTooLarge from None
        raise KafkaError(ErrorCode.corrupt_message, f"the batch's payload does not decompress: {e}") from None
    return memoryview(out)[:n]


def _snappy_into(body: memoryview, out: bytearray) -> int:
    """Kafka's snappy: xerial-framed chunks of raw snappy (the Java client), or one raw
    block (librdkafka may send that); each raw block states its length up front."""
    chunks: list[memoryview] = []
    if bytes(body[:8]) == _XERIAL_MAGIC:
        pos = _XERIAL_HEADER
        while pos < len(body):
            if len(body) - pos < 4:
                raise cramjam.DecompressionError("truncated xerial chunk length")
            length = int.from_bytes(body[pos : pos + 4], "big", signed=True)
            pos += 4
            if length < 0 or pos + length > len(body):
                raise cramjam.DecompressionError("xerial chunk runs past the batch")
            chunks.append(body[pos : pos + length])
            pos += length
    else:
        chunks.append(body)
    total = 0
    for chunk in chunks:
        size = cramjam.snappy.decompress_raw_len(chunk)
        if total + size > len(out):
            raise cramjam.DecompressionError(_OVERFLOW)
        total += cramjam.snappy.decompress_raw_into(chunk, memoryview(out)[total:])
    return total


def walk_records(records: memoryview, count: int, *, need_keys: bool) -> None:
    """The records must frame `records` exactly and number `count`; with `need_keys`, each
    must have a key.  Raises KafkaError.

    This runs for every batch produced, once per record: the one- and two-byte record
    lengths (records under 8 KiB) are decoded inline, on a bytes copy (indexing bytes is
    several times cheaper than indexing a memoryview; the copy is a memcpy)."""
    data = bytes(records)
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
            length, pos = _varint(data, pos, end)
        if length <= 0 or length > end - pos:
            raise KafkaError(ErrorCode.corrupt_message, f"record {seen} has length {length}: the batch is corrupt")
        if need_keys:
            field = pos + 1  # attributes
            _, field = _varint(data, field, pos + length)  # timestamp delta
            _, field = _varint(data, field, pos + length)  # offset delta
            key_length, _ = _varint(data, field, pos + length)
            if key_length < 0:
                raise KafkaError(ErrorCode.invalid_record, "a compacted topic cannot accept a record without a key")
        pos += length
        seen += 1
    if seen != count:
        raise KafkaError(ErrorCode.corrupt_message, f"the batch holds {seen} records, its header says {count}")


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """A zigzag varint of at most 5 bytes (record lengths and deltas) or 10 (timestamps)."""
    raw = shift = 0
    while True:
        if pos >= end:
            raise KafkaError(ErrorCode.corrupt_message, "truncated varint in a record: the batch is corrupt")
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise KafkaError(ErrorCode.corrupt_message, "varint too long in a record: the batch is corrupt")


def check(header: BatchHeader, batch: memoryview, *, limit: int, need_keys: bool, inline: bool) -> None:
    """Validate the payload of one batch.  With `inline`, raises PayloadTooLarge when it
    would decompress to more than INLINE_BYTES (the caller then runs it in a worker, with
    `inline=False`); otherwise the limit is `limit` and MESSAGE_TOO_LARGE is raised."""
    size = INLINE_BYTES if inline and limit > INLINE_BYTES else limit
    try:
        records = payload(header, batch, size)
    except PayloadTooLarge:
        if size < limit:
            raise
        raise KafkaError(
            ErrorCode.message_too_large,
            f"the batch decompresses to more than message.max.decompressed.bytes={limit}",
        ) from None
    if header.compression == 0:
        _walk_native(batch, need_keys=need_keys)
    else:
        walk_records(records, header.records_count, need_keys=need_keys)


def _walk_native(batch: memoryview, *, need_keys: bool) -> None:
    """`walk_records` for an uncompressed batch, by aiokafka's compiled batch reader: every
    record's length and fields must add up, and the records must number as the header says
    and fill the batch exactly.  The Python walk costs about 0.3 us a record, which was most
    of the broker's CPU on the produce path; this is several times cheaper."""
    try:
        for record in DefaultRecordBatch(batch):
            if need_keys and record.key is None:
                raise KafkaError(ErrorCode.invalid_record, "a compacted topic cannot accept a record without a key")
    except KafkaError:
        raise
    except Exception as e:  # whatever the reader finds wrong, the batch is corrupt
        raise KafkaError(ErrorCode.corrupt_message, f"the batch's records are corrupt: {e}") from None
