"""Avro serde in the Confluent wire format, with fastavro.

A framed message is ``0x00`` (magic byte), the writer schema's registry id (4 bytes, big-endian),
then the record in Avro binary encoding, so Confluent's serializers and any Confluent-compatible
consumer read what streamshop writes and the other way round.

Layers:
- sans-io functions: `frame` / `unframe` (the 5-byte header), `encode` / `decode` (Avro binary,
  with validation and reader-schema projection).  They do no I/O, so a synchronous consumer (the
  Spark source) can use them with any way of fetching schemas.
- `AvroSerializer` / `AvroDeserializer`: the same over a `SchemaRegistry` (normally
  `schemas.client.RegistryClient`), with subject naming strategies and caches.

Errors: every failure to encode or decode one message is a `SerdeError`, one subclass per kind
(`UnknownMagicByteError`, `UnknownSchemaIdError`, `UndecodablePayloadError`,
`RecordValidationError`, `ReaderSchemaMismatchError`, `InvalidSchemaError`).  They are permanent
for that message: a consumer sends it to its dead-letter topic.  A `RegistryError` that is not an
unknown id (registry down, timeout) is transient and propagates unchanged: retry, don't dead-letter.

Python values of logical types: decimal <-> `decimal.Decimal`, timestamp-millis <-> timezone-aware
`datetime` (UTC on read; a naive datetime is refused on write rather than guessed), uuid <->
`uuid.UUID` on read (`UUID` or a canonical 8-4-4-4-12 hex string on write).  Decimals are checked
against the schema's precision and scale (fastavro alone lets too many integer digits through).
"""

from __future__ import annotations

import enum
import functools
import io
import json
import re
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, Protocol
from uuid import UUID

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.read import SchemaResolutionError
from fastavro.types import Schema
from fastavro.validation import validate

from schemas.registry_errors import ERROR_SCHEMA_NOT_FOUND, RegisteredSchema, RegistryError

__all__ = [
    "HEADER_SIZE",
    "MAGIC_BYTE",
    "AvroDeserializer",
    "AvroSchema",
    "AvroSerializer",
    "Decoded",
    "InvalidSchemaError",
    "ReaderSchemaMismatchError",
    "RecordValidationError",
    "SchemaRegistry",
    "SerdeError",
    "SubjectNameStrategy",
    "UndecodablePayloadError",
    "UnknownMagicByteError",
    "UnknownSchemaIdError",
    "decode",
    "encode",
    "frame",
    "unframe",
]

MAGIC_BYTE = 0
_HEADER = struct.Struct(">BI")
HEADER_SIZE = _HEADER.size  # 5
_MAX_SCHEMA_ID = 2**31 - 1  # Confluent ids are Java ints
_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


# -- errors ------------------------------------------------------------------------------------


class SerdeError(Exception):
    """A message could not be encoded or decoded.  Permanent for that message."""


class UnknownMagicByteError(SerdeError):
    """The message does not start with the Confluent magic byte 0: it is not Confluent-framed."""

    def __init__(self, magic: int) -> None:
        self.magic = magic
        hint = ""
        if magic in (ord("{"), ord("[")):
            hint = " (it looks like JSON)"
        elif 0x20 <= magic < 0x7F:
            hint = f" (printable {chr(magic)!r}: plain text?)"
        super().__init__(f"unknown magic byte 0x{magic:02x}{hint}: not a Confluent-framed Avro message (expected 0x00)")


class UnknownSchemaIdError(SerdeError):
    """The schema id in the header is not known to the registry."""

    def __init__(self, schema_id: int, detail: str = "") -> None:
        self.schema_id = schema_id
        suffix = f": {detail}" if detail else ""
        super().__init__(f"unknown schema id {schema_id}: the registry has no such schema{suffix}")


class UndecodablePayloadError(SerdeError):
    """The bytes are not a valid Avro encoding under the writer schema (truncated, garbage, trailing bytes)."""

    def __init__(self, message: str, *, schema_id: int | None = None, record_name: str | None = None) -> None:
        self.schema_id = schema_id
        self.record_name = record_name
        super().__init__(message)


