"""The "consumer" embedded protocol: subscription and assignment blobs, sans-io.

The broker treats member metadata and assignments as opaque bytes, as Kafka does; it
decodes them only to report (describe, lag per member) and to refuse OffsetDelete for a
topic the group is subscribed to.  Anything that does not decode is reported as unknown.
"""

from __future__ import annotations

import struct

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def i16(self) -> int:
        (value,) = _I16.unpack_from(self.data, self.pos)
        self.pos += 2
        return int(value)

    def i32(self) -> int:
        (value,) = _I32.unpack_from(self.data, self.pos)
        self.pos += 4
        return int(value)

    def count(self) -> int:
        """An array's length: -1 (null) reads as empty; more entries than bytes left is refused."""
        n = self.i32()
        if n > len(self.data) - self.pos:
            raise ValueError("array count larger than the data")
        return max(n, 0)

    def bytes_(self) -> bytes | None:
        n = self.i32()
        if n < 0:
            return None
        if n > len(self.data) - self.pos:
            raise ValueError("bytes longer than the data")
        value = self.data[self.pos : self.pos + n]
        self.pos += n
        return value

    def string(self) -> str:
        length = self.i16()
        if length < 0:
            return ""
        value = self.data[self.pos : self.pos + length].decode()
        self.pos += length
        return value


def subscription_topics(metadata: bytes) -> set[str] | None:
    """Topics of a ConsumerProtocolSubscription (any version), or None."""
    found = decode_subscription(metadata)
    return None if found is None else set(found[0])


def decode_subscription(metadata: bytes) -> tuple[list[str], dict[str, list[int]]] | None:
    """A ConsumerProtocolSubscription's topics and (v1+) owned partitions, or None when it
    does not decode.  Counts are bounded by the bytes left, so a hostile count cannot make
    it allocate more than the blob's size."""
    try:
        reader = _Reader(metadata)
        version = reader.i16()
        topics = [reader.string() for _ in range(reader.count())]
        owned: dict[str, list[int]] = {}
        if version >= 1:
            reader.bytes_()  # user data
            for _ in range(reader.count()):
                topic = reader.string()
                owned.setdefault(topic, []).extend(reader.i32() for _ in range(reader.count()))
        return topics, owned
    except (struct.error, UnicodeDecodeError, ValueError):
        return None


def assignment_partitions(assignment: bytes) -> dict[str, list[int]] | None:
    """Partitions of a ConsumerProtocolAssignment (any version), or None."""
    if not assignment:
        return {}
    try:
        reader = _Reader(assignment)
        reader.i16()
        out: dict[str, list[int]] = {}
        for _ in range(max(reader.i32(), 0)):
            topic = reader.string()
            out[topic] = [reader.i32() for _ in range(max(reader.i32(), 0))]
        return out
    except (struct.error, UnicodeDecodeError):
        return None


def encode_assignment(partitions: dict[str, list[int]], version: int = 0) -> bytes:
    """A ConsumerProtocolAssignment (used by tools and tests)."""
    out = bytearray(_I16.pack(version) + _I32.pack(len(partitions)))
    for topic, parts in partitions.items():
        name = topic.encode()
        out += _I16.pack(len(name)) + name + _I32.pack(len(parts))
        for p in parts:
            out += _I32.pack(p)
    out += _I32.pack(-1)  # no user data
    return bytes(out)


def encode_subscription(topics: list[str], version: int = 0) -> bytes:
    """A ConsumerProtocolSubscription of `topics` (describing consumer-protocol members)."""
    out = bytearray(_I16.pack(version) + _I32.pack(len(topics)))
    for topic in topics:
        name = topic.encode()
        out += _I16.pack(len(name)) + name
    out += _I32.pack(-1)  # no user data
    return bytes(out)
