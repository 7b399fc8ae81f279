"""Async client for the Confluent Schema Registry REST API (Avro schemas only).

Speaks the subset the serde and the services need: register a schema under a subject, look a
schema up under a subject, fetch a schema by id, and fetch a subject's latest version.  It works
against streamshop's bundled registry and against Confluent's own.

Caching: a schema id always names the same schema, so ids and schemas are cached for the life of
the client, and concurrent first requests for the same thing share one HTTP call.  The latest
version of a subject changes over time and is never cached.

Errors: every failure is a `RegistryError(status, error_code, message)` carrying Confluent's
`error_code` (e.g. 40401 subject not found, 40403 schema not found, 42201 invalid schema, 409
incompatible) when the registry sent one; `RegistryUnavailableError` (a subclass, status `None`)
when no HTTP answer came back at all, which callers should treat as transient.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self, TypeVar
from urllib.parse import quote

import aiohttp
from yarl import URL

from schemas.registry_errors import (
    ERROR_SCHEMA_NOT_FOUND,
    ERROR_SUBJECT_NOT_FOUND,
    ERROR_VERSION_NOT_FOUND,
    RegisteredSchema,
    RegistryError,
    RegistryUnavailableError,
)

__all__ = [
    "CONTENT_TYPE",
    "ERROR_SCHEMA_NOT_FOUND",
    "ERROR_SUBJECT_NOT_FOUND",
    "ERROR_VERSION_NOT_FOUND",
    "RegisteredSchema",
    "RegistryClient",
    "RegistryError",
    "RegistryUnavailableError",
]

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
_ACCEPT = f"{CONTENT_TYPE}, application/vnd.schemaregistry+json; qs=0.9, application/json; qs=0.5"

_T = TypeVar("_T")


def basic_authorization(user: str, password: str) -> str:
    """The ``Authorization`` header value of HTTP basic auth (RFC 7617, UTF-8)."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# How long a registration may take: longer than a registry's own bound for a write with its
# defaults (up to 15 s to learn its primary, then 30 s for a write forwarded to it), so that a
# client never gives up on a write the registry still completes.  Reads answer from memory.
WRITE_TIMEOUT = 50.0


