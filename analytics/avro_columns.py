"""Avro binary -> Arrow columns, fast: one decoder generated per (writer, reader) schema pair.

Why not fastavro per record: measured on 2 cores, `fastavro.schemaless_reader` decodes a real
`OrderCreated` (nested envelope, an array of line items, decimals, timestamps) at ~35k records/s
per core, ~60k/s with logical types stripped, and its container-file block reader is no faster;
then building Arrow from the dicts costs as much again.  (Its ~200k/s holds for tiny flat records.)
polars' Avro reader is fast but rejects or panics on half of our schemas (enums with defaults,
nullable unions).  So, like fastavro's own compiled readers but in plain Python, this module
generates straight-line code for each schema pair -- Avro schema resolution (field reordering,
defaults, promotions, enum symbol mapping, unions) settled at compile time -- that appends values
straight into one Python list per Arrow leaf column.  Arrow arrays are then built from the lists
in C (`pa.array`), decimals and timestamps vectorised; strings stay bytes until Arrow checks them
as UTF-8 (see `EventColumns._compile`).  That is ~4-5x fastavro and skips the dicts.

Every record is decoded under `try`: a record that runs past its end, has trailing bytes, invalid
UTF-8, an out-of-range int or decimal, an unknown union branch or enum index is rolled back out of
the columns, becomes a null row and is reported as `(row, message)`; the records around it decode.

Avro -> Spark types (spark-avro's mapping, so a job moving to spark-avro sees the same shapes):
null -> null; boolean; int -> int; long -> bigint; float; double; bytes and fixed -> binary;
string and enum -> string; decimal (bytes or fixed) -> decimal(p, s); timestamp-millis/micros ->
timestamp; local-timestamp-millis/micros -> timestamp_ntz; date -> date; time-millis -> int;
time-micros -> bigint; uuid -> string; record -> struct; array -> array; map -> map<string, _>;
a union of null and one type -> that type; [int, long] -> bigint; [float, double] -> double; other
unions -> struct<member0, member1, ...> of the non-null branches with only the one written set.
Every column is nullable (a quarantined record is a null row).  Recursive schemas are refused.

The reader decides the shape; any writer schema that resolves to it under Avro's rules decodes
into the same columns, so events written with an older schema version read as the current one.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Context, Decimal
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
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

from schemas.serde import AvroSchema

__all__ = [
    "Decoder",
    "EventColumns",
    "SchemaResolutionError",
    "UnsupportedSchemaError",
    "spark_type",
]

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_MAX_MILLIS = (2**63 - 1) // 1000  # a timestamp-millis value that still fits int64 microseconds
_MAX_INT64_DECIMAL_PRECISION = 18  # unscaled values of these fit int64: built without Decimal objects
_DECIMAL38 = Context(prec=40)  # exact for decimal(38): the default context rounds to 28 digits


class UnsupportedSchemaError(ValueError):
    """The reader schema cannot be mapped to Spark columns (recursive, or not a record)."""


class SchemaResolutionError(ValueError):
    """Data written with this writer schema cannot be read with the reader schema (Avro rules)."""


# A compiled decoder: (framed values, header size, first row, errors out) -> next row.
Decoder = Callable[[Sequence[bytes], int, int, list[tuple[int, str]]], int]


# -- schema helpers ----------------------------------------------------------------------------


def _deref(node: Any, named: Mapping[str, Any]) -> Any:
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


def _kind(node: Any) -> str:
    if isinstance(node, list):
        return "union"
    if isinstance(node, str):
        return node
    kind = node["type"]
    return "error" if kind == "error" else str(kind)


def _logical(node: Any) -> str | None:
    return node.get("logicalType") if isinstance(node, dict) else None


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _names(node: Mapping[str, Any]) -> set[str]:
    return {_short(node["name"]), *(_short(a) for a in node.get("aliases", ()))}


def _is_record(node: Any) -> bool:
    return isinstance(node, dict) and node.get("type") in ("record", "error")


# -- column builders ---------------------------------------------------------------------------


class _Node:
    """Builds one Arrow array from Python lists that generated code appends to.

    Nulls of structs, lists and maps are kept as the indices of the null rows, so that decoding
    a present value costs no validity append (most values are present).
    """

    def size(self) -> int:
        """Rows appended so far."""
        raise NotImplementedError

    def null(self) -> None:
        raise NotImplementedError

    def add(self, value: Any) -> None:
        """Append a value in column form (defaults); None is null."""
        raise NotImplementedError

    def truncate(self, n: int) -> None:
        """Keep the first `n` rows (rolls a failed record back)."""
        raise NotImplementedError

    def finish(self, arrow_type: pa.DataType) -> pa.Array:
        """The Arrow array of everything appended; the lists are cleared in place (generated
        code holds their bound `append` methods)."""
        raise NotImplementedError


def _mask(nulls: list[int], size: int) -> pa.Array | None:
    """Arrow's null mask (True = null) of `size` rows from the null rows, which are cleared."""
    if not nulls:
        return None
    mask = [False] * size
    for row in nulls:
        mask[row] = True
    nulls.clear()
    return pa.array(mask, pa.bool_())


