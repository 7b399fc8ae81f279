"""Avro schema compatibility (reader against writer) of enums (symbols, defaults, names), fixed,
arrays and maps, and unions (every writer branch read, promotions, records picked by name).

Each rule has an allowed and a rejected case; reasons are checked for their kind and JSON-pointer
path, the way Apache Avro's Java SchemaCompatibility / Confluent Schema Registry decide them.
"""

from __future__ import annotations

from registry.compatibility import can_read, check
from registry.levels import Level
from tests.support.avro_schemas import compatible, enum, fixed, fld, only_reason, record

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
