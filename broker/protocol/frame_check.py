"""Structural check of a request body against its message schema, before kio decodes it.

kio's native reader trusts the counts and lengths a frame declares: a compact array whose
length is near 2**32 is allocated up front, and the allocation failure aborts the process,
which no `except` can catch.  Kafka's generated readers refuse such a frame ("Tried to
allocate a collection of size N, but there are only M bytes remaining"); so do we, for every
field, before the reader runs:

- a string, bytes or records length never exceeds the bytes left;
- an array count never exceeds the bytes left (divided by the smallest encoding of one
  element), so everything the reader allocates is bounded by the frame's size;
- null only where the schema allows it (Kafka: "non-nullable field X was serialized as null");
- the elements of all arrays (and tagged fields) of one request are capped, so a small frame
  cannot ask for millions of objects;
- tagged fields stay inside their declared size, known ones are checked by their own type.

The check walks the bytes without building anything; one pass per request, compiled once
per message type and version.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from functools import cache
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)


class FrameError(ValueError):
    """The body does not match its schema; the message says where and why."""


class Budget:
    """How many more array elements and tagged fields this request may declare."""

    __slots__ = ("left",)

    def __init__(self, elements: int) -> None:
        self.left = elements

    def take(self, n: int, what: str) -> None:
        self.left -= n
        if self.left < 0:
            raise FrameError(f"{what}: the request declares more array elements than the limit allows")


# check(buf, pos, end, budget) -> new pos
Check = Callable[[Any, int, int, Budget], int]

_FIXED = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "float64": 8,
    "uuid": 16,
}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_MAX_LENGTH = 0x7FFFFFFF


def read_uvarint(buf: Any, pos: int, end: int, what: str) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes (Kafka's limit for lengths and counts)."""
    result = shift = 0
    while True:
        if pos >= end:
            raise FrameError(f"{what}: truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            if result > 0xFFFFFFFF:
                raise FrameError(f"{what}: varint out of range")
            return result, pos
        shift += 7
        if shift >= 35:
            raise FrameError(f"{what}: varint longer than 5 bytes")


def _need(pos: int, n: int, end: int, what: str) -> int:
    if n > end - pos:
        raise FrameError(f"{what}: needs {n} bytes, {end - pos} left")
    return pos + n


def _length(buf: Any, pos: int, end: int, *, flexible: bool, wide: bool, what: str) -> tuple[int, int]:
    """Length of a string/bytes field (-1 for null)."""
    if flexible:
        raw, pos = read_uvarint(buf, pos, end, what)
        return raw - 1, pos
    size = 4 if wide else 2
    _need(pos, size, end, what)
    (n,) = (_I32 if wide else _I16).unpack_from(buf, pos)
    if n < -1:
        raise FrameError(f"{what}: negative length {n}")
    return n, pos + size


def _count(buf: Any, pos: int, end: int, flexible: bool, what: str) -> tuple[int, int]:
    """Count of an array (-1 for null)."""
    if flexible:
        raw, pos = read_uvarint(buf, pos, end, what)
        count = raw - 1
    else:
        _need(pos, 4, end, what)
        (count,) = _I32.unpack_from(buf, pos)
        pos += 4
        if count < -1:
            raise FrameError(f"{what}: negative array length {count}")
    if count > _MAX_LENGTH:
        raise FrameError(f"{what}: array length {count} out of range")
    return count, pos


def _fixed_check(size: int, what: str) -> Check:
    def check(buf: Any, pos: int, end: int, budget: Budget) -> int:
        if size > end - pos:
            raise FrameError(f"{what}: needs {size} bytes, {end - pos} left")
        return pos + size

    return check


def _bytes_check(flexible: bool, wide: bool, nullable: bool, what: str) -> Check:
    if flexible:
        return _compact_bytes_check(nullable, what)

    def check(buf: Any, pos: int, end: int, budget: Budget) -> int:
        n, pos = _length(buf, pos, end, flexible=flexible, wide=wide, what=what)
        if n < 0:
            if not nullable:
                raise FrameError(f"{what}: null in a non-nullable field")
            return pos
        return _need(pos, n, end, what)

    return check


def _compact_bytes_check(nullable: bool, what: str) -> Check:
    """`_bytes_check` of a flexible version, its length read inline when it takes one byte
    (under 127 bytes: most strings), sparing a commit's dozens of fields two calls each."""

    def check(buf: Any, pos: int, end: int, budget: Budget) -> int:
        if pos < end and buf[pos] < 0x80:
            n: int = buf[pos] - 1
            pos += 1
        else:
            raw, pos = read_uvarint(buf, pos, end, what)
            n = raw - 1
        if n < 0:
            if not nullable:
                raise FrameError(f"{what}: null in a non-nullable field")
            return pos
        if n > end - pos:
            raise FrameError(f"{what}: needs {n} bytes, {end - pos} left")
        return pos + n

    return check


def _min_size(cls: type) -> int:
    """Fewest bytes one encoded instance can take (for bounding array counts)."""
    flexible = bool(cls.__flexible__)  # type: ignore[attr-defined]
    total = 1 if flexible else 0  # the tag buffer's count
    for f in dataclasses.fields(cls):
        if get_field_tag(f) is not None:
            continue
        kind = classify_field(f)
        kafka_type = f.metadata.get("kafka_type", "")
        if isinstance(kind, EntityField):
            total += 1 if is_optional(f) else _min_size(kind.type_)
        elif isinstance(kind, EntityTupleField | PrimitiveTupleField) or kafka_type not in _FIXED:
            total += 1 if flexible else (4 if kafka_type in ("bytes", "records") or kind.is_array else 2)
        else:
            total += _FIXED[kafka_type]
    return total


def _array_check(
    elem: Check | None, elem_fixed: int, elem_min: int, *, flexible: bool, nullable: bool, what: str
) -> Check:
    """An array of entities (`elem`) or of fixed-size primitives (`elem_fixed` bytes each)."""
    per = max(elem_min, 1)

    def check(buf: Any, pos: int, end: int, budget: Budget) -> int:
        count, pos = _count(buf, pos, end, flexible, what)
        if count < 0:
            if not nullable:
                raise FrameError(f"{what}: null array in a non-nullable field")
            return pos
        if count * per > end - pos:
            raise FrameError(f"{what}: array of {count} elements in {end - pos} bytes")
        budget.take(count, what)
        if elem is None:
            return pos + count * elem_fixed
        for _ in range(count):
            pos = elem(buf, pos, end, budget)
        return pos

    return check


def _nullable_entity_check(cls: type, what: str) -> Check:
    """A nullable struct (KIP-893): an int8 marker, -1 for null, 1 before the struct."""
    inner = entity_check(cls)

    def check(buf: Any, pos: int, end: int, budget: Budget) -> int:
        if pos >= end:
            raise FrameError(f"{what}: needs 1 byte, 0 left")
        marker = buf[pos]
        if marker == 0xFF:
            return pos + 1
        if marker != 1:
            raise FrameError(f"{what}: nullable struct marker {marker}, not -1 or 1")
        return inner(buf, pos + 1, end, budget)

    return check


def _field_check(f: dataclasses.Field[Any], flexible: bool, owner: str) -> Check:
    kind = classify_field(f)
    kafka_type = f.metadata.get("kafka_type", "")
    nullable = is_optional(f)
    what = f"{owner}.{f.name}"
    if isinstance(kind, EntityField):
        return _nullable_entity_check(kind.type_, what) if nullable else entity_check(kind.type_)
    if isinstance(kind, EntityTupleField):
        return _array_check(
            entity_check(kind.type_), 0, _min_size(kind.type_), flexible=flexible, nullable=nullable, what=what
        )
    if isinstance(kind, PrimitiveTupleField):
        if kafka_type in _FIXED:
            size = _FIXED[kafka_type]
            return _array_check(None, size, size, flexible=flexible, nullable=nullable, what=what)
        elem = _bytes_check(flexible, kafka_type in ("bytes", "records"), False, what)
        return _array_check(elem, 0, 1 if flexible else 2, flexible=flexible, nullable=nullable, what=what)
    if kafka_type in _FIXED:
        return _fixed_check(_FIXED[kafka_type], what)
    if kafka_type in ("string", "bytes", "records"):
        return _bytes_check(flexible, kafka_type != "string", nullable, what)
    raise TypeError(f"{what}: no check for kafka type {kafka_type!r}")


@cache
def entity_check(cls: type) -> Check:
    """The compiled check of one message (or nested struct) type."""
    flexible = bool(cls.__flexible__)  # type: ignore[attr-defined]
    owner = cls.__name__
    steps: list[Check] = []
    tagged: dict[int, Check] = {}
    fixed_run = 0
    for f in dataclasses.fields(cls):
        tag = get_field_tag(f)
        if tag is not None:
            tagged[int(tag)] = _field_check(f, flexible, owner)
            continue
        kafka_type = f.metadata.get("kafka_type", "")
        if not classify_field(f).is_array and kafka_type in _FIXED:
            fixed_run += _FIXED[kafka_type]  # consecutive fixed-size fields: one bounds check
            continue
        if fixed_run:
            steps.append(_fixed_check(fixed_run, owner))
            fixed_run = 0
        steps.append(_field_check(f, flexible, owner))
    if fixed_run:
        steps.append(_fixed_check(fixed_run, owner))
    if flexible:
        steps.append(_tag_buffer_check(tagged, owner))
    if len(steps) == 1:
        return steps[0]
    if len(steps) == 2:  # most nested structs (partitions): two or three steps, called in a row
        first, second = steps
        return lambda buf, pos, end, budget: second(buf, first(buf, pos, end, budget), end, budget)
    if len(steps) == 3:
        first, second, third = steps
        return lambda buf, pos, end, budget: third(
            buf, second(buf, first(buf, pos, end, budget), end, budget), end, budget
        )

    def check(buf: Any, pos: int, end: int, budget: Budget) -> int:
        for step in steps:
            pos = step(buf, pos, end, budget)
        return pos

    return check


def _tag_buffer_check(known: dict[int, Check], owner: str) -> Check:
    what = f"{owner} tagged fields"

    def check(buf: Any, pos: int, end: int, budget: Budget) -> int:
        if pos < end and buf[pos] == 0:  # no tagged fields, as nearly always: no varint to read
            return pos + 1
        count, pos = read_uvarint(buf, pos, end, what)
        if count == 0:
            return pos
        if 2 * count > end - pos:
            raise FrameError(f"{what}: {count} tagged fields in {end - pos} bytes")
        budget.take(count, what)
        for _ in range(count):
            tag, pos = read_uvarint(buf, pos, end, what)
            size, pos = read_uvarint(buf, pos, end, what)
            field_end = _need(pos, size, end, what)
            inner = known.get(tag)
            if inner is not None and inner(buf, pos, field_end, budget) != field_end:
                raise FrameError(f"{what}: tag {tag} does not fill its {size} bytes")
            pos = field_end
        return pos

    return check


def check_body(cls: type, buf: Any, pos: int, max_elements: int) -> int:
    """Walk a request body of type `cls` at `pos`; returns where it ends.  Raises FrameError."""
    return entity_check(cls)(buf, pos, len(buf), Budget(max_elements))
