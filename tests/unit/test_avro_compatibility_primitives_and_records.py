"""Avro schema compatibility (reader against writer) of primitives, the promotions of the
specification, and records: defaults, field and record aliases, namespaces and reasons' paths.

Each rule has an allowed and a rejected case; reasons are checked for their kind and JSON-pointer
path, the way Apache Avro's Java SchemaCompatibility / Confluent Schema Registry decide them.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from registry.compatibility import can_read
from tests.support.avro_schemas import PRIMITIVES, PROMOTIONS, compatible, fld, only_reason, record


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
