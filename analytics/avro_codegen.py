"""Generated Avro decoders: straight-line Python for one (writer, reader) schema pair.

`DecoderGen` emits the code that reads one record written with the writer schema into the
reader's column builders (`analytics.arrow_builders`, planned by `analytics.avro_column_plan`):
Avro schema resolution (field reordering, defaults, promotions, enum symbol mapping, unions) is
settled while generating, so the code does only the reading; builders' `append` methods are bound
into its namespace.  `function` wraps that code in the decoder of a run of framed values, each
under `try`: a value that fails is handed to the caller's rollback (see `analytics.avro_columns`,
which compiles a fast and a strict decoder per writer schema).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from analytics.arrow_builders import ColumnBuilder, LeafBuilder, ListBuilder, MapBuilder, UnionBuilder
from analytics.avro_column_plan import (
    Column,
    SchemaResolutionError,
    default_value,
    deref,
    kind_of,
    logical_of,
    names_of,
)

__all__ = ["Decoder", "DecoderGen"]

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_MAX_MILLIS = (2**63 - 1) // 1000  # a timestamp-millis value that still fits int64 microseconds

# A compiled decoder: (framed values, header size, first row, errors out) -> next row.
Decoder = Callable[[Sequence[bytes], int, int, list[tuple[int, str]]], int]


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


class DecoderGen:
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
        w = deref(w, self.wn)
        kind = kind_of(w)
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

    def read(self, w: Any, col: Column, ind: int, where: str) -> None:
        """Emit code reading writer type `w` into reader column `col` (resolution per Avro)."""
        w = deref(w, self.wn)
        wkind = kind_of(w)
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

    def read_into_union(self, w: Any, col: Column, ind: int, where: str) -> None:
        wkind = kind_of(w)
        if wkind == "null":
            if not col.nullable_union:
                raise SchemaResolutionError(f"{where}: null cannot be read as {_describe_type(col.schema)}")
            self.emit(ind, f"{self.bind(col.node.null, 'N')}()")
            return
        if not isinstance(col.node, UnionBuilder):
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

    def read_plain(self, w: Any, col: Column, ind: int, where: str) -> None:
        r = col.schema
        wkind, rkind = kind_of(w), kind_of(r)
        node = col.node
        if rkind == "null":
            if wkind != "null":
                raise SchemaResolutionError(f"{where}: {wkind} cannot be read as null")
            self.emit(ind, f"{self.bind(node.null, 'N')}()")
            return
        if rkind in ("record", "error"):
            if wkind not in ("record", "error") or not (names_of(w) & names_of(r)):
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
        append = self.bind(node.values.append, "A") if isinstance(node, LeafBuilder) else ""
        v = self.var("v")
        rlogical, wlogical = logical_of(r), logical_of(w)
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
        if isinstance(node, LeafBuilder) and node.kind in ("ts_ms", "ts_us"):
            unit = "millis" if node.kind == "ts_ms" else "micros"
            if wkind != "long" or (wlogical is not None and not wlogical.endswith(unit)):
                raise SchemaResolutionError(f"{where}: {_describe_type(w)} cannot be read as {_describe_type(r)}")
            self.long(ind, v)
            if node.kind == "ts_ms":
                self.emit(ind, f"if not -{_MAX_MILLIS} <= {v} <= {_MAX_MILLIS}: raise _Bad('timestamp out of range')")
            self.emit(ind, f"{append}({v})")
            return
        if rkind == "enum":
            if wkind != "enum" or not (names_of(w) & names_of(r)):
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
            if wkind != "fixed" or int(w["size"]) != int(r["size"]) or not (names_of(w) & names_of(r)):
                raise SchemaResolutionError(f"{where}: {_describe_type(w)} cannot be read as fixed {r['name']}")
            size = int(r["size"])
            self.emit(ind, f"{append}(buf[pos:pos + {size}]); pos += {size}")
            return
        self.primitive(w, wkind, rkind, node, append, v, ind, where)

    def primitive(  # noqa: PLR0917 - the state of read_plain, passed on
        self, w: Any, wkind: str, rkind: str, node: ColumnBuilder, append: str, v: str, ind: int, where: str
    ) -> None:
        assert isinstance(node, LeafBuilder)
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

    def record(self, w: Any, col: Column, ind: int, where: str, *, top: bool = False) -> None:
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
            value = default_value(child, rf["default"], self.rn)
            self.emit(ind, f"{self.bind(child.node.add, 'D')}({self.bind(_Const(value), 'C')}.value)")

    def repeated(self, witem: Any, col: Column, ind: int, where: str, *, is_map: bool) -> None:
        node = col.node
        assert isinstance(node, (ListBuilder, MapBuilder))
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
            assert isinstance(node, MapBuilder)
            n = self.var("n")
            self.length(ind + 2, n)
            keys = self.bind(node.keys.values.append, "A")
            self.emit(ind + 2, f"{keys}(buf[pos:pos + {n}]{self.decode}); pos += {n}")
        self.read(witem, item, ind + 2, f"{where}[]")
        offsets = self.bind(node.offsets, "O")
        self.emit(ind, f"{offsets}.append({offsets}[-1] + {count})")

    # the decoder function ---------------------------------------------------------------------

    BODY = 3  # the indent of a record's code inside `function`'s def, loop and try

    def function(
        self, name: str, strict: Decoder | None, *, rollback: Callable[[int], None], truncate: Callable[[int], None]
    ) -> Decoder:
        """The decoder of a run of framed values: the code emitted (at indent BODY) for each value,
        under `try`.  A value that fails is, in the strict decoder (`strict` is None), rolled back
        out of the columns (`rollback(row)`: a null row) and reported in `errors`; in the fast
        one, truncated away (`truncate(row)`) and decoded again by `strict`, whose error it gets."""
        self.env["_rollback"] = rollback
        self.env["_describe"] = _describe
        self.env["_truncate"] = truncate
        self.env["_strict"] = strict
        lines = [
            "def decode(values, start, row, errors):",
            "    for buf in values:",
            "        try:",
            "            pos = start",
            "            nbuf = len(buf)",
            *self.lines,
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
        env = self.env
        exec(
            compile("\n".join(lines), f"<avro decoder {name}>", "exec"), env
        )  # generated from a parsed schema, never from data
        decode: Decoder = env["decode"]
        return decode


@dataclass(frozen=True)
class _Const:
    """A default value in column form, referenced from generated code."""

    value: Any


def _describe_type(node: Any) -> str:
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