class RecordValidationError(SerdeError):
    """A record to encode does not match its schema.  `problems` names each offending field."""

    def __init__(self, record_name: str, problems: list[str]) -> None:
        self.record_name = record_name
        self.problems = problems
        super().__init__(f"record does not match schema {record_name}: " + "; ".join(problems))


class ReaderSchemaMismatchError(SerdeError):
    """Data written with one schema cannot be read with the requested reader schema (Avro resolution)."""

    def __init__(self, writer_name: str, reader_name: str, detail: str, *, schema_id: int | None = None) -> None:
        self.writer_name = writer_name
        self.reader_name = reader_name
        self.schema_id = schema_id
        where = "" if schema_id is None else f" (schema id {schema_id})"
        super().__init__(f"data written with {writer_name}{where} cannot be read as {reader_name}: {detail}")


class InvalidSchemaError(SerdeError):
    """A schema text is not a valid Avro schema."""


# -- schemas -----------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class AvroSchema:
    """A parsed, self-contained Avro schema.

    `name` is the full name of the top-level named type (`io.streamshop.events.orders.OrderCreated`)
    or the primitive type's name; `text` is the JSON sent to the registry; `parsed` is fastavro's
    parsed form; `named` maps every named type defined inside to its parsed definition.
    """

    name: str
    text: str
    parsed: Schema = field(repr=False)
    named: Mapping[str, Any] = field(repr=False)

    @functools.cached_property
    def logical_check(self) -> Callable[[Any], bool] | None:
        """Checks fastavro's validation leaves out: uuid strings are uuids, datetimes are aware.

        None when the schema has no uuid or timestamp field.  Compiled once per schema; it visits
        only the parts of a record that hold such fields.
        """
        return _compile_logical_check(self.parsed, self.named, frozenset())

    @classmethod
    def parse(cls, schema: str | Mapping[str, Any] | list[Any]) -> AvroSchema:
        """Parse JSON text or an already loaded JSON value.  Raises `InvalidSchemaError`."""
        try:
            loaded: Any = json.loads(schema) if isinstance(schema, str) else schema
        except ValueError as e:
            raise InvalidSchemaError(f"schema is not JSON: {e}") from e
        text = schema if isinstance(schema, str) else json.dumps(schema, separators=(",", ":"))
        named: dict[str, Any] = {}
        try:
            parsed = parse_schema(loaded if not isinstance(loaded, Mapping) else dict(loaded), named)
        except Exception as e:  # fastavro raises SchemaParseException, UnknownType, KeyError, TypeError...
            raise InvalidSchemaError(f"invalid Avro schema: {type(e).__name__}: {_short(str(e), 300)}") from e
        return cls(name=_schema_name(parsed), text=text, parsed=parsed, named=named)


_UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def _uuid_ok(value: Any) -> bool:
    return isinstance(value, UUID) or (isinstance(value, str) and _UUID_RE.fullmatch(value) is not None)


def _aware_ok(value: Any) -> bool:
    return not isinstance(value, datetime) or value.tzinfo is not None


def _decimal_check(schema: Mapping[str, Any]) -> Callable[[Any], bool]:
    """fastavro checks a decimal's scale but counts precision before rescaling: check the integer digits."""
    integer_digits = int(schema.get("precision", 0)) - int(schema.get("scale", 0))

    def check(value: Any) -> bool:
        if not isinstance(value, Decimal):
            return True
        return value.is_finite() and (value.is_zero() or value.adjusted() < integer_digits)

    return check


