"""A partition's `log-start-offset` file: where DeleteRecords last moved its log start.

Written on the event loop (a rename, no fsync) and fsynced by `sync` in a worker thread before
DeleteRecords answers; read once at load, where a file a crash left unreadable counts as none
(the first segment's base) rather than as a reason not to start."""

from __future__ import annotations

import os
from pathlib import Path

import structlog

from broker.log.segment import fsync_dir

FILE = "log-start-offset"

log = structlog.get_logger(__name__)


def read(directory: Path) -> int:
    path = directory / FILE
    try:
        return max(0, int(path.read_text())) if path.exists() else 0
    except (OSError, ValueError) as e:
        log.warning("log start offset unreadable; starting from the first segment", path=str(path), error=str(e))
        return 0


def write(directory: Path, offset: int) -> None:
    tmp = directory / f"{FILE}.tmp"
    tmp.write_text(str(offset))
    tmp.replace(directory / FILE)


def sync(directory: Path) -> None:
    """fsync the file and its directory (blocking)."""
    fd = os.open(directory / FILE, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(directory)
