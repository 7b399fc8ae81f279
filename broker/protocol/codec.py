"""Kafka framing and the glue to `kio`'s generated message types, sans-io.

A request frame is: int32 size, then the request header (api key, api version,
correlation id, client id, and tagged fields for flexible versions), then the body.
Headers are parsed by hand (they are on every request); bodies by kio's native reader.
"""

from __future__ import annotations

import datetime
import io
import struct
import sys
from dataclasses import fields
from functools import cache
from types import ModuleType
from typing import NamedTuple, TypeVar

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.serial.readers import Reader
from kio.serial.writers import Writer
from kio.static.protocol import Entity

from broker.protocol.errors import ErrorCode
from broker.protocol.fetch_codec import Part, RawResponse
from broker.protocol.frame_check import FrameError, check_body

_HEAD = struct.Struct(">hhi")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_EPOCH = datetime.datetime.fromtimestamp(0, datetime.UTC)
DEFAULT_MAX_ELEMENTS = 100_000


class MalformedRequest(Exception):
    """The frame cannot be parsed: Kafka closes the connection; so do we."""


E = TypeVar("E", bound=Entity)


class RequestHeader(NamedTuple):
    """A request's header as parsed (a tuple: made for every request, and cheap to make)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    size: int  # bytes of the header within the frame
    client_host: str = ""  # the peer's address


def peek_header(frame: bytes | memoryview) -> tuple[int, int, int]:
    if len(frame) < _HEAD.size:
        raise MalformedRequest(f"frame of {len(frame)} bytes has no request header")
    api_key, api_version, correlation_id = _HEAD.unpack_from(frame, 0)
    return api_key, api_version, correlation_id


def _read_uvarint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise MalformedRequest("truncated varint in request header")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 35:
            raise MalformedRequest("varint too long in request header")


def parse_header(frame: bytes | memoryview, flexible: bool, client_host: str = "") -> RequestHeader:
    api_key, api_version, correlation_id = peek_header(frame)
    pos = 8
    if len(frame) < pos + 2:
        raise MalformedRequest("truncated client id")
    (length,) = _I16.unpack_from(frame, pos)
    pos += 2
    client_id = None
    if length >= 0:
        if len(frame) < pos + length:
            raise MalformedRequest("truncated client id")
        client_id = bytes(frame[pos : pos + length]).decode("utf-8", "replace")
        pos += length
    if flexible:
        count, pos = _read_uvarint(frame, pos)
        for _ in range(count):
            _, pos = _read_uvarint(frame, pos)
            size, pos = _read_uvarint(frame, pos)
            pos += size
        if pos > len(frame):
            raise MalformedRequest("truncated tagged fields in request header")
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos, client_host)


@cache
def request_type(api_key: int, version: int) -> type[Entity]:
    return load_request_schema(api_key, version)


@cache
def response_type(api_key: int, version: int) -> type[Entity]:
    return load_response_schema(api_key, version)


@cache
def _reader(cls: type[Entity]) -> Reader[Entity]:
    return entity_reader(cls)


@cache
def _writer(cls: type[Entity]) -> Writer[Entity]:
    return entity_writer(cls)


def decode_request(
    frame: bytes | memoryview,
    client_host: str = "",
    max_elements: int = DEFAULT_MAX_ELEMENTS,
) -> tuple[RequestHeader, Entity]:
    """Parse header and body of a request whose api key and version are supported.

    The body is checked against its schema first (`frame_check`): kio's reader is only ever
    given a frame whose declared counts and lengths fit in the bytes present."""
    api_key, api_version, _ = peek_header(frame)
    cls = request_type(api_key, api_version)
    header = parse_header(frame, cls.__flexible__, client_host)
    try:
        check_body(cls, frame, header.size, max_elements)
    except FrameError as e:
        raise MalformedRequest(f"{cls.__name__} v{api_version}: {e}") from None
    try:
        body, size = _reader(cls)(frame, header.size)
    except Exception as e:  # kio raises a variety of errors on bad input
        raise MalformedRequest(f"cannot parse {cls.__name__} v{api_version}: {e}") from e
    # Trailing bytes after a complete body are ignored, as Kafka does: librdkafka's
    # all-topics Metadata v12 request carries 3 bytes of padding after its null array.
    if header.size + size > len(frame):
        raise MalformedRequest(
            f"{cls.__name__} v{api_version}: body overruns the frame by {header.size + size - len(frame)} bytes"
        )
    return header, body


def encode_response(correlation_id: int, response: Entity, *, header_v0: bool = False) -> bytes:
    """Size-prefixed response frame.  ApiVersions always uses response header v0."""
    buf = io.BytesIO()
    buf.write(b"\x00\x00\x00\x00")
    buf.write(_I32.pack(correlation_id))
    if type(response).__flexible__ and not header_v0:
        buf.write(b"\x00")  # no tagged fields
    _writer(type(response))(buf, response)
    out = buf.getbuffer()
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def encode_body(entity: Entity) -> bytes:
    """An entity's encoding alone (no size or header): a part of a `RawResponse`."""
    buf = io.BytesIO()
    _writer(type(entity))(buf, entity)
    return buf.getvalue()


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# For encoders written by hand: in flexible versions lengths are compact (n + 1 as an unsigned
# varint, 0 meaning null); before, int32 for arrays and int16 for strings (-1: null).
_NULL_STRING = {False: _I16.pack(-1), True: b"\x00"}


