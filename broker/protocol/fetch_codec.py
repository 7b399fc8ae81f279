"""Hand-rolled FetchResponse encoder (v4-v18), sans-io.

Measured: encoding a 6 MB Fetch response through kio's generic writer copied the record
bytes twice and took ~40% of the broker's CPU during consumption.  Here the fixed fields
are packed with struct and the record bytes are passed through as separate buffers, so
the only copy left is the socket write.  Record data too large to hold for a slow client
comes as a `Streamed` part: the connection reads it from its file as the socket drains.
`tests/unit/test_fetch_codec.py` checks every version against kio's own decoder.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field
from typing import Protocol

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_V4 = struct.Struct(">ihqq")  # index, error, high watermark, last stable offset
_I64 = struct.Struct(">q")
_ABORTED = struct.Struct(">qq")
_TOP_V7 = struct.Struct(">ihi")  # throttle, error, session id

Buffer = bytes | bytearray | memoryview


class Streamed(Protocol):
    """Bytes of a file, sent as the socket drains (`broker.log.region.SegmentRegion`)."""

    position: int
    length: int

    def __len__(self) -> int: ...

    def open(self) -> int:
        """A descriptor of the file, which the sender closes."""
        ...


Part = Buffer | Streamed


@dataclass(slots=True)
class FetchPartition:
    index: int
    error: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: Part | None
    aborted: list[tuple[int, int]] | None = None  # (producer id, first offset); None: not asked


@dataclass(slots=True)
class FetchTopic:
    name: str
    topic_id: uuid.UUID | None
    partitions: list[FetchPartition] = field(default_factory=list)


@dataclass(slots=True)
class RawResponse:
    """A response already encoded as buffers; `flexible` selects response header v1."""

    parts: list[Part]
    flexible: bool
    throttled: bool = False  # the body starts with throttle_time_ms (`with_throttle` sets it)
    throttle_last: bool = False  # the last part starts with it instead (Produce)

    def with_throttle(self, throttle_ms: int) -> RawResponse:
        """The response with its throttle_time_ms raised to `throttle_ms`."""
        if self.throttle_last:
            last = self.parts[-1]
            if not isinstance(last, bytes | bytearray | memoryview) or _I32.unpack_from(last, 0)[0] >= throttle_ms:
                return self
            return RawResponse(
                [*self.parts[:-1], _I32.pack(throttle_ms) + bytes(last[4:])], self.flexible, throttle_last=True
            )
        first = self.parts[0]
        if not self.throttled or not isinstance(first, bytes | bytearray | memoryview) or len(first) < 4:
            return self
        if _I32.unpack_from(first, 0)[0] >= throttle_ms:
            return self
        return RawResponse([_I32.pack(throttle_ms) + bytes(first[4:]), *self.parts[1:]], self.flexible, True)


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_fetch_response(
    version: int, topics: list[FetchTopic], error: int = 0, session_id: int = 0, throttle_ms: int = 0
) -> RawResponse:
    flexible = version >= 12
    parts: list[Part] = []
    head = bytearray()
    if version >= 7:
        head += _TOP_V7.pack(throttle_ms, error, session_id)
    else:
        head += _I32.pack(throttle_ms)
    head += _uvarint(len(topics) + 1) if flexible else _I32.pack(len(topics))
    for topic in topics:
        if version >= 13:
            head += (topic.topic_id or uuid.UUID(int=0)).bytes
        else:
            name = topic.name.encode()
            head += _uvarint(len(name) + 1) + name if flexible else _I16.pack(len(name)) + name
        head += _uvarint(len(topic.partitions) + 1) if flexible else _I32.pack(len(topic.partitions))
        for p in topic.partitions:
            head += _PARTITION_V4.pack(p.index, p.error, p.high_watermark, p.last_stable_offset)
            if version >= 5:
                head += _I64.pack(p.log_start_offset)
            if p.aborted is None:  # read_uncommitted: null, as Kafka
                head += b"\x00" if flexible else b"\xff\xff\xff\xff"
            else:
                head += _uvarint(len(p.aborted) + 1) if flexible else _I32.pack(len(p.aborted))
                for producer_id, first_offset in p.aborted:
                    head += _ABORTED.pack(producer_id, first_offset)
                    if flexible:
                        head += b"\x00"  # aborted transaction tagged fields
            if version >= 11:
                head += b"\xff\xff\xff\xff"  # preferred read replica: -1
            records = p.records
            if records is None:
                head += b"\x00" if flexible else b"\xff\xff\xff\xff"
            else:
                head += _uvarint(len(records) + 1) if flexible else _I32.pack(len(records))
                if len(records):
                    parts.append(bytes(head))
                    parts.append(records)
                    head = bytearray()
            if flexible:
                head += b"\x00"  # partition tagged fields
        if flexible:
            head += b"\x00"  # topic tagged fields
    if flexible:
        head += b"\x00"  # response tagged fields
    parts.append(bytes(head))
    return RawResponse(parts, flexible, throttled=True)  # every version served starts with it
