"""The reader schema's column plan: Avro schema -> Spark type and Arrow builder, per column.

Avro -> Spark types (spark-avro's mapping, so a job moving to spark-avro sees the same shapes):
null -> null; boolean; int -> int; long -> bigint; float; double; bytes and fixed -> binary;
string and enum -> string; decimal (bytes or fixed) -> decimal(p, s); timestamp-millis/micros ->
timestamp; local-timestamp-millis/micros -> timestamp_ntz; date -> date; time-millis -> int;
time-micros -> bigint; uuid -> string; record -> struct; array -> array; map -> map<string, _>;
a union of null and one type -> that type; [int, long] -> bigint; [float, double] -> double; other
unions -> struct<member0, member1, ...> of the non-null branches with only the one written set.
Every column is nullable (a quarantined record is a null row).  Recursive schemas are refused.

A `Column` keeps the reader's Avro node next to its Spark type and builder: the programs of
`analytics.avro_program` resolve writer data into it (and its defaults, `default_value`).  The
small schema helpers here (`deref`, `kind_of`...) read parsed Avro JSON for both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from analytics.arrow_builders import (
    ColumnBuilder,
    LeafBuilder,
    ListBuilder,
    MapBuilder,
    StructBuilder,
    UnionBuilder,
)
from schemas.serde import AvroSchema

__all__ = [
    "Column",
    "SchemaResolutionError",
    "UnsupportedSchemaError",
    "default_value",
    "deref",
    "is_record",
    "kind_of",
    "logical_of",
    "names_of",
    "plan_column",
    "short_name",
    "spark_type",
]

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


class UnsupportedSchemaError(ValueError):
    """The reader schema cannot be mapped to Spark columns (recursive, or not a record)."""


class SchemaResolutionError(ValueError):
    """Data written with this writer schema cannot be read with the reader schema (Avro rules)."""


# -- schema helpers ----------------------------------------------------------------------------


def deref(node: Any, named: Mapping[str, Any]) -> Any:
    """A named-type reference -> its definition; `{"type": <complex>}` wrappers unwrapped."""
    while True:
        if isinstance(node, str) and node not in _PRIMITIVES:
            try:
                node = named[node]
            except KeyError:
                raise UnsupportedSchemaError(f"unknown named type {node!r}") from None
        elif isinstance(node, dict) and isinstance(node.get("type"), (dict, list)):
            node = node["type"]
        elif isinstance(node, dict) and node.get("type") in named and node["type"] not in _PRIMITIVES:
            node = named[node["type"]]
        else:
            return node


def kind_of(node: Any) -> str:
    """A dereferenced node's type: a primitive's name, record, error, enum, array..., or union."""
    if isinstance(node, list):
        return "union"
    if isinstance(node, str):
        return node
    kind = node["type"]
    return "error" if kind == "error" else str(kind)


def logical_of(node: Any) -> str | None:
    return node.get("logicalType") if isinstance(node, dict) else None


def short_name(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def names_of(node: Mapping[str, Any]) -> set[str]:
    return {short_name(node["name"]), *(short_name(a) for a in node.get("aliases", ()))}


def is_record(node: Any) -> bool:
    return isinstance(node, dict) and node.get("type") in ("record", "error")


# -- reader schema -> Spark type + column builder -----------------------------------------------


@dataclass(frozen=True)
class Column:
    """A reader type: its Spark type, its builder, and how writer data resolves into it."""

    spark: DataType
    node: ColumnBuilder
    schema: Any  # the reader's (dereferenced) Avro node
    members: tuple[Any, ...] = ()  # for unions: the reader's non-null branches
    nullable_union: bool = False
    children: tuple[Column, ...] = ()


def spark_type(schema: AvroSchema | Any, named: Mapping[str, Any] | None = None) -> DataType:
    """The Spark type of an Avro schema (see the module docstring for the mapping)."""
    if isinstance(schema, AvroSchema):
        return plan_column(schema.parsed, schema.named, frozenset()).spark
    return plan_column(schema, named or {}, frozenset()).spark


def plan_column(node: Any, named: Mapping[str, Any], visiting: frozenset[str]) -> Column:
    """The column of reader node `node`; `visiting`: the records around it (recursion is refused)."""
    node = deref(node, named)
    kind = kind_of(node)
    logical = logical_of(node)
    if kind == "union":
        branches = [deref(b, named) for b in node]
        non_null = [b for b in branches if kind_of(b) != "null"]
        nullable = len(non_null) < len(branches)
        kinds = {kind_of(b) for b in non_null if logical_of(b) is None}
        if not non_null:
            return Column(NullType(), LeafBuilder("null"), node, nullable_union=True)
        if len(non_null) == 1:
            inner = plan_column(non_null[0], named, visiting)
            return Column(inner.spark, inner.node, node, (non_null[0],), nullable, (inner,))
        if len(kinds) == len(non_null) and kinds in ({"int", "long"}, {"float", "double"}):
            widest = "long" if "long" in kinds else "double"
            inner = plan_column(widest, named, visiting)
            return Column(inner.spark, inner.node, node, tuple(non_null), nullable, (inner,))
        members = [plan_column(b, named, visiting) for b in non_null]
        names = [f"member{i}" for i in range(len(members))]
        struct = StructType([StructField(n, m.spark, True) for n, m in zip(names, members, strict=True)])
        return Column(
            struct, UnionBuilder(names, [m.node for m in members]), node, tuple(non_null), nullable, tuple(members)
        )
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = int(node.get("precision", 0)), int(node.get("scale", 0))
        if not 0 < precision <= 38 or not 0 <= scale <= precision:
            raise UnsupportedSchemaError(f"decimal({precision}, {scale}) does not fit Spark's decimal(38)")
        return Column(DecimalType(precision, scale), LeafBuilder("dec", precision), node)
    if kind == "long" and logical in ("timestamp-millis", "timestamp-micros"):
        return Column(TimestampType(), LeafBuilder("ts_ms" if logical == "timestamp-millis" else "ts_us"), node)
    if kind == "long" and logical in ("local-timestamp-millis", "local-timestamp-micros"):
        unit = "ts_ms" if logical == "local-timestamp-millis" else "ts_us"
        return Column(TimestampNTZType(), LeafBuilder(unit), node)
    if kind == "int" and logical == "date":
        return Column(DateType(), LeafBuilder("date"), node)
    simple: dict[str, tuple[DataType, str]] = {
        "null": (NullType(), "null"),
        "boolean": (BooleanType(), "bool"),
        "int": (IntegerType(), "i32"),
        "long": (LongType(), "i64"),
        "float": (FloatType(), "f32"),
        "double": (DoubleType(), "f64"),
        "bytes": (BinaryType(), "bin"),
        "fixed": (BinaryType(), "bin"),
        "string": (StringType(), "str"),
        "enum": (StringType(), "str"),
    }
    if kind in simple:
        spark, leaf = simple[kind]
        return Column(spark, LeafBuilder(leaf), node)
    if kind in ("record", "error"):
        name = node["name"]
        if name in visiting:
            raise UnsupportedSchemaError(f"recursive type {name} cannot be a Spark column")
        if not node["fields"]:
            raise UnsupportedSchemaError(f"record {name} has no fields: Spark has no empty struct column")
        inside = visiting | {name}
        fields = [(f["name"], plan_column(f["type"], named, inside)) for f in node["fields"]]
        struct = StructType([StructField(n, c.spark, True) for n, c in fields])
        builder = StructBuilder([n for n, _ in fields], [c.node for _, c in fields])
        return Column(struct, builder, node, children=tuple(c for _, c in fields))
    if kind == "array":
        item = plan_column(node["items"], named, visiting)
        return Column(ArrayType(item.spark, True), ListBuilder(item.node), node, children=(item,))
    if kind == "map":
        values = plan_column(node["values"], named, visiting)
        return Column(MapType(StringType(), values.spark, True), MapBuilder(values.node), node, children=(values,))
    raise UnsupportedSchemaError(f"unsupported Avro type {kind!r}")


# -- defaults: JSON default -> column form ------------------------------------------------------


def default_value(col: Column, value: Any, named: Mapping[str, Any]) -> Any:
    """A reader field's JSON default in the form its column's builder takes (`add`)."""
    node = col.schema
    if isinstance(node, list):
        # A union's default belongs to its first branch.
        first = deref(node[0], named)
        if kind_of(first) == "null" or value is None:
            return None
        if isinstance(col.node, UnionBuilder):
            return (0, default_value(col.children[0], value, named))
        return default_value(col.children[0], value, named)
    kind, logical = kind_of(node), logical_of(node)
    if value is None:
        return None
    if logical == "decimal":
        return int.from_bytes(value.encode("latin-1"), "big", signed=True)
    if kind in ("bytes", "fixed"):
        return value.encode("latin-1")
    if kind in ("float", "double"):
        return float(value)
    if kind in ("record", "error"):
        out: dict[str, Any] = {}
        for f, child in zip(node["fields"], col.children, strict=True):
            if f["name"] in value:
                out[f["name"]] = default_value(child, value[f["name"]], named)
            elif "default" in f:
                out[f["name"]] = default_value(child, f["default"], named)
            else:
                raise SchemaResolutionError(f"default of {node['name']} lacks field {f['name']}")
        return out
    if kind == "array":
        return [default_value(col.children[0], v, named) for v in value]
    if kind == "map":
        return {k: default_value(col.children[0], v, named) for k, v in value.items()}
    return value
