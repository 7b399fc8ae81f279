"""The catalog of streamshop's event schemas and the topics they travel on.

`load_catalog()` reads every ``schemas/*.avsc`` file, resolves named-type references between
files (a file may use a type defined by another file, e.g. ``io.streamshop.events.common.Envelope``)
by inlining each referenced definition at its first use, and parses the result with fastavro.
Every schema in the catalog is therefore self-contained: its `text` is what gets registered,
and what Confluent's clients, the Spark job and any other Avro reader can use on its own.

The topic table below is the data flow of docs/architecture.md: which events go to which topic, what the
Kafka key is (always a plain UTF-8 string, never Avro, see schemas/README.md), and which subject
naming strategy the topic's values are registered with.
"""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any
from uuid import UUID

from schemas.serde import AvroSchema, InvalidSchemaError, SubjectNameStrategy

__all__ = [
    "EVENTS_NAMESPACE",
    "EXAMPLES_DIR",
    "SCHEMA_DIR",
    "TOPICS",
    "Catalog",
    "CatalogError",
    "Topic",
    "default_catalog",
    "from_json",
    "iter_fields",
    "load_catalog",
    "to_json",
]

SCHEMA_DIR = Path(__file__).resolve().parent
EXAMPLES_DIR = SCHEMA_DIR / "examples"
EVENTS_NAMESPACE = "io.streamshop.events"

_ORDERS = f"{EVENTS_NAMESPACE}.orders"
_OTP = f"{EVENTS_NAMESPACE}.otp"
_LOGS = f"{EVENTS_NAMESPACE}.logs"
_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_NAMED_KINDS = frozenset({"record", "error", "enum", "fixed"})


class CatalogError(Exception):
    """The schema files, examples or topic table are inconsistent."""


@dataclass(frozen=True, slots=True)
class Topic:
    """A topic of the data flow: the events it carries, its key and its subject naming strategy."""

    name: str
    events: tuple[str, ...]
    key: str
    strategy: SubjectNameStrategy
    doc: str

    def subject(self, record_name: str, *, is_key: bool = False) -> str:
        """The registry subject `record_name`'s schema is registered under on this topic."""
        return self.strategy.subject(self.name, record_name, is_key=is_key)


_LOG_TOPIC_DOC = "Structured log lines of every service (key: the emitting instance), indexed by group log-indexer."

# Topics that carry one event type use Confluent's default TopicNameStrategy (`<topic>-value`);
# topics that carry several use TopicRecordNameStrategy (`<topic>-<full.Name>`), so each event
# type evolves as its own lineage and compatibility is checked per type.
TOPICS: tuple[Topic, ...] = (
    Topic(
        "orders",
        (f"{_ORDERS}.OrderCreated", f"{_ORDERS}.OrderStatusChanged"),
        key="order_id",
        strategy=SubjectNameStrategy.TOPIC_RECORD,
        doc="Order lifecycle events from the orders service (through its outbox); 6 partitions.",
    ),
    Topic(
        "otp.requests",
        (f"{_OTP}.OtpRequested",),
        key="user_id",
        strategy=SubjectNameStrategy.TOPIC,
        doc="OTP requests from the otp service; read by both groups sms-sender and email-sender (fan-out).",
    ),
    Topic(
        "otp.deliveries",
        (f"{_OTP}.OtpDelivered", f"{_OTP}.OtpFailed"),
        key="request_id",
        strategy=SubjectNameStrategy.TOPIC_RECORD,
        doc="Outcome of each delivery attempt, from sms-sender and email-sender.",
    ),
    Topic("logs.app", (f"{_LOGS}.LogRecord",), "instance", SubjectNameStrategy.TOPIC, _LOG_TOPIC_DOC),
    Topic("logs.ingress", (f"{_LOGS}.LogRecord",), "instance", SubjectNameStrategy.TOPIC, _LOG_TOPIC_DOC),
    Topic("logs.db", (f"{_LOGS}.LogRecord",), "instance", SubjectNameStrategy.TOPIC, _LOG_TOPIC_DOC),
)


