"""Avro binary -> Arrow columns, fast: one decoder generated per (writer, reader) schema pair.

Why not fastavro per record: measured on 2 cores, `fastavro.schemaless_reader` decodes a real
`OrderCreated` (nested envelope, an array of line items, decimals, timestamps) at ~35k records/s
per core, ~60k/s with logical types stripped, and its container-file block reader is no faster;
then building Arrow from the dicts costs as much again.  (Its ~200k/s holds for tiny flat records.)
polars' Avro reader is fast but rejects or panics on half of our schemas (enums with defaults,
nullable unions).  So Avro schema resolution (field reordering, defaults, promotions, enum symbol
mapping, unions) is settled once per schema pair into a decoding program, and the program
appends values straight into one Python list per Arrow leaf column.  Arrow arrays are then built
from the lists in C (`pa.array`), decimals and timestamps vectorised; strings stay bytes until
Arrow checks them as UTF-8 (see `EventColumns._compile`).

Two decoders run a program.  The fast one is compiled (`analytics._avrovm`, C: 0.35 us for an
`OrderCreated` on one core, against 3.3 us for generated Python, itself ~4-5x fastavro); the
strict one is generated straight-line Python, which also stands in for the fast one when the
package was installed without a C compiler (`COMPILED` says which).

Every record is decoded under `try`: a record that runs past its end, has trailing bytes, invalid
UTF-8, an out-of-range int or decimal, an unknown union branch or enum index, or more array and
map items than it has bytes (nulls take none: unbounded, they would cost time and memory) is
rolled back out of the columns, becomes a null row and is reported as `(row, message)`; the records around it decode.
The compiled decoder words no message: a record it cannot read goes to the strict decoder.

The reader decides the shape; any writer schema that resolves to it under Avro's rules decodes
into the same columns, so events written with an older schema version read as the current one.

The parts, one module each:
- `analytics.avro_column_plan`: the reader schema -> Spark types and column builders (the
  Avro -> Spark type mapping is there), the schema errors;
- `analytics.arrow_builders`: the Python lists decoded values are appended to, built into Arrow;
- `analytics.avro_program`: a (writer, reader) schema pair -> its decoding program;
- `analytics.avro_codegen`: a program as generated Python (the strict decoder, and the fast
  one without the extension); `analytics/_avrovm.c`: the program interpreted in C (the fast one);
- this module, `EventColumns`: the columns of a reader, a fast and a strict decoder per writer
  schema, and the quarantine of records that do not decode.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Sequence
from types import ModuleType
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.types import StructField

from analytics.arrow_builders import InvalidTextError
from analytics.avro_codegen import Decoder, python_decoder
from analytics.avro_column_plan import (
    SchemaResolutionError,
    UnsupportedSchemaError,
    deref,
    is_record,
    kind_of,
    names_of,
    plan_column,
    short_name,
)
from analytics.avro_program import CALL, Op, Program, ProgramGen
from schemas.serde import AvroSchema

__all__ = ["COMPILED", "EventColumns"]

_avrovm: ModuleType | None
try:
    _avrovm = importlib.import_module("analytics._avrovm")
except ImportError:  # built without a C compiler: generated Python alone
    _avrovm = None

COMPILED = _avrovm is not None

_T = TypeVar("_T")


class EventColumns:
    """Arrow columns for the top-level fields of a reader schema, filled by compiled decoders.

    The reader is a record (its fields become columns) or a union of records (one struct column
    per record, named by its short name, only the one written set).  `decoder(writer)` compiles
    (once per writer schema) a function that appends decoded records; `null_rows(n)` appends
    rows with every field null; `finish()` returns one Arrow array per column and starts over.
    """

    def __init__(
        self, reader: AvroSchema, rename: Callable[[str], str] = lambda name: name, *, compiled: bool = COMPILED
    ) -> None:
        self.reader = reader
        self._vm = _avrovm if compiled else None
        root = deref(reader.parsed, reader.named)
        self._union_of_records = isinstance(root, list)
        if self._union_of_records:
            branches = [deref(b, reader.named) for b in root]
            if not all(is_record(b) for b in branches):
                raise UnsupportedSchemaError("a reader union must contain only records")
            self._columns = [plan_column(b, reader.named, frozenset()) for b in branches]
            names = [short_name(b["name"]) for b in branches]
        elif is_record(root):
            top = plan_column(root, reader.named, frozenset())
            self._root = top
            self._columns = list(top.children)
            names = [f["name"] for f in root["fields"]]
        else:
            raise UnsupportedSchemaError(
                f"the reader schema must be a record or a union of records, not {kind_of(root)}"
            )
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
            except InvalidTextError:
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
        w = deref(writer.parsed, writer.named)
        if not is_record(w):
            raise SchemaResolutionError(f"the writer schema is {kind_of(w)}, not a record")
        program = self._program(writer, w)
        strict = python_decoder(program, writer.name, None, rollback=self._rollback, truncate=self._truncate)
        if self._vm is not None:  # the compiled interpreter of the same program
            fast: Decoder = self._vm.Decoder(program, self._truncate, strict)
        else:
            fast = python_decoder(program, writer.name, strict, rollback=self._rollback, truncate=self._truncate)
        return fast, strict

    def _program(self, writer: AvroSchema, w: Any) -> Program:
        """The program reading a record written with `w` into the columns."""
        gen = ProgramGen(writer.named, self.reader.named)
        if not self._union_of_records:
            r = self._root.schema
            if not (names_of(w) & names_of(r)):
                raise SchemaResolutionError(f"{w['name']} is not {r['name']}")
            return tuple(gen.record(w, self._root, short_name(r["name"])))
        choice = next((i for i, c in enumerate(self._columns) if names_of(w) & names_of(c.schema)), None)
        if choice is None:
            raise SchemaResolutionError(f"{w['name']} is none of the reader union's records")
        ops: list[Op] = []
        for i, col in enumerate(self._columns):
            ops += gen.record(w, col, short_name(col.schema["name"])) if i == choice else [(CALL, col.node.null)]
        return tuple(ops)
