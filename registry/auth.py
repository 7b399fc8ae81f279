"""HTTP basic authentication for the registry, with three roles (kit.users: the users file).

- ``read``: every GET, schema lookups and compatibility checks;
- ``write``: read, and registering schemas;
- ``admin``: everything, including deletes and changes of config and mode.

A request without valid credentials gets 401 with ``WWW-Authenticate: Basic``; an
authenticated one without the role gets 403, error code 40301 as Confluent's.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web
from aiohttp.typedefs import Middleware

from kit.users import ROLES, LoginThrottled, Users, UsersFileError, allows, hash_password, parse_basic
from registry.errors import TOO_MANY_FAILED_LOGINS, UNAUTHORIZED, USER_DENIED, RegistryError

log = structlog.get_logger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

__all__ = ["ROLES", "Users", "UsersFileError", "basic_auth", "hash_password", "required_role"]


def required_role(method: str, path: str) -> str:
    """The weakest role that may make this request."""
    if method in ("GET", "HEAD", "OPTIONS"):
        return "read"
    if method == "POST":
        parts = [p for p in path.split("/") if p]
        if parts and parts[0] == "compatibility":
            return "read"  # a check changes nothing
        if len(parts) == 2 and parts[0] == "subjects":
            return "read"  # POST /subjects/{subject}: look a schema up
        return "write"
    return "admin"  # PUT (config, mode), DELETE


# Probes stay open: a supervisor or orchestrator checks them without credentials.
PUBLIC_PATHS = frozenset({"/healthz", "/readyz"})
_REALM = {"WWW-Authenticate": 'Basic realm="SchemaRegistry", charset="UTF-8"'}


def basic_auth(users: Users) -> Middleware:
    """A middleware admitting only authenticated users whose role allows the request."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in PUBLIC_PATHS:
            return await handler(request)
        credentials = parse_basic(request.headers.get("Authorization"))
        client = request.remote or ""
        try:
            role = await users.authenticate(*credentials, source=client) if credentials else None
        except LoginThrottled as e:
            log.warning("registry login refused: too many failures", user=credentials and credentials[0], client=client)
            raise RegistryError(
                429, TOO_MANY_FAILED_LOGINS, str(e), {"Retry-After": str(math.ceil(e.retry_after_s))}
            ) from None
        if role is None:
            # As Kafka logs a failed authentication: who tried, from where (never the password).
            log.warning("registry authentication failed", user=credentials[0] if credentials else None, client=client)
            raise RegistryError(401, UNAUTHORIZED, "Unauthorized", _REALM)
        needed = required_role(request.method, request.path)
        if not allows(role, needed):
            raise RegistryError(
                403, USER_DENIED, f"User is denied operation {request.method} {request.path}: needs the {needed} role"
            )
        return await handler(request)

    return middleware
