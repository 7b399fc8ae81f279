"""The registry's HTTP conventions, Confluent's: content negotiation, the error body
(``{"error_code", "message"}``), request bodies and path parameters, and reads that catch up
with the log before they answer 404."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import structlog
from aiohttp import web

from contracts import bounded_json
from registry import errors
from registry.config import RegistryConfig
from registry.errors import RegistryError
from registry.schema_text import ParsedSchema, parse_avro
from registry.store import LATEST, SchemaStore

log = structlog.get_logger(__name__)

T = TypeVar("T")

STORE: web.AppKey[SchemaStore] = web.AppKey("store", SchemaStore)
CONFIG: web.AppKey[RegistryConfig] = web.AppKey("config", RegistryConfig)
RESPONSE_TYPE: web.RequestKey[str] = web.RequestKey("response_type", str)

# Response types in order of preference; requests may also send octet-stream (Confluent's
# default for a body without a type).
RESPONSE_TYPES = ("application/vnd.schemaregistry.v1+json", "application/vnd.schemaregistry+json", "application/json")
REQUEST_TYPES = frozenset((*RESPONSE_TYPES, "application/octet-stream"))
SCHEMA_TYPES = ["AVRO"]
# How long a read that found nothing may spend catching up with the log before it says 404.
READ_SYNC_SECONDS = 2.0

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


# ----------------------------------------------------------------------------------------------
# Content negotiation, errors, request parsing


def negotiate(accept: str | None) -> str | None:
    """The response type for an Accept header; None when nothing we produce is acceptable."""
    if not accept or not accept.strip():
        return RESPONSE_TYPES[0]
    best: tuple[float, int] | None = None
    chosen: str | None = None
    for item in accept.split(","):
        media, *params = (part.strip() for part in item.split(";"))
        media = media.lower()
        quality = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        if quality <= 0:
            continue
        if media in ("*/*", "application/*", "*"):
            candidate = RESPONSE_TYPES[0]
        elif media in RESPONSE_TYPES:
            candidate = media
        else:
            continue
        rank = (quality, -RESPONSE_TYPES.index(candidate))
        if best is None or rank > best:
            best, chosen = rank, candidate
    return chosen


def reply(request: web.Request, data: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=json.dumps(data, ensure_ascii=False).encode(),
        status=status,
        content_type=request.get(RESPONSE_TYPE, RESPONSE_TYPES[0]),
    )


def raw_reply(request: web.Request, text: str) -> web.Response:
    """A schema's own text as the body (the `/schema` endpoints)."""
    return web.Response(body=text.encode(), content_type=request.get(RESPONSE_TYPE, RESPONSE_TYPES[0]))


@web.middleware
async def confluent_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Negotiate the response type; turn every failure into Confluent's error body."""
    response_type = negotiate(request.headers.get("Accept"))
    request[RESPONSE_TYPE] = response_type or RESPONSE_TYPES[0]
    try:
        if response_type is None:
            raise errors.http_error(406, "Not Acceptable")
        return await handler(request)
    except RegistryError as e:
        response = reply(request, e.body(), e.status)
        response.headers.update(e.headers)
        return response
    except web.HTTPException as e:
        if e.status < 400:
            raise
        return reply(request, errors.http_error(e.status, e.reason).body(), e.status)
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("request failed", method=request.method, path=request.path)
        return reply(request, {"error_code": 500, "message": "Internal Server Error"}, 500)


async def json_body(request: web.Request) -> dict[str, Any]:
    """The JSON object of a POST/PUT: 415 for a media type Confluent refuses, 400 (as
    Confluent's Jackson mapper) for a body that is not a JSON object."""
    if request.content_type.lower() not in REQUEST_TYPES:
        raise errors.http_error(415, "Unsupported Media Type")
    raw = await request.read()
    if not raw.strip():
        raise RegistryError(400, 400, "No content to map due to end-of-input")
    try:
        data = bounded_json.loads(raw, max_depth=bounded_json.SCHEMA_DEPTH)
    except (ValueError, UnicodeDecodeError) as e:
        raise RegistryError(400, 400, f"Unexpected character in JSON body: {e}") from e
    if not isinstance(data, dict):
        raise RegistryError(400, 400, f"Cannot deserialize a request object from a JSON {type(data).__name__}")
    return data


def flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").strip().lower() == "true"


def version_of(text: str) -> int:
    """A version path segment: 1..2^31-1, or `latest` / -1 (returned as LATEST)."""
    if text == "latest":
        return LATEST
    try:
        number = int(text)
    except ValueError:
        raise errors.invalid_version(text) from None
    if number == -1:
        return LATEST
    if number < 1 or number > errors.MAX_VERSION:
        raise errors.invalid_version(text)
    return number


def schema_id_of(request: web.Request) -> int:
    try:
        return int(request.match_info["id"])
    except ValueError:
        raise errors.http_error(404, "Not Found") from None


def schema_from(body: dict[str, Any]) -> ParsedSchema:
    """The schema of a register/lookup/compatibility request (Avro only)."""
    schema_type = body.get("schemaType")
    if schema_type is not None and str(schema_type).upper() not in SCHEMA_TYPES:
        raise RegistryError(422, errors.INVALID_SCHEMA, f"Invalid schema type {schema_type}")
    references = body.get("references")
    if references is not None and not isinstance(references, list):
        raise errors.invalid_schema("references must be a list")
    if references:
        raise errors.invalid_schema("schema references are not supported by this registry")
    text = body.get("schema")
    if not isinstance(text, str) or not text.strip():
        raise errors.invalid_schema("Empty schema")
    return parse_avro(text)


def optional_int(body: dict[str, Any], name: str) -> int | None:
    """`id`/`version` of a register request; absent, null, or <= 0 means "not given"."""
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RegistryError(422, 422, f"{name} must be an integer")
    return value if value > 0 else None


def store_of(request: web.Request) -> SchemaStore:
    return request.app[STORE]


async def read_synced(store: SchemaStore, lookup: Callable[[], T]) -> T:
    """Answer from local state; on a miss, catch up with the log once (another registry
    instance may have just written it) and look again."""
    try:
        return lookup()
    except RegistryError as e:
        if e.status != 404:
            raise
        try:
            await store.sync(READ_SYNC_SECONDS)
        except RegistryError:
            raise e from None
    return lookup()
