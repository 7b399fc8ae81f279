"""The structural check that runs before kio's native reader: it accepts exactly what the
schemas allow, ends where the reader ends, and refuses every declared count or length that
does not fit in the bytes present (which would otherwise make the reader allocate it)."""

from __future__ import annotations

import contextlib
import io
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records

from broker.handlers import APIS
from broker.protocol.codec import MalformedRequest, decode_request, request_type
from broker.protocol.frame_check import FrameError, check_body
from tests.support.examples import examples

st.register_type_strategy(Records, st.binary(max_size=64).map(Records))
# Every advertised version is checked by `make test`; the fast tier checks each API's newest
# (drawing kio's entities costs about a CPU-second per version: some 240 of them in all).
ADVERTISED = [
    pytest.param(api.key, v, marks=() if v == api.max_version else pytest.mark.slow)
    for api in APIS
    for v in range(api.min_version, api.max_version + 1)
]


def _encode(entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def _frame(api_key: int, version: int, body: bytes) -> bytes:
    """Header v1 or v2 (flexible: one more byte of tagged fields) and the body."""
    head = struct.pack(">hhih", api_key, version, 7, 4) + b"test"
    if request_type(api_key, version).__flexible__:
        head += b"\x00"
    return head + body


def _valid_body_passes_and_ends_where_kio_ends(cls: type[Any], entity: Any) -> bytes:
    body = _encode(entity)
    assert check_body(cls, body, 0, 1 << 30) == len(body)
    try:
        decoded, size = entity_reader(cls)(body, 0)
    except ValueError as e:  # kio cannot hold every int64 in a timedelta: refused, not decoded
        error: ValueError | None = e
    else:
        error = None
        assert size == len(body)
        assert decoded == entity
    if error is not None:
        assert "overflow" in str(error)
    return body


@pytest.mark.parametrize(("api_key", "version"), ADVERTISED)
@settings(max_examples=examples(15), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_valid_request_passes_whole_and_its_mutations_never_overrun(
    api_key: int, version: int, data: st.DataObject
) -> None:
    """A request as kio writes it passes the check, which ends where kio's reader ends. Then
    flip, replace, cut or extend its bytes: decode_request either refuses the result with
    MalformedRequest or returns a body; it never raises anything else (and never aborts).
    One drawn request serves both: drawing kio's entities is nearly all of the test's time."""
    cls = request_type(api_key, version)
    body = bytearray(_valid_body_passes_and_ends_where_kio_ends(cls, data.draw(st.from_type(cls))))
    for _ in range(data.draw(st.integers(1, 4))):
        action = data.draw(st.sampled_from(["set", "cut", "extend", "huge"]))
        at = data.draw(st.integers(0, max(len(body) - 1, 0)))
        if action == "set" and body:
            body[at] = data.draw(st.integers(0, 255))
        elif action == "cut":
            del body[at:]
        elif action == "extend":
            body += data.draw(st.binary(max_size=8))
        else:  # a length or count claiming far more than is there
            body[at:at] = data.draw(st.sampled_from([b"\xff\xff\xff\xff\x0f", b"\x7f\xff\xff\xff", b"\xff\xfe"]))
    with contextlib.suppress(MalformedRequest):
        decode_request(memoryview(_frame(api_key, version, bytes(body))).toreadonly())


def test_the_twenty_byte_metadata_frame_that_aborted_the_reader_is_refused() -> None:
    frame = bytes.fromhex("000000100003000900000001ffff00ffffffff0f")[4:]
    with pytest.raises(MalformedRequest, match="array length"):
        decode_request(frame)


def test_null_in_a_non_nullable_array_is_refused_as_kafka_does() -> None:
    """Produce v3's topic_data is not nullable: kio would hand the handler None."""
    cls = request_type(0, 3)
    body = struct.pack(">hhi", -1, 1, 1000) + struct.pack(">i", -1)
    with pytest.raises(FrameError, match="null array in a non-nullable field"):
        check_body(cls, body, 0, 1000)


def test_null_where_the_schema_allows_it_passes() -> None:
    """Metadata v9's topics may be null (all topics)."""
    cls = request_type(3, 9)
    body = b"\x00\x01\x00\x00\x00"  # topics null, auto-create, two flags, no tagged fields
    assert check_body(cls, body, 0, 1000) == len(body)


def test_a_request_declaring_more_elements_than_the_cap_is_refused() -> None:
    cls = request_type(3, 9)
    names = b"".join(b"\x02a\x00" for _ in range(50))
    body = b"\x33" + names + b"\x01\x00\x00\x00"  # 50 topics
    assert check_body(cls, body, 0, 50) == len(body)
    with pytest.raises(FrameError, match="more array elements than the limit"):
        check_body(cls, body, 0, 49)


def test_a_primitive_array_count_is_bounded_by_the_bytes_left() -> None:
    """OffsetFetch v1 partition indexes: int32 array claiming 1,000 entries in 8 bytes."""
    cls = request_type(9, 1)
    body = struct.pack(">h", 1) + b"g" + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
    body += struct.pack(">i", 1000) + b"\x00" * 8
    with pytest.raises(FrameError, match="array of 1000 elements in 8 bytes"):
        check_body(cls, body, 0, 1 << 20)


def test_a_tagged_field_running_past_the_frame_is_refused() -> None:
    cls = request_type(3, 9)
    body = b"\x01\x01\x00\x00" + b"\x01" + b"\x05" + b"\x7f" + b"ab"  # one tag of 127 bytes, 2 there
    with pytest.raises(FrameError, match="tagged fields"):
        check_body(cls, body, 0, 1000)
