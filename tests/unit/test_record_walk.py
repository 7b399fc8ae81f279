"""The produce-time record walk (`record_walk.check_records`): it accepts what a consumer can
read back and nothing else.  Its inline reading of the common record shape must agree with
the general reader on every input, and both with aiokafka's compiled batch reader (what the
validator used before), but for two cases where that reader is wrong: a record whose
attributes byte is 0x80 or more (it reads the byte as a varint; Kafka reads one byte, so
the broker refuses such records rather than store what readers disagree on), and a record
that runs past the end of the batch (it reads beyond its buffer)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from aiokafka.record.default_records import DefaultRecordBatch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.protocol import record_walk
from broker.protocol.batch import HEADER_SIZE, InvalidBatch
from broker.protocol.record_walk import _check_record, check_records, frame_records, python_check_records
from broker.protocol.records import Record, build_batch
from tests.support.examples import examples

SETTINGS = settings(
    max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)

# Sizes on both sides of the one- and two-byte varint boundaries (63/64 and 8191/8192 bytes).
sizes = st.sampled_from([0, 1, 5, 63, 64, 200, 8191, 8192])
maybe_bytes = st.none() | sizes.flatmap(lambda n: st.binary(min_size=n, max_size=n))
header_keys = st.sampled_from(["", "a", "trace-id", "é", "k" * 70])
headers = st.lists(st.tuples(header_keys, maybe_bytes), max_size=2).map(tuple)
offset_deltas = st.sampled_from([0, 1, 63, 64, 8191, 8192, 1 << 30])
timestamp_deltas = st.sampled_from([0, 1, 63, 64, 8191, 8192, 1 << 40])


@st.composite
def records(draw: st.DrawFn) -> list[Record]:
    count = draw(st.integers(min_value=1, max_value=7))
    base = 1_700_000_000_000
    offsets = sorted(draw(st.lists(offset_deltas, min_size=count, max_size=count, unique=True)))
    return [
        Record(offset, base + draw(timestamp_deltas), draw(maybe_bytes), draw(maybe_bytes), draw(headers))
        for offset in offsets
    ]


@st.composite
def damaged(draw: st.DrawFn) -> tuple[bytes, int]:
    """The records section of a valid batch with a few bytes changed, added or cut, and
    sometimes a record count that is off by one."""
    recs = [replace(r, offset=i) for i, r in enumerate(draw(records()))]
    body = bytearray(build_batch(recs)[HEADER_SIZE:])
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        at = draw(st.integers(min_value=0, max_value=len(body) - 1))
        op = draw(st.sampled_from(["set", "insert", "delete", "cut"]))
        byte = draw(st.integers(min_value=0, max_value=255))
        if op == "set":
            body[at] = byte
        elif op == "insert":
            body.insert(at, byte)
        elif op == "delete":
            del body[at]
        else:
            del body[at:]
        if not body:
            break
    count = len(recs) + draw(st.sampled_from([0, 0, 0, -1, 1]))
    return bytes(body), count


def outcome(data: bytes, count: int, need_keys: bool, walk: record_walk.Walk = check_records) -> tuple[str, str]:
    try:
        walk(data, count, need_keys=need_keys)
    except InvalidBatch as e:
        return e.kind, str(e)
    return "ok", ""


def general_reader(data: bytes, count: int, need_keys: bool) -> tuple[str, str]:
    """`check_records` without its inline reading: every record through `_check_record`."""
    pos = 0
    try:
        for index in range(count):
            pos = _check_record(data, pos, index, need_keys)
        if pos != len(data):
            raise InvalidBatch("corrupt", f"{len(data) - pos} bytes follow the batch's {count} records")
    except InvalidBatch as e:
        return e.kind, str(e)
    return "ok", ""


def aiokafka_reader(data: bytes, count: int, need_keys: bool) -> str:
    """What the validator concluded with aiokafka's reader."""
    batch = bytearray(build_batch([Record(0, 0, b"k", b"v")])[:HEADER_SIZE]) + data
    batch[57:61] = count.to_bytes(4, "big", signed=True)
    try:
        for record in DefaultRecordBatch(bytes(batch)):
            if need_keys and record.key is None:
                return "invalid"
    except Exception:
        return "corrupt"
    return "ok"


@SETTINGS
@given(recs=records())
def test_valid_records_pass_and_a_missing_key_is_invalid_only_where_keys_are_needed(recs: list[Record]) -> None:
    data = build_batch(recs)[HEADER_SIZE:]
    assert outcome(data, len(recs), need_keys=False) == ("ok", "")
    keyless = any(r.key is None for r in recs)
    assert outcome(data, len(recs), need_keys=True)[0] == ("invalid" if keyless else "ok")
    frame_records(data, len(recs), need_keys=False)


