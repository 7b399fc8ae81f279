"""Avro -> Spark/Arrow columns: the type mapping, and the generated decoders checked against
fastavro (the reference implementation) on the catalog, on random data and under evolution."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

import pyarrow as pa
import pytest
from fastavro import schemaless_reader, schemaless_writer
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from analytics.avro_column_plan import SchemaResolutionError, UnsupportedSchemaError, spark_type
from analytics.avro_columns import COMPILED, EventColumns
from schemas.catalog import default_catalog
from schemas.serde import AvroSchema, encode
from tests.support.examples import examples

CATALOG = default_catalog()
HEADER = b"\x00\x00\x00\x00\x2a"


@pytest.fixture(autouse=True, params=["compiled", "python"])
def engine(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test runs with each fast decoder: the compiled interpreter and generated Python."""
    global _COMPILED  # noqa: PLW0603 - read by `decode`, which the tests call
    _COMPILED = request.param == "compiled"
    yield
    _COMPILED = True


_COMPILED = True


def test_the_compiled_decoder_is_built() -> None:
    assert COMPILED  # `make setup` builds analytics/_avrovm.c: the tests run it


def decode(
    reader: AvroSchema, writer: AvroSchema, payloads: list[bytes]
) -> tuple[list[dict[str, Any]], list[tuple[int, str]]]:
    """Decode framed payloads the way the source does: rows as Python values, and the errors."""
    columns = EventColumns(reader, compiled=_COMPILED)
    schema = to_arrow_schema(StructType(columns.fields), timezone="UTC")

    def fill() -> list[tuple[int, str]]:
        errors: list[tuple[int, str]] = []
        count = columns.decoder(writer)([HEADER + p for p in payloads], len(HEADER), 0, errors)
        assert count == len(payloads)
        return errors

    errors, arrays = columns.build(fill, [f.type for f in schema])
    return pa.RecordBatch.from_arrays(arrays, schema=schema).to_pylist(), errors


def normal(value: Any) -> Any:
    """fastavro's and Arrow's Python values in one shape: uuids as strings, maps as dicts,
    spark-avro union structs as the member that is set."""
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, dict):
        if not value:  # an empty map (records always have fields): Arrow's is an empty list
            return []
        if all(k.startswith("member") for k in value):
            chosen = [v for v in value.values() if v is not None]
            return normal(chosen[0]) if chosen else None
        return {k: normal(v) for k, v in value.items()}
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return {k: normal(v) for k, v in value}
        return [normal(v) for v in value]
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    return value


def fastavro_decode(writer: AvroSchema, reader: AvroSchema, payload: bytes) -> Any:
    return schemaless_reader(io.BytesIO(payload), writer.parsed, reader.parsed)


# -- the type mapping ---------------------------------------------------------------------------

_MAPPING = [
    ("boolean", "boolean", "bool"),
    ("int", "int", "int32"),
    ("long", "bigint", "int64"),
    ("float", "float", "float"),
    ("double", "double", "double"),
    ("bytes", "binary", "binary"),
    ("string", "string", "string"),
    ({"type": "string", "logicalType": "uuid"}, "string", "string"),
    ({"type": "long", "logicalType": "timestamp-millis"}, "timestamp", "timestamp[us, tz=UTC]"),
    ({"type": "long", "logicalType": "timestamp-micros"}, "timestamp", "timestamp[us, tz=UTC]"),
    ({"type": "long", "logicalType": "local-timestamp-millis"}, "timestamp_ntz", "timestamp[us]"),
    ({"type": "int", "logicalType": "date"}, "date", "date32[day]"),
    ({"type": "bytes", "logicalType": "decimal", "precision": 18, "scale": 4}, "decimal(18,4)", "decimal128(18, 4)"),
    ({"type": "fixed", "name": "F", "size": 3}, "binary", "binary"),
    ({"type": "enum", "name": "E", "symbols": ["a", "b"]}, "string", "string"),
    (["null", "string"], "string", "string"),
    (
        ["null", {"type": "record", "name": "R", "fields": [{"name": "x", "type": "bytes"}]}],
        "struct<x:binary>",
        "struct<x: binary>",
    ),
    (["int", "long"], "bigint", "int64"),
    (["null", "float", "double"], "double", "double"),
    (
        ["null", "boolean", "long", "double", "string"],
        "struct<member0:boolean,member1:bigint,member2:double,member3:string>",
        "struct<member0: bool, member1: int64, member2: double, member3: string>",
    ),
    (
        {"type": "array", "items": {"type": "enum", "name": "C", "symbols": ["s"]}},
        "array<string>",
        "list<element: string>",
    ),
    (
        {"type": "array", "items": {"type": "record", "name": "L", "fields": [{"name": "q", "type": "int"}]}},
        "array<struct<q:int>>",
        "list<element: struct<q: int32>>",
    ),
    ({"type": "map", "values": ["null", "long"]}, "map<string,bigint>", "map<string, int64>"),
]


