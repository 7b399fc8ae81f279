"""The compiled Avro decoder (analytics/_avrovm.c) against the generated Python one, input for input.

The compiled decoder must take exactly the records the Python one takes, into the same values,
and hand every other record to the strict Python decoder, so that the rows and the errors of a
batch are the same whichever fast decoder ran.  Valid records are mutated byte by byte (flipped,
cut, stretched) and both decode the same batches.
"""

from __future__ import annotations

import importlib
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from analytics import avro_program
from analytics.avro_columns import EventColumns
from schemas.catalog import default_catalog
from schemas.serde import AvroSchema, encode
from tests.support.examples import examples

CATALOG = default_catalog()
HEADER = b"\x00\x00\x00\x00\x2a"
_avrovm = importlib.import_module("analytics._avrovm")

# The fields writer and reader have alike: a decimal in a fixed, a timestamp, a boolean, an array.
_SHARED = [
    {
        "name": "money",
        "type": {"type": "fixed", "name": "M", "size": 9, "logicalType": "decimal", "precision": 20, "scale": 2},
    },
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "flag", "type": "boolean"},
    {"name": "scores", "type": {"type": "array", "items": "double"}},
]
_WRITER = AvroSchema.parse(
    {
        "type": "record",
        "name": "Event",
        "fields": [
            {"name": "gone", "type": {"type": "map", "values": {"type": "array", "items": ["null", "string"]}}},
            {
                "name": "gone_record",
                "type": {"type": "record", "name": "G", "fields": [{"name": "x", "type": "float"}]},
            },
            {"name": "count", "type": "int"},
            {"name": "ratio", "type": "float"},
            {"name": "name", "type": "bytes"},
            {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["a", "b", "new"]}},
            {"name": "maybe", "type": ["null", "long", "string"]},
            *_SHARED,
        ],
    }
)
_READER = AvroSchema.parse(
    {
        "type": "record",
        "name": "Event",
        "fields": [
            {"name": "count", "type": "double"},
            {"name": "ratio", "type": "double"},
            {"name": "name", "type": "string"},
            {
                "name": "kind",
                "type": {"type": "enum", "name": "Kind", "symbols": ["a", "b", "other"], "default": "other"},
            },
            {"name": "maybe", "type": ["null", "double", "string"]},
            *_SHARED,
            {"name": "added", "type": {"type": "map", "values": "long"}, "default": {"k": 1}},
        ],
    }
)
_EVOLVED = (
    _WRITER,
    _READER,
    {
        "gone": {"k": ["x", None], "": []},
        "gone_record": {"x": 1.5},
        "count": -7,
        "ratio": 0.25,
        "name": b"n\xc3\xa9",
        "kind": "new",
        "maybe": "s",
        "money": b"\x00" * 8 + b"\x05",
        "at": 1_700_000_000_000,
        "flag": True,
        "scores": [1.0, -2.5],
    },
)
# (writer, reader, a valid record): every catalog event, and a pair that resolves with skips,
# promotions, defaults and an enum default.
_CASES = [(CATALOG.schema(n), CATALOG.schema(n), CATALOG.example(n)) for n in CATALOG.events()] + [_EVOLVED]


class _Decoding:
    """One reader's columns, decoding batches of framed payloads with one fast decoder."""

    def __init__(self, reader: AvroSchema, *, compiled: bool) -> None:
        self.columns = EventColumns(reader, compiled=compiled)
        self.types = [f.type for f in to_arrow_schema(StructType(self.columns.fields), timezone="UTC")]

    def batch(self, writer: AvroSchema, payloads: list[bytes]) -> tuple[list[dict[str, Any]], list[tuple[int, str]]]:
        def fill() -> list[tuple[int, str]]:
            errors: list[tuple[int, str]] = []
            decode = self.columns.decoder(writer)
            assert decode([HEADER + p for p in payloads], len(HEADER), 0, errors) == len(payloads)
            return errors

        errors, arrays = self.columns.build(fill, self.types)
        names = self.columns.names
        # Timestamps as their int64 microseconds: a mutated long is a valid Avro timestamp far
        # outside what Python's datetime (which to_pylist would make) can hold.
        plain = [a.cast(_plain(a.type)) for a in arrays]
        return pa.RecordBatch.from_arrays(plain, names=names).to_pylist(), errors


def _plain(t: pa.DataType) -> pa.DataType:
    """`t` with every timestamp, however nested, made int64."""
    if pa.types.is_timestamp(t):
        return pa.int64()
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_plain(f.type)) for f in t])
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_plain(t.value_type)))
    if pa.types.is_map(t):
        return pa.map_(_plain(t.key_type), _plain(t.item_type))
    return t


def _batch(reader: AvroSchema, writer: AvroSchema, payloads: list[bytes], *, compiled: bool) -> tuple[Any, Any]:
    return _Decoding(reader, compiled=compiled).batch(writer, payloads)


def _same_both_ways(writer: AvroSchema, reader: AvroSchema, payloads: list[bytes]) -> list[tuple[int, str]]:
    """The rows and errors of `payloads` with either fast decoder: decoded one by one (a batch
    holding a string that is not UTF-8 is decoded again whole by the strict decoder, which
    would hide the fast one's work on its other records) and as one batch."""
    compiled, python = _Decoding(reader, compiled=True), _Decoding(reader, compiled=False)
    errors: list[tuple[int, str]] = []
    for row, payload in enumerate(payloads):
        alone = compiled.batch(writer, [payload])
        assert alone == python.batch(writer, [payload]), payload.hex()
        errors += [(row, message) for _, message in alone[1]]
    assert compiled.batch(writer, payloads) == python.batch(writer, payloads)
    return errors