def _compile_logical_check(
    node: Any, named: Mapping[str, Any], visiting: frozenset[str]
) -> Callable[[Any], bool] | None:
    """A predicate over the uuid / timestamp leaves under `node`, or None when there are none.

    Shapes that are wrong are left alone (fastavro's validation reports them); unions other than
    `["null", X]` are not looked into.
    """
    if isinstance(node, str):
        if node in named and node not in visiting:
            return _compile_logical_check(named[node], named, visiting | {node})
        return None
    if isinstance(node, list):
        checks = [_compile_logical_check(b, named, visiting) for b in node]
        inner = [c for c in checks if c is not None]
        if len(node) == 2 and "null" in node and len(inner) == 1:
            only = inner[0]
            return lambda v: v is None or only(v)
        return None
    logical = node.get("logicalType")
    kind = node.get("type")
    if logical == "uuid":
        return _uuid_ok
    if logical in ("timestamp-millis", "timestamp-micros"):
        return _aware_ok
    if logical == "decimal":
        return _decimal_check(node)
    if kind in ("record", "error"):
        inside = visiting | {node["name"]}
        fields = [(f["name"], _compile_logical_check(f["type"], named, inside)) for f in node["fields"]]
        checked = [(name, check) for name, check in fields if check is not None]
        if not checked:
            return None
        return lambda v: not isinstance(v, Mapping) or all(n not in v or c(v[n]) for n, c in checked)
    if kind == "array":
        item = _compile_logical_check(node["items"], named, visiting)
        if item is None:
            return None
        return lambda v: not isinstance(v, (list, tuple)) or all(item(x) for x in v)
    if kind == "map":
        value = _compile_logical_check(node["values"], named, visiting)
        if value is None:
            return None
        return lambda v: not isinstance(v, Mapping) or all(value(x) for x in v.values())
    if isinstance(kind, (dict, list)) or (isinstance(kind, str) and kind in named):
        return _compile_logical_check(kind, named, visiting)
    return None


def _schema_name(parsed: Schema) -> str:
    if isinstance(parsed, dict):
        name = parsed.get("name")
        if isinstance(name, str):
            return name
        return str(parsed.get("type"))
    if isinstance(parsed, list):
        return "union"
    return parsed


# -- framing (sans-io) -------------------------------------------------------------------------


def frame(schema_id: int, payload: bytes) -> bytes:
    """Prefix Avro binary `payload` with the Confluent header for `schema_id`."""
    if not 0 <= schema_id <= _MAX_SCHEMA_ID:
        raise ValueError(f"schema id {schema_id} is outside 0..{_MAX_SCHEMA_ID}")
    return _HEADER.pack(MAGIC_BYTE, schema_id) + payload


def unframe(data: bytes | bytearray | memoryview) -> tuple[int, memoryview]:
    """Split a Confluent-framed message into (schema id, Avro payload).

    Raises `UnknownMagicByteError` when the first byte is not 0, `UndecodablePayloadError` when
    the message is empty or shorter than the 5-byte header.
    """
    view = memoryview(data)
    if len(view) == 0:
        raise UndecodablePayloadError("empty message: no Confluent header (a tombstone has no value to decode)")
    if view[0] != MAGIC_BYTE:
        raise UnknownMagicByteError(view[0])
    if len(view) < HEADER_SIZE:
        raise UndecodablePayloadError(
            f"truncated header: {len(view)} bytes, a Confluent-framed message has at least {HEADER_SIZE}"
        )
    _, schema_id = _HEADER.unpack_from(view)
    return schema_id, view[HEADER_SIZE:]


# -- Avro binary (sans-io) ---------------------------------------------------------------------


def encode(schema: AvroSchema, record: Any, *, validate_record: bool = True) -> bytes:
    """Avro binary of `record` under `schema` (no header).

    Missing fields that have a default take it; unknown fields are rejected.  With
    `validate_record` (the default) the record is checked first, so a float is never truncated
    into an int, an int never overflows, a uuid is a uuid.  Raises `RecordValidationError` naming
    the offending fields.
    """
    if validate_record:
        try:
            valid = validate(record, schema.parsed, raise_errors=False)
        except Exception:  # a logical-type conversion failed (decimal scale, ...)
            valid = False
        if valid and schema.logical_check is not None:
            valid = schema.logical_check(record)
        if not valid:
            raise RecordValidationError(schema.name, _problems(record, schema) or ["invalid record"])
    out = io.BytesIO()
    try:
        schemaless_writer(out, schema.parsed, record, strict_allow_default=True)
    except Exception as e:
        problems = _problems(record, schema) or [f"{type(e).__name__}: {_short(str(e), 200)}"]
        raise RecordValidationError(schema.name, problems) from e
    return out.getvalue()