def encode_count(n: int, flexible: bool) -> bytes:
    """An array's length."""
    return uvarint(n + 1) if flexible else _I32.pack(n)


def encode_string(value: str | None, flexible: bool) -> bytes:
    """A string, or null."""
    if value is None:
        return _NULL_STRING[flexible]
    encoded = value.encode()
    return (uvarint(len(encoded) + 1) if flexible else _I16.pack(len(encoded))) + encoded


def frame_raw_response(correlation_id: int, response: RawResponse) -> list[Part]:
    """Size prefix and response header for an already-encoded body."""
    size = sum(len(p) for p in response.parts) + 4 + (1 if response.flexible else 0)
    head = _I32.pack(size) + _I32.pack(correlation_id) + (b"\x00" if response.flexible else b"")
    return [head, *response.parts]


# --- building version-specific responses ------------------------------------------------


_FIELD_INFO: dict[type, dict[str, str]] = {}


def _field_info(cls: type) -> dict[str, str]:
    info = _FIELD_INFO.get(cls)
    if info is None:
        info = _FIELD_INFO[cls] = {f.name: f.metadata.get("kafka_type", "") for f in fields(cls)}
    return info


def ms_to_datetime(ms: int) -> datetime.datetime:
    return _EPOCH + datetime.timedelta(milliseconds=ms)


def timedelta_ms(value: datetime.timedelta | int) -> int:
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    return int(value)


def build(cls: type[E], **values: object) -> E:
    """Construct a kio entity from plain values, dropping fields this version lacks and
    converting ints to the timedelta / datetime / ErrorCode the field expects."""
    info = _field_info(cls)
    kwargs: dict[str, object] = {}
    for name, raw in values.items():
        kafka_type = info.get(name)
        if kafka_type is None:
            continue
        value = raw
        if isinstance(raw, int) and not isinstance(raw, bool):
            if kafka_type.startswith("timedelta"):
                value = datetime.timedelta(milliseconds=raw)
            elif kafka_type == "datetime_i64":
                value = None if raw < 0 else ms_to_datetime(raw)
            elif kafka_type == "error_code" and not isinstance(raw, ErrorCode):
                value = ErrorCode(raw)
        kwargs[name] = value
    return cls(**kwargs)


def nested(cls: type[Entity], name: str) -> type[Entity]:
    """A nested entity type of the same message and version as `cls` (found by name: each
    version's module has its own classes)."""
    found = nested_or_none(cls, name)
    assert found is not None, f"{cls.__module__} has no {name}"
    return found


def nested_or_none(cls: type[Entity], name: str) -> type[Entity] | None:
    """Like `nested`, for types that only some versions have."""
    module: ModuleType = sys.modules[cls.__module__]
    found: object = getattr(module, name, None)
    return found if isinstance(found, type) else None
