"""Avro schema compatibility: can a reader schema decode data written with a writer schema?

Implements the "Schema Resolution" rules of the Avro specification, deciding the way Apache
Avro's Java ``SchemaCompatibility`` does (which is what Confluent Schema Registry calls for
Avro subjects), and the registry's compatibility levels on top of it.

Reader/writer rules (``can_read``):

* primitives match themselves; the writer may be promoted: int -> long/float/double,
  long -> float/double, float -> double, string <-> bytes;
* records match by *unqualified* name (or when a reader alias, qualified with the reader's
  namespace, equals the writer's full name); fields match by name or by a reader field alias;
  a reader field missing from the writer needs a ``default``; writer-only fields are skipped;
* enums match by name; every writer symbol must be a reader symbol unless the reader enum has a
  ``default`` (Avro 1.9+);
* fixed match by name and size; arrays and maps resolve their items and values recursively;
* unions: every branch of a writer union must be readable (by the reader union, or by the
  non-union reader); a reader union reads a non-union writer when one of its branches does;
* logical types resolve as their underlying type, except that two valid ``decimal`` types must
  have the same precision and scale (the specification's rule; Java's checker, and so Confluent,
  ignores logical types -- see ``DECIMAL_STRICT``);
* named type references and recursive schemas resolve through a per-schema table of full names;
  a (reader, writer) record pair already in progress is assumed compatible, which ends the
  recursion (and is correct: any real incompatibility is found on the way in).

Reasons are human-readable strings ``"<KIND> at <path>: <detail>"`` where the path is a JSON
pointer into the reader schema (``/fields/amount/type``; a number selects a writer union branch),
and KIND is Java's/Confluent's incompatibility type (TYPE_MISMATCH, NAME_MISMATCH,
MISSING_ENUM_SYMBOLS, MISSING_UNION_BRANCH, FIXED_SIZE_MISMATCH,
READER_FIELD_MISSING_DEFAULT_VALUE) or one of ours (DECIMAL_MISMATCH, AMBIGUOUS_FIELD, MORE).

Inputs are validated with ``fastavro.parse_schema`` plus the checks fastavro skips (names and
field names that are not Avro identifiers, records without a ``fields`` list, duplicate field
names, unions inside unions, two union branches of one type or name); an invalid schema raises
``InvalidSchemaError``, a ``ValueError``. ``validate`` applies the same rules on their own: this
module is the one place that decides what a valid Avro schema is (the registry calls it too).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeAlias

import fastavro

from registry.levels import Level

__all__ = ["DECIMAL_STRICT", "InvalidSchemaError", "can_read", "check", "validate"]

# The Avro specification: "two schemas that are decimal logical types match if their scales and
# precisions match". Apache Avro's Java SchemaCompatibility (used by Confluent) does not check it;
# a scale change silently rescales every value (12.34 read as 1.234), so streamshop, which keeps
# money in decimals, follows the specification. Set False for Confluent's exact behaviour.
DECIMAL_STRICT = True

# Most reasons kept per record pair (and returned); the rest are counted, not listed. Keeps
# pathological schemas (records referencing records twice, many levels deep) linear.
_MAX_REASONS = 100


class InvalidSchemaError(ValueError):
    """The schema given is not a valid Avro schema. ``reason`` says why on its own, without the
    "invalid Avro schema: " that ``str()`` puts first, for callers that word their own message
    (the registry's 42201 "Invalid schema: ...")."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = message if reason is None else reason


# ----------------------------------------------------------------------------------------------
# Public API


def can_read(reader: Any, writer: Any) -> list[str]:
    """Why ``reader`` cannot decode data written with ``writer``; ``[]`` when it always can.

    Both are parsed JSON schemas (``dict``/``list``/``str`` as from ``json.loads``; a ``str``
    holding JSON text of an object, array or string is decoded first). Raises
    ``InvalidSchemaError`` (a ``ValueError``) if either is not a valid Avro schema.
    """
    return _render(_Checker().check(_compile(reader), _compile(writer)))


def check(new: Any, existing: list[Any], level: Level) -> list[str]:
    """Why ``new`` may not follow ``existing`` (earlier versions, oldest first) at ``level``.

    BACKWARD: new reads the latest; FORWARD: the latest reads new; FULL: both; the
    ``_TRANSITIVE`` variants apply the same to every earlier version; NONE: always ``[]``.
    Like Confluent, versions are checked latest first and the reasons of the first incompatible
    version are returned, each prefixed with which direction failed and which version
    (``#n``, 1-based position in ``existing``).
    """
    level = Level(level)
    if level is Level.NONE or not existing:
        return []
    backward = level in (Level.BACKWARD, Level.BACKWARD_TRANSITIVE, Level.FULL, Level.FULL_TRANSITIVE)
    forward = level in (Level.FORWARD, Level.FORWARD_TRANSITIVE, Level.FULL, Level.FULL_TRANSITIVE)
    transitive = level in (Level.BACKWARD_TRANSITIVE, Level.FORWARD_TRANSITIVE, Level.FULL_TRANSITIVE)

    compiled_new = _compile(new)
    numbered = list(enumerate(existing, start=1))
    targets = list(reversed(numbered)) if transitive else numbered[-1:]
    for number, old in targets:
        compiled_old = _compile(old)
        reasons: list[str] = []
        if backward:
            prefix = f"new schema cannot read data written with existing schema #{number}: "
            reasons += [prefix + r for r in _render(_Checker().check(compiled_new, compiled_old))]
        if forward:
            prefix = f"existing schema #{number} cannot read data written with the new schema: "
            reasons += [prefix + r for r in _render(_Checker().check(compiled_old, compiled_new))]
        if reasons:
            return reasons
    return []


def validate(schema: Any) -> None:
    """Raise ``InvalidSchemaError`` unless ``schema`` is a valid Avro schema.

    ``schema`` is parsed JSON, taken as it is: unlike ``can_read`` and ``check``, a ``str`` is
    not decoded again, because a caller that parsed the text itself holds a JSON string, which
    is a type name (``'{"type": "int"}'`` as a JSON string names no type).
    """
    _build(schema)


# ----------------------------------------------------------------------------------------------
# Compiled schemas: named types resolved to shared nodes, names fully qualified.

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
# A name (each dot-separated part of a full name) and a field name, as the specification defines
# them; fastavro accepts any string.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# reader type -> writer types it can read besides itself
_PROMOTIONS: dict[str, frozenset[str]] = {
    "long": frozenset({"int"}),
    "float": frozenset({"int", "long"}),
    "double": frozenset({"int", "long", "float"}),
    "bytes": frozenset({"string"}),
    "string": frozenset({"bytes"}),
}


@dataclass(eq=False)
class _Primitive:
    kind: str
    decimal: tuple[int, int] | None = None  # (precision, scale) of a valid decimal on bytes
    logical: str | None = None


@dataclass(eq=False)
class _Array:
    items: _Schema


@dataclass(eq=False)
class _Map:
    values: _Schema


@dataclass(eq=False)
class _Union:
    branches: list[_Schema]


@dataclass(eq=False)
class _Field:
    name: str
    aliases: tuple[str, ...]
    type: _Schema
    has_default: bool


@dataclass(eq=False)
class _Record:
    fullname: str
    aliases: frozenset[str]  # fully qualified
    fields: list[_Field] = field(default_factory=list)
    kind: str = "record"


@dataclass(eq=False)
class _Enum:
    fullname: str
    aliases: frozenset[str]
    symbols: list[str]
    default: str | None
    kind: str = "enum"


@dataclass(eq=False)
class _Fixed:
    fullname: str
    aliases: frozenset[str]
    size: int
    decimal: tuple[int, int] | None = None
    kind: str = "fixed"


_Named: TypeAlias = _Record | _Enum | _Fixed
_Schema: TypeAlias = _Primitive | _Array | _Map | _Union | _Named


def _compile(schema: Any) -> _Schema:
    return _build(_decode_text(schema))


def _build(schema: Any) -> _Schema:
    """The node of a parsed JSON schema, validated: fastavro's rules, then ours (`_Builder`)."""
    try:
        fastavro.parse_schema(schema)  # validation only: the builder reads the JSON itself
    except Exception as e:  # fastavro raises SchemaParseException, UnknownType, TypeError, ...
        reason = str(e) or type(e).__name__
        raise InvalidSchemaError(f"invalid Avro schema: {reason}", reason) from e
    try:
        return _Builder().build(schema, "")
    except InvalidSchemaError as e:
        raise InvalidSchemaError(f"invalid Avro schema: {e}", str(e)) from None


def _decode_text(schema: Any) -> Any:
    if isinstance(schema, str) and schema.lstrip()[:1] in ("{", "[", '"'):
        try:
            return json.loads(schema)
        except ValueError as e:
            raise InvalidSchemaError(f"invalid JSON in schema: {e}") from e
    return schema


def _qualify(name: str, namespace: str) -> str:
    if "." in name or not namespace:
        return name
    return f"{namespace}.{name}"


def _short(fullname: str) -> str:
    return fullname.rsplit(".", 1)[-1]


def _decimal_of(node: dict[str, Any]) -> tuple[int, int] | None:
    """(precision, scale) of a valid decimal logical type, else None (invalid ones are ignored,
    as the specification says: the schema is then read as its underlying type)."""
    if node.get("logicalType") != "decimal":
        return None
    precision, scale = node.get("precision"), node.get("scale", 0)
    if type(precision) is not int or type(scale) is not int or not 0 <= scale <= precision or precision < 1:
        return None
    return (precision, scale)


class _Builder:
    """Turns one schema's JSON into nodes; a named type is one node however often referenced."""

    def __init__(self) -> None:
        self.names: dict[str, _Named] = {}

    def build(self, s: Any, namespace: str) -> _Schema:
        if isinstance(s, str):
            return self._reference(s, namespace)
        if isinstance(s, list):
            return self._union(s, namespace)
        if not isinstance(s, dict):
            raise InvalidSchemaError(f"not an Avro schema: {s!r}")
        kind = s.get("type")
        if isinstance(kind, str) and kind in _PRIMITIVES:
            logical = s.get("logicalType")
            return _Primitive(
                kind,
                _decimal_of(s) if kind == "bytes" else None,
                logical if isinstance(logical, str) else None,
            )
        if kind in ("record", "error"):
            return self._record(s, namespace)
        if kind == "enum":
            return self._enum(s, namespace)
        if kind == "fixed":
            return self._fixed(s, namespace)
        if kind == "array":
            return _Array(self.build(s.get("items"), namespace))
        if kind == "map":
            return _Map(self.build(s.get("values"), namespace))
        if isinstance(kind, (str, list, dict)):  # {"type": "SomeName"} or {"type": {...}}
            return self.build(kind, namespace)
        raise InvalidSchemaError(f"unknown Avro type: {kind!r}")

    def _union(self, s: list[Any], namespace: str) -> _Union:
        """The specification (and Java) forbid unions in unions and two branches of one unnamed
        type; fastavro lets both through, so they are checked here."""
        branches = [self.build(branch, namespace) for branch in s]
        seen: set[str] = set()
        for branch in branches:
            if isinstance(branch, _Union):
                raise InvalidSchemaError("a union may not immediately contain another union")
            key = branch.fullname if isinstance(branch, _Record | _Enum | _Fixed) else _kind(branch)
            if key in seen:
                raise InvalidSchemaError(f"a union may not hold two branches of type {key!r}")
            seen.add(key)
        return _Union(branches)

    def _reference(self, name: str, namespace: str) -> _Schema:
        if name in _PRIMITIVES:
            return _Primitive(name)
        found = self.names.get(_qualify(name, namespace)) or self.names.get(name)
        if found is None:
            raise InvalidSchemaError(f"unknown type name {name!r} (namespace {namespace!r})")
        return found

    def _naming(self, s: dict[str, Any], namespace: str) -> tuple[str, str, frozenset[str]]:
        """(full name, own namespace, qualified aliases) of a named type definition."""
        name = s.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidSchemaError(f"named type without a name: {s!r}")
        if not all(_NAME.fullmatch(part) for part in name.split(".")):
            raise InvalidSchemaError(f"invalid name {name!r}")
        if "." in name:
            fullname = name
            own = name.rsplit(".", 1)[0]
        else:
            declared = s.get("namespace")
            own = declared if isinstance(declared, str) else namespace
            fullname = _qualify(name, own)
        if fullname in self.names or fullname in _PRIMITIVES:
            raise InvalidSchemaError(f"type {fullname!r} is defined twice")
        aliases = s.get("aliases") or []
        return fullname, own, frozenset(_qualify(a, own) for a in aliases if isinstance(a, str))

    def _record(self, s: dict[str, Any], namespace: str) -> _Record:
        fullname, own, aliases = self._naming(s, namespace)
        record = _Record(fullname, aliases)
        self.names[fullname] = record  # before the fields: they may refer to it
        fields = s.get("fields")
        if not isinstance(fields, list):  # fastavro lets a missing or non-list `fields` through
            raise InvalidSchemaError(f"record {fullname!r} has no fields list")
        seen: set[str] = set()
        for f in fields:
            name = f.get("name") if isinstance(f, dict) else None
            if not isinstance(name, str):
                raise InvalidSchemaError(f"record {fullname!r} has a field without a name")
            if not _NAME.fullmatch(name):
                raise InvalidSchemaError(f"record {fullname!r} has a field with an invalid name {name!r}")
            if name in seen:
                raise InvalidSchemaError(f"record {fullname!r} has two fields named {name!r}")
            seen.add(name)
            field_aliases = tuple(a for a in f.get("aliases") or [] if isinstance(a, str))
            record.fields.append(_Field(name, field_aliases, self.build(f.get("type"), own), "default" in f))
        return record

    def _enum(self, s: dict[str, Any], namespace: str) -> _Enum:
        fullname, _, aliases = self._naming(s, namespace)
        default = s.get("default")
        node = _Enum(fullname, aliases, list(s.get("symbols") or []), default if isinstance(default, str) else None)
        self.names[fullname] = node
        return node

    def _fixed(self, s: dict[str, Any], namespace: str) -> _Fixed:
        fullname, _, aliases = self._naming(s, namespace)
        node = _Fixed(fullname, aliases, int(s.get("size", -1)), _decimal_of(s))
        self.names[fullname] = node
        return node


# ----------------------------------------------------------------------------------------------
# The checker


class _Reason(NamedTuple):
    path: tuple[str, ...]  # relative to the node being checked
    kind: str
    detail: str


def _under(segments: tuple[str, ...], reasons: Iterable[_Reason]) -> list[_Reason]:
    return [r._replace(path=segments + r.path) for r in reasons]


def _capped(reasons: list[_Reason]) -> list[_Reason]:
    """At most ``_MAX_REASONS``, the last one counting those left out (idempotent)."""
    if len(reasons) <= _MAX_REASONS:
        return reasons
    kept = reasons[: _MAX_REASONS - 1]
    return [*kept, _Reason((), "MORE", f"{len(reasons) - len(kept)} more incompatibilities not listed")]


def _render(reasons: Sequence[_Reason]) -> list[str]:
    out = []
    for r in _capped(list(reasons)):
        pointer = "/" + "/".join(s.replace("~", "~0").replace("/", "~1") for s in r.path)
        out.append(f"{r.kind} at {pointer}: {r.detail}")
    return out


def _describe(node: _Schema) -> str:
    if isinstance(node, _Primitive):
        if node.decimal is not None:
            return f"{node.kind} (decimal({node.decimal[0]},{node.decimal[1]}))"
        return f"{node.kind} ({node.logical})" if node.logical else node.kind
    if isinstance(node, _Union):
        return "union [" + ", ".join(_describe(b) for b in node.branches) + "]"
    if isinstance(node, _Array):
        return f"array of {_describe(node.items)}"
    if isinstance(node, _Map):
        return f"map of {_describe(node.values)}"
    if isinstance(node, _Fixed) and node.decimal is not None:
        return f"fixed '{node.fullname}' (decimal({node.decimal[0]},{node.decimal[1]}))"
    return f"{node.kind} '{node.fullname}'"


def _kind(node: _Schema) -> str:
    if isinstance(node, _Primitive | _Record | _Enum | _Fixed):
        return node.kind
    return {_Array: "array", _Map: "map", _Union: "union"}[type(node)]


def _names_match(reader: _Named, writer: _Named) -> bool:
    return _short(reader.fullname) == _short(writer.fullname) or writer.fullname in reader.aliases


def _selects(branch: _Schema, writer: _Schema) -> bool:
    """Whether the specification would resolve ``writer`` against this reader union branch
    (same kind and, for named types, same name); used only to explain a failure."""
    if _kind(branch) != _kind(writer):
        return False
    if isinstance(branch, _Record | _Enum | _Fixed) and isinstance(writer, _Record | _Enum | _Fixed):
        return _names_match(branch, writer)
    return True


class _Checker:
    """One reader/writer comparison; memoizes record pairs, which also ends recursion."""

    def __init__(self) -> None:
        # (id(reader), id(writer)) -> reasons; None while that pair is being checked. The nodes
        # are alive for the whole check, so ids are stable.
        self._records: dict[tuple[int, int], list[_Reason] | None] = {}

    def check(self, reader: _Schema, writer: _Schema) -> list[_Reason]:
        if isinstance(reader, _Record) and isinstance(writer, _Record):
            key = (id(reader), id(writer))
            if key in self._records:
                return self._records[key] or []  # in progress: compatible unless proven otherwise
            self._records[key] = None
            result = _capped(self._record(reader, writer))
            self._records[key] = result
            return result
        return self._compute(reader, writer)

    def _compute(self, reader: _Schema, writer: _Schema) -> list[_Reason]:
        if isinstance(writer, _Union):
            if isinstance(reader, _Union):
                reasons: list[_Reason] = []
                for i, branch in enumerate(writer.branches):
                    reasons += _under((str(i),), self._reader_union(reader, branch))
                return reasons
            # a non-union reader must read every branch the writer may have used
            reasons = []
            for i, branch in enumerate(writer.branches):
                reasons += _under((str(i),), self.check(reader, branch))
            return reasons
        if isinstance(reader, _Union):
            return self._reader_union(reader, writer)

        if isinstance(reader, _Primitive) and isinstance(writer, _Primitive):
            if reader.kind == writer.kind:
                return self._decimals(reader.decimal, writer.decimal)
            if writer.kind in _PROMOTIONS.get(reader.kind, frozenset()):
                return []
        elif isinstance(reader, _Array) and isinstance(writer, _Array):
            return _under(("items",), self.check(reader.items, writer.items))
        elif isinstance(reader, _Map) and isinstance(writer, _Map):
            return _under(("values",), self.check(reader.values, writer.values))
        elif isinstance(reader, _Enum) and isinstance(writer, _Enum):
            return self._name(reader, writer) + self._enum(reader, writer)
        elif isinstance(reader, _Fixed) and isinstance(writer, _Fixed):
            reasons = self._name(reader, writer)
            if reader.size != writer.size:
                reasons.append(
                    _Reason(
                        ("size",),
                        "FIXED_SIZE_MISMATCH",
                        f"reader fixed '{reader.fullname}' has size {reader.size}, "
                        f"writer fixed '{writer.fullname}' has size {writer.size}",
                    )
                )
            return reasons + self._decimals(reader.decimal, writer.decimal)
        return [
            _Reason((), "TYPE_MISMATCH", f"reader type {_describe(reader)} cannot read writer type {_describe(writer)}")
        ]

    def _reader_union(self, reader: _Union, writer: _Schema) -> list[_Reason]:
        """A reader union reads a (non-union) writer schema when one of its branches does."""
        attempts: list[tuple[_Schema, list[_Reason]]] = []
        for branch in reader.branches:
            reasons = self.check(branch, writer)
            if not reasons:
                return []
            attempts.append((branch, reasons))
        missing = _Reason(
            (),
            "MISSING_UNION_BRANCH",
            f"reader {_describe(reader)} has no branch that can read writer type {_describe(writer)}",
        )
        # Explain with the branch the specification would pick: same kind (and name, if named).
        for branch, reasons in attempts:
            if _selects(branch, writer):
                return [missing, *reasons]
        return [missing]

    def _name(self, reader: _Named, writer: _Named) -> list[_Reason]:
        if _names_match(reader, writer):
            return []
        return [
            _Reason(
                ("name",),
                "NAME_MISMATCH",
                f"reader {reader.kind} '{reader.fullname}' does not match writer {writer.kind} "
                f"'{writer.fullname}' (unqualified names differ and no reader alias is '{writer.fullname}')",
            )
        ]

    def _enum(self, reader: _Enum, writer: _Enum) -> list[_Reason]:
        known = set(reader.symbols)
        missing = [s for s in writer.symbols if s not in known]
        if not missing or (reader.default is not None and reader.default in known):
            return []
        return [
            _Reason(
                ("symbols",),
                "MISSING_ENUM_SYMBOLS",
                f"reader enum '{reader.fullname}' lacks writer symbols {missing} and has no default symbol",
            )
        ]

    @staticmethod
    def _decimals(reader: tuple[int, int] | None, writer: tuple[int, int] | None) -> list[_Reason]:
        if not DECIMAL_STRICT or reader is None or writer is None or reader == writer:
            return []
        return [
            _Reason(
                (),
                "DECIMAL_MISMATCH",
                f"reader decimal({reader[0]},{reader[1]}) cannot read writer decimal({writer[0]},{writer[1]}): "
                "decimal precision and scale must both match",
            )
        ]

    def _record(self, reader: _Record, writer: _Record) -> list[_Reason]:
        reasons = self._name(reader, writer)
        by_name = {f.name: f for f in writer.fields}
        for reader_field in reader.fields:
            where = ("fields", reader_field.name)
            matches: list[_Field] = []
            for name in (reader_field.name, *reader_field.aliases):
                candidate = by_name.get(name)
                if candidate is not None and all(candidate is not m for m in matches):
                    matches.append(candidate)
            if len(matches) > 1:
                reasons.append(
                    _Reason(
                        where,
                        "AMBIGUOUS_FIELD",
                        f"reader field '{reader_field.name}' (aliases {list(reader_field.aliases)}) matches "
                        f"several writer fields: {[m.name for m in matches]}",
                    )
                )
            elif not matches:
                if not reader_field.has_default:
                    reasons.append(
                        _Reason(
                            where,
                            "READER_FIELD_MISSING_DEFAULT_VALUE",
                            f"reader field '{reader_field.name}' has no default value and is missing "
                            f"from writer record '{writer.fullname}'",
                        )
                    )
            else:
                reasons += _under((*where, "type"), self.check(reader_field.type, matches[0].type))
        return reasons