@pytest.mark.parametrize(("avro", "spark", "arrow"), _MAPPING, ids=[json.dumps(m[0]) for m in _MAPPING])
def test_each_avro_type_maps_to_the_spark_type_and_arrow_type_spark_expects(avro: Any, spark: str, arrow: str) -> None:
    record = AvroSchema.parse({"type": "record", "name": "T", "fields": [{"name": "f", "type": avro}]})

    assert spark_type(record).simpleString() == f"struct<f:{spark}>"
    assert str(to_arrow_schema(StructType(EventColumns(record).fields), timezone="UTC").field("f").type) == arrow


def test_the_mapping_covers_every_avro_type_the_catalog_uses() -> None:
    used: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, list):
            used.add("union")
            for b in node:
                walk(b)
        elif isinstance(node, dict):
            used.add(node.get("logicalType") or node["type"] if isinstance(node["type"], str) else "nested")
            for f in node.get("fields", ()):
                walk(f["type"])
            for key in ("items", "values"):
                if key in node:
                    walk(node[key])
            if isinstance(node["type"], (dict, list)):
                walk(node["type"])
        elif node in ("null", "boolean", "int", "long", "float", "double", "bytes", "string"):
            used.add(node)

    for name in CATALOG.schemas:
        walk(json.loads(CATALOG.schema(name).text))
    covered = {"union", "record", "array", "map", "null"}
    for avro, _, _ in _MAPPING:
        if isinstance(avro, str):
            covered.add(avro)
        elif isinstance(avro, dict):
            covered.add(avro.get("logicalType") or avro["type"])
    assert used <= covered, used - covered


def test_recursive_and_non_record_readers_are_refused() -> None:
    linked = {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]}
    with pytest.raises(UnsupportedSchemaError, match="recursive"):
        EventColumns(AvroSchema.parse(linked))
    with pytest.raises(UnsupportedSchemaError, match="record"):
        EventColumns(AvroSchema.parse('"string"'))


# -- decoding, against fastavro -----------------------------------------------------------------


@pytest.mark.parametrize("name", CATALOG.events())
def test_every_catalog_example_decodes_as_fastavro_decodes_it(name: str) -> None:
    schema = CATALOG.schema(name)
    payload = encode(schema, CATALOG.example(name))

    rows, errors = decode(schema, schema, [payload, payload])

    assert errors == []
    assert normal(rows[1]) == normal(fastavro_decode(schema, schema, payload))


