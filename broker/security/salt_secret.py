"""The broker's secret for made-up SCRAM salts: random, made once, kept in the data directory.

An unknown user is answered with a salt made from this secret and the name, so the answer is
the same at every attempt (a fresh salt each time would tell the name apart).  The secret must
not be guessable: derived from anything an outsider knows (the data directory's path, the
node id), anyone could compute the made-up salts and tell unknown names from real ones.
"""

from __future__ import annotations

import secrets
import stat
from pathlib import Path

import structlog

from broker.log.segment import replace_durably

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
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_durably(path, secret, mode=0o600)  # readable by the broker's user only
    return secret
