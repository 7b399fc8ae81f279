"""The log index: a table of log records plus a full-text index over their text: FTS5 on SQLite,
a generated tsvector column with a GIN index on PostgreSQL.  Both take the same query (`q`):
every word must occur, punctuation and operators in it are plain text.  The lines of one trace
(`trace_id`) come from an index of their own, newest first.

Records are appended by the indexer inside its consumer transaction (`insert_many`: a batch in a
few multi-row INSERTs), so a record and its processed event id commit together.  Full-text
search uses an external-content FTS5 table kept in step by triggers; where this SQLite lacks
FTS5, `q` falls back to a substring (LIKE) match over the same text, which is slower but gives
the same answers for whole words.

Retention keeps at most `max_records` rows: each batch deletes the rows more than `max_records`
behind its newest, up to 2,000 at a time (a lowered limit is reached over the next batches, never
by one long delete).  Ids are never reused, so "oldest" is oldest *indexed* (arrival order, as
Kafka's own retention) and the delete walks the id index from the oldest row.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from services.common.db import Database, Migration, Row, Session, Step, row_chunks

__all__ = ["LEVELS", "STREAMS", "LogEntry", "LogQuery", "LogStore", "fts5_available", "iso_ms"]

LEVELS: tuple[str, ...] = ("debug", "info", "warning", "error", "critical")
STREAMS: tuple[str, ...] = ("app", "ingress", "db")


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One log line, as indexed."""

    event_id: str
    topic: str
    partition: int
    offset: int
    service: str
    instance: str
    level: str
    event: str
    logger: str
    timestamp_ms: int
    trace_id: str | None
    request_id: str | None
    fields: Mapping[str, Any]

    @property
    def stream(self) -> str:
        """``app``, ``ingress`` or ``db``: the topic's suffix (``logs.db`` -> ``db``)."""
        return self.topic.rpartition(".")[2]


@dataclass(frozen=True, slots=True)
class LogQuery:
    """Filters of `LogStore.search`; None means "any"."""

    service: str | None = None
    level: str | None = None
    stream: str | None = None
    q: str | None = None
    since_ms: int | None = None
    trace_id: str | None = None
    limit: int = 50


def fts5_available(conn: sqlite3.Connection) -> bool:
    """True when this SQLite can create FTS5 tables (probed with a throwaway temp table)."""
    try:
        conn.execute("CREATE VIRTUAL TABLE temp._fts5_probe USING fts5(x)")
    except sqlite3.OperationalError:
        return False
    conn.execute("DROP TABLE temp._fts5_probe")
    return True


def _create_schema(conn: sqlite3.Connection) -> None:
    conn.execute(
        "CREATE TABLE logs ("
        " id INTEGER PRIMARY KEY AUTOINCREMENT,"
        " event_id TEXT NOT NULL UNIQUE,"
        " topic TEXT NOT NULL, partition INTEGER NOT NULL, offset INTEGER NOT NULL,"
        " stream TEXT NOT NULL, service TEXT NOT NULL, instance TEXT NOT NULL, level TEXT NOT NULL,"
        " event TEXT NOT NULL, logger TEXT NOT NULL, ts INTEGER NOT NULL,"
        " trace_id TEXT, request_id TEXT, fields TEXT NOT NULL)"
    )
    conn.execute("CREATE INDEX logs_ts ON logs (ts, id)")
    conn.execute("CREATE INDEX logs_service_ts ON logs (service, ts, id)")
    conn.execute("CREATE INDEX logs_level_ts ON logs (level, ts, id)")
    if not fts5_available(conn):
        return
    conn.execute("CREATE VIRTUAL TABLE logs_fts USING fts5(event, logger, fields, content='logs', content_rowid='id')")
    conn.execute(
        "CREATE TRIGGER logs_fts_insert AFTER INSERT ON logs BEGIN"
        " INSERT INTO logs_fts (rowid, event, logger, fields) VALUES (new.id, new.event, new.logger, new.fields);"
        " END"
    )
    conn.execute(
        "CREATE TRIGGER logs_fts_delete AFTER DELETE ON logs BEGIN"
        " INSERT INTO logs_fts (logs_fts, rowid, event, logger, fields)"
        " VALUES ('delete', old.id, old.event, old.logger, old.fields);"
        " END"
    )