class RegistryClient:
    """Confluent Schema Registry REST client over aiohttp.

    Use as `async with RegistryClient("http://127.0.0.1:8081") as registry: ...`, or call
    `close()`.  A session passed in is used as is and left open (its owner closes it).
    `timeout` bounds a read, `write_timeout` a registration.
    """

    def __init__(
        self,
        url: str,
        *,
        session: aiohttp.ClientSession | None = None,
        timeout: float = 10.0,
        write_timeout: float = WRITE_TIMEOUT,
        auth: tuple[str, str] | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._base = URL(url.rstrip("/"))
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._session = session
        self._owns_session = session is None
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._write_timeout = aiohttp.ClientTimeout(total=write_timeout)
        self._authorization = {"Authorization": basic_authorization(*auth)} if auth else {}
        self._ids: dict[tuple[str, str], int] = {}
        self._lookups: dict[tuple[str, str], RegisteredSchema] = {}
        self._schemas: dict[int, str] = {}
        self._inflight: dict[Hashable, asyncio.Future[Any]] = {}
        self._closed = False

    @property
    def url(self) -> str:
        return str(self._base)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the session this client opened (a session passed in is left to its owner)."""
        self._closed = True
        if self._owns_session and self._session is not None:
            await self._session.close()
        self._session = None

    # -- API -----------------------------------------------------------------------------------

    async def register(self, subject: str, schema: str) -> int:
        """`POST /subjects/{subject}/versions`: register `schema` (Avro JSON text), return its id.

        Registering a schema the subject already has returns the existing id.  Cached per
        (subject, schema).
        """
        key = (subject, schema)
        cached = self._ids.get(key)
        if cached is not None:
            return cached

        async def call() -> int:
            answer = await self._request("POST", ("subjects", subject, "versions"), {"schema": schema}, write=True)
            schema_id = answer.int_field("id")
            self._ids[key] = schema_id
            self._schemas.setdefault(schema_id, schema)
            return schema_id

        return await self._single_flight(("register", *key), call)

    async def lookup(self, subject: str, schema: str) -> RegisteredSchema:
        """`POST /subjects/{subject}`: find `schema` among the subject's versions (no registration).

        Raises `RegistryError` with error_code 40401 (unknown subject) or 40403 (schema not under
        that subject).  Cached per (subject, schema).
        """
        key = (subject, schema)
        cached = self._lookups.get(key)
        if cached is not None:
            return cached

        async def call() -> RegisteredSchema:
            found = (await self._request("POST", ("subjects", subject), {"schema": schema})).registered(subject)
            self._lookups[key] = found
            self._ids[key] = found.schema_id
            self._schemas.setdefault(found.schema_id, found.schema)
            return found

        return await self._single_flight(("lookup", *key), call)

    async def get_schema(self, schema_id: int) -> str:
        """`GET /schemas/ids/{id}`: the Avro schema text with that id.  Cached forever.

        Raises `RegistryError` with error_code 40403 when the registry has no such id, and when
        the schema is not Avro or uses schema references (this client resolves neither).
        """
        cached = self._schemas.get(schema_id)
        if cached is not None:
            return cached

        async def call() -> str:
            answer = await self._request("GET", ("schemas", "ids", str(schema_id)))
            schema_type = answer.body.get("schemaType", "AVRO")
            if schema_type != "AVRO":
                raise RegistryError(answer.status, None, f"schema id {schema_id} is {schema_type}, not AVRO")
            if answer.body.get("references"):
                raise RegistryError(
                    answer.status,
                    None,
                    f"schema id {schema_id} uses schema references, which this client does not resolve",
                )
            text = answer.str_field("schema")
            self._schemas[schema_id] = text
            return text

        return await self._single_flight(("schema", schema_id), call)

    async def latest(self, subject: str) -> RegisteredSchema:
        """`GET /subjects/{subject}/versions/latest` (never cached: it changes as schemas evolve)."""
        found = (await self._request("GET", ("subjects", subject, "versions", "latest"))).registered(subject)
        self._schemas.setdefault(found.schema_id, found.schema)
        return found

    # -- plumbing ------------------------------------------------------------------------------

    async def _single_flight(self, key: Hashable, call: Callable[[], Awaitable[_T]]) -> _T:
        """Run `call` once for concurrent callers with the same key; each caller may be cancelled alone."""
        future = self._inflight.get(key)
        if future is None:
            future = asyncio.ensure_future(call())
            self._inflight[key] = future

            def done(f: asyncio.Future[Any]) -> None:
                self._inflight.pop(key, None)
                if not f.cancelled():
                    f.exception()  # retrieved here too, in case every caller was cancelled

            future.add_done_callback(done)
        result: _T = await asyncio.shield(future)
        return result

    def _url(self, segments: tuple[str, ...]) -> URL:
        path = "/".join(quote(s, safe="") for s in segments)
        return URL(f"{self._base}/{path}", encoded=True)

    async def _request(
        self,
        method: str,
        segments: tuple[str, ...],
        body: object = None,
        *,
        write: bool = False,
    ) -> _Answer:
        if self._closed:
            raise RuntimeError("RegistryClient is closed")
        if self._session is None:
            self._session = aiohttp.ClientSession()
        url = self._url(segments)
        headers = {"Accept": _ACCEPT, **self._authorization}
        data: bytes | None = None
        if body is not None:
            headers["Content-Type"] = CONTENT_TYPE
            data = json.dumps(body).encode()
        try:
            async with self._session.request(
                method,
                url,
                data=data,
                headers=headers,
                timeout=self._write_timeout if write else self._timeout,
                ssl=self._ssl,
            ) as response:
                raw = await response.read()
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as e:
            detail = str(e) or type(e).__name__
            raise RegistryUnavailableError(f"{method} {url}: {detail}") from e
        return _parse_response(status, raw, f"{method} {url.path}")


@dataclass(frozen=True, slots=True)
class _Answer:
    """A successful registry answer: its HTTP status and JSON object body."""

    status: int
    body: dict[str, Any]

    def int_field(self, name: str) -> int:
        value = self.body.get(name)
        if not isinstance(value, int) or isinstance(value, bool):
            raise RegistryError(self.status, None, f"answer lacks an integer {name!r}: {json.dumps(self.body)[:200]}")
        return value

    def str_field(self, name: str) -> str:
        value = self.body.get(name)
        if not isinstance(value, str):
            raise RegistryError(self.status, None, f"answer lacks a string {name!r}: {json.dumps(self.body)[:200]}")
        return value

    def registered(self, subject: str) -> RegisteredSchema:
        found = self.body.get("subject")
        return RegisteredSchema(
            subject=found if isinstance(found, str) else subject,
            version=self.int_field("version"),
            schema_id=self.int_field("id"),
            schema=self.str_field("schema"),
        )


def _parse_response(status: int, raw: bytes, what: str) -> _Answer:
    """Turn an HTTP answer into an `_Answer`, or raise `RegistryError` with Confluent's error code."""
    text = raw.decode("utf-8", "replace")
    try:
        body: object = json.loads(text) if text else None
    except ValueError:
        body = None
    if status >= 400:
        if isinstance(body, dict):
            code = body.get("error_code")
            message = body.get("message")
            raise RegistryError(
                status,
                code if isinstance(code, int) and not isinstance(code, bool) else None,
                str(message) if message is not None else f"{what} failed",
            )
        raise RegistryError(status, None, f"{what} failed: {text[:200] or 'empty body'}")
    if not isinstance(body, dict):
        raise RegistryError(status, None, f"{what}: expected a JSON object, got {text[:200]!r}")
    return _Answer(status, body)
