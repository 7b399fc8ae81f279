"""Value formats of the console producer and consumer: Avro through the schema registry, JSON,
text and raw bytes (what kafka-avro-console-consumer and kcat's ``-s avro`` do).

A `Renderer` turns a record's key or value into the bytes printed; a `RecordEncoder` turns a
line of input into the bytes sent.  Both fetch schemas from the registry once per id (blocking,
one attempt: a console user wants an answer now, not after backoff) and fail per record with a
`FormatError` that says why, so one bad record never stops the tool.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from contracts import bounded_json
from schemas.blocking_registry import Missing, RegistryUnavailableError, fetch_schema, latest_registered, subjects
from schemas.catalog import CatalogError, from_json, to_json
from schemas.serde import HEADER_SIZE, MAGIC_BYTE, AvroSchema, InvalidSchemaError, SerdeError, decode, encode, frame


class FormatError(Exception):
    """This one record cannot be shown or sent in the format asked for."""


def _framed(data: bytes) -> bool:
    return len(data) >= HEADER_SIZE and data[0] == MAGIC_BYTE


class Renderer:
    """Bytes to print for keys or values in one format; `schema_id` of the last Avro one."""

    def __init__(self, fmt: str, registry: str, warn: Callable[[str], None]) -> None:
        self.fmt = fmt
        self.registry = registry
        self._warn = warn
        self._schemas: dict[int, AvroSchema | Missing] = {}
        self._unreachable: str | None = None
        self.schema_id: int | None = None

    def render(self, data: bytes | None) -> bytes:
        self.schema_id = None
        if data is None:
            return b"null"
        fmt = self.fmt
        if fmt == "auto":
            fmt = "avro" if _framed(data) and self._unreachable is None else "bytes"
        if fmt == "bytes":
            return data
        if fmt == "string":
            return data.decode("utf-8", "replace").encode()
        if fmt == "json":
            try:
                return to_json(bounded_json.loads(data)).encode()
            except (ValueError, UnicodeDecodeError) as e:  # JSONLimitError too: deep, huge numbers
                raise FormatError(f"not JSON: {e}") from None
        return self._avro(data)

    def _avro(self, data: bytes) -> bytes:
        if not _framed(data):
            shown = "empty" if not data else f"starts with byte 0x{data[0]:02x}"
            raise FormatError(f"not Confluent-framed Avro ({shown}, {len(data)} bytes)")
        schema_id = struct.unpack_from(">I", data, 1)[0]
        schema = self._schema(schema_id)
        if isinstance(schema, Missing):
            if self.fmt == "auto" and self._unreachable is not None:
                return data  # the registry went away: show what is stored
            raise FormatError(schema.reason)
        try:
            value = decode(memoryview(data)[HEADER_SIZE:], schema, schema_id=schema_id)
        except SerdeError as e:
            raise FormatError(str(e)) from None
        self.schema_id = schema_id
        return to_json(value).encode()

    def _schema(self, schema_id: int) -> AvroSchema | Missing:
        known = self._schemas.get(schema_id)
        if known is not None:
            return known
        if self._unreachable is not None:
            return Missing(self._unreachable)
        try:
            found = fetch_schema(self.registry, schema_id, wait=False)
        except RegistryUnavailableError as e:
            self._unreachable = f"schema registry at {self.registry} unreachable ({e}); set --registry"
            if self.fmt == "auto":
                self._warn(f"{self._unreachable}; printing Confluent-framed records as stored")
            return Missing(self._unreachable)
        self._schemas[schema_id] = found
        return found


class RecordEncoder:
    """Bytes to send for one line of input in one format."""

    def __init__(self, fmt: str, registry: str, topic: str, subject: str | None, schema_id: int | None) -> None:
        self.fmt = fmt
        self.schema_id = 0
        self.schema: AvroSchema | None = None
        if fmt != "avro":
            return
        try:
            if schema_id is None:
                self.schema_id, text = _latest(registry, topic, subject)
                self.schema = AvroSchema.parse(text)
            else:
                found = fetch_schema(registry, schema_id, wait=False)
                if isinstance(found, Missing):
                    raise FormatError(found.reason)
                self.schema_id, self.schema = schema_id, found
        except RegistryUnavailableError as e:
            raise FormatError(f"schema registry at {registry} unreachable ({e}); set --registry") from None
        except (ValueError, InvalidSchemaError) as e:
            raise FormatError(str(e)) from None

    def encode(self, line: bytes) -> bytes:
        if self.fmt == "string":
            return line
        try:
            value = bounded_json.loads(line)
        except (ValueError, UnicodeDecodeError) as e:
            raise FormatError(f"not JSON: {e}") from None
        if self.schema is None:
            return line
        try:
            return frame(self.schema_id, encode(self.schema, from_json(self.schema, value)))
        except (CatalogError, SerdeError) as e:
            raise FormatError(str(e)) from None


def _latest(registry: str, topic: str, subject: str | None) -> tuple[int, str]:
    """The latest schema of `subject`, by default TOPIC-value; when that is missing the error
    names the topic's subjects (a topic with several record types uses one subject per type)."""
    try:
        return latest_registered(registry, subject or f"{topic}-value", wait=False)
    except ValueError as e:
        if subject is not None:
            raise
        candidates = [s for s in subjects(registry) if s.startswith(f"{topic}-")]
        if not candidates:
            raise
        names = ", ".join(sorted(candidates))
        raise ValueError(f"{e}; the topic's subjects are {names}: pick one with --subject") from None


def headers_text(headers: list[tuple[str, bytes | None]] | None) -> bytes:
    """Headers as kafka-console-consumer prints them: ``k:v,k2:v2``, or ``NO_HEADERS``."""
    if not headers:
        return b"NO_HEADERS"
    return b",".join(k.encode() + b":" + (b"null" if v is None else v) for k, v in headers)


__all__ = ["FormatError", "RecordEncoder", "Renderer", "headers_text"]