_POSTGRES_SCHEMA = """
CREATE TABLE logs (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id TEXT NOT NULL UNIQUE,
    topic TEXT NOT NULL, "partition" INTEGER NOT NULL, "offset" BIGINT NOT NULL,
    stream TEXT NOT NULL, service TEXT NOT NULL, instance TEXT NOT NULL, level TEXT NOT NULL,
    event TEXT NOT NULL, logger TEXT NOT NULL, ts BIGINT NOT NULL,
    trace_id TEXT, request_id TEXT, fields TEXT NOT NULL,
    -- PostgreSQL's full-text search over the event, logger and fields, kept by the server; split
    -- at every character that is not a letter or digit first, as SQLite's FTS5 (unicode61) does
    -- (PostgreSQL's own parser would keep "/orders" or "a-b" whole).
    words tsvector GENERATED ALWAYS AS (
        to_tsvector('simple', regexp_replace(event || ' ' || logger || ' ' || fields, '[^[:alnum:]]+', ' ', 'g'))
    ) STORED
);
CREATE INDEX logs_ts ON logs (ts, id);
CREATE INDEX logs_service_ts ON logs (service, ts, id);
CREATE INDEX logs_level_ts ON logs (level, ts, id);
CREATE INDEX logs_words ON logs USING GIN (words);
"""

MIGRATIONS: Sequence[Migration] = (
    Step(sqlite=_create_schema, postgresql=_POSTGRES_SCHEMA),
    # "the lines of this trace", newest first, from the index alone on both backends
    "CREATE INDEX logs_trace_ts ON logs (trace_id, ts, id)",
)


def _words(text: str) -> list[str]:
    """The searchable words of user text: those with a letter or digit."""
    return [w for w in text.split() if any(c.isalnum() for c in w)]


def _match_expression(text: str) -> str | None:
    """User text as an FTS5 query: every word must occur (each quoted, so FTS5 operators and
    punctuation in the input are plain text, never syntax).  None when no word is searchable."""
    words = _words(text)
    if not words:
        return None
    return " ".join('"' + w.replace('"', '""') + '"' for w in words)


