"""API keys: who may call a service, as bearer tokens (RFC 6750).

A service with ``<PREFIX>_API_KEYS_FILE`` set admits a request only with a key of that file in
``Authorization: Bearer <key>``; without the setting it is open, as a local demo is.  The
probes (``/healthz``, ``/readyz``) and the API description (``/openapi.json``) stay open so
that supervisors and orchestrators need no key; every other endpoint (writes, reads of data,
the logs search, the catcher's inbox, ``/metrics``) needs one.

The file names each caller and keeps only a hash of its key, one caller per line::

    # caller: sha256:<hex of SHA-256 of the key>
    locust: sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
    dashboard: sha256:...

``streamshop users api-key NAME`` prints a new random key and its line.  A key is 32
random bytes, so one SHA-256 is as strong as a slow hash here and costs nothing per request.
A missing or unknown key gets 401 with ``WWW-Authenticate: Bearer``, and the failure is logged
with the caller unknown; keys never appear in logs.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

import structlog
from aiohttp import web
from aiohttp.typedefs import Middleware

from kit.errors import ServiceError
from kit.files import read_small_text

__all__ = ["CALLER_KEY", "PUBLIC_PATHS", "ApiKeys", "ApiKeysError", "Unauthorized", "api_key_middleware", "new_key"]

log = structlog.get_logger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

PUBLIC_PATHS = frozenset({"/healthz", "/readyz", "/openapi.json"})
CALLER_KEY: web.RequestKey[str] = web.RequestKey("caller", str)
MAX_FILE_BYTES = 1024 * 1024
MAX_KEY_CHARS = 512
_LINE = re.compile(r"(?P<name>[A-Za-z0-9_.@-]{1,128})\s*:\s*sha256:(?P<hash>[0-9a-f]{64})")


class ApiKeysError(ValueError):
    """The API keys file cannot be used; the message names the line."""


class Unauthorized(ServiceError):
    status = 401
    code = "unauthorized"
    default_message = "a valid API key is required: Authorization: Bearer <key>"

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": 'Bearer realm="streamshop"'}


def new_key() -> str:
    return secrets.token_urlsafe(32)


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class ApiKeys:
    """Callers by the hash of their key."""

    def __init__(self, callers: Mapping[str, str]) -> None:
        self._by_hash = {digest: name for name, digest in callers.items()}

    @classmethod
    def parse(cls, text: str) -> ApiKeys:
        callers: dict[str, str] = {}
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            match = _LINE.fullmatch(line)
            if match is None:
                raise ApiKeysError(f"line {number}: expected 'caller: sha256:<64 hex digits>'")
            if match["name"] in callers:
                raise ApiKeysError(f"line {number}: caller {match['name']!r} appears twice")
            callers[match["name"]] = match["hash"]
        if not callers:
            raise ApiKeysError("no caller: every request would be refused")
        return cls(callers)

    @classmethod
    def load(cls, path: Path) -> ApiKeys:
        try:
            text = read_small_text(path, MAX_FILE_BYTES)
        except ValueError as e:
            raise ApiKeysError(str(e)) from e
        try:
            return cls.parse(text)
        except ApiKeysError as e:
            raise ApiKeysError(f"{path}: {e}") from e

    def caller(self, authorization: str | None) -> str | None:
        """The caller whose key the header carries; None when absent, malformed or unknown."""
        if not authorization or len(authorization) > MAX_KEY_CHARS:
            return None
        scheme, _, key = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            return None
        return self._by_hash.get(key_hash(key.strip()))


def api_key_middleware(keys: ApiKeys, public: frozenset[str] = PUBLIC_PATHS) -> Middleware:
    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in public or request.method == "OPTIONS":
            return await handler(request)
        caller = keys.caller(request.headers.get("Authorization"))
        if caller is None:
            log.warning("request without a valid API key", method=request.method, path=request.path)
            raise Unauthorized()
        request[CALLER_KEY] = caller
        return await handler(request)

    return authenticate


def key_line(name: str, key: str) -> str:
    return f"{name}: sha256:{key_hash(key)}"


def main(caller: str = "caller") -> int:
    """Print a new random key for `caller` and its users-file line."""
    made = new_key()
    print(f"key:  {made}\nline: {key_line(caller, made)}")
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else "caller"))