@pytest.mark.slow  # 300 damaged batches read three ways; the compiled walk's agreement stays in the fast tier
@SETTINGS
@given(case=damaged(), need_keys=st.booleans())
def test_the_inline_reading_agrees_with_the_general_reader(case: tuple[bytes, int], need_keys: bool) -> None:
    data, count = case
    assert outcome(data, count, need_keys, python_check_records) == general_reader(data, count, need_keys)


@pytest.mark.slow  # 300 damaged batches, each also read by aiokafka's pure-Python reader
@SETTINGS
@given(case=damaged(), need_keys=st.booleans())
def test_the_walk_agrees_with_aiokafkas_reader_but_where_that_reader_is_wrong(
    case: tuple[bytes, int], need_keys: bool
) -> None:
    data, count = case
    ours, message = outcome(data, count, need_keys)
    theirs = aiokafka_reader(data, count, need_keys)
    if ours != theirs:
        assert ours == "corrupt"
        assert "attributes" in message or "runs past the end" in message


def test_an_attributes_byte_of_0x80_or_more_is_corrupt() -> None:
    data = bytearray(build_batch([Record(0, 0, b"k", b"v")])[HEADER_SIZE:])
    data[1] = 0x80
    assert outcome(bytes(data), 1, need_keys=False)[0] == "corrupt"


# --- the compiled walk (_recordwalk.c) against the Python walk, input for input -----------
# (loadtest/fuzz_record_walk.py does the same, coverage-guided: tests/integration/test_fuzz_record_walk.py)


def accepts(name: str, data: bytes, count: int, need_keys: bool) -> tuple[bool, bool]:
    """What the compiled and the Python walk `name` say of the records: (compiled, python)."""
    try:
        getattr(record_walk, f"python_{name}")(data, count, need_keys=need_keys)
        python = True
    except InvalidBatch:
        python = False
    return getattr(record_walk._compiled, name)(data, count, need_keys), python


def test_the_compiled_walk_is_built_and_validation_uses_it() -> None:
    # `make setup` builds it; an install without a C compiler falls back to the Python walk.
    assert record_walk.COMPILED, "broker.protocol._recordwalk is not built: reinstall with a C compiler"


@SETTINGS
@given(recs=records(), need_keys=st.booleans())
def test_the_compiled_walk_accepts_what_the_python_walk_accepts(recs: list[Record], need_keys: bool) -> None:
    data = build_batch(recs)[HEADER_SIZE:]
    for name in ("check_records", "frame_records"):
        compiled, python = accepts(name, data, len(recs), need_keys)
        assert compiled == python, name


@SETTINGS
@given(case=damaged(), need_keys=st.booleans())
def test_the_compiled_walk_refuses_what_the_python_walk_refuses(case: tuple[bytes, int], need_keys: bool) -> None:
    data, count = case
    for name in ("check_records", "frame_records"):
        compiled, python = accepts(name, data, count, need_keys)
        assert compiled == python, name


@pytest.mark.parametrize(
    "tail",
    [
        # a key length of ten bytes, its value beyond 64 bits: negative (null) or positive (past the end)
        bytes([0xFF] * 9 + [0x7F]),
        bytes([0xFE] * 9 + [0x7F]),
        bytes([0x81] + [0x80] * 8 + [0x01]),  # ten bytes, the value within 64 bits
        bytes([0x80] * 10 + [0x00]),  # eleven bytes: too long
    ],
)
@pytest.mark.parametrize("need_keys", [False, True])
def test_the_walks_agree_on_varints_of_ten_bytes_and_more(tail: bytes, need_keys: bool) -> None:
    # attributes, timestamp delta, offset delta, then the long key length, a null value, no headers
    fields = bytes([0, 0, 0]) + tail + bytes([1, 0])
    record = bytes([len(fields) * 2]) + fields
    for name in ("check_records", "frame_records"):
        compiled, python = accepts(name, record, 1, need_keys)
        assert compiled == python, name


def test_the_compiled_walk_reads_any_buffer_in_place() -> None:
    data = build_batch([Record(0, 0, b"k", b"v")])[HEADER_SIZE:]
    for view in (data, bytearray(data), memoryview(b"xx" + data)[2:]):
        check_records(view, 1, need_keys=True)
        frame_records(view, 1, need_keys=True)
