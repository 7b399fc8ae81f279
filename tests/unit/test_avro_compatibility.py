"""The Avro compatibility checker: Avro's schema resolution rules (reader vs writer), decided the
way Apache Avro's Java SchemaCompatibility / Confluent Schema Registry decide them, and the
registry's compatibility levels (NONE, BACKWARD, FORWARD, FULL and their transitive variants).

Each rule has an allowed and a rejected case; reasons are checked for their kind and JSON-pointer
path. Properties: every schema reads itself, adding an optional field is FULL compatible, widening
int to long is BACKWARD but not FORWARD compatible, and whenever the checker says a reader can
read a writer, fastavro really decodes random data written with the writer using the reader.
"""

from __future__ import annotations

import copy
import io
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import fastavro
import pytest
from fastavro.utils import generate_many
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from registry import compatibility
from registry.compatibility import InvalidSchemaError, can_read, check
from registry.levels import Level

# ----------------------------------------------------------------------------------------------
# helpers


def record(name: str, *fields: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def fld(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


def enum(name: str, *symbols: str, **extra: Any) -> dict[str, Any]:
    return {"type": "enum", "name": name, "symbols": list(symbols), **extra}


def fixed(name: str, size: int, **extra: Any) -> dict[str, Any]:
    return {"type": "fixed", "name": name, "size": size, **extra}


def decimal(precision: int, scale: int, base: str = "bytes", **extra: Any) -> dict[str, Any]:
    return {"type": base, "logicalType": "decimal", "precision": precision, "scale": scale, **extra}


def compatible(reader: Any, writer: Any) -> bool:
    return can_read(reader, writer) == []


def only_reason(reader: Any, writer: Any) -> str:
    reasons = can_read(reader, writer)
    assert len(reasons) == 1, reasons
    return reasons[0]


PRIMITIVES = ["null", "boolean", "int", "long", "float", "double", "bytes", "string"]
# (reader, writer) pairs the specification allows besides identity, written out by hand
PROMOTIONS = {
    ("long", "int"),
    ("float", "int"),
    ("float", "long"),
    ("double", "int"),
    ("double", "long"),
    ("double", "float"),
    ("bytes", "string"),
    ("string", "bytes"),
}

# ----------------------------------------------------------------------------------------------
# primitives and promotions


@pytest.mark.parametrize(("reader", "writer"), list(itertools.product(PRIMITIVES, PRIMITIVES)))
def test_primitive_reads_itself_and_only_the_promotions_of_the_spec(reader: str, writer: str) -> None:
    expected = reader == writer or (reader, writer) in PROMOTIONS
    assert compatible(reader, writer) is expected
    # the long form {"type": "int"} is the same schema
    assert compatible({"type": reader}, {"type": writer}) is expected


def test_a_rejected_primitive_names_both_types_at_the_root() -> None:
    assert only_reason("int", "long") == "TYPE_MISMATCH at /: reader type int cannot read writer type long"


def test_promotion_applies_inside_a_record_field_with_the_field_path() -> None:
    old = record("Order", fld("amount", "int"))
    new = record("Order", fld("amount", "long"))
    assert compatible(new, old)
    assert only_reason(old, new) == "TYPE_MISMATCH at /fields/amount/type: reader type int cannot read writer type long"


def test_string_and_bytes_read_each_other_but_not_numbers() -> None:
    assert compatible("bytes", "string")
    assert compatible("string", "bytes")
    assert not compatible("string", "int")
    assert not compatible("int", "string")


# ----------------------------------------------------------------------------------------------
# records


ORDER_V1 = record("Order", fld("id", "string"), fld("amount", "int"), namespace="shop")


def test_a_reader_field_missing_in_the_writer_needs_a_default() -> None:
    with_default = record("Order", *ORDER_V1["fields"], fld("note", "string", default=""), namespace="shop")
    without = record("Order", *ORDER_V1["fields"], fld("note", "string"), namespace="shop")
    assert compatible(with_default, ORDER_V1)
    assert only_reason(without, ORDER_V1) == (
        "READER_FIELD_MISSING_DEFAULT_VALUE at /fields/note: reader field 'note' has no default value "
        "and is missing from writer record 'shop.Order'"
    )


def test_a_null_default_counts_as_a_default() -> None:
    new = record("Order", *ORDER_V1["fields"], fld("coupon", ["null", "string"], default=None), namespace="shop")
    assert compatible(new, ORDER_V1)


def test_writer_fields_missing_in_the_reader_are_ignored() -> None:
    reader = record("Order", fld("id", "string"), namespace="shop")
    assert compatible(reader, ORDER_V1)


def test_fields_match_by_name_not_position() -> None:
    reordered = record("Order", fld("amount", "long"), fld("id", "string"), namespace="shop")
    assert compatible(reordered, ORDER_V1)


def test_a_renamed_field_reads_the_old_one_through_a_reader_alias() -> None:
    renamed = record("Order", fld("id", "string"), fld("total", "int", aliases=["amount"]), namespace="shop")
    assert compatible(renamed, ORDER_V1)
    no_alias = record("Order", fld("id", "string"), fld("total", "int"), namespace="shop")
    assert "READER_FIELD_MISSING_DEFAULT_VALUE at /fields/total" in only_reason(no_alias, ORDER_V1)


def test_writer_field_aliases_are_not_used() -> None:
    writer = record("R", fld("total", "int", aliases=["amount"]))
    reader = record("R", fld("amount", "int"))
    assert not compatible(reader, writer)


def test_a_field_alias_matching_a_second_writer_field_is_ambiguous() -> None:
    writer = record("R", fld("a", "int"), fld("b", "int"))
    reader = record("R", fld("a", "int", aliases=["b"]))
    assert only_reason(reader, writer).startswith("AMBIGUOUS_FIELD at /fields/a:")


def test_records_match_by_unqualified_name_so_a_namespace_change_is_compatible() -> None:
    moved = record("Order", fld("id", "string"), fld("amount", "int"), namespace="shop.v2")
    assert compatible(moved, ORDER_V1)
    assert compatible(ORDER_V1, moved)
    full_name_form = record("shop.v2.Order", fld("id", "string"), fld("amount", "int"))
    assert compatible(full_name_form, ORDER_V1)


def test_a_renamed_record_is_rejected_unless_a_reader_alias_names_the_writer() -> None:
    renamed = record("Purchase", fld("id", "string"), fld("amount", "int"), namespace="shop")
    assert only_reason(renamed, ORDER_V1).startswith("NAME_MISMATCH at /name: reader record 'shop.Purchase'")
    # aliases are qualified with the reader's namespace: "Order" means "shop.Order" here
    aliased = {**renamed, "aliases": ["Order"]}
    assert compatible(aliased, ORDER_V1)
    full_alias = {**renamed, "namespace": "other", "aliases": ["shop.Order"]}
    assert compatible(full_alias, ORDER_V1)
    # ... and compared with the writer's full name, as Java does: other.Order is not shop.Order
    wrong_namespace_alias = {**renamed, "namespace": "other", "aliases": ["Order"]}
    assert not compatible(wrong_namespace_alias, ORDER_V1)


def test_all_field_problems_are_reported_each_with_its_path() -> None:
    writer = record("R", fld("a", "int"), fld("b", "string"), fld("c", "boolean"))
    reader = record("R", fld("a", "string"), fld("b", "int"), fld("c", "boolean"), fld("d", "int"))
    reasons = can_read(reader, writer)
    assert [r.split(":")[0] for r in reasons] == [
        "TYPE_MISMATCH at /fields/a/type",
        "TYPE_MISMATCH at /fields/b/type",
        "READER_FIELD_MISSING_DEFAULT_VALUE at /fields/d",
    ]


def test_nested_records_report_the_full_path() -> None:
    def order(line_qty: str) -> dict[str, Any]:
        line = record("Line", fld("sku", "string"), fld("qty", line_qty))
        return record("Order", fld("lines", {"type": "array", "items": line}), namespace="shop")

    assert compatible(order("long"), order("int"))
    assert only_reason(order("int"), order("long")) == (
        "TYPE_MISMATCH at /fields/lines/type/items/fields/qty/type: reader type int cannot read writer type long"
    )


def test_record_and_other_types_do_not_match() -> None:
    assert not compatible(ORDER_V1, "string")
    assert not compatible({"type": "map", "values": "int"}, ORDER_V1)


# ----------------------------------------------------------------------------------------------
# enums


STATUS = enum("Status", "NEW", "PAID", namespace="shop")


def test_an_enum_reads_a_writer_whose_symbols_it_all_knows() -> None:
    more = enum("Status", "NEW", "PAID", "SHIPPED", namespace="shop")
    assert compatible(more, STATUS)  # reader gained a symbol
    assert compatible(enum("Status", "PAID", "NEW"), STATUS)  # order does not matter


def test_a_writer_symbol_unknown_to_the_reader_is_rejected() -> None:
    more = enum("Status", "NEW", "PAID", "SHIPPED", namespace="shop")
    assert only_reason(STATUS, more) == (
        "MISSING_ENUM_SYMBOLS at /symbols: reader enum 'shop.Status' lacks writer symbols ['SHIPPED'] "
        "and has no default symbol"
    )


def test_an_enum_default_lets_the_reader_accept_unknown_symbols() -> None:
    more = enum("Status", "NEW", "PAID", "SHIPPED", namespace="shop")
    with_default = enum("Status", "UNKNOWN", "NEW", "PAID", default="UNKNOWN", namespace="shop")
    assert compatible(with_default, more)
    # a field default is not an enum default
    reader = record("R", fld("s", STATUS, default="NEW"))
    assert not compatible(reader, record("R", fld("s", more)))


def test_enum_names_must_match_or_be_aliased() -> None:
    assert only_reason(enum("State", "NEW", "PAID"), STATUS).startswith("NAME_MISMATCH at /name:")
    assert compatible(enum("State", "NEW", "PAID", aliases=["shop.Status"]), STATUS)


# ----------------------------------------------------------------------------------------------
# fixed


def test_fixed_needs_the_same_size_and_name() -> None:
    md5 = fixed("Hash", 16, namespace="x")
    assert compatible(fixed("Hash", 16, namespace="y"), md5)
    assert only_reason(fixed("Hash", 32), md5) == (
        "FIXED_SIZE_MISMATCH at /size: reader fixed 'Hash' has size 32, writer fixed 'x.Hash' has size 16"
    )
    assert only_reason(fixed("Digest", 16), md5).startswith("NAME_MISMATCH at /name:")
    assert compatible(fixed("Digest", 16, aliases=["x.Hash"]), md5)
    assert not compatible("bytes", md5)
    assert not compatible(md5, "bytes")


# ----------------------------------------------------------------------------------------------
# arrays and maps


def test_array_items_and_map_values_resolve_recursively() -> None:
    assert compatible({"type": "array", "items": "long"}, {"type": "array", "items": "int"})
    assert only_reason({"type": "array", "items": "int"}, {"type": "array", "items": "long"}).startswith(
        "TYPE_MISMATCH at /items:"
    )
    assert compatible({"type": "map", "values": "double"}, {"type": "map", "values": "float"})
    assert only_reason({"type": "map", "values": "float"}, {"type": "map", "values": "double"}).startswith(
        "TYPE_MISMATCH at /values:"
    )


def test_an_array_is_not_a_map() -> None:
    assert not compatible({"type": "array", "items": "int"}, {"type": "map", "values": "int"})
    assert not compatible({"type": "map", "values": "int"}, {"type": "array", "items": "int"})


# ----------------------------------------------------------------------------------------------
# unions


def test_a_reader_union_must_accept_every_writer_branch() -> None:
    assert compatible(["null", "string", "int"], ["null", "string"])  # union widened
    assert compatible(["string", "null"], ["null", "string"])  # order does not matter
    assert only_reason(["null", "string"], ["null", "string", "int"]) == (
        "MISSING_UNION_BRANCH at /2: reader union [null, string] has no branch that can read writer type int"
    )


def test_union_branches_are_resolved_with_promotions() -> None:
    assert compatible(["null", "long"], ["null", "int"])
    assert compatible(["null", "double"], ["int", "long", "float"])
    assert not compatible(["null", "int"], ["null", "long"])


def test_a_non_union_reader_must_read_every_writer_branch() -> None:
    assert compatible("long", ["int", "long"])
    assert compatible("string", ["string"])
    assert (
        only_reason("string", ["null", "string"])
        == "TYPE_MISMATCH at /0: reader type string cannot read writer type null"
    )


def test_a_union_reader_reads_a_non_union_writer_when_some_branch_does() -> None:
    assert compatible(["null", "string"], "string")
    assert compatible(["null", "long"], "int")
    assert only_reason(["null", "string"], "int") == (
        "MISSING_UNION_BRANCH at /: reader union [null, string] has no branch that can read writer type int"
    )


def test_making_a_field_optional_is_backward_but_not_forward_compatible() -> None:
    old = record("R", fld("a", "string"))
    new = record("R", fld("a", ["null", "string"], default=None))
    assert check(new, [old], Level.BACKWARD) == []
    assert check(new, [old], Level.FORWARD) != []


def test_union_of_records_picks_the_record_by_name() -> None:
    a = record("A", fld("x", "int"))
    b = record("B", fld("y", "string"))
    assert compatible([a, b], b)
    assert compatible([a, b], [b, a])
    assert not compatible([a], b)


def test_a_failing_union_branch_is_explained_by_the_same_named_branch() -> None:
    old_line = record("Line", fld("sku", "string"))
    new_line = record("Line", fld("sku", "string"), fld("qty", "int"))
    reasons = can_read(["null", new_line], old_line)
    assert reasons == [
        "MISSING_UNION_BRANCH at /: reader union [null, record 'Line'] has no branch that can read "
        "writer type record 'Line'",
        "READER_FIELD_MISSING_DEFAULT_VALUE at /fields/qty: reader field 'qty' has no default value and is "
        "missing from writer record 'Line'",
    ]


# ----------------------------------------------------------------------------------------------
# named references, namespaces and recursion

LIST_V1 = record("Node", fld("value", "int"), fld("next", ["null", "Node"], default=None), namespace="ll")


def test_a_recursive_schema_reads_itself_and_evolves() -> None:
    assert compatible(LIST_V1, LIST_V1)
    v2 = record(
        "Node",
        fld("value", "long"),
        fld("next", ["null", "Node"], default=None),
        fld("label", "string", default=""),
        namespace="ll",
    )
    assert compatible(v2, LIST_V1)
    assert (
        only_reason(LIST_V1, v2) == "TYPE_MISMATCH at /fields/value/type: reader type int cannot read writer type long"
    )


def test_an_incompatibility_reached_only_through_recursion_is_found() -> None:
    tree = record(
        "Tree",
        fld("children", {"type": "array", "items": "Tree"}),
        fld("meta", {"type": "map", "values": "string"}),
    )
    tree_bytes = record(
        "Tree",
        fld("children", {"type": "array", "items": "Tree"}),
        fld("meta", {"type": "map", "values": "int"}),
    )
    assert compatible(tree, tree)
    assert only_reason(tree_bytes, tree) == (
        "TYPE_MISMATCH at /fields/meta/type/values: reader type int cannot read writer type string"
    )


def test_mutually_recursive_records() -> None:
    def schema(leaf: str) -> dict[str, Any]:
        b = record("B", fld("a", ["null", "A"], default=None), fld("leaf", leaf))
        return record("A", fld("b", ["null", b], default=None))

    assert compatible(schema("long"), schema("int"))
    reasons = can_read(schema("int"), schema("long"))
    assert reasons
    assert any("/fields/b/type/1/fields/leaf/type" in r for r in reasons), reasons


def test_a_named_type_used_twice_is_checked_at_both_paths() -> None:
    def order(zip_type: str) -> dict[str, Any]:
        address = record("Address", fld("zip", zip_type))
        return record("Order", fld("billing", address), fld("shipping", "Address"), namespace="shop")

    assert compatible(order("long"), order("int"))
    reasons = can_read(order("int"), order("long"))
    assert [r.split(":")[0] for r in reasons] == [
        "TYPE_MISMATCH at /fields/billing/type/fields/zip/type",
        "TYPE_MISMATCH at /fields/shipping/type/fields/zip/type",
    ]


def test_references_resolve_through_namespaces() -> None:
    # "Money" inside namespace shop means shop.Money; "other.Currency" is a full name
    writer = record(
        "Order",
        fld("currency", enum("Currency", "EUR", "USD", namespace="other")),
        fld("total", record("Money", fld("units", "int"))),
        fld("refund", ["null", "Money"], default=None),
        fld("refund_currency", "other.Currency"),
        namespace="shop",
    )
    reader = copy.deepcopy(writer)
    reader["fields"][0]["type"]["symbols"] = ["EUR"]  # the definition, used by both fields
    reasons = can_read(reader, writer)
    assert [r.split(":")[0] for r in reasons] == [
        "MISSING_ENUM_SYMBOLS at /fields/currency/type/symbols",
        "MISSING_ENUM_SYMBOLS at /fields/refund_currency/type/symbols",
    ]


def test_a_name_defined_in_an_inner_namespace_is_inherited_by_nested_definitions() -> None:
    inner = record("Inner", fld("x", "int"))  # inherits namespace "deep" from Outer's name
    schema = record("deep.Outer", fld("i", inner), fld("j", "deep.Inner"), fld("k", "Inner"))
    assert compatible(schema, schema)


def test_deep_sharing_stays_fast_and_reasons_stay_bounded() -> None:
    def chain(leaf: str, depth: int = 40) -> dict[str, Any]:
        node = record("N0", fld("v", leaf))
        for i in range(1, depth):
            node = record(f"N{i}", fld("a", node), fld("b", f"N{i - 1}"))
        return node

    assert compatible(chain("long"), chain("int"))
    reasons = can_read(chain("int"), chain("long"))  # 2**39 paths lead to the leaf
    assert 0 < len(reasons) <= 100
    assert reasons[-1].startswith("MORE")


# ----------------------------------------------------------------------------------------------
# logical types


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


# ----------------------------------------------------------------------------------------------
# compatibility levels

V1 = record("User", fld("id", "string"), fld("name", "string"), namespace="acct")
# added an optional field: every level accepts it
V2_ADD_OPTIONAL = record(
    "User", fld("id", "string"), fld("name", "string"), fld("email", ["null", "string"], default=None), namespace="acct"
)
# added a required field: old data lacks it (not BACKWARD); old readers ignore it (FORWARD)
V2_ADD_REQUIRED = record("User", fld("id", "string"), fld("name", "string"), fld("age", "int"), namespace="acct")
# removed a field without default: new readers are fine (BACKWARD); old readers miss it (not FORWARD)
V2_REMOVE_REQUIRED = record("User", fld("id", "string"), namespace="acct")
# changed a type incompatibly both ways
V2_BREAKING = record("User", fld("id", "int"), fld("name", "string"), namespace="acct")

LEVEL_CASES = [
    # level, new schema, accepted?
    (Level.BACKWARD, V2_ADD_OPTIONAL, True),
    (Level.BACKWARD, V2_REMOVE_REQUIRED, True),
    (Level.BACKWARD, V2_ADD_REQUIRED, False),
    (Level.BACKWARD, V2_BREAKING, False),
    (Level.FORWARD, V2_ADD_OPTIONAL, True),
    (Level.FORWARD, V2_ADD_REQUIRED, True),
    (Level.FORWARD, V2_REMOVE_REQUIRED, False),
    (Level.FORWARD, V2_BREAKING, False),
    (Level.FULL, V2_ADD_OPTIONAL, True),
    (Level.FULL, V2_ADD_REQUIRED, False),
    (Level.FULL, V2_REMOVE_REQUIRED, False),
    (Level.FULL, V2_BREAKING, False),
    (Level.NONE, V2_BREAKING, True),
    (Level.NONE, V2_ADD_REQUIRED, True),
]


@pytest.mark.parametrize(("level", "new", "accepted"), LEVEL_CASES)
def test_levels_with_one_previous_version(level: Level, new: dict[str, Any], accepted: bool) -> None:
    assert (check(new, [V1], level) == []) is accepted
    # with a single previous version, the transitive level decides the same
    if level is not Level.NONE:
        transitive = Level(f"{level.value}_TRANSITIVE")
        assert (check(new, [V1], transitive) == []) is accepted


def test_backward_reasons_say_which_direction_and_version_failed() -> None:
    reasons = check(V2_ADD_REQUIRED, [V1], Level.BACKWARD)
    assert reasons == [
        "new schema cannot read data written with existing schema #1: READER_FIELD_MISSING_DEFAULT_VALUE at "
        "/fields/age: reader field 'age' has no default value and is missing from writer record 'acct.User'"
    ]
    forward = check(V2_REMOVE_REQUIRED, [V1], Level.FORWARD)
    assert forward == [
        "existing schema #1 cannot read data written with the new schema: READER_FIELD_MISSING_DEFAULT_VALUE at "
        "/fields/name: reader field 'name' has no default value and is missing from writer record 'acct.User'"
    ]


def test_full_reports_both_directions() -> None:
    reasons = check(V2_BREAKING, [V1], Level.FULL)
    assert len(reasons) == 2
    assert reasons[0].startswith("new schema cannot read data written with existing schema #1: TYPE_MISMATCH")
    assert reasons[1].startswith("existing schema #1 cannot read data written with the new schema: TYPE_MISMATCH")


def test_nothing_to_compare_with_is_always_compatible() -> None:
    for level in Level:
        assert check(V1, [], level) == []


def test_levels_accept_their_string_names() -> None:
    assert check(V2_ADD_REQUIRED, [V1], "BACKWARD") != []  # type: ignore[arg-type]
    assert check(V2_ADD_REQUIRED, [V1], "FORWARD") == []  # type: ignore[arg-type]
    assert Level("FULL_TRANSITIVE") is Level.FULL_TRANSITIVE
    assert str(Level.BACKWARD) == "BACKWARD"
    assert [level.value for level in Level] == [
        "NONE",
        "BACKWARD",
        "BACKWARD_TRANSITIVE",
        "FORWARD",
        "FORWARD_TRANSITIVE",
        "FULL",
        "FULL_TRANSITIVE",
    ]


# Transitive cases: the new schema agrees with the latest version but not with an older one.
# v1 had no "tier"; v2 added it with a default; v3 drops the default: v3 reads v2 data (the field
# is there) but not v1 data (no field, no default).
T1 = record("Account", fld("id", "string"))
T2 = record("Account", fld("id", "string"), fld("tier", "string", default="basic"))
T3 = record("Account", fld("id", "string"), fld("tier", "string"))


def test_backward_checks_only_the_latest_version() -> None:
    assert check(T3, [T1, T2], Level.BACKWARD) == []


def test_backward_transitive_checks_every_version() -> None:
    reasons = check(T3, [T1, T2], Level.BACKWARD_TRANSITIVE)
    assert reasons == [
        "new schema cannot read data written with existing schema #1: READER_FIELD_MISSING_DEFAULT_VALUE at "
        "/fields/tier: reader field 'tier' has no default value and is missing from writer record 'Account'"
    ]
    assert check(T2, [T1], Level.BACKWARD_TRANSITIVE) == []


# F1 required "region"; F2 gave it a default; F3 removes it: F2 reads F3 data (default), F1 cannot.
F1 = record("Shop", fld("id", "string"), fld("region", "string"))
F2 = record("Shop", fld("id", "string"), fld("region", "string", default="eu"))
F3 = record("Shop", fld("id", "string"))


def test_forward_checks_only_the_latest_version() -> None:
    assert check(F3, [F1, F2], Level.FORWARD) == []


def test_forward_transitive_checks_every_version() -> None:
    reasons = check(F3, [F1, F2], Level.FORWARD_TRANSITIVE)
    assert len(reasons) == 1
    assert reasons[0].startswith("existing schema #1 cannot read data written with the new schema: ")
    assert "/fields/region" in reasons[0]


def test_full_transitive_checks_both_directions_against_every_version() -> None:
    # G1 -> G2 -> G3 each FULL compatible with the previous (a defaulted field comes and goes),
    # but G3 changes the type of "x" that G1 had and G2 did not: only G1 sees the conflict.
    g1 = record("G", fld("id", "string"), fld("x", "int", default=0))
    g2 = record("G", fld("id", "string"))
    g3 = record("G", fld("id", "string"), fld("x", "string", default=""))
    assert check(g2, [g1], Level.FULL) == []
    assert check(g3, [g1, g2], Level.FULL) == []
    reasons = check(g3, [g1, g2], Level.FULL_TRANSITIVE)
    assert len(reasons) == 2
    assert all("existing schema #1" in r and "/fields/x/type" in r for r in reasons)


def test_transitive_levels_report_the_latest_incompatible_version_first_and_only() -> None:
    # both v1 and v2 conflict with the new schema; like Confluent, the latest one is reported
    v1 = record("R", fld("a", "int"))
    v2 = record("R", fld("a", "int"), fld("b", "int", default=0))
    new = record("R", fld("a", "string"), fld("b", "int", default=0))
    reasons = check(new, [v1, v2], Level.BACKWARD_TRANSITIVE)
    assert reasons
    assert all("existing schema #2" in r for r in reasons)


def test_none_ignores_even_unrelated_schemas() -> None:
    assert check("string", [V1, T1, "int"], Level.NONE) == []


# ----------------------------------------------------------------------------------------------
# properties

PROPERTY_SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)

NAMESPACES = ["a", "b.c", "", None]  # "": the null namespace; None: inherit the enclosing one
SIMPLE_LOGICAL = [
    {"type": "long", "logicalType": "timestamp-millis"},
    {"type": "long", "logicalType": "timestamp-micros"},
    {"type": "int", "logicalType": "date"},
    {"type": "string", "logicalType": "uuid"},
]


@dataclass
class SchemaGen:
    """Draws a random valid Avro schema (as JSON) with nested named types, references to earlier
    named types (full or short name, as the namespace requires) and optional self-references."""

    draw: st.DrawFn
    logical: bool
    counter: itertools.count[int] = field(default_factory=itertools.count)
    # full name -> namespace, for named types whose definition is complete
    defined: dict[str, str] = field(default_factory=dict)

    def schema(self, depth: int, namespace: str) -> Any:
        kinds = ["primitive"] * 3
        if self.logical:
            kinds.append("logical")
        if depth < 3:
            kinds += ["record", "record", "enum", "fixed", "array", "map", "union"]
        if self.referable(namespace):
            kinds.append("reference")
        return self.of_kind(self.draw(st.sampled_from(kinds)), depth, namespace)

    def referable(self, namespace: str) -> list[str]:
        """Named types a reference can reach from `namespace` (a null-namespace type cannot be
        named from inside a namespace: its name has no dot, so it would be qualified)."""
        return sorted(name for name, own in self.defined.items() if own or not namespace)

    def of_kind(self, kind: str, depth: int, namespace: str) -> Any:
        draw = self.draw
        if kind == "primitive":
            return draw(st.sampled_from(PRIMITIVES))
        if kind == "logical":
            return draw(
                st.sampled_from(SIMPLE_LOGICAL)
                | st.integers(1, 20).flatmap(lambda p: st.integers(0, p).map(lambda s: decimal(p, s)))
            )
        if kind == "array":
            return {"type": "array", "items": self.schema(depth + 1, namespace)}
        if kind == "map":
            return {"type": "map", "values": self.schema(depth + 1, namespace)}
        if kind == "reference":
            fullname = draw(st.sampled_from(self.referable(namespace)))
            own = self.defined[fullname]
            return fullname.rsplit(".", 1)[-1] if own == namespace and draw(st.booleans()) else fullname
        if kind == "union":
            return self.union(depth, namespace)
        name = f"N{next(self.counter)}"
        declared = draw(st.sampled_from(NAMESPACES))
        own = namespace if declared is None else declared
        node: dict[str, Any] = {"type": kind, "name": name}
        if declared is not None:
            node["namespace"] = declared
        if kind == "enum":
            node["symbols"] = draw(st.lists(st.sampled_from("ABCDEF"), min_size=1, max_size=4, unique=True))
            if draw(st.booleans()):
                node["default"] = node["symbols"][0]
        elif kind == "fixed":
            node["size"] = draw(st.integers(1, 4))
        else:
            names = draw(st.lists(st.sampled_from(["f0", "f1", "f2", "f3", "f4"]), max_size=4, unique=True))
            node["fields"] = []
            for field_name in names:
                field_type = self.schema(depth + 1, own)
                entry: dict[str, Any] = {"name": field_name, "type": field_type}
                default = default_for(field_type)
                if default is not NO_DEFAULT and draw(st.booleans()):
                    entry["default"] = default
                node["fields"].append(entry)
            if draw(st.integers(0, 3)) == 0:  # a linked list / tree: optional self-reference
                node["fields"].append({"name": "self_ref", "type": ["null", name], "default": None})
        self.defined[f"{own}.{name}" if own else name] = own
        return node

    def union(self, depth: int, namespace: str) -> list[Any]:
        # at most one branch per unnamed type, no nested unions, each named type once
        picked = self.draw(
            st.lists(
                st.sampled_from([*PRIMITIVES, "array", "map", "record", "enum", "fixed", "reference"]),
                min_size=1,
                max_size=4,
                unique=True,
            )
        )
        branches: list[Any] = []
        # the reference first: it must not name a type this union defines itself
        for kind in sorted(picked, key=lambda k: k != "reference"):
            if kind in PRIMITIVES:
                branches.append(kind)
            elif kind != "reference" or self.referable(namespace):
                branches.append(self.of_kind(kind, depth + 1, namespace))
        return branches or ["null"]


NO_DEFAULT = object()


def default_for(schema: Any) -> Any:
    """A valid default value for simple schemas, else NO_DEFAULT."""
    if isinstance(schema, list):
        return default_for(schema[0])
    kind = schema.get("type") if isinstance(schema, dict) else schema
    if isinstance(schema, dict) and schema.get("logicalType") in ("uuid", "decimal"):
        return NO_DEFAULT
    defaults: dict[str, Any] = {
        "null": None,
        "boolean": False,
        "int": 0,
        "long": 0,
        "float": 0.0,
        "double": 0.0,
        "string": "",
        "bytes": "",
        "array": [],
        "map": {},
    }
    if kind in defaults:
        return defaults[kind]
    if kind == "enum":
        return schema["symbols"][0]
    return NO_DEFAULT


@st.composite
def avro_schemas(draw: st.DrawFn, logical: bool = True, top: str | None = None) -> Any:
    gen = SchemaGen(draw, logical)
    return gen.schema(0, "") if top is None else gen.of_kind(top, 0, "")


@PROPERTY_SETTINGS
@given(avro_schemas())
def test_property_every_schema_reads_itself(schema: Any) -> None:
    fastavro.parse_schema(schema)  # the generator makes valid schemas
    assert can_read(schema, schema) == []
    for level in Level:
        assert check(schema, [schema, schema], level) == []


@PROPERTY_SETTINGS
@given(avro_schemas(top="record"), st.sampled_from(PRIMITIVES), st.booleans())
def test_property_adding_an_optional_field_is_backward_compatible(old: Any, kind: str, null_first: bool) -> None:
    added: dict[str, Any]
    if kind == "null":
        added = {"name": "added", "type": "null", "default": None}
    elif null_first:
        added = {"name": "added", "type": ["null", kind], "default": None}
    else:  # the default belongs to the first branch
        added = {"name": "added", "type": [kind, "null"], "default": default_for(kind)}
    new = copy.deepcopy(old)
    new["fields"].append(added)
    assert check(new, [old], Level.BACKWARD) == []
    assert check(new, [old], Level.BACKWARD_TRANSITIVE) == []
    # and, the old readers ignoring the new field, FORWARD and FULL compatible too
    assert check(new, [old], Level.FULL_TRANSITIVE) == []


def widen(schema: Any) -> tuple[Any, bool]:
    """Every plain "int" replaced by "long" (a copy), and whether any was."""
    if schema in ("int", {"type": "int"}):
        return "long", True
    if isinstance(schema, list):
        pairs = [widen(s) for s in schema]
        return [p[0] for p in pairs], any(p[1] for p in pairs)
    if isinstance(schema, dict):
        out, changed = {}, False
        for key, value in schema.items():
            if key in ("type", "items", "values") and not (key == "type" and isinstance(value, str)):
                out[key], c = widen(value)
                changed |= c
            elif key == "fields":
                out[key] = []
                for f in value:
                    new_type, c = widen(f["type"])
                    out[key].append({**f, "type": new_type})
                    changed |= c
            else:
                out[key] = value
        return out, changed
    return schema, False


@PROPERTY_SETTINGS
@given(avro_schemas(logical=False))
def test_property_widening_int_to_long_is_backward_but_not_forward(schema: Any) -> None:
    wide, changed = widen(schema)
    try:
        can_read(wide, wide)
    except InvalidSchemaError:  # a union that now holds "long" twice
        assume(False)
    assert can_read(wide, schema) == []
    event(f"int widened: {changed}")
    if changed and not has_union_reading_long(schema):
        # the old schema reads "long" nowhere: every field and branch of the writer is checked
        assert check(wide, [schema], Level.FORWARD) != []


def has_union_reading_long(schema: Any) -> bool:
    """Whether a union holds "int" next to a branch that could read it once widened."""
    text = json.dumps(schema)
    return '"float"' in text or '"double"' in text


@dataclass
class Mutator:
    """Derives a reader schema from a writer schema by random evolutions, compatible or not
    (names are kept, so references stay valid)."""

    draw: Callable[[st.SearchStrategy[Any]], Any]

    def mutate(self, schema: Any) -> Any:
        draw = self.draw
        if isinstance(schema, str) and schema in PRIMITIVES:
            choice = draw(st.sampled_from(["keep", "keep", "promote", "other", "optional"]))
            promotions = sorted(r for r, w in PROMOTIONS if w == schema)
            if choice == "promote" and promotions:
                return draw(st.sampled_from(promotions))
            if choice == "other":
                return draw(st.sampled_from(PRIMITIVES))
            if choice == "optional" and schema != "null":
                return ["null", schema]
            return schema
        if isinstance(schema, list):
            branches = [self.mutate(b) for b in schema]
            if draw(st.booleans()) and len(branches) > 1:
                del branches[draw(st.integers(0, len(branches) - 1))]
            if "null" not in branches and draw(st.booleans()):
                branches.append("null")
            return branches
        if not isinstance(schema, dict):
            return schema  # a reference
        out = dict(schema)
        kind = schema["type"]
        if kind == "array":
            out["items"] = self.mutate(schema["items"])
        elif kind == "map":
            out["values"] = self.mutate(schema["values"])
        elif kind == "enum":
            symbols = list(schema["symbols"])
            if draw(st.booleans()):
                symbols.append("Z")
            if len(symbols) > 1 and draw(st.booleans()):
                symbols.pop(0)
            out["symbols"] = symbols
            if "default" in out and out["default"] not in symbols:
                del out["default"]
        elif kind == "fixed" and draw(st.integers(0, 4)) == 0:
            out["size"] = schema["size"] + 1
        elif kind == "record":
            fields = []
            for f in schema["fields"]:
                if draw(st.integers(0, 4)) == 0:
                    continue  # drop the field
                new_type = self.mutate(f["type"])
                entry = {k: v for k, v in f.items() if k != "default"}
                entry["type"] = new_type
                kept = default_for(new_type)
                if "default" in f and type(kept) is type(f["default"]) and kept == f["default"]:
                    entry["default"] = f["default"]
                fields.append(entry)
            if draw(st.booleans()):
                added: dict[str, Any] = {"name": "added", "type": draw(st.sampled_from(["int", "string"]))}
                if draw(st.booleans()):
                    added["default"] = default_for(added["type"])
                fields.append(added)
            out["fields"] = fields
        return out


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)
@given(st.data())
def test_property_whatever_the_checker_accepts_fastavro_can_decode(data: st.DataObject) -> None:
    """Soundness against a real implementation: when can_read says yes, fastavro decodes random
    data written with the writer schema using the reader schema."""
    writer = data.draw(avro_schemas(logical=False))
    reader = Mutator(data.draw).mutate(writer)
    try:
        parsed_reader = fastavro.parse_schema(reader)
        can_read(reader, reader)
    except (InvalidSchemaError, ValueError, fastavro.schema.SchemaParseException):
        # a dropped field held a definition a later reference needs, or "null" was added
        # to a union already holding it
        assume(False)
    parsed_writer = fastavro.parse_schema(writer)
    reasons = can_read(reader, writer)
    event("compatible" if not reasons else "incompatible")
    if reasons:
        return
    for datum in generate_many(parsed_writer, 3):
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed_writer, datum)
        buffer.seek(0)
        try:
            fastavro.schemaless_reader(buffer, parsed_writer, parsed_reader)
        except UnicodeDecodeError:
            # bytes read as string: the specification's promotion, so the schemas match, but
            # random bytes are not UTF-8 (fastavro writes every string as UTF-8, so nothing
            # else can raise this): a failure of the data, not of the schemas
            event("random bytes read as string")
