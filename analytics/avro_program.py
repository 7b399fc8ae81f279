"""Avro schema resolution, settled once per (writer, reader) pair into a decoding program.

A program is what reading one record written with the writer schema into the reader's column
builders (`analytics.arrow_builders`) takes, with Avro's resolution already decided: fields
reordered, skipped or defaulted, promotions, enum symbols mapped, union branches picked.  It is a
tuple of operations, each a tuple `(opcode, operands...)`; unions and array or map blocks hold
programs of their own.  Two back-ends run it: `analytics.avro_codegen` turns it into
straight-line Python, and `analytics._avrovm` (C, when built) interprets it.  Both append to the
same builders' lists, so the two are interchangeable record for record.

The operands are the builders' own lists and methods and constants of the reader schema, never
anything from data.  Errors a program meets while reading (out of range, unknown branch...) are
worded by the Python back-end alone: the compiled one hands a record it cannot read to it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from analytics.arrow_builders import LeafBuilder, ListBuilder, MapBuilder, UnionBuilder
from analytics.avro_column_plan import (
    Column,
    SchemaResolutionError,
    default_value,
    deref,
    kind_of,
    logical_of,
    names_of,
)

__all__ = ["MAX_MILLIS", "OPCODES", "Op", "Program", "ProgramGen", "describe_type"]

Op = tuple[Any, ...]
Program = tuple[Op, ...]

MAX_MILLIS = (2**63 - 1) // 1000  # a timestamp-millis value that still fits int64 microseconds

# Reading into a leaf's list (operand 1): `(op, values)`, and for FIXED the size, for DECIMAL the
# size (-1: length-prefixed bytes) and 10**precision, for ENUM the reader's symbol per writer
# index (None: unknown to the reader).
BOOL, INT, LONG, INT_AS_FLOAT, LONG_AS_FLOAT, TS_MILLIS, FLOAT, DOUBLE = range(1, 9)
STRING, BYTES, FIXED, DECIMAL, ENUM = range(9, 14)
# `(CALL, f)` calls f() (a builder's null); `(ADD, f, value)` calls f(value) (a default).
CALL, ADD = 14, 15
FAIL = 16  # `(FAIL, message)`: data of a writer branch the reader cannot hold
UNION = 17  # `(UNION, (program per branch index, ...))`
BLOCKS = 18  # `(BLOCKS, offsets, item program)`: an array's or map's blocks, read
SKIP, SKIP_LONG, SKIP_BYTES = 19, 20, 21  # `(SKIP, n)`: n bytes; a varint; a length and its bytes
SKIP_BLOCKS = 22  # `(SKIP_BLOCKS, item program)`: an array's or map's blocks, skipped

OPCODES = {
    name: value
    for name, value in globals().items()
    if name.isupper() and isinstance(value, int) and name not in ("MAX_MILLIS",)
}

_PROMOTIONS = {
    "boolean": {"boolean"},
    "int": {"int"},
    "long": {"int", "long"},
    "float": {"int", "long", "float"},
    "double": {"int", "long", "float", "double"},
    "string": {"string", "bytes"},
    "bytes": {"string", "bytes"},
}


class ProgramGen:
    """Resolves writer types into reader columns, as programs."""

    def __init__(self, writer_named: Mapping[str, Any], reader_named: Mapping[str, Any]) -> None:
        self.wn = writer_named
        self.rn = reader_named

    # skipping writer data the reader does not want ---------------------------------------------

    def skip(self, w: Any) -> list[Op]:
        w = deref(w, self.wn)
        kind = kind_of(w)
        if kind == "null":
            return []
        if kind == "boolean":
            return [(SKIP, 1)]
        if kind in ("int", "long", "enum"):
            return [(SKIP_LONG,)]
        if kind in ("float", "double"):
            return [(SKIP, 4 if kind == "float" else 8)]
        if kind in ("bytes", "string"):
            return [(SKIP_BYTES,)]
        if kind == "fixed":
            return [(SKIP, int(w["size"]))]
        if kind in ("record", "error"):
            return [op for f in w["fields"] for op in self.skip(f["type"])]
        if kind in ("array", "map"):
            item = self.skip(w["items"]) if kind == "array" else [(SKIP_BYTES,), *self.skip(w["values"])]
            return [(SKIP_BLOCKS, tuple(item))]
        if kind == "union":
            return [(UNION, tuple(tuple(self.skip(b)) for b in w))]
        raise SchemaResolutionError(f"cannot skip writer type {kind}")

    # reading writer data into a reader column -----------------------------------------------------

    def read(self, w: Any, col: Column, where: str) -> list[Op]:
        """The program reading writer type `w` into reader column `col` (resolution per Avro)."""
        w = deref(w, self.wn)
        if kind_of(w) == "union":
            branches = []
            for branch in w:
                try:
                    branches.append(tuple(self.read(branch, col, where)))
                except SchemaResolutionError as e:
                    branches.append(((FAIL, str(e)),))  # Avro: only an error if such data shows up
            return [(UNION, tuple(branches))]
        if isinstance(col.schema, list):
            return self.read_into_union(w, col, where)
        return self.read_plain(w, col, where)

    def read_into_union(self, w: Any, col: Column, where: str) -> list[Op]:
        if kind_of(w) == "null":
            if not col.nullable_union:
                raise SchemaResolutionError(f"{where}: null cannot be read as {describe_type(col.schema)}")
            return [(CALL, col.node.null)]
        if not isinstance(col.node, UnionBuilder):
            # [null, X] or [int, long] / [float, double]: one builder; promote into it.
            target = col.children[0]
            if len(col.members) > 1:  # the merged numeric union's builder is the widest type
                return self.read_plain(w, target, where)
            return self.read(w, target, where)
        choice = _pick_branch(w, col.members, self.rn)
        if choice is None:
            raise SchemaResolutionError(f"{where}: {describe_type(w)} matches no branch of the reader union")
        ops: list[Op] = []
        for i, member in enumerate(col.children):
            ops += self.read(w, member, f"{where}.member{i}") if i == choice else [(CALL, member.node.null)]
        return ops

    def read_plain(self, w: Any, col: Column, where: str) -> list[Op]:
        r = col.schema
        wkind, rkind = kind_of(w), kind_of(r)
        node = col.node
        if rkind == "null":
            if wkind != "null":
                raise SchemaResolutionError(f"{where}: {wkind} cannot be read as null")
            return [(CALL, node.null)]
        if rkind in ("record", "error"):
            if wkind not in ("record", "error") or not (names_of(w) & names_of(r)):
                raise SchemaResolutionError(f"{where}: {describe_type(w)} cannot be read as record {r['name']}")
            return self.record(w, col, where)
        if rkind in ("array", "map"):
            if wkind != rkind:
                raise SchemaResolutionError(f"{where}: {wkind} cannot be read as {rkind}")
            return self.blocks(w, col, where)
        assert isinstance(node, LeafBuilder)
        values = node.values
        rlogical, wlogical = logical_of(r), logical_of(w)
        if rlogical == "decimal" and rkind in ("bytes", "fixed"):
            if (
                wlogical != "decimal"
                or wkind not in ("bytes", "fixed")
                or int(w.get("scale", 0)) != int(r.get("scale", 0))
            ):
                raise SchemaResolutionError(f"{where}: {describe_type(w)} cannot be read as {describe_type(r)}")
            size = -1 if wkind == "bytes" else int(w["size"])
            return [(DECIMAL, values, size, 10 ** int(r["precision"]))]
        if node.kind in ("ts_ms", "ts_us"):
            unit = "millis" if node.kind == "ts_ms" else "micros"
            if wkind != "long" or (wlogical is not None and not wlogical.endswith(unit)):
                raise SchemaResolutionError(f"{where}: {describe_type(w)} cannot be read as {describe_type(r)}")
            return [(TS_MILLIS if node.kind == "ts_ms" else LONG, values)]
        if rkind == "enum":
            if wkind != "enum" or not (names_of(w) & names_of(r)):
                raise SchemaResolutionError(f"{where}: {describe_type(w)} cannot be read as enum {r['name']}")
            symbols = set(r["symbols"])
            default = r.get("default")
            return [(ENUM, values, tuple(s if s in symbols else default for s in w["symbols"]))]
        if rkind == "fixed":
            if wkind != "fixed" or int(w["size"]) != int(r["size"]) or not (names_of(w) & names_of(r)):
                raise SchemaResolutionError(f"{where}: {describe_type(w)} cannot be read as fixed {r['name']}")
            return [(FIXED, values, int(r["size"]))]
        if wkind not in _PROMOTIONS.get(rkind, set()):
            raise SchemaResolutionError(f"{where}: {describe_type(w)} cannot be read as {rkind}")
        if wkind in ("int", "long"):
            as_float = rkind in ("float", "double")
            if wkind == "int":
                return [(INT_AS_FLOAT if as_float else INT, values)]
            return [(LONG_AS_FLOAT if as_float else LONG, values)]
        simple = {"boolean": BOOL, "float": FLOAT, "double": DOUBLE, "bytes": BYTES, "string": BYTES}
        if wkind in ("string", "bytes") and rkind == "string":
            return [(STRING, values)]
        return [(simple[wkind], values)]

    def record(self, w: Any, col: Column, where: str) -> list[Op]:
        r = col.schema
        by_name: dict[str, int] = {}
        for i, f in enumerate(r["fields"]):
            by_name[f["name"]] = i
            for alias in f.get("aliases", ()):
                by_name.setdefault(alias, i)
        seen: set[int] = set()
        ops: list[Op] = []
        for wf in w["fields"]:
            match = by_name.get(wf["name"])
            if match is None or match in seen:
                ops += self.skip(wf["type"])
                continue
            seen.add(match)
            ops += self.read(wf["type"], col.children[match], f"{where}.{r['fields'][match]['name']}")
        for i, rf in enumerate(r["fields"]):
            if i in seen:
                continue
            if "default" not in rf:
                raise SchemaResolutionError(
                    f"{where}.{rf['name']}: the writer has no such field and the reader's has no default"
                )
            child = col.children[i]
            ops.append((ADD, child.node.add, default_value(child, rf["default"], self.rn)))
        return ops

    def blocks(self, w: Any, col: Column, where: str) -> list[Op]:
        node = col.node
        assert isinstance(node, (ListBuilder, MapBuilder))
        if isinstance(node, MapBuilder):
            item = [(STRING, node.keys.values), *self.read(w["values"], col.children[0], f"{where}[]")]
        else:
            item = self.read(w["items"], col.children[0], f"{where}[]")
        return [(BLOCKS, node.offsets, tuple(item))]


def describe_type(node: Any) -> str:
    if isinstance(node, list):
        return "union"
    kind = kind_of(node)
    name = node.get("name") if isinstance(node, dict) else None
    logical = logical_of(node)
    return " ".join(p for p in (kind, name, f"({logical})" if logical else None) if p)


def _pick_branch(w: Any, members: Sequence[Any], named: Mapping[str, Any]) -> int | None:
    """Avro: the first reader branch matching the writer type exactly, else the first it promotes to."""
    wkind = kind_of(w)
    for i, member in enumerate(members):
        m = deref(member, named)
        if kind_of(m) == wkind and (not isinstance(m, dict) or "name" not in m or (names_of(w) & names_of(m))):
            return i
    promotions = {"int": ("long", "float", "double"), "long": ("float", "double"), "float": ("double",)}
    promotions |= {"string": ("bytes",), "bytes": ("string",)}
    for i, m in enumerate(members):
        if kind_of(deref(m, named)) in promotions.get(wkind, ()):
            return i
    return None