_ALL_TYPES = AvroSchema.parse(
    {
        "type": "record",
        "name": "All",
        "namespace": "t",
        "fields": [
            {"name": "b", "type": "boolean"},
            {"name": "i", "type": "int"},
            {"name": "l", "type": "long"},
            {"name": "f", "type": "float"},
            {"name": "d", "type": "double"},
            {"name": "raw", "type": "bytes"},
            {"name": "s", "type": "string"},
            {"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "money", "type": {"type": "bytes", "logicalType": "decimal", "precision": 18, "scale": 4}},
            {"name": "big", "type": {"type": "bytes", "logicalType": "decimal", "precision": 30, "scale": 2}},
            {"name": "fx", "type": {"type": "fixed", "name": "Four", "size": 4}},
            {"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["red", "green", "blue"]}},
            {"name": "opt", "type": ["null", "string"]},
            {
                "name": "inner",
                "type": ["null", {"type": "record", "name": "Inner", "fields": [{"name": "n", "type": "long"}]}],
            },
            {"name": "tags", "type": {"type": "array", "items": "t.Color"}},
            {"name": "lines", "type": {"type": "array", "items": "t.Inner"}},
            {"name": "attrs", "type": {"type": "map", "values": ["null", "boolean", "long", "double", "string"]}},
        ],
    }
)

_TEXT = st.text(max_size=12)
_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False), _TEXT)
_RECORDS = st.fixed_dictionaries(
    {
        "b": st.booleans(),
        "i": st.integers(-(2**31), 2**31 - 1),
        "l": st.integers(-(2**63), 2**63 - 1),
        "f": st.floats(width=32, allow_nan=False),
        "d": st.floats(allow_nan=False),
        "raw": st.binary(max_size=12),
        "s": _TEXT,
        "u": st.uuids().map(str),
        "ts": st.datetimes(datetime(1900, 1, 1), datetime(2200, 1, 1), timezones=st.just(UTC)).map(
            lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000)
        ),
        "money": st.decimals(-(10**14) + 1, 10**14 - 1, places=4),
        "big": st.decimals(-(10**28) + 1, 10**28 - 1, places=2),
        "fx": st.binary(min_size=4, max_size=4),
        "e": st.sampled_from(["red", "green", "blue"]),
        "opt": st.none() | _TEXT,
        "inner": st.none() | st.builds(lambda n: {"n": n}, st.integers(-(2**63), 2**63 - 1)),
        "tags": st.lists(st.sampled_from(["red", "green", "blue"]), max_size=4),
        "lines": st.lists(st.builds(lambda n: {"n": n}, st.integers(-5, 5)), max_size=3),
        "attrs": st.dictionaries(_TEXT, _SCALAR, max_size=4),
    }
)


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(_RECORDS, min_size=1, max_size=5))
def test_random_records_of_every_type_decode_as_fastavro_decodes_them(records: list[dict[str, Any]]) -> None:
    payloads = []
    for record in records:
        out = io.BytesIO()
        schemaless_writer(out, _ALL_TYPES.parsed, record)
        payloads.append(out.getvalue())

    rows, errors = decode(_ALL_TYPES, _ALL_TYPES, payloads)

    assert errors == []
    assert [normal(r) for r in rows] == [normal(fastavro_decode(_ALL_TYPES, _ALL_TYPES, p)) for p in payloads]


# -- schema evolution ---------------------------------------------------------------------------

_WRITER = AvroSchema.parse(
    {
        "type": "record",
        "name": "Event",
        "namespace": "old.ns",
        "fields": [
            {"name": "gone", "type": {"type": "map", "values": {"type": "array", "items": ["null", "string"]}}},
            {"name": "count", "type": "int"},
            {"name": "ratio", "type": "float"},
            {"name": "name", "type": "bytes"},
            {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["a", "b", "new"]}},
            {"name": "maybe", "type": ["null", "long"]},
            {"name": "always", "type": "string"},
            {"name": "old_name", "type": "string"},
            {
                "name": "gone_too",
                "type": ["null", {"type": "record", "name": "G", "fields": [{"name": "x", "type": "double"}]}],
            },
        ],
    }
)
_READER = AvroSchema.parse(
    {
        "type": "record",
        "name": "Event",
        "namespace": "new.ns",
        "fields": [
            {"name": "always", "type": ["null", "string"]},
            {"name": "count", "type": "long"},
            {"name": "ratio", "type": "double"},
            {"name": "name", "type": "string"},
            {
                "name": "kind",
                "type": {"type": "enum", "name": "Kind", "symbols": ["a", "b", "unknown"], "default": "unknown"},
            },
            {"name": "maybe", "type": ["null", "double"], "default": None},
            {"name": "renamed", "aliases": ["old_name"], "type": "string"},
            {"name": "added", "type": {"type": "array", "items": "int"}, "default": [1, 2]},
            {
                "name": "added_record",
                "type": {"type": "record", "name": "A", "fields": [{"name": "p", "type": "string", "default": "d"}]},
                "default": {},
            },
            {
                "name": "added_money",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
                "default": "\u0004\u00d2",
            },
        ],
    }
)


