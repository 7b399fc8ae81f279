"""Avro schema compatibility (reader against writer) through named references: recursive and
mutually recursive records, a named type used at two paths, namespaces, and deep sharing
checked fast with bounded reasons.

Each rule has an allowed and a rejected case; reasons are checked for their kind and JSON-pointer
path, the way Apache Avro's Java SchemaCompatibility / Confluent Schema Registry decide them.
"""

from __future__ import annotations

import copy
from typing import Any

from registry.compatibility import can_read
from tests.support.avro_schemas import compatible, enum, fld, only_reason, record

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
