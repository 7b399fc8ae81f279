"""The logs API as OpenAPI 3.1 (served at /openapi.json)."""

from __future__ import annotations

from typing import Any

from kit.openapi import document, obj, operation
from services.logs.store import LEVELS, STREAMS
from services.logs.tail import MAX_BACKLOG

__all__ = ["LOGS_OPENAPI"]

_COUNT = {"type": "integer", "minimum": 0}

LOG_ITEM: dict[str, Any] = obj(
    {
        "id": {"type": "integer"},
        "event_id": {"type": "string"},
        "timestamp": {"type": "string", "format": "date-time"},
        "service": {"type": "string"},
        "instance": {"type": "string"},
        "level": {"type": "string"},
        "event": {"type": "string"},
        "logger": {"type": "string"},
        "stream": {"type": "string", "enum": list(STREAMS)},
        "trace_id": {"type": ["string", "null"]},
        "request_id": {"type": ["string", "null"]},
        "fields": {"type": "object"},
        "topic": {"type": "string"},
        "partition": _COUNT,
        "offset": _COUNT,
    }
)


def _filters(last: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"name": name, "in": "query", "required": False, "schema": schema}
        for name, schema in (
            ("service", {"type": "string", "minLength": 1, "maxLength": 128}),
            ("level", {"type": "string", "enum": list(LEVELS)}),
            ("stream", {"type": "string", "enum": list(STREAMS)}),
            ("q", {"type": "string", "minLength": 1, "maxLength": 500, "description": "full-text search"}),
            (
                "since",
                {
                    "type": "string",
                    "description": "ISO 8601 timestamp with a time zone, or epoch milliseconds",
                    "examples": ["2026-01-01T00:00:00Z"],
                },
            ),
            (
                "trace_id",
                {
                    "type": "string",
                    "pattern": "^[0-9a-f]{32}$",
                    "description": "only the lines of this trace (W3C trace id, 32 lowercase hex digits)",
                    "examples": ["4bf92f3577b34da6a3ce929d0e0e4736"],
                },
            ),
        )
    ] + [last]


LOGS_OPENAPI = document(
    "logs",
    "Every service's logs (topics logs.app, logs.ingress, logs.db), indexed in SQLite with full-text "
    "search: search, counts, and a live tail over Server-Sent Events.",
    {
        "/logs": {
            "get": operation(
                "search_logs",
                "matching records, newest first",
                {200: obj({"items": {"type": "array", "items": LOG_ITEM}})},
                parameters=_filters(
                    {
                        "name": "limit",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "integer", "minimum": 1, "maximum": 500, "default": 50},
                    }
                ),
                errors=(422,),
            )
        },
        "/logs/stats": {
            "get": operation(
                "log_stats",
                "record counts in total, per level and per service",
                {
                    200: obj(
                        {
                            "total": _COUNT,
                            "levels": {"type": "object", "additionalProperties": _COUNT},
                            "services": {
                                "type": "object",
                                "additionalProperties": {"type": "object", "additionalProperties": _COUNT},
                            },
                            "full_text": {"type": "boolean"},
                        }
                    )
                },
            )
        },
        "/logs/instances": {
            "get": operation(
                "log_instances",
                "each (service, instance) that logged since `since` (default: the last five minutes), by "
                "service then instance: its lines, error lines, requests served (access-log lines) and newest line",
                {
                    200: obj(
                        {
                            "since": {"type": "string", "format": "date-time"},
                            "items": {
                                "type": "array",
                                "items": obj(
                                    {
                                        "service": {"type": "string"},
                                        "instance": {"type": "string"},
                                        "lines": _COUNT,
                                        "errors": _COUNT,
                                        "requests": _COUNT,
                                        "last_seen": {"type": "string", "format": "date-time"},
                                    }
                                ),
                            },
                        }
                    )
                },
                parameters=[
                    {
                        "name": "since",
                        "in": "query",
                        "required": False,
                        "schema": {
                            "type": "string",
                            "description": "ISO 8601 timestamp with a time zone, or epoch milliseconds",
                            "examples": ["2026-01-01T00:00:00Z"],
                        },
                    }
                ],
                errors=(422,),
            )
        },
        "/logs/tail": {
            "get": operation(
                "tail_logs",
                "the newest `backlog` matching records, then every new one, as Server-Sent Events "
                "(`event: log`, `id:` the record id, `data:` a record as in GET /logs; a `: keepalive` "
                "comment when idle); Last-Event-ID resumes after that record",
                {200: {"type": "string"}},
                content_type="text/event-stream",
                parameters=[
                    *_filters(
                        {
                            "name": "backlog",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "integer", "minimum": 0, "maximum": MAX_BACKLOG, "default": 10},
                        }
                    ),
                    {"name": "Last-Event-ID", "in": "header", "required": False, "schema": {"type": "string"}},
                ],
                errors=(422, 503),
            )
        },
    },
)