@dataclass(frozen=True)
class Catalog:
    """Every schema of `directory` by full name, the files they come from, and the topic table."""

    directory: Path
    schemas: Mapping[str, AvroSchema]
    files: Mapping[str, Path]
    topics: Mapping[str, Topic]
    _short: Mapping[str, str] = field(repr=False)

    def full_name(self, name: str) -> str:
        """`OrderCreated` or `io.streamshop.events.orders.OrderCreated` -> the full name."""
        if name in self.schemas:
            return name
        full = self._short.get(name)
        if full is None:
            raise CatalogError(f"no schema named {name!r}; known: {', '.join(sorted(self._short))}")
        return full

    def schema(self, name: str) -> AvroSchema:
        """The self-contained schema of a type, by full or short name."""
        return self.schemas[self.full_name(name)]

    def events(self) -> tuple[str, ...]:
        """Full names of the types published to some topic (the other files are shared types)."""
        seen = dict.fromkeys(name for topic in self.topics.values() for name in topic.events)
        return tuple(seen)

    def topics_for(self, name: str) -> tuple[Topic, ...]:
        """The topics an event type is published to (LogRecord goes to three)."""
        full = self.full_name(name)
        return tuple(t for t in self.topics.values() if full in t.events)

    def subject(self, topic: str, name: str, *, is_key: bool = False) -> str:
        """The registry subject of type `name` on `topic`, per the topic's strategy."""
        return self.topics[topic].subject(self.full_name(name), is_key=is_key)

    def topic_strategies(self) -> dict[str, SubjectNameStrategy]:
        """Per-topic strategies, for `AvroSerializer(topic_strategies=...)`."""
        return {t.name: t.strategy for t in self.topics.values()}

    def example_path(self, name: str) -> Path:
        return self.directory / "examples" / f"{self.full_name(name).rsplit('.', 1)[-1]}.json"

    def example(self, name: str) -> Any:
        """The example datum of a type, from `examples/<Name>.json`, as Python values (see `from_json`)."""
        path = self.example_path(name)
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise CatalogError(f"{path}: {e}") from e
        return from_json(self.schema(name), raw)


def load_catalog(directory: Path = SCHEMA_DIR, topics: tuple[Topic, ...] = TOPICS) -> Catalog:
    """Load and parse every `*.avsc` in `directory`; check the topic table against them."""
    raw: dict[str, dict[str, Any]] = {}
    files: dict[str, Path] = {}
    for path in sorted(directory.glob("*.avsc")):
        try:
            node = json.loads(path.read_text())
        except ValueError as e:
            raise CatalogError(f"{path.name}: not JSON: {e}") from e
        if not isinstance(node, dict) or node.get("type") not in _NAMED_KINDS or "name" not in node:
            raise CatalogError(f"{path.name}: the top level must be a named type (record, enum or fixed)")
        full = _full_name(node["name"], node.get("namespace"))
        if full in raw:
            raise CatalogError(f"{path.name}: {full} is also defined by {files[full].name}")
        raw[full] = node
        files[full] = path
    if not raw:
        raise CatalogError(f"no .avsc files in {directory}")

    schemas: dict[str, AvroSchema] = {}
    for full in raw:
        expanded = _Expander(raw, files[full].name).expand(full)
        try:
            schemas[full] = AvroSchema.parse(expanded)
        except InvalidSchemaError as e:
            raise CatalogError(f"{files[full].name}: {e}") from e

    short: dict[str, str] = {}
    for full in schemas:
        name = full.rsplit(".", 1)[-1]
        if name in short:
            raise CatalogError(f"short name {name} is ambiguous: {short[name]} and {full}")
        short[name] = full

    by_topic: dict[str, Topic] = {}
    for topic in topics:
        missing = [e for e in topic.events if e not in schemas]
        if missing:
            raise CatalogError(f"topic {topic.name} carries {', '.join(missing)}, which no .avsc defines")
        by_topic[topic.name] = topic
    return Catalog(directory=directory, schemas=schemas, files=files, topics=by_topic, _short=short)


