"""The run's PostgreSQL server (streamshop.postgres, Debian's package) and a fresh database per
test on it."""

from __future__ import annotations

import itertools
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from streamshop import postgres

_names = itertools.count(1)


def fresh_database(server: postgres.Server, prefix: str = "t") -> str:
    """A new, empty database on `server`; its URL.  Callable from a test's event loop (the
    creation runs on a loop of its own, in a thread)."""
    name = f"{prefix}_{os.getpid()}_{next(_names)}"
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(postgres.create_database, server, name).result()


def start_server(directory: Path) -> postgres.Server:
    return postgres.start(directory, timeout=120)
