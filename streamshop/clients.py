"""What the console tools share: client configuration, Kafka error text, tables, signals.

The tools use confluent-kafka (librdkafka) on purpose: the same commands work against
the bundled broker and against Apache Kafka.
"""

from __future__ import annotations

import logging
import re
import signal
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from types import FrameType
from typing import Any

CLIENT_ID = "streamshop-cli"


class CommandError(Exception):
    """A failure to report in one line, with exit status 1."""


def parse_pairs(items: Iterable[str], flag: str) -> dict[str, str]:
    """`k=v` arguments of a repeatable flag, in order; a later key wins."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CommandError(f"{flag} {item!r}: expected KEY=VALUE")
        out[key.strip()] = value
    return out


class _FirstOfEach(logging.Filter):
    """librdkafka repeats a failing connection's error every retry; show each once."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        key = re.sub(r"\d+|\(after .*\)", "", record.getMessage())
        if key in self.seen:
            return False
        self.seen.add(key)
        return True


def _librdkafka_logger() -> logging.Logger:
    logger = logging.getLogger("streamshop.librdkafka")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("librdkafka: %(message)s"))
        handler.addFilter(_FirstOfEach())
        logger.addHandler(handler)
        logger.propagate = False
    return logger


def client_config(
    bootstrap: str, extra: Sequence[str] = (), settings: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """librdkafka settings: ours, then the command's, then the user's `-X key=value`."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "client.id": CLIENT_ID,
        "log.connection.close": False,
        "logger": _librdkafka_logger(),
    }
    config.update(settings or {})
    config.update(parse_pairs(extra, "-X"))
    return config


def check_reachable(bootstrap: str, timeout: float = 3.0) -> None:
    """Fail fast, saying what was tried and what to check, when no bootstrap server accepts a
    TCP connection (librdkafka would only report `_TRANSPORT: Failed to get metadata` after the
    whole timeout)."""
    import socket

    from kit.settings import parse_host_ports

    try:
        servers = parse_host_ports(bootstrap)
    except ValueError as e:
        raise CommandError(f"bootstrap servers: {e}") from None
    tried: list[str] = []
    for server in servers:
        try:
            with socket.create_connection((server.host, server.port), timeout=timeout):
                return
        except OSError as e:
            tried.append(f"{server} ({e.strerror or e})")
    raise CommandError(
        f"cannot reach a broker at {', '.join(tried)}. Is one running? `make demo` (or `.venv/bin/streamshop up`) "
        "starts the local stack on 127.0.0.1:9092; for another cluster give --bootstrap HOST:PORT or set "
        "STREAMSHOP_BOOTSTRAP_SERVERS."
    )


def error_text(error: Any) -> str:
    """`NAME: message` of a confluent_kafka.KafkaError, a KafkaException, or anything else."""
    from confluent_kafka import KafkaError, KafkaException

    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
        error = error.args[0]
    if isinstance(error, KafkaError):
        return f"{error.name()}: {error.str()}"
    return str(error)


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Left-aligned columns separated by two spaces."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def warn(command: str, message: str) -> None:
    print(f"streamshop {command}: {message}", file=sys.stderr, flush=True)


class StopSignal:
    """Set by SIGINT or SIGTERM while installed; polling loops check it between polls."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.event.set()

    def __enter__(self) -> StopSignal:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)

    def __bool__(self) -> bool:
        return self.event.is_set()