def _drop_nulls_from(nulls: list[int], n: int) -> None:
    while nulls and nulls[-1] >= n:
        nulls.pop()


def _offsets(offsets: list[int]) -> pa.Array:
    """Arrow list offsets from an offsets list, which restarts at [0] in place."""
    array = pa.array(offsets, pa.int32())
    del offsets[1:]
    return array


class _Leaf(_Node):
    """Scalars.  `kind` says how the list's values become Arrow: e.g. ms ints -> timestamp(us)."""

    def __init__(self, kind: str, precision: int = 0) -> None:
        self.kind = kind
        self.precision = precision
        self.values: list[Any] = []

    def size(self) -> int:
        return len(self.values)

    def null(self) -> None:
        self.values.append(None)

    def add(self, value: Any) -> None:
        self.values.append(value)

    def truncate(self, n: int) -> None:
        del self.values[n:]

    def finish(self, arrow_type: pa.DataType) -> pa.Array:
        try:
            return self._arrow(self.values, arrow_type)
        finally:
            self.values.clear()

    def _arrow(self, values: list[Any], arrow_type: pa.DataType) -> pa.Array:
        if self.kind == "null":
            return pa.nulls(len(values), arrow_type)
        if self.kind in ("ts_ms", "ts_us"):
            ints = pa.array(values, pa.int64())
            if self.kind == "ts_ms":
                ints = pc.multiply(ints, 1000)  # range checked per record: cannot overflow
            return ints.cast(arrow_type)
        if self.kind == "date":
            return pa.array(values, pa.int32()).cast(arrow_type)
        if self.kind == "str" and arrow_type == pa.string():
            # The fast decoders append strings as their UTF-8 bytes (defaults and enum symbols
            # are `str`s: Arrow encodes those); the cast checks the bytes, in C.
            try:
                return pa.array(values, pa.binary()).cast(arrow_type)
            except pa.ArrowInvalid as e:
                raise _InvalidTextError(str(e)) from None
        if self.kind == "dec":
            assert isinstance(arrow_type, pa.Decimal128Type)
            if self.precision <= _MAX_INT64_DECIMAL_PRECISION:
                # Unscaled int64 -> decimal128 with scale 0, then the same 16-byte values
                # reinterpreted at the column's scale: no Decimal objects at all.
                unscaled = pa.array(values, pa.int64()).cast(pa.decimal128(38, 0))
                return pa.Array.from_buffers(
                    arrow_type, len(unscaled), unscaled.buffers(), null_count=unscaled.null_count
                )
            scale = arrow_type.scale
            return pa.array([None if v is None else Decimal(v).scaleb(-scale, _DECIMAL38) for v in values], arrow_type)
        return pa.array(values, arrow_type)


class _InvalidTextError(Exception):
    """A string decoded by a fast decoder is not UTF-8 (found when its column is built)."""


class _Struct(_Node):
    def __init__(self, names: list[str], children: list[_Node]) -> None:
        self.names = names
        self.children = children  # never empty: empty records are refused
        self.nulls: list[int] = []

    def size(self) -> int:
        return self.children[0].size()

    def null(self) -> None:
        self.nulls.append(self.size())
        for child in self.children:
            child.null()

    def add(self, value: Any) -> None:
        if value is None:
            self.null()
            return
        for name, child in zip(self.names, self.children, strict=True):
            child.add(value[name])

    def truncate(self, n: int) -> None:
        _drop_nulls_from(self.nulls, n)
        for child in self.children:
            child.truncate(n)

    def finish(self, arrow_type: pa.DataType) -> pa.Array:
        assert isinstance(arrow_type, pa.StructType)
        mask = _mask(self.nulls, self.size())
        fields = list(arrow_type)
        arrays = [c.finish(f.type) for c, f in zip(self.children, fields, strict=True)]
        return pa.StructArray.from_arrays(arrays, fields=fields, mask=mask)


class _Union(_Struct):
    """A general union as struct<member0, member1, ...>: one member set per row."""

    def add(self, value: Any) -> None:
        if value is None:
            self.null()
            return
        index, inner = value
        for i, child in enumerate(self.children):
            if i == index:
                child.add(inner)
            else:
                child.null()


class _List(_Node):
    def __init__(self, item: _Node) -> None:
        self.item = item
        self.offsets = [0]
        self.nulls: list[int] = []

    def size(self) -> int:
        return len(self.offsets) - 1

    def null(self) -> None:
        self.nulls.append(self.size())
        self.offsets.append(self.offsets[-1])

    def add(self, value: Any) -> None:
        if value is None:
            self.null()
            return
        for v in value:
            self.item.add(v)
        self.offsets.append(self.offsets[-1] + len(value))

    def truncate(self, n: int) -> None:
        _drop_nulls_from(self.nulls, n)
        del self.offsets[n + 1 :]
        self.item.truncate(self.offsets[n])

    def finish(self, arrow_type: pa.DataType) -> pa.Array:
        assert isinstance(arrow_type, pa.ListType)
        mask = _mask(self.nulls, self.size())
        items = self.item.finish(arrow_type.value_type)
        return pa.ListArray.from_arrays(_offsets(self.offsets), items, type=arrow_type, mask=mask)