def decode(
    payload: bytes | bytearray | memoryview,
    writer: AvroSchema,
    reader: AvroSchema | None = None,
    *,
    schema_id: int | None = None,
) -> Any:
    """Decode Avro binary written with `writer`, projected onto `reader` when given.

    Projection follows Avro's resolution rules: fields the reader added take their default,
    fields the reader dropped are skipped, unknown enum symbols take the enum default.  Raises
    `UndecodablePayloadError` for truncated or garbage bytes and for trailing bytes after the
    record, `ReaderSchemaMismatchError` when `reader` cannot read `writer`'s data.
    """
    data = bytes(payload)
    buffer = io.BytesIO(data)
    reader_parsed = None if reader is None or reader.text == writer.text else reader.parsed
    where = f"schema id {schema_id} ({writer.name})" if schema_id is not None else writer.name
    try:
        value = schemaless_reader(buffer, writer.parsed, reader_parsed)
    except SchemaResolutionError as e:
        reader_name = reader.name if reader is not None else writer.name
        raise ReaderSchemaMismatchError(writer.name, reader_name, _short(str(e), 200), schema_id=schema_id) from e
    except Exception as e:  # EOFError, IndexError, ValueError, UnicodeDecodeError...: the bytes are wrong
        kind = "truncated" if isinstance(e, EOFError) else "undecodable"
        detail = _short(str(e), 200) or type(e).__name__
        raise UndecodablePayloadError(
            f"{kind} Avro payload for {where} at byte {buffer.tell()} of {len(data)}: {detail}",
            schema_id=schema_id,
            record_name=writer.name,
        ) from e
    if buffer.tell() != len(data):
        raise UndecodablePayloadError(
            f"undecodable Avro payload for {where}: {len(data) - buffer.tell()} bytes left after the record "
            f"(it ends at byte {buffer.tell()} of {len(data)}): wrong schema id or garbage",
            schema_id=schema_id,
            record_name=writer.name,
        )
    return value


# -- field-level diagnosis (runs only on the error path) ---------------------------------------


def _problems(record: Any, schema: AvroSchema) -> list[str]:
    problems: list[str] = []
    _walk(record, schema.parsed, schema.named, schema.name.rsplit(".", 1)[-1], problems)
    return problems


def _walk(datum: Any, schema: Any, named: Mapping[str, Any], path: str, out: list[str]) -> None:
    if isinstance(schema, str) and schema in named:
        schema = named[schema]
    if isinstance(schema, list):
        if not any(_fits(datum, branch, named) for branch in schema):
            out.append(f"{path}: got {_describe(datum)}, expected {_expected(schema, named)}")
        return
    kind = schema.get("type") if isinstance(schema, dict) else schema
    if isinstance(schema, dict) and "logicalType" not in schema and kind in ("record", "error"):
        if not isinstance(datum, Mapping):
            out.append(f"{path}: got {_describe(datum)}, expected record {schema['name']}")
            return
        fields = schema["fields"]
        known = {f["name"] for f in fields}
        out.extend(f"{path}.{extra}: not a field of {schema['name']}" for extra in datum if extra not in known)
        for f in fields:
            if f["name"] in datum:
                _walk(datum[f["name"]], f["type"], named, f"{path}.{f['name']}", out)
            elif "default" not in f:
                out.append(
                    f"{path}.{f['name']}: missing (required, no default), expected {_expected(f['type'], named)}"
                )
        return
    if isinstance(schema, dict) and kind == "array":
        if isinstance(datum, (str, bytes, Mapping)) or not isinstance(datum, Iterable):
            out.append(f"{path}: got {_describe(datum)}, expected array")
            return
        for i, item in enumerate(datum):
            _walk(item, schema["items"], named, f"{path}[{i}]", out)
        return
    if isinstance(schema, dict) and kind == "map":
        if not isinstance(datum, Mapping):
            out.append(f"{path}: got {_describe(datum)}, expected map")
            return
        for key, value in datum.items():
            if not isinstance(key, str):
                out.append(f"{path}: map key {key!r} is not a string")
            else:
                _walk(value, schema["values"], named, f"{path}[{key!r}]", out)
        return
    if not _fits(datum, schema, named):
        out.append(f"{path}: got {_describe(datum)}, expected {_expected(schema, named)}{_reason(datum, schema)}")


