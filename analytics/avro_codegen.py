"""Generated Avro decoders: a decoding program (`analytics.avro_program`) as straight-line Python.

`python_decoder` emits the code a program stands for, reading one record into the reader's
column builders, whose lists' `append` methods are bound into its namespace; it wraps that code
in the decoder of a run of framed values, each under `try`: a value that fails is handed to the
caller's rollback (see `analytics.avro_columns`, which makes a fast and a strict decoder per
writer schema).  Every error message of a record is worded here.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

from analytics import avro_program as op
from analytics.avro_program import MAX_MILLIS, Program

__all__ = ["Decoder", "python_decoder"]

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1

# A decoder: (framed values, header size, first row, errors out) -> next row.
Decoder = Callable[[Sequence[bytes], int, int, list[tuple[int, str]]], int]


class _Bad(Exception):
    """A per-record decode failure (internal: the message becomes the row's `error`)."""


def _varint_overflow(b: int) -> _Bad:
    """The error of a varint whose tenth byte `b` does not end a 64-bit value."""
    return _Bad("varint longer than 10 bytes" if b >= 0x80 else "varint exceeds 64 bits")


def _read_long(buf: bytes, pos: int) -> tuple[int, int]:
    """Zigzag varint at `pos` -> (value, next pos); refuses more than 64 bits."""
    result = 0
    for shift in range(0, 63, 7):
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
    b = buf[pos]
    if b > 1:
        raise _varint_overflow(b)
    result |= b << 63
    return (result >> 1) ^ -(result & 1), pos + 1


def _describe(e: Exception) -> str:
    if isinstance(e, _Bad):
        return str(e)
    if isinstance(e, (IndexError, struct.error)):
        return "truncated: the data ends inside a value"
    if isinstance(e, UnicodeDecodeError):
        return f"invalid UTF-8 in a string: {e.reason}"
    return f"{type(e).__name__}: {e}"


class _Emitter:
    """Emits the Python of a program (the body of the per-value loop)."""

    BODY = 3  # the indent of a record's code inside the decoder's def, loop and try

    def __init__(self, *, fast: bool) -> None:
        # fast: strings are appended as their bytes, UTF-8-checked when their column is built.
        self.decode = "" if fast else ".decode()"
        self.lines: list[str] = []
        self.env: dict[str, Any] = {
            "_rl": _read_long,
            "_vo": _varint_overflow,
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

    def bind(self, obj: Any, prefix: str, key: int | None = None) -> str:
        """A name in the generated code's namespace for `obj`: one per `key` (default: the
        object's identity; the program keeps every object alive, so no identity is reused)."""
        key = id(obj) if key is None else key
        name = self._ids.get(key)
        if name is None:
            name = self.var(prefix)
            self._ids[key] = name
            self.env[name] = obj
        return name

    def append(self, values: list[Any]) -> str:
        """The name bound to `values.append`: one per list (each `.append` is a new object)."""
        return self.bind(values.append, "A", key=id(values))

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
        for shift in range(7, 63, 7):  # bytes 2 to 9
            self.emit(ind + 2, f"b = buf[pos]; pos += 1; {target} |= (b & 127) << {shift}")
            self.emit(ind + 2, "if b < 128: break")
        self.emit(ind + 2, "b = buf[pos]; pos += 1")  # the tenth holds bit 63 alone
        self.emit(ind + 2, "if b > 1: raise _vo(b)")
        self.emit(ind + 2, f"{target} |= b << 63; break")
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

    # operations -------------------------------------------------------------------------------

    def program(self, program: Program, ind: int) -> None:
        for o in program:
            self.operation(o, ind)

    def operation(self, o: tuple[Any, ...], ind: int) -> None:
        code = o[0]
        if code in (op.BOOL, op.INT, op.LONG, op.INT_AS_FLOAT, op.LONG_AS_FLOAT, op.TS_MILLIS):
            append, v = self.append(o[1]), self.var("v")
            if code == op.BOOL:
                self.emit(ind, f"{v} = buf[pos]; pos += 1")
                self.emit(ind, f"if {v} > 1: raise _Bad('boolean byte is not 0 or 1')")
                self.emit(ind, f"{append}({v} == 1)")
                return
            if code in (op.INT, op.INT_AS_FLOAT):
                self.int32(ind, v)
            else:
                self.long(ind, v)
            if code == op.TS_MILLIS:
                self.emit(ind, f"if not -{MAX_MILLIS} <= {v} <= {MAX_MILLIS}: raise _Bad('timestamp out of range')")
            as_float = code in (op.INT_AS_FLOAT, op.LONG_AS_FLOAT)
            self.emit(ind, f"{append}(float({v}))" if as_float else f"{append}({v})")
        elif code in (op.FLOAT, op.DOUBLE):
            size, unpack = (4, "_f32") if code == op.FLOAT else (8, "_f64")
            self.emit(ind, f"{self.append(o[1])}({unpack}(buf, pos)[0]); pos += {size}")
        elif code in (op.STRING, op.BYTES):
            n = self.var("n")
            self.length(ind, n)
            decode = self.decode if code == op.STRING else ""
            self.emit(ind, f"{self.append(o[1])}(buf[pos:pos + {n}]{decode}); pos += {n}")
        elif code == op.FIXED:
            self.emit(ind, f"{self.append(o[1])}(buf[pos:pos + {o[2]}]); pos += {o[2]}")
        elif code == op.DECIMAL:
            _, values, size, limit = o
            v = self.var("v")
            n = str(size)
            if size < 0:
                n = self.var("n")
                self.length(ind, n)
            self.emit(ind, f"{v} = _fb(buf[pos:pos + {n}], 'big', signed=True); pos += {n}")
            self.emit(ind, f"if not -{limit} < {v} < {limit}: raise _Bad('decimal exceeds precision')")
            self.emit(ind, f"{self.append(values)}({v})")
        elif code == op.ENUM:
            _, values, table = o
            v = self.var("v")
            self.long(ind, v)
            self.emit(ind, f"if not 0 <= {v} < {len(table)}: raise _Bad('enum index out of range')")
            self.emit(ind, f"{v} = {self.bind(table, 'E')}[{v}]")
            if None in table:
                self.emit(ind, f"if {v} is None: raise _Bad('enum symbol unknown to the reader')")
            self.emit(ind, f"{self.append(values)}({v})")
        elif code == op.CALL:
            self.emit(ind, f"{self.bind(o[1], 'N')}()")
        elif code == op.ADD:
            self.emit(ind, f"{self.bind(o[1], 'D')}({self.bind(_Const(o[2]), 'C')}.value)")
        elif code == op.FAIL:
            self.emit(ind, f"raise _Bad({o[1]!r})")
        elif code == op.UNION:
            idx = self.var("u")
            self.long(ind, idx)
            for i, branch in enumerate(o[1]):
                self.emit(ind, f"{'if' if i == 0 else 'elif'} {idx} == {i}:")
                self.program(branch, ind + 1)
                self.emit(ind + 1, "pass")
            self.emit(ind, "else: raise _Bad('union branch index out of range')")
        elif code in (op.BLOCKS, op.SKIP_BLOCKS):
            self.blocks(o, ind)
        elif code == op.SKIP:
            self.emit(ind, f"pos += {o[1]}")
        elif code == op.SKIP_LONG:
            self.long(ind, "_")
        elif code == op.SKIP_BYTES:
            n = self.var("n")
            self.length(ind, n)
            self.emit(ind, f"pos += {n}")
        else:
            raise ValueError(f"unknown opcode {code}")

    def blocks(self, o: tuple[Any, ...], ind: int) -> None:
        """An array's or map's blocks: read into the offsets' list, or skipped (a block with a
        negative count comes with its byte size: a skip jumps over it, a read reads it)."""
        read = o[0] == op.BLOCKS
        k = self.var("k")
        count = self.var("c")
        if read:
            self.emit(ind, f"{count} = 0")
        self.emit(ind, "while True:")
        self.long(ind + 1, k)
        self.emit(ind + 1, f"if {k} == 0: break")
        self.emit(ind + 1, f"if {k} < 0:")
        if read:
            self.emit(ind + 2, f"{k} = -{k}")
            self.length(ind + 2, "_")
        else:
            size = self.var("s")
            self.length(ind + 2, size)
            self.emit(ind + 2, f"pos += {size}")
            self.emit(ind + 2, "continue")
        # Items of a zero-width type (null) take no bytes: without a budget, blocks of them
        # would make a small record cost time and memory without bound.
        self.emit(ind + 1, f"items -= {k}")
        self.emit(ind + 1, "if items < 0: raise _Bad('block count larger than the message')")
        if read:
            self.emit(ind + 1, f"{count} += {k}")
        self.emit(ind + 1, f"for _ in range({k}):")
        self.program(o[-1], ind + 2)
        self.emit(ind + 2, "pass")
        if read:
            offsets = self.bind(o[1], "O")
            self.emit(ind, f"{offsets}.append({offsets}[-1] + {count})")


class _Const:
    """A default value in column form, referenced from generated code."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def python_decoder(
    program: Program,
    name: str,
    strict: Decoder | None,
    *,
    rollback: Callable[[int], None],
    truncate: Callable[[int], None],
) -> Decoder:
    """The decoder of a run of framed values: `program`'s code for each value, under `try`.  A
    value that fails is, in the strict decoder (`strict` is None), rolled back out of the columns
    (`rollback(row)`: a null row) and reported in `errors`; in the fast one, truncated away
    (`truncate(row)`) and decoded again by `strict`, whose error it gets."""
    gen = _Emitter(fast=strict is not None)
    gen.program(program, _Emitter.BODY)
    env = gen.env
    env["_rollback"] = rollback
    env["_describe"] = _describe
    env["_truncate"] = truncate
    env["_strict"] = strict
    lines = [
        "def decode(values, start, row, errors):",
        "    for buf in values:",
        "        try:",
        "            pos = start",
        "            nbuf = len(buf)",
        "            items = nbuf  # the array and map items a record may hold: one per byte",
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
    exec(compile("\n".join(lines), f"<avro decoder {name}>", "exec"), env)  # from a parsed schema, never from data
    decode: Decoder = env["decode"]
    return decode