def test_data_of_an_older_writer_resolves_into_the_reader_as_fastavro_resolves_it() -> None:
    data = [
        {
            "gone": {"k": ["x", None]},
            "count": 3,
            "ratio": 0.5,
            "name": b"n",
            "kind": "b",
            "maybe": 7,
            "always": "s",
            "old_name": "o",
            "gone_too": {"x": 1.5},
        },
        {
            "gone": {},
            "count": -1,
            "ratio": 2.0,
            "name": b"",
            "kind": "new",
            "maybe": None,
            "always": "",
            "old_name": "",
            "gone_too": None,
        },
    ]
    payloads = [encode(_WRITER, d) for d in data]

    rows, errors = decode(_READER, _WRITER, payloads)

    assert errors == []
    # fastavro hands back defaults as raw JSON (no nested record defaults, no decimal conversion):
    # those two fields are checked against the Avro spec below instead.
    spec_checked = {"added_record", "added_money"}
    assert [{k: v for k, v in normal(r).items() if k not in spec_checked} for r in rows] == [
        {k: v for k, v in normal(fastavro_decode(_WRITER, _READER, p)).items() if k not in spec_checked}
        for p in payloads
    ]
    assert rows[1]["kind"] == "unknown"  # a symbol the reader lacks: the reader's enum default
    assert (rows[0]["added"], rows[0]["added_record"], rows[0]["added_money"]) == ([1, 2], {"p": "d"}, Decimal("12.34"))


def test_a_reader_field_the_writer_lacks_without_default_cannot_resolve() -> None:
    reader = AvroSchema.parse(
        {
            "type": "record",
            "name": "Event",
            "fields": [{"name": "always", "type": "string"}, {"name": "extra", "type": "int"}],
        }
    )
    with pytest.raises(SchemaResolutionError, match="extra"):
        EventColumns(reader).decoder(_WRITER)
    with pytest.raises(SchemaResolutionError, match="is not"):
        EventColumns(CATALOG.schema("OrderCreated")).decoder(CATALOG.schema("OrderStatusChanged"))


def test_a_union_reader_puts_each_record_type_in_its_own_column() -> None:
    reader = AvroSchema.parse(
        [
            {"type": "record", "name": "A", "namespace": "x", "fields": [{"name": "a", "type": "int"}]},
            {"type": "record", "name": "B", "namespace": "x", "fields": [{"name": "b", "type": "string"}]},
        ]
    )
    writer_b = AvroSchema.parse(
        {"type": "record", "name": "B", "namespace": "y", "fields": [{"name": "b", "type": "string"}]}
    )

    rows, errors = decode(reader, writer_b, [encode(writer_b, {"b": "hi"})])

    assert errors == []
    assert rows == [{"A": None, "B": {"b": "hi"}}]


# -- bad data -----------------------------------------------------------------------------------