class _Map(_Node):
    def __init__(self, values: _Node) -> None:
        self.keys = _Leaf("str")
        self.values = values
        self.offsets = [0]
        self.nulls: list[int] = []

    def size(self) -> int:
        return len(self.offsets) - 1

    def null(self) -> None:
        self.nulls.append(self.size())
        self.offsets.append(self.offsets[-1])

    def add(self, value: Any) -> None:
        if value is None:
            self.null()
            return
        for k, v in value.items():
            self.keys.add(k)
            self.values.add(v)
        self.offsets.append(self.offsets[-1] + len(value))

    def truncate(self, n: int) -> None:
        _drop_nulls_from(self.nulls, n)
        del self.offsets[n + 1 :]
        self.keys.truncate(self.offsets[n])
        self.values.truncate(self.offsets[n])

    def finish(self, arrow_type: pa.DataType) -> pa.Array:
        assert isinstance(arrow_type, pa.MapType)
        mask = _mask(self.nulls, self.size())
        keys = self.keys.finish(pa.string())
        items = self.values.finish(arrow_type.item_type)
        return pa.MapArray.from_arrays(_offsets(self.offsets), keys, items, type=arrow_type, mask=mask)


# -- reader schema -> Spark type + column builder -----------------------------------------------


@dataclass(frozen=True)
class _Column:
    """A reader type: its Spark type, its builder, and how writer data resolves into it."""

    spark: DataType
    node: _Node
    schema: Any  # the reader's (dereferenced) Avro node
    members: tuple[Any, ...] = ()  # for unions: the reader's non-null branches
    nullable_union: bool = False
    children: tuple[_Column, ...] = ()


def spark_type(schema: AvroSchema | Any, named: Mapping[str, Any] | None = None) -> DataType:
    """The Spark type of an Avro schema (see the module docstring for the mapping)."""
    if isinstance(schema, AvroSchema):
        return _build(schema.parsed, schema.named, frozenset()).spark
    return _build(schema, named or {}, frozenset()).spark


def _build(node: Any, named: Mapping[str, Any], visiting: frozenset[str]) -> _Column:
    node = _deref(node, named)
    kind = _kind(node)
    logical = _logical(node)
    if kind == "union":
        branches = [_deref(b, named) for b in node]
        non_null = [b for b in branches if _kind(b) != "null"]
        nullable = len(non_null) < len(branches)
        kinds = {_kind(b) for b in non_null if _logical(b) is None}
        if not non_null:
            return _Column(NullType(), _Leaf("null"), node, nullable_union=True)
        if len(non_null) == 1:
            inner = _build(non_null[0], named, visiting)
            return _Column(inner.spark, inner.node, node, (non_null[0],), nullable, (inner,))
        if len(kinds) == len(non_null) and kinds in ({"int", "long"}, {"float", "double"}):
            widest = "long" if "long" in kinds else "double"
            inner = _build(widest, named, visiting)
            return _Column(inner.spark, inner.node, node, tuple(non_null), nullable, (inner,))
        members = [_build(b, named, visiting) for b in non_null]
        names = [f"member{i}" for i in range(len(members))]
        struct = StructType([StructField(n, m.spark, True) for n, m in zip(names, members, strict=True)])
        return _Column(
            struct, _Union(names, [m.node for m in members]), node, tuple(non_null), nullable, tuple(members)
        )
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = int(node.get("precision", 0)), int(node.get("scale", 0))
        if not 0 < precision <= 38 or not 0 <= scale <= precision:
            raise UnsupportedSchemaError(f"decimal({precision}, {scale}) does not fit Spark's decimal(38)")
        return _Column(DecimalType(precision, scale), _Leaf("dec", precision), node)
    if kind == "long" and logical in ("timestamp-millis", "timestamp-micros"):
        return _Column(TimestampType(), _Leaf("ts_ms" if logical == "timestamp-millis" else "ts_us"), node)
    if kind == "long" and logical in ("local-timestamp-millis", "local-timestamp-micros"):
        unit = "ts_ms" if logical == "local-timestamp-millis" else "ts_us"
        return _Column(TimestampNTZType(), _Leaf(unit), node)
    if kind == "int" and logical == "date":
        return _Column(DateType(), _Leaf("date"), node)
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
        return _Column(spark, _Leaf(leaf), node)
    if kind in ("record", "error"):
        name = node["name"]
        if name in visiting:
            raise UnsupportedSchemaError(f"recursive type {name} cannot be a Spark column")
        if not node["fields"]:
            raise UnsupportedSchemaError(f"record {name} has no fields: Spark has no empty struct column")
        inside = visiting | {name}
        fields = [(f["name"], _build(f["type"], named, inside)) for f in node["fields"]]
        struct = StructType([StructField(n, c.spark, True) for n, c in fields])
        builder = _Struct([n for n, _ in fields], [c.node for _, c in fields])
        return _Column(struct, builder, node, children=tuple(c for _, c in fields))
    if kind == "array":
        item = _build(node["items"], named, visiting)
        return _Column(ArrayType(item.spark, True), _List(item.node), node, children=(item,))
    if kind == "map":
        values = _build(node["values"], named, visiting)
        return _Column(MapType(StringType(), values.spark, True), _Map(values.node), node, children=(values,))
    raise UnsupportedSchemaError(f"unsupported Avro type {kind!r}")


