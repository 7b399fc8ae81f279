"""Produce-time validation of a batch's records, as Kafka's `LogValidator` does it: nothing
is stored that a consumer could not read back.

The header and CRC are checked by `batch.validate_batch`.  Here the payload:

- a compression codec Kafka does not define, or a payload that does not decompress, is
  `CORRUPT_MESSAGE`;
- a payload that decompresses to more than `message.max.decompressed.bytes` is
  `MESSAGE_TOO_LARGE` (a 16 KB zstd batch can claim 512 MiB);
- the records must frame the payload exactly, as many as the header counts
  (`CORRUPT_MESSAGE` otherwise); an uncompressed batch's records are also read field by
  field (`record_walk.check_records`): each record's fields must add up to its length and its
  header keys must be UTF-8;
- on a compacted topic every record needs a key (`INVALID_RECORD`, as Kafka).

Decompression writes into a bounded buffer (cramjam releases the GIL while it works).  The
caller decides where it runs: small payloads on the event loop, large ones in a worker
thread (`needs_worker`), so no single request holds the loop for long.
"""

from __future__ import annotations

import threading

import cramjam

from broker.protocol.batch import HEADER_SIZE, BatchHeader, InvalidBatch
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.record_walk import check_records, frame_records

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
    # Each path keeps the checks it had: an uncompressed batch's records read field by field,
    # a compressed payload's framed.
    try:
        if header.compression == 0:
            check_records(records, header.records_count, need_keys=need_keys)
        else:
            frame_records(records, header.records_count, need_keys=need_keys)
    except InvalidBatch as e:
        code = ErrorCode.invalid_record if e.kind == "invalid" else ErrorCode.corrupt_message
        raise KafkaError(code, str(e)) from None