@functools.cache
def default_catalog() -> Catalog:
    """The catalog of the installed `schemas/` directory, loaded once."""
    return load_catalog()


def _full_name(name: str, namespace: str | None) -> str:
    if "." in name or not namespace:
        return name
    return f"{namespace}.{name}"


class _Expander:
    """Inline referenced top-level types of other files at their first use, Avro-style.

    Every named definition gets an explicit `namespace`, every reference becomes a full name, so
    the result means the same wherever it is read.  Types nested inside a file are private to it;
    a type used by several files gets a file of its own.
    """

    def __init__(self, raw: Mapping[str, dict[str, Any]], file_name: str) -> None:
        self._raw = raw
        self._file = file_name
        self._defined: set[str] = set()

    def expand(self, full: str) -> dict[str, Any]:
        return self._define(self._raw[full], None)

    def _walk(self, node: Any, namespace: str | None) -> Any:
        if isinstance(node, str):
            if node in _PRIMITIVES:
                return node
            full = _full_name(node, namespace)
            if full in self._defined:
                return full
            if full in self._raw:
                return self._define(self._raw[full], None)
            raise CatalogError(
                f"{self._file}: unknown type {node!r} (resolved as {full}); "
                "a type shared between files must be the top-level type of its own .avsc"
            )
        if isinstance(node, list):
            return [self._walk(branch, namespace) for branch in node]
        if isinstance(node, dict):
            kind = node.get("type")
            if kind in _NAMED_KINDS:
                return self._define(node, namespace)
            if kind == "array":
                return {**node, "items": self._walk(node["items"], namespace)}
            if kind == "map":
                return {**node, "values": self._walk(node["values"], namespace)}
            return {**node, "type": self._walk(kind, namespace)}
        raise CatalogError(f"{self._file}: {node!r} is not a schema")

    def _define(self, node: dict[str, Any], enclosing: str | None) -> dict[str, Any]:
        full = _full_name(node["name"], node.get("namespace", enclosing))
        if full in self._defined:
            raise CatalogError(f"{self._file}: {full} is defined twice")
        self._defined.add(full)
        namespace, _, name = full.rpartition(".")
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key == "name":
                out["name"] = name
                if namespace:
                    out["namespace"] = namespace
            elif key != "namespace":
                out[key] = value
        if node.get("type") in ("record", "error"):
            out["fields"] = [{**f, "type": self._walk(f["type"], namespace or None)} for f in node["fields"]]
        return out


# -- JSON <-> Python values --------------------------------------------------------------------


def from_json(schema: AvroSchema, value: Any) -> Any:
    """Turn plain JSON (as in `examples/*.json` and the HTTP API) into values the serde writes.

    Plain JSON, not Avro's JSON encoding: union values are untagged (the first branch whose JSON
    kind fits wins), decimals are strings (`"12.50"`), timestamps are ISO 8601 strings with an
    offset (`"2025-01-31T12:00:00.123Z"`) or epoch milliseconds, uuids are strings, bytes are
    base64.  Record fields left out stay out (the writer fills their defaults).
    """
    return _from_json(value, schema.parsed, schema.named, schema.name.rsplit(".", 1)[-1])


def to_json(value: Any) -> str:
    """One line of plain JSON for a decoded Avro value: the inverse of `from_json`."""
    return json.dumps(value, default=_jsonable, ensure_ascii=False, separators=(",", ":"))