def _like_pattern(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def iso_ms(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


_COLUMNS = (
    'id, event_id, topic, "partition", "offset", stream, service, instance, level, event, logger, ts,'
    " trace_id, request_id, fields"
)


_TRIM_STEP = 2000  # rows retention deletes per batch at most: more than a batch adds (500)

_INSERTED = (
    'event_id, topic, "partition", "offset", stream, service, instance, level, event, logger, ts, trace_id,'
    " request_id, fields"
)


def _row_of(entry: LogEntry) -> tuple[Any, ...]:
    return (
        entry.event_id,
        entry.topic,
        entry.partition,
        entry.offset,
        entry.stream,
        entry.service,
        entry.instance,
        entry.level,
        entry.event,
        entry.logger,
        entry.timestamp_ms,
        entry.trace_id,
        entry.request_id,
        json.dumps(dict(entry.fields), separators=(",", ":"), default=repr),
    )


def _item(row: Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "event_id": row["event_id"],
        "timestamp": iso_ms(row["ts"]),
        "service": row["service"],
        "instance": row["instance"],
        "level": row["level"],
        "event": row["event"],
        "logger": row["logger"],
        "stream": row["stream"],
        "trace_id": row["trace_id"],
        "request_id": row["request_id"],
        "fields": json.loads(row["fields"]),
        "topic": row["topic"],
        "partition": row["partition"],
        "offset": row["offset"],
    }


class LogStore:
    """The `logs` tables of one `Database`."""

    def __init__(self, db: Database, *, max_records: int) -> None:
        if max_records < 1:
            raise ValueError("max_records must be positive")
        self.db = db
        self.max_records = max_records
        self.full_text = False

    async def setup(self) -> None:
        await self.db.migrate("logs", MIGRATIONS)
        if self.db.dialect == "postgresql":
            self.full_text = True
            return
        row = await self.db.fetchone("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'logs_fts'")
        self.full_text = row is not None

    async def insert(self, s: Session, entry: LogEntry) -> bool:
        """Index `entry` in the caller's transaction (False when its event id is already indexed),
        then apply retention."""
        return await self.insert_many(s, [entry]) == 1

    async def insert_many(self, s: Session, entries: Sequence[LogEntry]) -> int:
        """Index `entries` in the caller's transaction with a few multi-row INSERTs (an entry whose
        event id is already indexed is skipped), then apply retention once; how many were new."""
        newest = 0
        indexed = 0
        for values, params in row_chunks([_row_of(entry) for entry in entries]):
            rows = await s.fetchall(
                f"INSERT INTO logs ({_INSERTED}) VALUES {values} ON CONFLICT DO NOTHING RETURNING id", params
            )
            indexed += len(rows)
            newest = max([newest, *(int(row[0]) for row in rows)])
        if indexed and newest > self.max_records:
            # Through the id index from the oldest row, in bounded steps: a prepared "id <= ?"
            # alone gets a generic plan on PostgreSQL, a scan of the whole table (1.7 ms a batch).
            await s.execute(
                "DELETE FROM logs WHERE id IN (SELECT id FROM logs WHERE id <= ? ORDER BY id LIMIT ?)",
                (newest - self.max_records, _TRIM_STEP),
            )
        return indexed

    async def search(self, query: LogQuery) -> list[dict[str, Any]]:
        """Matching records, newest first (by timestamp, then by arrival)."""
        where, params = self._filters(query)
        sql = f"SELECT {_COLUMNS} FROM logs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY ts DESC, id DESC LIMIT ?"
        params.append(query.limit)
        return [_item(row) for row in await self.db.fetchall(sql, params)]

    async def after(self, query: LogQuery, after_id: int) -> list[dict[str, Any]]:
        """Matching records indexed after row `after_id`, in arrival order (the live tail)."""
        where, params = self._filters(query)
        where.append("id > ?")
        params.append(after_id)
        sql = f"SELECT {_COLUMNS} FROM logs WHERE " + " AND ".join(where) + " ORDER BY id LIMIT ?"
        params.append(query.limit)
        return [_item(row) for row in await self.db.fetchall(sql, params)]

    async def last_id(self) -> int:
        """Id of the newest indexed row (0 when empty): where a tail without backlog starts."""
        row = await self.db.fetchone("SELECT MAX(id) FROM logs")
        return int(row[0]) if row is not None and row[0] is not None else 0

    def _filters(self, query: LogQuery) -> tuple[list[str], list[Any]]:
        where: list[str] = []
        params: list[Any] = []
        for column, value in (
            ("service", query.service),
            ("level", query.level),
            ("stream", query.stream),
            ("trace_id", query.trace_id),
        ):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if query.since_ms is not None:
            where.append("ts >= ?")
            params.append(query.since_ms)
        if query.q:
            if self.full_text and self.db.dialect == "postgresql":
                words = _words(query.q)
                if words:
                    # Each word a phrase of its parts (as a quoted FTS5 string), all of them required.
                    phrases = [" ".join(re.split(r"[^\w]+|_", w)).strip() for w in words]
                    where.append("words @@ (" + " && ".join(["phraseto_tsquery('simple', ?)"] * len(phrases)) + ")")
                    params.extend(phrases)
                    return where, params
            match = _match_expression(query.q) if self.full_text and self.db.dialect == "sqlite" else None
            if match is not None:
                where.append("id IN (SELECT rowid FROM logs_fts WHERE logs_fts MATCH ?)")
                params.append(match)
            else:
                where.append("(event LIKE ? ESCAPE '\\' OR logger LIKE ? ESCAPE '\\' OR fields LIKE ? ESCAPE '\\')")
                params.extend([_like_pattern(query.q)] * 3)
        return where, params

    async def stats(self) -> dict[str, Any]:
        """Record counts: in total, per level, and per service and level."""
        rows = await self.db.fetchall("SELECT service, level, COUNT(*) AS n FROM logs GROUP BY service, level")
        services: dict[str, dict[str, int]] = {}
        levels: dict[str, int] = {}
        total = 0
        for row in rows:
            n = int(row["n"])
            per = services.setdefault(row["service"], {"total": 0})
            per[row["level"]] = n
            per["total"] += n
            levels[row["level"]] = levels.get(row["level"], 0) + n
            total += n
        return {"total": total, "levels": levels, "services": services, "full_text": self.full_text}

    async def instances(self, since_ms: int) -> list[dict[str, Any]]:
        """Each (service, instance) that logged since `since_ms`, by service then instance: its
        lines, its error lines, the requests it served (its access-log lines on `logs.ingress`)
        and the time of its newest line.  Several instances of one service show as several rows:
        how a scaled service is seen from its logs, wherever its instances run."""
        rows = await self.db.fetchall(
            "SELECT service, instance, COUNT(*) AS lines,"
            " SUM(CASE WHEN level IN ('error', 'critical') THEN 1 ELSE 0 END) AS errors,"
            " SUM(CASE WHEN stream = 'ingress' THEN 1 ELSE 0 END) AS requests, MAX(ts) AS last_ts"
            " FROM logs WHERE ts >= ? GROUP BY service, instance ORDER BY service, instance",
            (since_ms,),
        )
        return [
            {
                "service": row["service"],
                "instance": row["instance"],
                "lines": int(row["lines"]),
                "errors": int(row["errors"]),
                "requests": int(row["requests"]),
                "last_seen": iso_ms(int(row["last_ts"])),
            }
            for row in rows
        ]

    async def count(self) -> int:
        row = await self.db.fetchone("SELECT COUNT(*) FROM logs")
        return int(row[0]) if row is not None else 0