# -- defaults: JSON default -> column form ------------------------------------------------------


def _default(col: _Column, value: Any, named: Mapping[str, Any]) -> Any:
    node = col.schema
    if isinstance(node, list):
        # A union's default belongs to its first branch.
        first = _deref(node[0], named)
        if _kind(first) == "null" or value is None:
            return None
        if isinstance(col.node, _Union):
            return (0, _default(col.children[0], value, named))
        return _default(col.children[0], value, named)
    kind, logical = _kind(node), _logical(node)
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
                out[f["name"]] = _default(child, value[f["name"]], named)
            elif "default" in f:
                out[f["name"]] = _default(child, f["default"], named)
            else:
                raise SchemaResolutionError(f"default of {node['name']} lacks field {f['name']}")
        return out
    if kind == "array":
        return [_default(col.children[0], v, named) for v in value]
    if kind == "map":
        return {k: _default(col.children[0], v, named) for k, v in value.items()}
    return value


# -- code generation ---------------------------------------------------------------------------


class _Bad(Exception):
    """A per-record decode failure (internal: the message becomes the row's `error`)."""


def _read_long(buf: bytes, pos: int) -> tuple[int, int]:
    """Zigzag varint at `pos` -> (value, next pos); refuses more than 64 bits."""
    result = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise _Bad("varint longer than 10 bytes")


def _describe(e: Exception) -> str:
    if isinstance(e, _Bad):
        return str(e)
    if isinstance(e, (IndexError, struct.error)):
        return "truncated: the data ends inside a value"
    if isinstance(e, UnicodeDecodeError):
        return f"invalid UTF-8 in a string: {e.reason}"
    return f"{type(e).__name__}: {e}"


