"""Arrow column builders: Python lists that the Avro decoders append to, built into Arrow arrays.

One builder per reader column node (`analytics.avro_column_plan` chooses which): a leaf keeps
one list of values, a struct its children, a list or map its offsets and items.  Generated code
(`analytics.avro_codegen`) binds the lists' `append` methods, so a decoded value costs one call
(the compiled decoder, `analytics/_avrovm.c`, appends to the same lists);
`finish` turns the lists into Arrow in C (`pa.array`), decimals and timestamps vectorised, and
clears them in place for the next batch.
"""

from __future__ import annotations

from decimal import Context, Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "ColumnBuilder",
    "InvalidTextError",
    "LeafBuilder",
    "ListBuilder",
    "MapBuilder",
    "StructBuilder",
    "UnionBuilder",
]

_MAX_INT64_DECIMAL_PRECISION = 18  # unscaled values of these fit int64: built without Decimal objects
_DECIMAL38 = Context(prec=40)  # exact for decimal(38): the default context rounds to 28 digits
# An Arrow scalar, not the int 1000: pyarrow converts a Python operand of a compute function
# anew on each call, and that conversion tries to import dateutil (a search of sys.path each
# time it is missing, about a third of the cost of finishing a small batch's timestamp column).
_US_PER_MS = pa.scalar(1000, pa.int64())


class ColumnBuilder:
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


class LeafBuilder(ColumnBuilder):
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
                ints = pc.multiply(ints, _US_PER_MS)  # range checked per record: cannot overflow
            return ints.cast(arrow_type)
        if self.kind == "date":
            return pa.array(values, pa.int32()).cast(arrow_type)
        if self.kind == "str" and arrow_type == pa.string():
            # The fast decoders append strings as their UTF-8 bytes (defaults and enum symbols
            # are `str`s: Arrow encodes those); the cast checks the bytes, in C.
            try:
                return pa.array(values, pa.binary()).cast(arrow_type)
            except pa.ArrowInvalid as e:
                raise InvalidTextError(str(e)) from None
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


class InvalidTextError(Exception):
    """A string decoded by a fast decoder is not UTF-8 (found when its column is built)."""


class StructBuilder(ColumnBuilder):
    def __init__(self, names: list[str], children: list[ColumnBuilder]) -> None:
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


class UnionBuilder(StructBuilder):
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


class ListBuilder(ColumnBuilder):
    def __init__(self, item: ColumnBuilder) -> None:
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


class MapBuilder(ColumnBuilder):
    def __init__(self, values: ColumnBuilder) -> None:
        self.keys = LeafBuilder("str")
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