def _fits(datum: Any, schema: Any, named: Mapping[str, Any]) -> bool:
    probe: list[str] = []
    if isinstance(schema, str) and schema in named:
        schema = named[schema]
    kind = schema.get("type") if isinstance(schema, dict) else schema
    if isinstance(schema, list) or (isinstance(schema, dict) and kind in ("record", "error", "array", "map")):
        _walk(datum, schema, named, "", probe)
        return not probe
    try:
        valid = bool(validate(datum, _standalone(schema), raise_errors=False))
    except Exception:
        return False
    logical = schema.get("logicalType") if isinstance(schema, dict) else None
    if logical == "uuid":
        return valid and _uuid_ok(datum)
    if logical in ("timestamp-millis", "timestamp-micros"):
        return valid and _aware_ok(datum)
    if logical == "decimal":
        return valid and _decimal_check(schema)(datum)
    return valid


def _standalone(schema: Any) -> Any:
    # A leaf (primitive, logical, enum, fixed) parses on its own; drop fastavro's parse markers.
    if isinstance(schema, dict):
        return {k: v for k, v in schema.items() if not k.startswith("__")}
    return schema


def _reason(datum: Any, schema: Any) -> str:
    """fastavro's own complaint for a leaf, when it has one (e.g. a decimal with too many places)."""
    if not isinstance(schema, dict) or "logicalType" not in schema:
        return ""
    if schema["logicalType"] == "decimal" and isinstance(datum, Decimal) and not _decimal_check(schema)(datum):
        if not datum.is_finite():
            return " (not a finite number)"
        return f" (at most {schema.get('precision', 0) - schema.get('scale', 0)} digits before the point)"
    try:
        validate(datum, _standalone(schema), raise_errors=True)
    except Exception as e:
        text = str(e)
        return f" ({_short(text, 120)})" if text and not text.startswith("[") else ""
    return ""


def _expected(schema: Any, named: Mapping[str, Any]) -> str:
    if isinstance(schema, list):
        return " | ".join(_expected(b, named) for b in schema)
    if isinstance(schema, str):
        if schema in named:
            return _expected(named[schema], named)
        return schema
    logical = schema.get("logicalType")
    kind = schema.get("type")
    if logical == "decimal":
        return f"decimal({schema.get('precision')},{schema.get('scale', 0)}) as Decimal"
    if logical in ("timestamp-millis", "timestamp-micros"):
        return f"{logical} as aware datetime"
    if logical == "uuid":
        return "uuid (UUID or 8-4-4-4-12 hex string)"
    if logical:
        return str(logical)
    if kind == "enum":
        return f"enum {schema['name']} {{{', '.join(schema['symbols'])}}}"
    if kind in ("record", "error", "fixed"):
        return f"{kind} {schema['name']}"
    if kind == "array":
        return f"array of {_expected(schema['items'], named)}"
    if kind == "map":
        return f"map of {_expected(schema['values'], named)}"
    return str(kind)


def _describe(datum: Any) -> str:
    return f"{type(datum).__name__} {_short(repr(datum), 40)}"


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- subject naming ----------------------------------------------------------------------------


class SubjectNameStrategy(enum.Enum):
    """How the subject a schema is registered under is named (Confluent's strategies, same names)."""

    TOPIC = "TopicNameStrategy"
    """`<topic>-value` / `<topic>-key`: one schema lineage per topic (Confluent's default)."""
    RECORD = "RecordNameStrategy"
    """`<full.record.Name>`: one lineage per record type, whatever the topic."""
    TOPIC_RECORD = "TopicRecordNameStrategy"
    """`<topic>-<full.record.Name>`: one lineage per record type per topic (several types per topic)."""

    def subject(self, topic: str, record_name: str, *, is_key: bool = False) -> str:
        if self is SubjectNameStrategy.TOPIC:
            return f"{topic}-{'key' if is_key else 'value'}"
        if record_name in _PRIMITIVES or record_name == "union":
            raise ValueError(f"{self.value} needs a named schema (record, enum, fixed), got {record_name}")
        if self is SubjectNameStrategy.RECORD:
            return record_name
        return f"{topic}-{record_name}"

    @classmethod
    def from_name(cls, name: str) -> SubjectNameStrategy:
        """Accept Confluent's class names, with or without package (`...subject.TopicNameStrategy`)."""
        short = name.rsplit(".", 1)[-1]
        for strategy in cls:
            if strategy.value == short or strategy.name == short.upper():
                return strategy
        raise ValueError(f"unknown subject name strategy {name!r}: use one of {', '.join(s.value for s in cls)}")


