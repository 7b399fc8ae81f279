"""Avro schema compatibility (reader against writer) of logical types (decimals' precision and
scale, Confluent's mode) and of the checker's inputs: JSON text, fastavro-parsed schemas and
invalid schemas.

Each rule has an allowed and a rejected case; reasons are checked for their kind and JSON-pointer
path, the way Apache Avro's Java SchemaCompatibility / Confluent Schema Registry decide them.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import fastavro
import pytest

from registry import compatibility
from registry.compatibility import InvalidSchemaError, can_read, check
from registry.levels import Level
from tests.support.avro_schemas import compatible, decimal, fld, only_reason, record


def test_logical_types_resolve_as_their_underlying_type() -> None:
    ts = {"type": "long", "logicalType": "timestamp-millis"}
    assert compatible(ts, "long")
    assert compatible("long", ts)
    assert compatible({"type": "long", "logicalType": "timestamp-micros"}, ts)  # Confluent does not look
    assert compatible({"type": "string", "logicalType": "uuid"}, "string")
    assert compatible({"type": "long", "logicalType": "timestamp-millis"}, {"type": "int", "logicalType": "date"})
    assert not compatible({"type": "int", "logicalType": "date"}, ts)


def test_decimals_must_have_the_same_precision_and_scale() -> None:
    assert compatible(decimal(10, 2), decimal(10, 2))
    assert only_reason(decimal(10, 3), decimal(10, 2)) == (
        "DECIMAL_MISMATCH at /: reader decimal(10,3) cannot read writer decimal(10,2): "
        "decimal precision and scale must both match"
    )
    assert not compatible(decimal(12, 2), decimal(10, 2))
    money = record("Order", fld("total", decimal(10, 2)))
    assert "DECIMAL_MISMATCH at /fields/total/type" in only_reason(record("Order", fld("total", decimal(10, 4))), money)


def test_fixed_decimals_follow_the_same_rule() -> None:
    assert compatible(decimal(8, 2, "fixed", name="D", size=8), decimal(8, 2, "fixed", name="D", size=8))
    assert not compatible(decimal(8, 3, "fixed", name="D", size=8), decimal(8, 2, "fixed", name="D", size=8))


def test_a_decimal_and_its_plain_base_type_read_each_other() -> None:
    assert compatible(decimal(10, 2), "bytes")
    assert compatible("bytes", decimal(10, 2))
    assert compatible("string", decimal(10, 2))  # bytes -> string promotion


def test_confluent_mode_ignores_decimal_precision_and_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compatibility, "DECIMAL_STRICT", False)
    assert compatible(decimal(10, 3), decimal(10, 2))


# ----------------------------------------------------------------------------------------------
# inputs


def test_json_text_is_accepted_and_inputs_are_not_modified() -> None:
    writer = record("Order", fld("amount", "int"), namespace="shop")
    reader = record("Order", fld("amount", "long"), fld("note", "string", default=""), namespace="shop")
    before = copy.deepcopy((reader, writer))
    assert can_read(json.dumps(reader), json.dumps(writer)) == []
    assert can_read(reader, writer) == []
    assert (reader, writer) == before
    assert can_read('"long"', "int") == []


def test_fastavro_parsed_schemas_are_accepted_too() -> None:
    old = record("Order", fld("amount", "int"), fld("next", ["null", "Order"], default=None), namespace="shop")
    new = record(
        "Purchase",
        fld("amount", "long"),
        fld("next", ["null", "Purchase"], default=None),
        namespace="shop",
        aliases=["Order"],  # fastavro keeps it short; it means shop.Order
    )
    parsed_old, parsed_new = fastavro.parse_schema(old), fastavro.parse_schema(new)
    assert can_read(parsed_new, parsed_old) == can_read(new, old) == []
    assert can_read(parsed_old, parsed_new) == can_read(old, new) != []


@pytest.mark.parametrize(
    "bad",
    [
        "nope",
        {"type": "record", "name": "R", "fields": [{"name": "a", "type": "Missing"}]},
        {"type": "enum", "name": "E", "symbols": ["A", "A"]},
        {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}, {"name": "a", "type": "int"}]},
        {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int", "default": "x"}]},
        ["null", "int", "null"],
        ["int", {"type": "int", "logicalType": "date"}],
        ["null", ["int", "string"]],
        [{"type": "array", "items": "int"}, {"type": "array", "items": "long"}],
        "{not json",
        42,
    ],
)
def test_an_invalid_schema_raises(bad: Any) -> None:
    with pytest.raises(InvalidSchemaError):
        can_read(bad, "int")
    with pytest.raises(ValueError, match="invalid"):
        check(bad, ["int"], Level.BACKWARD)
