"""The broker's secret for made-up SCRAM salts: random, made once, kept in the data directory.

An unknown user is answered with a salt made from this secret and the name, so the answer is
the same at every attempt (a fresh salt each time would tell the name apart).  The secret must
not be guessable: derived from anything an outsider knows (the data directory's path, the
node id), anyone could compute the made-up salts and tell unknown names from real ones.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

FILE_NAME = "scram-salt.secret"
SECRET_BYTES = 32


def load_or_create(data_dir: Path) -> bytes:
    """The secret kept in `data_dir`, made and written durably (mode 0600) on first use."""
    path = data_dir / FILE_NAME
    try:
        secret = path.read_bytes()
    except FileNotFoundError:
        secret = b""
    if len(secret) == SECRET_BYTES:
        if stat.S_IMODE(path.stat().st_mode) & 0o077:
            log.warning("scram salt secret was readable by others; made private", path=str(path))
            path.chmod(0o600)
        return secret
    if secret:
        # Only a hand-edited file can be short: it is written whole, then renamed into place.
        log.warning("scram salt secret is malformed; a new one is made", path=str(path), size=len(secret))
    secret = secrets.token_bytes(SECRET_BYTES)
    _write_private(path, secret)
    return secret


def _write_private(path: Path, data: bytes) -> None:
    """Write `path` whole and durably, readable by the broker's user only: a temporary file
    made 0600 (never briefly world-readable), fsynced, renamed, and the directory fsynced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