class _Gen:
    """Emits the body of a decoder for one writer schema into the reader's builders."""

    def __init__(self, writer_named: Mapping[str, Any], reader_named: Mapping[str, Any], *, fast: bool) -> None:
        # fast: strings are appended as their bytes, UTF-8-checked when their column is built.
        self.decode = "" if fast else ".decode()"
        self.wn = writer_named
        self.rn = reader_named
        self.lines: list[str] = []
        self.env: dict[str, Any] = {
            "_rl": _read_long,
            # Bound once: `int.from_bytes` in generated code looks up and binds the classmethod
            # at every call (measured: ~5% of decoding OrderCreated, three decimals a record).
            "_fb": int.from_bytes,
            "_Bad": _Bad,
            "_f32": struct.Struct("<f").unpack_from,
            "_f64": struct.Struct("<d").unpack_from,
        }
        self._ids: dict[int, str] = {}
        self._n = 0

    def var(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def bind(self, obj: Any, prefix: str) -> str:
        key = id(obj)
        name = self._ids.get(key)
        if name is None:
            name = self.var(prefix)
            self._ids[key] = name
            self.env[name] = obj
        return name

    def emit(self, ind: int, line: str) -> None:
        self.lines.append("    " * ind + line)

    # primitives -------------------------------------------------------------------------------

    def long(self, ind: int, target: str) -> None:
        """A zigzag varint into `target`: one byte inline, longer ones unrolled inside a loop
        that runs once (timestamps take six or seven bytes: a function call each, or a loop
        keeping a shift count, would cost more)."""
        self.emit(ind, "b = buf[pos]; pos += 1")
        self.emit(ind, "if b < 128:")
        self.emit(ind + 1, f"{target} = (b >> 1) ^ -(b & 1)")
        self.emit(ind, "else:")
        self.emit(ind + 1, f"{target} = b & 127")
        self.emit(ind + 1, "while True:")
        for shift in range(7, 64, 7):  # bytes 2 to 10
            self.emit(ind + 2, f"b = buf[pos]; pos += 1; {target} |= (b & 127) << {shift}")
            self.emit(ind + 2, "if b < 128: break")
        self.emit(ind + 2, "raise _Bad('varint longer than 10 bytes')")
        self.emit(ind + 1, f"{target} = ({target} >> 1) ^ -({target} & 1)")

    def length(self, ind: int, target: str) -> None:
        """A length: non-negative; lengths under 64 (one even byte) take the short path."""
        self.emit(ind, "b = buf[pos]")
        self.emit(ind, "if b < 128 and not b & 1:")
        self.emit(ind + 1, f"{target} = b >> 1; pos += 1")
        self.emit(ind, "else:")
        self.emit(ind + 1, f"{target}, pos = _rl(buf, pos)")
        self.emit(ind + 1, f"if {target} < 0: raise _Bad('negative length')")

    def int32(self, ind: int, target: str) -> None:
        self.long(ind, target)
        self.emit(ind, f"if not {_INT32_MIN} <= {target} <= {_INT32_MAX}: raise _Bad('int out of range')")

    # skipping writer data the reader does not want ---------------------------------------------

    def skip(self, w: Any, ind: int) -> None:
        w = _deref(w, self.wn)
        kind = _kind(w)
        if kind == "null":
            return
        if kind == "boolean":
            self.emit(ind, "pos += 1")
        elif kind in ("int", "long", "enum"):
            self.long(ind, "_")
        elif kind == "float":
            self.emit(ind, "pos += 4")
        elif kind == "double":
            self.emit(ind, "pos += 8")
        elif kind in ("bytes", "string"):
            n = self.var("n")
            self.length(ind, n)
            self.emit(ind, f"pos += {n}")
        elif kind == "fixed":
            self.emit(ind, f"pos += {int(w['size'])}")
        elif kind in ("record", "error"):
            for f in w["fields"]:
                self.skip(f["type"], ind)
        elif kind in ("array", "map"):
            k = self.var("k")
            self.emit(ind, "while True:")
            self.long(ind + 1, k)
            self.emit(ind + 1, f"if {k} == 0: break")
            self.emit(ind + 1, f"if {k} < 0:")
            size = self.var("s")
            self.length(ind + 2, size)  # a negative count comes with the block's byte size: jump
            self.emit(ind + 2, f"pos += {size}")
            self.emit(ind + 2, "continue")
            self.emit(ind + 1, f"if {k} > nbuf: raise _Bad('block count larger than the message')")
            self.emit(ind + 1, f"for _ in range({k}):")
            if kind == "map":
                self.skip("string", ind + 2)
            self.skip(w["items"] if kind == "array" else w["values"], ind + 2)
            self.emit(ind + 2, "pass")
        elif kind == "union":
            idx = self.var("u")
            self.long(ind, idx)
            for i, branch in enumerate(w):
                self.emit(ind, f"{'if' if i == 0 else 'elif'} {idx} == {i}:")
                self.skip(branch, ind + 1)
                self.emit(ind + 1, "pass")
            self.emit(ind, "else: raise _Bad('union branch index out of range')")
        else:
            raise SchemaResolutionError(f"cannot skip writer type {kind}")

    # reading writer data into a reader column -----------------------------------------------------

    def read(self, w: Any, col: _Column, ind: int, where: str) -> None:
        """Emit code reading writer type `w` into reader column `col` (resolution per Avro)."""
        w = _deref(w, self.wn)
        wkind = _kind(w)
        if wkind == "union":
            idx = self.var("u")
            self.long(ind, idx)
            for i, branch in enumerate(w):
                self.emit(ind, f"{'if' if i == 0 else 'elif'} {idx} == {i}:")
                try:
                    mark = len(self.lines)
                    self.read(branch, col, ind + 1, where)
                except SchemaResolutionError as e:
                    # Avro: only an error if data of that branch shows up.
                    del self.lines[mark:]
                    self.emit(ind + 1, f"raise _Bad({str(e)!r})")
            self.emit(ind, "else: raise _Bad('union branch index out of range')")
            return
        if isinstance(col.schema, list):
            self.read_into_union(w, col, ind, where)
            return
        self.read_plain(w, col, ind, where)

    def read_into_union(self, w: Any, col: _Column, ind: int, where: str) -> None:
        wkind = _kind(w)
        if wkind == "null":
            if not col.nullable_union:
                raise SchemaResolutionError(f"{where}: null cannot be read as {_describe_type(col.schema)}")
            self.emit(ind, f"{self.bind(col.node.null, 'N')}()")
            return
        if not isinstance(col.node, _Union):
            # [null, X] or [int, long] / [float, double]: one builder; promote into it.
            target = col.children[0]
            if len(col.members) > 1:  # the merged numeric union's builder is the widest type
                self.read_plain(w, target, ind, where)
                return
            self.read(w, target, ind, where)
            return
        choice = _pick_branch(w, col.members, self.rn)
        if choice is None:
            raise SchemaResolutionError(f"{where}: {_describe_type(w)} matches no branch of the reader union")
        for i, member in enumerate(col.children):
            if i == choice:
                self.read(w, member, ind, f"{where}.member{i}")
            else:
                self.emit(ind, f"{self.bind(member.node.null, 'N')}()")

    def read_plain(self, w: Any, col: _Column, ind: int, where: str) -> None:
        r = col.schema
        wkind, rkind = _kind(w), _kind(r)
        node = col.node
        if rkind == "null":
            if wkind != "null":
                raise SchemaResolutionError(f"{where}: {wkind} cannot be read as null")
            self.emit(ind, f"{self.bind(node.null, 'N')}()")
            return
        if rkind in ("record", "error"):
            if wkind not in ("record", "error") or not (_names(w) & _names(r)):
                raise SchemaResolutionError(f"{where}: {_describe_type(w)} cannot be read as record {r['name']}")
            self.record(w, col, ind, where)
            return
        if rkind == "array":
            if wkind != "array":
                raise SchemaResolutionError(f"{where}: {wkind} cannot be read as array")
            self.repeated(w["items"], col, ind, where, is_map=False)
            return
        if rkind == "map":
            if wkind != "map":
                raise SchemaResolutionError(f"{where}: {wkind} cannot be read as map")
            self.repeated(w["values"], col, ind, where, is_map=True)
            return
        append = self.bind(node.values.append, "A") if isinstance(node, _Leaf) else ""
        v = self.var("v")
        rlogical, wlogical = _logical(r), _logical(w)
        if rlogical == "decimal" and rkind in ("bytes", "fixed"):
            if (
                wlogical != "decimal"
                or wkind not in ("bytes", "fixed")
                or int(w.get("scale", 0)) != int(r.get("scale", 0))
            ):
                raise SchemaResolutionError(f"{where}: {_describe_type(w)} cannot be read as {_describe_type(r)}")
            if wkind == "bytes":
                n = self.var("n")
                self.length(ind, n)
            else:
                n = str(int(w["size"]))
            self.emit(ind, f"{v} = _fb(buf[pos:pos + {n}], 'big', signed=True); pos += {n}")
            limit = 10 ** int(r["precision"])
            self.emit(ind, f"if not -{limit} < {v} < {limit}: raise _Bad('decimal exceeds precision')")
            self.emit(ind, f"{append}({v})")
            return
        if isinstance(node, _Leaf) and node.kind in ("ts_ms", "ts_us"):
            unit = "millis" if node.kind == "ts_ms" else "micros"
            if wkind != "long" or (wlogical is not None and not wlogical.endswith(unit)):
                raise SchemaResolutionError(f"{where}: {_describe_type(w)} cannot be read as {_describe_type(r)}")
            self.long(ind, v)
            if node.kind == "ts_ms":
                self.emit(ind, f"if not -{_MAX_MILLIS} <= {v} <= {_MAX_MILLIS}: raise _Bad('timestamp out of range')")
            self.emit(ind, f"{append}({v})")
            return
        if rkind == "enum":
            if wkind != "enum" or not (_names(w) & _names(r)):
                raise SchemaResolutionError(f"{where}: {_describe_type(w)} cannot be read as enum {r['name']}")
            symbols = set(r["symbols"])
            default = r.get("default")
            table = tuple(s if s in symbols else default for s in w["symbols"])
            t = self.bind(table, "E")
            self.long(ind, v)
            self.emit(ind, f"if not 0 <= {v} < {len(table)}: raise _Bad('enum index out of range')")
            self.emit(ind, f"{v} = {t}[{v}]")
            if None in table:
                self.emit(ind, f"if {v} is None: raise _Bad('enum symbol unknown to the reader')")
            self.emit(ind, f"{append}({v})")
            return
        if rkind == "fixed":
            if wkind != "fixed" or int(w["size"]) != int(r["size"]) or not (_names(w) & _names(r)):
                raise SchemaResolutionError(f"{where}: {_describe_type(w)} cannot be read as fixed {r['name']}")
            size = int(r["size"])
            self.emit(ind, f"{append}(buf[pos:pos + {size}]); pos += {size}")
            return
        self.primitive(w, wkind, rkind, node, append, v, ind, where)

    def primitive(  # noqa: PLR0917 - the state of read_plain, passed on
        self, w: Any, wkind: str, rkind: str, node: _Node, append: str, v: str, ind: int, where: str
    ) -> None:
        assert isinstance(node, _Leaf)
        promotions = {
            "boolean": {"boolean"},
            "int": {"int"},
            "long": {"int", "long"},
            "float": {"int", "long", "float"},
            "double": {"int", "long", "float", "double"},
            "string": {"string", "bytes"},
            "bytes": {"string", "bytes"},
        }
        if wkind not in promotions.get(rkind, set()) or wkind in ("enum", "fixed"):
            raise SchemaResolutionError(f"{where}: {_describe_type(w)} cannot be read as {rkind}")
        if wkind == "boolean":
            self.emit(ind, f"{v} = buf[pos]; pos += 1")
            self.emit(ind, f"if {v} > 1: raise _Bad('boolean byte is not 0 or 1')")
            self.emit(ind, f"{append}({v} == 1)")
        elif wkind == "int" and node.kind in ("i32", "date"):
            self.int32(ind, v)
            self.emit(ind, f"{append}({v})")
        elif wkind in ("int", "long"):
            if wkind == "int":
                self.int32(ind, v)
            else:
                self.long(ind, v)
            self.emit(ind, f"{append}({v})" if rkind in ("int", "long") else f"{append}(float({v}))")
        elif wkind == "float":
            self.emit(ind, f"{append}(_f32(buf, pos)[0]); pos += 4")
        elif wkind == "double":
            self.emit(ind, f"{append}(_f64(buf, pos)[0]); pos += 8")
        else:  # string / bytes
            n = self.var("n")
            self.length(ind, n)
            if rkind == "string":
                self.emit(ind, f"{append}(buf[pos:pos + {n}]{self.decode}); pos += {n}")
            else:
                self.emit(ind, f"{append}(buf[pos:pos + {n}]); pos += {n}")

    def record(self, w: Any, col: _Column, ind: int, where: str, *, top: bool = False) -> None:
        r = col.schema
        by_name: dict[str, int] = {}
        for i, f in enumerate(r["fields"]):
            by_name[f["name"]] = i
            for alias in f.get("aliases", ()):
                by_name.setdefault(alias, i)
        seen: set[int] = set()
        for wf in w["fields"]:
            match = by_name.get(wf["name"])
            if match is None or match in seen:
                self.skip(wf["type"], ind)
                continue
            seen.add(match)
            self.read(wf["type"], col.children[match], ind, f"{where}.{r['fields'][match]['name']}")
        for i, rf in enumerate(r["fields"]):
            if i in seen:
                continue
            if "default" not in rf:
                raise SchemaResolutionError(
                    f"{where}.{rf['name']}: the writer has no such field and the reader's has no default"
                )
            child = col.children[i]
            value = _default(child, rf["default"], self.rn)
            self.emit(ind, f"{self.bind(child.node.add, 'D')}({self.bind(_Const(value), 'C')}.value)")

    def repeated(self, witem: Any, col: _Column, ind: int, where: str, *, is_map: bool) -> None:
        node = col.node
        assert isinstance(node, (_List, _Map))
        item = col.children[0]
        count, k = self.var("c"), self.var("k")
        self.emit(ind, f"{count} = 0")
        self.emit(ind, "while True:")
        self.long(ind + 1, k)
        self.emit(ind + 1, f"if {k} == 0: break")
        self.emit(ind + 1, f"if {k} < 0:")
        self.emit(ind + 2, f"{k} = -{k}")
        self.length(ind + 2, "_")
        self.emit(ind + 1, f"if {k} > nbuf: raise _Bad('block count larger than the message')")
        self.emit(ind + 1, f"{count} += {k}")
        self.emit(ind + 1, f"for _ in range({k}):")
        if is_map:
            assert isinstance(node, _Map)
            n = self.var("n")
            self.length(ind + 2, n)
            keys = self.bind(node.keys.values.append, "A")
            self.emit(ind + 2, f"{keys}(buf[pos:pos + {n}]{self.decode}); pos += {n}")
        self.read(witem, item, ind + 2, f"{where}[]")
        offsets = self.bind(node.offsets, "O")
        self.emit(ind, f"{offsets}.append({offsets}[-1] + {count})")


@dataclass(frozen=True)
class _Const:
    """A default value in column form, referenced from generated code."""

    value: Any


def _describe_type(node: Any) -> str:
    if isinstance(node, list):
        return "union"
    kind = _kind(node)
    name = node.get("name") if isinstance(node, dict) else None
    logical = _logical(node)
    return " ".join(p for p in (kind, name, f"({logical})" if logical else None) if p)


def _pick_branch(w: Any, members: Sequence[Any], named: Mapping[str, Any]) -> int | None:
    """Avro: the first reader branch matching the writer type exactly, else the first it promotes to."""
    wkind = _kind(w)
    for i, member in enumerate(members):
        m = _deref(member, named)
        if _kind(m) == wkind and (not isinstance(m, dict) or "name" not in m or (_names(w) & _names(m))):
            return i
    promotions = {"int": ("long", "float", "double"), "long": ("float", "double"), "float": ("double",)}
    promotions |= {"string": ("bytes",), "bytes": ("string",)}
    for i, m in enumerate(members):
        if _kind(_deref(m, named)) in promotions.get(wkind, ()):
            return i
    return None


# -- the public builder ------------------------------------------------------------------------

_T = TypeVar("_T")


class EventColumns:
    """Arrow columns for the top-level fields of a reader schema, filled by compiled decoders.

    The reader is a record (its fields become columns) or a union of records (one struct column
    per record, named by its short name, only the one written set).  `decoder(writer)` compiles
    (once per writer schema) a function that appends decoded records; `null_rows(n)` appends
    rows with every field null; `finish()` returns one Arrow array per column and starts over.
    """

    def __init__(self, reader: AvroSchema, rename: Callable[[str], str] = lambda name: name) -> None:
        self.reader = reader
        root = _deref(reader.parsed, reader.named)
        self._union_of_records = isinstance(root, list)
        if self._union_of_records:
            branches = [_deref(b, reader.named) for b in root]
            if not all(_is_record(b) for b in branches):
                raise UnsupportedSchemaError("a reader union must contain only records")
            self._columns = [_build(b, reader.named, frozenset()) for b in branches]
            names = [_short(b["name"]) for b in branches]
        elif _is_record(root):
            top = _build(root, reader.named, frozenset())
            self._root = top
            self._columns = list(top.children)
            names = [f["name"] for f in root["fields"]]
        else:
            raise UnsupportedSchemaError(f"the reader schema must be a record or a union of records, not {_kind(root)}")
        self.names = [rename(n) for n in names]
        if len(set(self.names)) != len(self.names):
            raise UnsupportedSchemaError(f"duplicate column names: {self.names}")
        self.fields = [StructField(n, c.spark, True) for n, c in zip(self.names, self._columns, strict=True)]
        # Per writer schema: the fast decoder and the strict one (see `_compile`).
        self._decoders: dict[str, tuple[Decoder, Decoder] | SchemaResolutionError] = {}
        self._strict = False  # while set, `decoder()` hands out the strict decoders

    def build(self, fill: Callable[[], _T], arrow_types: Sequence[pa.DataType]) -> tuple[_T, list[pa.Array]]:
        """Run `fill` (which calls the decoders of `decoder(...)` and `null_rows`), then `finish`:
        `fill`'s result and the arrays.  On any failure the builders are reset, so builders
        cached across tasks never carry half a batch into the next one."""
        try:
            try:
                return fill(), self.finish(arrow_types)
            except _InvalidTextError:
                # A string is not UTF-8: decode the batch again with the strict decoders, which
                # check each string and quarantine exactly the records holding a bad one.
                self.reset()
                self._strict = True
                try:
                    return fill(), self.finish(arrow_types)
                finally:
                    self._strict = False
        except BaseException:
            self.reset()
            raise

    def decoder(self, writer: AvroSchema) -> Decoder:
        """The decoder of data written with `writer`; raises `SchemaResolutionError` if it cannot
        be read as the reader (then every record written with it is quarantined)."""
        found = self._decoders.get(writer.text)
        if found is None:
            try:
                found = self._compile(writer)
            except (SchemaResolutionError, UnsupportedSchemaError) as e:
                found = SchemaResolutionError(str(e))
            self._decoders[writer.text] = found
        if isinstance(found, SchemaResolutionError):
            raise found
        return found[self._strict]

    def reset(self) -> None:
        """Drop everything appended (after a failure half-way through a batch)."""
        for col in self._columns:
            col.node.truncate(0)

    def null_rows(self, count: int) -> None:
        for col in self._columns:
            for _ in range(count):
                col.node.null()

    def finish(self, arrow_types: Iterable[pa.DataType]) -> list[pa.Array]:
        """One array per column, in the order of `fields`; the builders start over."""
        return [c.node.finish(t) for c, t in zip(self._columns, arrow_types, strict=True)]

    def _rollback(self, row: int) -> None:
        for col in self._columns:
            col.node.truncate(row)
            col.node.null()

    def _truncate(self, row: int) -> None:
        for col in self._columns:
            col.node.truncate(row)

    def _compile(self, writer: AvroSchema) -> tuple[Decoder, Decoder]:
        """The fast and the strict decoder of `writer`'s data.

        They differ only in strings: the strict one decodes each (a `str`; invalid UTF-8
        quarantines its record), the fast one keeps its bytes, UTF-8-checked in C when the column
        is built (a `str` costs more to make and to turn into Arrow); on invalid UTF-8, `build`
        decodes the batch again with the strict decoders.  A record the fast one cannot decode is
        decoded again by the strict one, whose error it gets (a record may hold bad UTF-8 and be
        truncated: the strict decoder reports what it meets first).
        """
        w = _deref(writer.parsed, writer.named)
        if not _is_record(w):
            raise SchemaResolutionError(f"the writer schema is {_kind(w)}, not a record")
        strict = self._generate(writer, w, None)
        return self._generate(writer, w, strict), strict

    def _generate(self, writer: AvroSchema, w: Any, strict: Decoder | None) -> Decoder:
        """The strict decoder, or (given the strict one) the fast one."""
        gen = _Gen(writer.named, self.reader.named, fast=strict is not None)
        gen.env["_rollback"] = self._rollback
        gen.env["_describe"] = _describe
        gen.env["_truncate"] = self._truncate
        gen.env["_strict"] = strict
        body = 3
        if self._union_of_records:
            choice = next(
                (i for i, c in enumerate(self._columns) if _names(w) & _names(c.schema)),
                None,
            )
            if choice is None:
                raise SchemaResolutionError(f"{w['name']} is none of the reader union's records")
            for i, col in enumerate(self._columns):
                if i == choice:
                    gen.record(w, col, body, _short(col.schema["name"]))
                else:
                    gen.emit(body, f"{gen.bind(col.node.null, 'N')}()")
        else:
            r = self._root.schema
            if not (_names(w) & _names(r)):
                raise SchemaResolutionError(f"{w['name']} is not {r['name']}")
            gen.record(w, self._root, body, _short(r["name"]), top=True)
        lines = [
            "def decode(values, start, row, errors):",
            "    for buf in values:",
            "        try:",
            "            pos = start",
            "            nbuf = len(buf)",
            *gen.lines,
            "            if pos != nbuf:",
            "                raise _Bad('trailing bytes after the record' if pos < nbuf else 'truncated')",
            *(
                [
                    "        except Exception as e:",
                    "            _rollback(row)",
                    "            errors.append((row, _describe(e)))",
                ]
                if strict is None
                else [
                    "        except Exception:",
                    "            _truncate(row)",
                    "            _strict((buf,), start, row, errors)",
                ]
            ),
            "        row += 1",
            "    return row",
        ]
        env = gen.env
        exec(
            compile("\n".join(lines), f"<avro decoder {writer.name}>", "exec"), env
        )  # generated from a parsed schema, never from data
        decode: Decoder = env["decode"]
        return decode
