"""Logging for every streamshop process: structlog key-value events, rendered as JSON lines, or
for a person when the stream is a terminal.

structlog renders through the standard library's logging, so the lines of libraries that log
with `logging` (aiohttp, asyncio, aiokafka, the Kafka clients) come out in the same format with
the same context (``request_id``; the current span's ``trace_id`` and ``span_id``).  A `tap` (a
structlog processor: the services' log shipper) sees every rendered line, from structlog and
from stdlib loggers alike.

Events are a short constant name and fields, never a formatted sentence::

    log.info("relay published", topic=topic, records=n)
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import IO, Any

import orjson
import structlog
from opentelemetry import trace
from structlog.typing import Processor

__all__ = ["ACCESS_LOGGER", "LEVELS", "configure_logging", "dumps_json", "get_logger"]

# The HTTP access log's logger (kit.middleware): the services ship its lines to logs.ingress.
# The name is part of the log lines people search, so it stays what it has always been.
ACCESS_LOGGER = "services.common.access"
LEVELS = ("debug", "info", "warning", "error", "critical")
_HANDLER_MARK = "_streamshop_handler"

# orjson: log lines are encoded on the hot path of every request, several times faster than json.
# Datetimes come out as ISO 8601 with a ``Z``; keys that are not strings are written as strings;
# anything else it does not know becomes its repr().  Dataclasses too (PASSTHROUGH): orjson would
# otherwise write their fields itself, bypassing the repr() that masks a settings object's secrets
# and leaves out fields marked repr=False (an OTP message's body, a sender's seal keys).
_ORJSON_OPTIONS = orjson.OPT_UTC_Z | orjson.OPT_NAIVE_UTC | orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS


def dumps_json(value: Any) -> bytes:
    """Compact JSON of a log line (or any structlog event dict)."""
    return orjson.dumps(value, default=repr, option=_ORJSON_OPTIONS)


def _json_line(event: Any, **_: Any) -> str:
    return dumps_json(event).decode()


def _trace_ids(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """The current span's trace and span ids (OpenTelemetry's context), on every line."""
    span = trace.get_current_span().get_span_context()
    if span.is_valid:
        event.setdefault("trace_id", f"{span.trace_id:032x}")
        event.setdefault("span_id", f"{span.span_id:016x}")
    return event


def _shared_processors() -> list[Processor]:
    # Run for structlog loggers and (as foreign_pre_chain) for stdlib records alike.
    return [
        structlog.contextvars.merge_contextvars,
        _trace_ids,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]


def configure_logging(
    *,
    level: str = "info",
    fmt: str = "auto",
    stream: IO[str] | None = None,
    tap: Processor | None = None,
) -> logging.Handler:
    """Configure structlog and the root logger; returns the handler it installed (a second
    call replaces the first one's handler, so tests and reloads do not double the output).

    `fmt` is ``json``, ``console`` or ``auto`` (console when `stream` is a TTY)."""
    out = stream if stream is not None else sys.stderr
    console = fmt == "console" or (fmt == "auto" and out.isatty())
    renderer: list[Processor] = (
        [structlog.dev.ConsoleRenderer(colors=out.isatty())]
        if console
        else [structlog.processors.format_exc_info, structlog.processors.JSONRenderer(serializer=_json_line)]
    )
    taps: list[Processor] = [tap] if tap is not None else []
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_shared_processors(),
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *taps, *renderer],
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    setattr(handler, _HANDLER_MARK, True)

    numeric = logging.getLevelNamesMapping()[level.upper()]
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(numeric)
    # No line shows the caller's file and line, process or thread: skip collecting them on every
    # record (the logging HOWTO's "Optimization" section; findCaller walks the stack each time).
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    # The request-context middleware writes the access log (with request id and route);
    # aiohttp's own line would say the same thing twice, and be shipped twice.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    # Py4J (PySpark's bridge to its JVM) logs each command and connection at INFO.
    logging.getLogger("py4j").setLevel(logging.WARNING)

    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *_shared_processors(),
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        # The structlog-side chain never changes between calls, so caching is safe and fast.
        cache_logger_on_first_use=True,
    )
    return handler


def get_logger(name: str, **initial: Any) -> Any:
    """A structlog logger named `name` (the ``logger`` field of its lines)."""
    return structlog.get_logger(name, **initial)
