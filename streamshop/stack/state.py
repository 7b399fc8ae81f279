"""``DATA_DIR/stack.json``: what a `streamshop up` runs, for `streamshop demo`, tests and tools.

Rewritten (to a temporary file, then renamed over the old one, so readers never see half a
file) whenever a child starts, becomes ready, exits or stops::

    {
      "version": 1,
      "state": "running",           # starting | running | stopping | stopped | failed
      "pid": 4242,                  # the `streamshop up` process
      "data_dir": "/abs/data/stack",
      "updated_at": "2026-05-09T10:00:00.000Z",
      "children": {
        "orders": {
          "state": "ready",         # pending | starting | ready | backoff | stopping | stopped | failed
          "pid": 4250,              # null while not running
          "urls": {"http": "http://127.0.0.1:8001"},
          "restarts": 0,            # times it was restarted after exiting
          "last_exit": null,        # status of its previous process (negative: killed by that signal)
          "started_at": "2026-05-09T10:00:01.000Z",
          "log": "/abs/data/stack/output/orders.log"
        },
        ...
      }
    }

URL roles: ``http`` (every HTTP child), ``bootstrap`` and ``admin`` (broker), ``smtp`` (catcher).
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kit.pids import pid_alive
from streamshop.clients import CommandError

__all__ = ["FILE_NAME", "VERSION", "iso_now", "pid_alive", "read_stack", "running_stack", "write_stack"]

FILE_NAME = "stack.json"
VERSION = 1


def iso_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path`, readable by its owner only (0600), whole or not at all: through a
    temporary file, fsynced, then renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_stack(path: Path, document: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(document, indent=2) + "\n")
    os.replace(tmp, path)


def read_stack(data_dir: Path) -> dict[str, Any] | None:
    """The stack file of `data_dir`, None when there is none."""
    path = data_dir / FILE_NAME
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError as e:
        raise CommandError(f"{path}: not a stack file ({e})") from None
    if not isinstance(document, dict) or document.get("version") != VERSION:
        raise CommandError(f"{path}: not a version {VERSION} stack file")
    return document


def running_stack(data_dir: Path) -> dict[str, Any] | None:
    """The stack file of `data_dir` when its `streamshop up` is alive and not stopping."""
    document = read_stack(data_dir)
    if document is None or document.get("state") in ("stopped", "failed") or not pid_alive(document.get("pid")):
        return None
    return document