# -- registry-backed serde ---------------------------------------------------------------------


class SchemaRegistry(Protocol):
    """What the serde needs from a registry; `schemas.client.RegistryClient` provides it."""

    async def register(self, subject: str, schema: str) -> int: ...

    async def lookup(self, subject: str, schema: str) -> RegisteredSchema: ...

    async def get_schema(self, schema_id: int) -> str: ...


class AvroSerializer:
    """Record -> Confluent-framed bytes, registering (or looking up) the schema on first use.

    `strategy` names subjects; `topic_strategies` overrides it per topic (e.g. TopicRecordName
    for topics that carry several event types).  With `auto_register=False` the schema must
    already be registered under the subject (lookup only), as in a locked-down production registry.
    """

    def __init__(
        self,
        registry: SchemaRegistry,
        *,
        strategy: SubjectNameStrategy = SubjectNameStrategy.TOPIC,
        topic_strategies: Mapping[str, SubjectNameStrategy] | None = None,
        auto_register: bool = True,
        validate_records: bool = True,
    ) -> None:
        self._registry = registry
        self._strategy = strategy
        self._topic_strategies = dict(topic_strategies or {})
        self._auto_register = auto_register
        self._validate = validate_records
        self._ids: dict[tuple[str, str], int] = {}

    def subject(self, topic: str, schema: AvroSchema, *, is_key: bool = False) -> str:
        return self._topic_strategies.get(topic, self._strategy).subject(topic, schema.name, is_key=is_key)

    async def schema_id(self, topic: str, schema: AvroSchema, *, is_key: bool = False) -> int:
        subject = self.subject(topic, schema, is_key=is_key)
        key = (subject, schema.text)
        schema_id = self._ids.get(key)
        if schema_id is None:
            if self._auto_register:
                schema_id = await self._registry.register(subject, schema.text)
            else:
                schema_id = (await self._registry.lookup(subject, schema.text)).schema_id
            self._ids[key] = schema_id
        return schema_id

    async def serialize(self, topic: str, schema: AvroSchema, record: Any, *, is_key: bool = False) -> bytes:
        """Encode `record` (validated first) and frame it with the id of `schema` under its subject."""
        payload = encode(schema, record, validate_record=self._validate)
        return frame(await self.schema_id(topic, schema, is_key=is_key), payload)


@dataclass(frozen=True, slots=True)
class Decoded:
    """A decoded message: the writer's schema id and record name, and the value (reader's shape)."""

    schema_id: int
    record_name: str
    value: Any


class AvroDeserializer:
    """Confluent-framed bytes -> record, fetching writer schemas by id (cached).

    `reader_schemas` are the schemas this consumer was built with; a message whose writer record
    name matches one is projected onto it (Avro resolution), others are returned in the writer's
    shape.  `record_name` in the result says which event type it is, to dispatch on topics that
    carry several.
    """

    def __init__(self, registry: SchemaRegistry, *, reader_schemas: Iterable[AvroSchema] = ()) -> None:
        self._registry = registry
        self._readers = {s.name: s for s in reader_schemas}
        self._writers: dict[int, AvroSchema] = {}

    async def writer_schema(self, schema_id: int) -> AvroSchema:
        """The schema with that registry id.  Raises `UnknownSchemaIdError` when there is none."""
        schema = self._writers.get(schema_id)
        if schema is None:
            try:
                text = await self._registry.get_schema(schema_id)
            except RegistryError as e:
                if e.status == 404 or e.error_code == ERROR_SCHEMA_NOT_FOUND:
                    raise UnknownSchemaIdError(schema_id, e.message) from e
                raise
            schema = AvroSchema.parse(text)
            self._writers[schema_id] = schema
        return schema

    async def deserialize(self, data: bytes | bytearray | memoryview, *, reader: AvroSchema | None = None) -> Decoded:
        """Decode one message value (or key).  `reader` overrides the reader schema for this call."""
        schema_id, payload = unframe(data)
        writer = await self.writer_schema(schema_id)
        if reader is None:
            reader = self._readers.get(writer.name)
        value = decode(payload, writer, reader, schema_id=schema_id)
        return Decoded(schema_id=schema_id, record_name=writer.name, value=value)