def test_the_opcodes_of_the_interpreter_are_the_programs() -> None:
    assert _avrovm.OPCODES == avro_program.OPCODES


def test_the_columns_use_the_compiled_decoder_for_the_fast_path() -> None:
    writer, reader, _ = _EVOLVED
    assert isinstance(EventColumns(reader).decoder(writer), _avrovm.Decoder)


@pytest.mark.parametrize(("writer", "reader", "record"), _CASES, ids=[c[0].name for c in _CASES])
def test_valid_records_decode_to_the_same_rows(writer: AvroSchema, reader: AvroSchema, record: Any) -> None:
    assert _same_both_ways(writer, reader, [encode(writer, record)] * 3) == []


_MUTATION = st.tuples(st.sampled_from(["flip", "cut", "insert", "drop"]), st.integers(0, 10_000), st.integers(0, 255))


def _mutate(payload: bytes, mutation: tuple[str, int, int]) -> bytes:
    kind, at, byte = mutation
    at %= len(payload) + 1
    if kind == "cut":
        return payload[:at]
    if kind == "insert":
        return payload[:at] + bytes([byte]) + payload[at:]
    if at == len(payload):
        return payload + bytes([byte])
    if kind == "drop":
        return payload[:at] + payload[at + 1 :]
    return payload[:at] + bytes([payload[at] ^ (byte or 1)]) + payload[at + 1 :]


@settings(max_examples=examples(150), deadline=None)
@given(st.sampled_from(range(len(_CASES))), st.lists(st.lists(_MUTATION, max_size=3), min_size=1, max_size=6))
# A byte inserted into a timestamp: a valid long far beyond the year 9999, found by the fuzzer.
@example(case=1, mutations=[[("insert", 0, 0), ("drop", 0, 0), ("insert", 3565, 129)]])
def test_mutated_records_give_the_same_rows_and_errors(case: int, mutations: list[list[tuple[str, int, int]]]) -> None:
    writer, reader, record = _CASES[case]
    valid = encode(writer, record)
    payloads = [valid]
    for steps in mutations:
        payload = valid
        for step in steps:
            payload = _mutate(payload, step)
        payloads += [payload, valid]

    errors = _same_both_ways(writer, reader, payloads)

    assert not {row for row, _ in errors} & set(range(0, len(payloads), 2))  # its neighbours decode


@pytest.mark.slow  # thousands of payloads per schema, each decoded both ways: minutes of CPU in all
@pytest.mark.parametrize(("writer", "reader", "record"), _CASES, ids=[c[0].name for c in _CASES])
def test_every_byte_replaced_and_every_cut_gives_the_same_rows_and_errors(
    writer: AvroSchema, reader: AvroSchema, record: Any
) -> None:
    """A sweep: each byte of a valid record set to the values that sit on a boundary of some
    check (0, 1, 2, the varint's continuation bit, 0xff), and the record cut after each byte."""
    valid = encode(writer, record)
    payloads = [
        valid[:at] + bytes([b]) + valid[at + 1 :] for at in range(len(valid)) for b in (0, 1, 2, 0x7F, 0x80, 0xFF)
    ]
    payloads += [valid[:at] for at in range(len(valid))]

    errors = _same_both_ways(writer, reader, payloads)

    assert len(errors) > len(valid)  # most of them are not records


def test_blocks_with_byte_sizes_are_read_and_skipped() -> None:
    """Avro lets a writer give a block a negative count followed by its size in bytes (a reader
    may jump over it); fastavro never writes one, so these are made by hand."""
    longs = AvroSchema.parse(
        {"type": "record", "name": "R", "fields": [{"name": "xs", "type": {"type": "array", "items": "long"}}]}
    )
    dropped = AvroSchema.parse(
        {"type": "record", "name": "R", "fields": [{"name": "other", "type": "long", "default": 0}]}
    )
    sized = b"\x03\x04\x02\x04\x02\x06\x00"  # count -2, 2 bytes: 1, 2; then count 1: 3; end
    assert _batch(longs, longs, [sized], compiled=True) == ([{"xs": [1, 2, 3]}], [])
    assert _same_both_ways(longs, longs, [sized]) == []
    assert _batch(dropped, longs, [sized], compiled=True) == ([{"other": 0}], [])
    assert _same_both_ways(longs, dropped, [sized]) == []
    past_the_end = b"\x03\x7e\x02\x04\x00"  # a skipped block's size beyond the value
    assert [row for row, _ in _same_both_ways(longs, dropped, [past_the_end])] == [0]


@pytest.mark.parametrize(
    "program",
    [
        ((99,),),  # an unknown opcode
        ((avro_program.LONG, "not a list"),),
        ((avro_program.SKIP, -1),),
        ((avro_program.UNION, "not branches"),),
        [(avro_program.SKIP, 1)],  # a list, not a tuple
    ],
)
def test_a_malformed_program_is_refused_when_made(program: Any) -> None:
    with pytest.raises((ValueError, TypeError)):
        _avrovm.Decoder(program, lambda row: None, lambda *args: 0)
