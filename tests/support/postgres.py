"""The run's PostgreSQL server (streamshop.postgres, Debian's package) and a fresh database per
test on it."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from streamshop import postgres

_names = itertools.count(1)


def fresh_database(server: postgres.Server, prefix: str = "t") -> str:
    """A new, empty database on `server`; its URL."""
    name = f"{prefix}_{os.getpid()}_{next(_names)}"
    return postgres.create_database(server, name)


def start_server(directory: Path) -> postgres.Server:
    return postgres.start(directory, timeout=120)
