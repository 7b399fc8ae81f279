"""Decoding shipped log lines and indexing them (the ``log-indexer`` consumer group's handler).

Log lines arrive in either encoding `services.common.log_shipper` can write: plain JSON
(`json_log_encoder`, the default) or Confluent-framed Avro ``LogRecord`` (`avro_log_encoder`).
`LogRecordDeserializer` tells them apart by the first byte: the Confluent magic byte 0 means
Avro (decoded through the registry by `AvroDeserializer`), ``{`` means JSON.  Anything else, or
a line missing required fields, is a poison record: a `SerdeError` or `PermanentError`, which
the consumer runner dead-letters at once to ``<topic>.dlq``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from contracts import bounded_json
from schemas.serde import AvroDeserializer, Decoded, UndecodablePayloadError
from services.common.consumer import IdempotentHandler, Message, PermanentError
from services.common.db import Database, Session
from services.logs.store import LogEntry, LogStore

__all__ = ["JSON_RECORD_NAME", "Indexer", "LogRecordDeserializer", "to_entry"]

JSON_RECORD_NAME = "io.streamshop.events.logs.LogRecord"
_MAGIC = 0
_LEVEL_ALIASES = {"warn": "warning", "exception": "error", "fatal": "critical", "notset": "debug", "trace": "debug"}
_KNOWN_LEVELS = frozenset({"debug", "info", "warning", "error", "critical", "unknown"})


class LogRecordDeserializer(AvroDeserializer):
    """Avro (magic byte 0) through the registry, or the shipper's JSON; see the module doc."""

    async def deserialize(self, data: bytes | bytearray | memoryview, *, reader: Any = None) -> Decoded:
        raw = bytes(data)
        if raw[:1] == bytes([_MAGIC]):
            return await super().deserialize(raw, reader=reader)
        if raw.lstrip()[:1] != b"{":
            raise UndecodablePayloadError("neither Confluent-framed Avro (magic byte 0) nor a JSON object")
        try:
            value = bounded_json.loads(raw)
        except (UnicodeDecodeError, ValueError) as e:
            raise UndecodablePayloadError(f"invalid JSON log record: {e}") from e
        if not isinstance(value, dict):
            raise UndecodablePayloadError("a JSON log record must be an object")
        return Decoded(schema_id=-1, record_name=JSON_RECORD_NAME, value=value)


def _timestamp_ms(value: object) -> int:
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return int(datetime.fromisoformat(value).timestamp() * 1000)
        except ValueError:
            pass
    raise PermanentError(f"timestamp must be an ISO 8601 string or epoch milliseconds, got {value!r}")


def _text(record: Mapping[str, Any], name: str, *, required: bool = True) -> str | None:
    value = record.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise PermanentError(f"log record field {name!r} must be a string, got {value!r}")
    return value


def to_entry(message: Message) -> LogEntry:
    """The indexable form of a decoded log record; `PermanentError` when it is not one."""
    if not message.record_name.endswith("LogRecord"):
        raise PermanentError(f"{message.record_name} is not a LogRecord")
    record = message.value
    if not isinstance(record, Mapping):
        raise PermanentError("a log record must be a record/object")
    level = str(record.get("level", "")).lower()
    level = _LEVEL_ALIASES.get(level, level)
    if level not in _KNOWN_LEVELS:
        raise PermanentError(f"unknown log level {record.get('level')!r}")
    fields = record.get("fields") or {}
    if not isinstance(fields, Mapping):
        raise PermanentError("log record field 'fields' must be a map")
    return LogEntry(
        event_id=message.event_id,
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        service=_text(record, "service") or "",
        instance=_text(record, "instance", required=False) or message.key or "",
        level=level,
        event=_text(record, "event") or "",
        logger=_text(record, "logger", required=False) or "",
        timestamp_ms=_timestamp_ms(record.get("timestamp")),
        trace_id=_text(record, "trace_id", required=False),
        request_id=_text(record, "request_id", required=False),
        fields=fields,
    )


class Indexer:
    """The consumer's handler: each record indexed once (its event id, or topic/partition/offset
    for a record without envelope, is recorded in the same transaction as the row)."""

    def __init__(
        self, db: Database, store: LogStore, *, name: str = "log-indexer", on_indexed: Callable[[], None] | None = None
    ) -> None:
        self.store = store
        self.indexed = 0
        self.on_indexed = on_indexed
        self.handler = IdempotentHandler(db, name, self._index)

    async def setup(self) -> None:
        await self.handler.setup()
        await self.store.setup()

    async def __call__(self, message: Message) -> None:
        await self.handler(message)

    @staticmethod
    def origin(message: Message) -> str | None:
        """The ``traceparent`` of the span a shipped line was logged in: the consumer runner
        links each batch to (a sample of) its lines' spans."""
        value = message.value.get("traceparent") if isinstance(message.value, Mapping) else None
        return value if isinstance(value, str) else None

    async def handle_batch(self, messages: list[Message]) -> None:
        """Index a run of records in one transaction (the consumer runner's batch path); all or
        nothing: a record that is not a log line fails the batch, which the runner then replays
        record by record so only that one is dead-lettered."""
        entries = [to_entry(message) for message in messages]
        claim, insert = self.handler.claim_many, self.store.insert_many

        async def write(s: Session) -> tuple[int, int]:
            claimed = await claim(s, [entry.event_id for entry in entries])
            fresh = []
            for entry in entries:  # an id twice in the batch is indexed once
                if entry.event_id in claimed:
                    claimed.discard(entry.event_id)
                    fresh.append(entry)
            return await insert(s, fresh), len(entries) - len(fresh)

        indexed, duplicates = await self.handler.db.write(write)
        self.handler.duplicates += duplicates
        self.indexed += indexed
        if indexed and self.on_indexed is not None:
            self.on_indexed()

    async def _index(self, tx: Session, message: Message) -> None:
        entry = to_entry(message)  # PermanentError rolls back: the event id is not recorded
        if await self.store.insert(tx, entry):
            tx.on_commit(self._count)

    def _count(self) -> None:
        self.indexed += 1
        if self.on_indexed is not None:
            self.on_indexed()  # after the commit: a woken live tail finds the row

    @property
    def duplicates(self) -> int:
        return self.handler.duplicates