def _jsonable(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(value).decode()
    raise TypeError(f"{type(value).__name__} is not JSON")


def _from_json(value: Any, node: Any, named: Mapping[str, Any], path: str) -> Any:
    if isinstance(node, str) and node in named:
        node = named[node]
    if isinstance(node, list):
        for branch in node:
            if _json_kind_fits(value, branch, named):
                return _from_json(value, branch, named, path)
        raise CatalogError(f"{path}: {value!r} fits no branch of the union")
    kind = node.get("type") if isinstance(node, dict) else node
    logical = node.get("logicalType") if isinstance(node, dict) else None
    if logical is not None:
        return _logical_from_json(value, logical, path)
    if kind in ("record", "error") and isinstance(value, Mapping):
        fields = {f["name"]: f["type"] for f in node["fields"]}
        return {k: _from_json(v, fields[k], named, f"{path}.{k}") if k in fields else v for k, v in value.items()}
    if kind == "array" and isinstance(value, list):
        return [_from_json(v, node["items"], named, f"{path}[{i}]") for i, v in enumerate(value)]
    if kind == "map" and isinstance(value, Mapping):
        return {k: _from_json(v, node["values"], named, f"{path}[{k!r}]") for k, v in value.items()}
    if kind in ("bytes", "fixed") and isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except ValueError as e:
            raise CatalogError(f"{path}: bytes must be base64: {e}") from e
    return value


def _logical_from_json(value: Any, logical: str, path: str) -> Any:
    try:
        if logical == "decimal":
            if isinstance(value, float):
                raise CatalogError(f'{path}: write decimals as strings (e.g. "12.50"), not JSON numbers')
            return Decimal(str(value)) if isinstance(value, (str, int)) else value
        if logical in ("timestamp-millis", "timestamp-micros"):
            if isinstance(value, int) and not isinstance(value, bool):
                scale = 1000 if logical == "timestamp-millis" else 1_000_000
                return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=value * 1_000_000 // scale)
            if isinstance(value, str):
                parsed = datetime.fromisoformat(value)
                if parsed.tzinfo is None:
                    raise CatalogError(f"{path}: timestamp {value!r} has no UTC offset")
                return parsed
            return value
        if logical == "uuid":
            return UUID(value) if isinstance(value, str) else value
    except (ValueError, InvalidOperation) as e:
        raise CatalogError(f"{path}: {value!r} is not a valid {logical}: {e}") from e
    return value


def _json_kind_fits(value: Any, node: Any, named: Mapping[str, Any]) -> bool:
    if isinstance(node, str) and node in named:
        node = named[node]
    kind = node.get("type") if isinstance(node, dict) else node
    if isinstance(node, dict) and node.get("logicalType") in ("decimal", "timestamp-millis", "timestamp-micros"):
        return isinstance(value, (str, int)) and not isinstance(value, bool)
    match kind:
        case "null":
            return value is None
        case "boolean":
            return isinstance(value, bool)
        case "int" | "long":
            return isinstance(value, int) and not isinstance(value, bool)
        case "float" | "double":
            return isinstance(value, (int, float)) and not isinstance(value, bool)
        case "string" | "bytes" | "fixed":
            return isinstance(value, str)
        case "enum":
            return isinstance(value, str) and value in node["symbols"]
        case "record" | "error" | "map":
            return isinstance(value, Mapping)
        case "array":
            return isinstance(value, list)
    return False


def iter_fields(schema: AvroSchema) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every record field of a schema, nested ones included, as (dotted path, field definition)."""
    seen: set[str] = set()

    def walk(node: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
        if isinstance(node, str):
            if node in schema.named and node not in seen:
                seen.add(node)
                yield from walk(schema.named[node], path)
            return
        if isinstance(node, list):
            for branch in node:
                yield from walk(branch, path)
            return
        kind = node.get("type")
        if kind in ("record", "error"):
            seen.add(node["name"])
            for f in node["fields"]:
                child = f"{path}.{f['name']}" if path else f["name"]
                yield child, f
                yield from walk(f["type"], child)
        elif kind == "array":
            yield from walk(node["items"], f"{path}[]")
        elif kind == "map":
            yield from walk(node["values"], f"{path}{{}}")
        elif isinstance(kind, (dict, list)):
            yield from walk(kind, path)

    yield from walk(schema.parsed, "")
