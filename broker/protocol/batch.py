"""Record batch (magic v2) header handling, sans-io.

The broker stores and serves batches as the client's bytes.  Everything it needs to know
about a batch is in the fixed 61-byte header, so the hot path never looks at records:

    offset  size  field
    0       8     base_offset            (patched by the broker, not covered by the CRC)
    8       4     batch_length           (bytes after this field)
    12      4     partition_leader_epoch (patched by the broker, not covered by the CRC)
    16      1     magic                  (must be 2)
    17      4     crc                    (CRC32C of bytes 21..end)
    21      2     attributes
    23      4     last_offset_delta
    27      8     base_timestamp
    35      8     max_timestamp
    43      8     producer_id
    51      2     producer_epoch
    53      4     base_sequence
    57      4     records_count
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import crc32c

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # base_offset + batch_length: the part of a batch not counted in batch_length
MAGIC_V2 = 2
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08  # set: LogAppendTime
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20


_HEADER = struct.Struct(">qiiBIhiqqqhii")
_PREFIX = struct.Struct(">qi")
_OFFSET_AND_LENGTH = _PREFIX
_LAST_OFFSET_DELTA = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")


class InvalidBatch(ValueError):
    """A batch that must not be stored: the caller maps `kind` to a Kafka error code."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind  # "corrupt" | "magic" | "invalid"


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Total size in bytes, including the offset and length prefix."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & ATTR_TIMESTAMP_TYPE)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        # Sequences wrap at int32 max, as in Kafka.
        return (self.base_sequence + self.last_offset_delta) % 0x80000000


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the 61-byte header at `pos`; the caller guarantees enough bytes."""
    return BatchHeader(*_HEADER.unpack_from(buf, pos))


def peek_offset_and_length(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Base offset and total size of the batch at `pos` (needs 12 bytes)."""
    base_offset, length = _OFFSET_AND_LENGTH.unpack_from(buf, pos)
    return base_offset, length + LOG_OVERHEAD


def compute_crc(batch: bytes | bytearray | memoryview) -> int:
    return int(crc32c.crc32c(memoryview(batch)[21:]))


def validate_batch(batch: bytes | bytearray | memoryview) -> BatchHeader:
    """Check one complete batch: size, magic and CRC.  Raises InvalidBatch."""
    if len(batch) < HEADER_SIZE:
        raise InvalidBatch("corrupt", f"batch of {len(batch)} bytes is shorter than a header")
    header = parse_header(batch)
    if header.magic != MAGIC_V2:
        raise InvalidBatch("magic", f"unsupported record batch magic {header.magic}")
    if header.size != len(batch):
        raise InvalidBatch("corrupt", f"batch length {header.batch_length} does not match {len(batch)} bytes")
    crc = compute_crc(batch)
    if crc != header.crc:
        raise InvalidBatch("corrupt", f"CRC mismatch: stored {header.crc:#x}, computed {crc:#x}")
    if header.records_count < 0 or header.last_offset_delta < 0:
        raise InvalidBatch("invalid", "negative record count or last offset delta")
    return header


def split_batches(data: bytes | memoryview) -> list[memoryview]:
    """Split a produce request's records field into batches.

    Raises InvalidBatch if the bytes do not divide into whole batches: a partial trailing
    batch is accepted in fetch responses but never in a produce request.
    """
    view = memoryview(data)
    out: list[memoryview] = []
    pos, end = 0, len(view)
    while pos < end:
        if end - pos < HEADER_SIZE:
            raise InvalidBatch("corrupt", "truncated record batch in request")
        _, size = peek_offset_and_length(view, pos)
        if size < HEADER_SIZE or pos + size > end:
            raise InvalidBatch("corrupt", f"record batch length {size} exceeds the request")
        out.append(view[pos : pos + size])
        pos += size
    return out


def iter_headers(buf: bytes | bytearray | memoryview, start: int = 0) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) for every complete batch header in `buf` from `start`.

    Stops at the first incomplete batch; the caller decides whether that is a torn tail.
    """
    pos, end = start, len(buf)
    while end - pos >= HEADER_SIZE:
        header = parse_header(buf, pos)
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + header.size > end:
            return
        yield pos, header
        pos += header.size


def whole_batches_prefix(buf: bytes | bytearray | memoryview) -> int:
    """Length of the longest prefix of `buf` that consists of whole batches."""
    pos, end = 0, len(buf)
    while end - pos >= LOG_OVERHEAD:
        _, size = peek_offset_and_length(buf, pos)
        if size < HEADER_SIZE or pos + size > end:
            break
        pos += size
    return pos


def stamp_header(
    batch: memoryview | bytes,
    base_offset: int,
    leader_epoch: int,
    log_append_time_ms: int | None,
) -> tuple[bytes, memoryview]:
    """The broker-assigned fields of a batch, without copying its records: returns the
    patched 61-byte header and a view of the untouched rest, for a vectored write.

    Base offset and leader epoch are outside the CRC.  For LogAppendTime topics Kafka sets
    the timestamp-type bit and max_timestamp, which are inside it, so the CRC is redone."""
    view = memoryview(batch)
    header = bytearray(view[:HEADER_SIZE])
    body = view[HEADER_SIZE:]
    _I64.pack_into(header, 0, base_offset)
    _I32.pack_into(header, 12, leader_epoch)
    if log_append_time_ms is not None:
        attributes = _I16.unpack_from(header, 21)[0] | ATTR_TIMESTAMP_TYPE
        _I16.pack_into(header, 21, attributes)
        _I64.pack_into(header, 35, log_append_time_ms)
        crc = crc32c.crc32c(memoryview(header)[21:])
        _U32.pack_into(header, 17, crc32c.crc32c(body, crc))
    return bytes(header), body