def test_each_bad_record_becomes_a_null_row_with_a_reason_and_its_neighbours_decode() -> None:
    schema = _ALL_TYPES
    good = {
        "b": True,
        "i": 1,
        "l": 2,
        "f": 1.5,
        "d": 2.5,
        "raw": b"r",
        "s": "s",
        "u": "6f1c2b7e-9a43-4d55-8d0e-3c2a9b1f7e10",
        "ts": datetime(2025, 1, 1, tzinfo=UTC),
        "money": Decimal("1.5"),
        "big": Decimal("2.25"),
        "fx": b"1234",
        "e": "blue",
        "opt": None,
        "inner": {"n": 1},
        "tags": ["red"],
        "lines": [{"n": 1}, {"n": 2}],
        "attrs": {"k": 1},
    }
    payload = encode(schema, good)
    # Offsets of a few fields in that payload, to corrupt them precisely.
    bool_at = 0
    string_at = payload.index(b"\x02s") + 1
    bad_records = {
        "truncated": payload[:-2],
        "trailing bytes": payload + b"\x00",
        "boolean byte": b"\x07" + payload[1:],
        "invalid UTF-8": payload[:string_at] + b"\xff" + payload[string_at + 1 :],
        "empty": b"",
        "varint longer than 10 bytes": payload[:1] + b"\xff" * 11 + payload[1:],
    }
    assert bool_at == 0
    batch = [payload]
    for bad in bad_records.values():
        batch += [bad, payload]

    rows, errors = decode(schema, schema, batch)

    expected_good = normal(fastavro_decode(schema, schema, payload))
    assert [normal(rows[i]) for i in range(0, len(batch), 2)] == [expected_good] * (len(bad_records) + 1)
    assert [row for row, _ in errors] == list(range(1, len(batch), 2))
    for (_, message), reason in zip(errors, bad_records, strict=True):
        assert reason in message or (reason == "empty" and "truncated" in message), (reason, message)
    assert all(all(v is None for v in rows[i].values()) for i in range(1, len(batch), 2))


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ({"type": "int"}, 2**31, "int out of range"),
        ({"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}, Decimal("100.00"), "precision"),
        ({"type": "long", "logicalType": "timestamp-millis"}, 2**62, "timestamp out of range"),
        ({"type": "enum", "name": "E", "symbols": ["a"]}, 5, "enum"),
        (["null", "long"], "union index 7", "union branch"),
        ({"type": "array", "items": "long"}, "block of 2**40", "block count"),
        ({"type": "string"}, "length -3", "negative length"),
        ({"type": "long"}, "a tenth byte of 0x7f", "exceeds 64 bits"),
    ],
)
def test_values_arrow_cannot_hold_are_refused_per_record(field: Any, value: Any, message: str) -> None:
    schema = AvroSchema.parse({"type": "record", "name": "R", "fields": [{"name": "f", "type": field}]})
    raw = {
        "int out of range": b"\x80\x80\x80\x80\x10",  # zigzag 2**31
        "precision": b"\x04" + (10000).to_bytes(2, "big"),
        "timestamp out of range": b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",  # zigzag 2**62
        "enum": b"\x0a",
        "union branch": b"\x0e",
        "block count": b"\x80\x80\x80\x80\x80\x20",
        "negative length": b"\x05",
        "exceeds 64 bits": b"\xff" * 9 + b"\x7f",  # Python's int would hold it; int64 cannot
    }[message]

    rows, errors = decode(schema, schema, [raw])

    assert rows == [{"f": None}]
    assert len(errors) == 1
    assert message in errors[0][1]


def test_arrays_of_items_that_take_no_bytes_hold_no_more_items_than_the_record_has_bytes() -> None:
    """Nulls take no bytes: a small record of blocks of them would otherwise make the decoder
    append (or, skipping them, loop) without bound. A record holds at most one array or map
    item per byte, read or skipped."""
    nulls = AvroSchema.parse(
        {
            "type": "record",
            "name": "R",
            "fields": [{"name": "n", "type": "long"}, {"name": "xs", "type": {"type": "array", "items": "null"}}],
        }
    )
    skipping = AvroSchema.parse({"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"}]})
    fits = b"\x02" + b"\x0e\x00"  # n=1, one block of 7 nulls: 8 bytes with the header
    hostile = b"\x02" + b"\x7e" * 100_000 + b"\x00"  # 100,000 blocks of 63 nulls each

    rows, errors = decode(nulls, nulls, [fits, hostile])
    assert rows == [{"n": 1, "xs": [None] * 7}, {"n": None, "xs": None}]
    assert [(row, "block count" in message) for row, message in errors] == [(1, True)]

    rows, errors = decode(skipping, nulls, [fits, hostile])
    assert rows == [{"n": 1}, {"n": None}]
    assert [(row, "block count" in message) for row, message in errors] == [(1, True)]


def test_timestamps_keep_their_milliseconds_before_the_epoch_too() -> None:
    schema = AvroSchema.parse(
        {
            "type": "record",
            "name": "R",
            "fields": [{"name": "t", "type": {"type": "long", "logicalType": "timestamp-millis"}}],
        }
    )
    moments = [
        datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC),
        datetime(1970, 1, 1, tzinfo=UTC) + timedelta(days=20000, milliseconds=1),
    ]

    rows, _ = decode(schema, schema, [encode(schema, {"t": m}) for m in moments])

    assert [normal(r["t"]) for r in rows] == moments
