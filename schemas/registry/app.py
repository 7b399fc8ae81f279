"""The schema registry's HTTP API: Confluent Schema Registry's REST API for Avro schemas.

`create_app(config)` builds the aiohttp application; its start-up replays the `_schemas` topic
(see `schemas.registry.store`) before the server accepts a request. `streamshop registry` runs
it (`main`). Requests and answers use Confluent's media types and error bodies, so Confluent's
clients, serializers and tools work against it unchanged.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import ssl
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog
from aiohttp import web
from aiohttp.typedefs import Middleware

from schemas import bounded_json
from schemas.registry import errors
from schemas.registry.auth import RegistryUsers, UsersFileError, basic_auth
from schemas.registry.compatibility import Level
from schemas.registry.config import ConfigError, RegistryConfig, parse_host_port
from schemas.registry.errors import RegistryError
from schemas.registry.openapi import registry_openapi
from schemas.registry.schema_text import ParsedSchema, checked, parse_avro
from schemas.registry.state import Mode, RegistryState, SchemaVersion
from schemas.registry.store import LATEST, SchemaStore, StoreUnavailable

log = structlog.get_logger(__name__)

T = TypeVar("T")
Setting = TypeVar("Setting", Level, Mode)

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


def _reply(request: web.Request, data: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=json.dumps(data, ensure_ascii=False).encode(),
        status=status,
        content_type=request.get(RESPONSE_TYPE, RESPONSE_TYPES[0]),
    )


def _raw(request: web.Request, text: str) -> web.Response:
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
        response = _reply(request, e.body(), e.status)
        response.headers.update(e.headers)
        return response
    except web.HTTPException as e:
        if e.status < 400:
            raise
        return _reply(request, errors.http_error(e.status, e.reason).body(), e.status)
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("request failed", method=request.method, path=request.path)
        return _reply(request, {"error_code": 500, "message": "Internal Server Error"}, 500)


async def _body(request: web.Request) -> dict[str, Any]:
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


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").strip().lower() == "true"


def _version(text: str) -> int:
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


def _schema_id(request: web.Request) -> int:
    try:
        return int(request.match_info["id"])
    except ValueError:
        raise errors.http_error(404, "Not Found") from None


def _schema_from(body: dict[str, Any]) -> ParsedSchema:
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


def _optional_int(body: dict[str, Any], name: str) -> int | None:
    """`id`/`version` of a register request; absent, null, or <= 0 means "not given"."""
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RegistryError(422, 422, f"{name} must be an integer")
    return value if value > 0 else None


def _store(request: web.Request) -> SchemaStore:
    return request.app[STORE]


async def _read(store: SchemaStore, lookup: Callable[[], T]) -> T:
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


# ----------------------------------------------------------------------------------------------
# Subjects


async def root(request: web.Request) -> web.Response:
    return _reply(request, {})


async def list_subjects(request: web.Request) -> web.Response:
    state = _store(request).state
    deleted_only = _flag(request, "deletedOnly")
    names = state.subject_names(include_deleted=_flag(request, "deleted") or deleted_only)
    if deleted_only:
        live = set(state.subject_names())
        names = [name for name in names if name not in live]
    prefix = request.query.get("subjectPrefix", "")
    return _reply(request, [name for name in names if name.startswith(prefix)])


async def list_versions(request: web.Request) -> web.Response:
    store, subject = _store(request), request.match_info["subject"]
    include_deleted = _flag(request, "deleted") or _flag(request, "deletedOnly")

    def lookup() -> list[int]:
        found = store.state.versions(subject, include_deleted)
        if not found:
            raise errors.subject_not_found(subject)
        if _flag(request, "deletedOnly"):
            return [sv.version for sv in found if sv.deleted]
        return [sv.version for sv in found]

    return _reply(request, await _read(store, lookup))


def _get_version(store: SchemaStore, subject: str, version: int, include_deleted: bool) -> dict[str, Any]:
    found = store.state.versions(subject, include_deleted)
    if not found:
        raise errors.subject_not_found(subject)
    if version == LATEST:
        return found[-1].describe()
    for sv in found:
        if sv.version == version:
            return sv.describe()
    raise errors.version_not_found(version)


async def get_version(request: web.Request) -> web.Response:
    store, subject = _store(request), request.match_info["subject"]
    version = _version(request.match_info["version"])
    include_deleted = _flag(request, "deleted")
    return _reply(request, await _read(store, lambda: _get_version(store, subject, version, include_deleted)))


async def get_version_schema(request: web.Request) -> web.Response:
    store, subject = _store(request), request.match_info["subject"]
    version = _version(request.match_info["version"])
    include_deleted = _flag(request, "deleted")
    found = await _read(store, lambda: _get_version(store, subject, version, include_deleted))
    return _raw(request, found["schema"])


async def referenced_by(request: web.Request) -> web.Response:
    store, subject = _store(request), request.match_info["subject"]
    version = _version(request.match_info["version"])
    await _read(store, lambda: _get_version(store, subject, version, False))
    return _reply(request, [])  # references are not supported, so nothing refers to a version


async def register(request: web.Request) -> web.Response:
    body = await _body(request)
    schema = _schema_from(body)
    schema_id, _version_number = await _store(request).register(
        request.match_info["subject"], schema, _optional_int(body, "id"), _optional_int(body, "version")
    )
    return _reply(request, {"id": schema_id})


async def lookup_schema(request: web.Request) -> web.Response:
    store, subject = _store(request), request.match_info["subject"]
    body = await _body(request)
    schema = _schema_from(body)
    include_deleted = _flag(request, "deleted")

    def lookup() -> dict[str, Any]:
        found = store.state.versions(subject, include_deleted)
        if not found:
            raise errors.subject_not_found(subject)
        for sv in reversed(found):
            if sv.schema.identity == schema.identity:
                return sv.describe()
        raise errors.schema_not_found()

    return _reply(request, await _read(store, lookup))


async def delete_subject(request: web.Request) -> web.Response:
    deleted = await _store(request).delete_subject(request.match_info["subject"], _flag(request, "permanent"))
    return _reply(request, deleted)


async def delete_version(request: web.Request) -> web.Response:
    version = _version(request.match_info["version"])
    deleted = await _store(request).delete_version(request.match_info["subject"], version, _flag(request, "permanent"))
    return _reply(request, deleted)


# ----------------------------------------------------------------------------------------------
# Schemas by id


async def schema_types(request: web.Request) -> web.Response:
    return _reply(request, SCHEMA_TYPES)


async def list_schemas(request: web.Request) -> web.Response:
    state = _store(request).state
    prefix = request.query.get("subjectPrefix", "")
    include_deleted, latest_only = _flag(request, "deleted"), _flag(request, "latestOnly")
    out: list[dict[str, Any]] = []
    for subject in state.subject_names(include_deleted):
        if subject.startswith(prefix):
            found = state.versions(subject, include_deleted)
            out += [sv.describe() for sv in (found[-1:] if latest_only else found)]
    return _reply(request, out)


async def get_schema(request: web.Request) -> web.Response:
    store, schema_id = _store(request), _schema_id(request)
    return _reply(request, {"schema": (await _read(store, lambda: _schema_text(store, schema_id)))})


async def get_schema_text(request: web.Request) -> web.Response:
    store, schema_id = _store(request), _schema_id(request)
    return _raw(request, await _read(store, lambda: _schema_text(store, schema_id)))


def _schema_text(store: SchemaStore, schema_id: int) -> str:
    schema = store.state.schemas.get(schema_id)
    if schema is None:
        raise errors.schema_not_found(schema_id)
    return schema.text


async def schema_versions(request: web.Request) -> web.Response:
    store, schema_id = _store(request), _schema_id(request)
    include_deleted = _flag(request, "deleted")
    subject = request.query.get("subject")

    def lookup() -> list[dict[str, Any]]:
        _schema_text(store, schema_id)
        found = store.state.versions_of_id(schema_id, include_deleted)
        return [{"subject": sv.subject, "version": sv.version} for sv in found if subject in (None, sv.subject)]

    return _reply(request, await _read(store, lookup))


async def schema_subjects(request: web.Request) -> web.Response:
    store, schema_id = _store(request), _schema_id(request)
    include_deleted = _flag(request, "deleted")
    subject = request.query.get("subject")

    def lookup() -> list[str]:
        _schema_text(store, schema_id)
        found = store.state.versions_of_id(schema_id, include_deleted)
        return sorted({sv.subject for sv in found if subject in (None, sv.subject)})

    return _reply(request, await _read(store, lookup))


# ----------------------------------------------------------------------------------------------
# Compatibility


async def test_compatibility(request: web.Request) -> web.Response:
    store, subject = _store(request), request.match_info["subject"]
    version_text = request.match_info.get("version")
    version = _version(version_text) if version_text is not None else None
    schema = _schema_from(await _body(request))

    def against() -> list[SchemaVersion]:
        live = store.state.versions(subject)
        if version is None:
            return live  # every version (the level says which count)
        if version == LATEST:
            return live[-1:]
        if not store.state.subjects.get(subject):
            raise errors.subject_not_found(subject)
        for sv in live:
            if sv.version == version:
                return [sv]
        raise errors.version_not_found(version)

    existing = await _read(store, against)
    reasons = checked(schema, [sv.schema for sv in existing], store.state.compatibility(subject))
    result: dict[str, Any] = {"is_compatible": not reasons}
    if _flag(request, "verbose"):
        result["messages"] = reasons
    return _reply(request, result)


# ----------------------------------------------------------------------------------------------
# Config and mode


def _level(body: dict[str, Any]) -> Level:
    """The level of a PUT /config body: `compatibility` or `compatibilityLevel` (each given
    one must be a level, case-insensitive; `compatibility` wins when both are)."""
    given = [body[name] for name in ("compatibility", "compatibilityLevel") if name in body] or [None]
    levels = []
    for raw in given:
        try:
            levels.append(Level(raw.upper() if isinstance(raw, str) else ""))
        except ValueError:
            raise errors.invalid_compatibility_level(raw) from None
    return levels[0]


def _subject(request: web.Request) -> str | None:
    return request.match_info.get("subject")


async def _setting(
    request: web.Request,
    configured: Callable[[RegistryState], Mapping[str | None, Setting]],
    in_force: Callable[[RegistryState, str | None], Setting],
    not_configured: Callable[[str], RegistryError],
) -> Setting:
    """A GET of /config or /mode: a subject's own setting (`not_configured` when it has none),
    or, for the global path or with `defaultToGlobal`, the setting in force."""
    store, subject = _store(request), _subject(request)
    if subject is None or _flag(request, "defaultToGlobal"):
        return in_force(store.state, subject)

    def lookup() -> Setting:
        own = configured(store.state)
        if subject not in own:
            raise not_configured(subject)
        return own[subject]

    return await _read(store, lookup)


async def get_config(request: web.Request) -> web.Response:
    level = await _setting(
        request, lambda state: state.configs, RegistryState.compatibility, errors.subject_compatibility_not_configured
    )
    return _reply(request, {"compatibilityLevel": level.value})


async def put_config(request: web.Request) -> web.Response:
    level = _level(await _body(request))
    await _store(request).set_compatibility(_subject(request), level)
    return _reply(request, {"compatibility": level.value})


async def delete_config(request: web.Request) -> web.Response:
    before = await _store(request).delete_compatibility(_subject(request))
    return _reply(request, {"compatibilityLevel": before.value})


async def get_mode(request: web.Request) -> web.Response:
    mode = await _setting(request, lambda state: state.modes, RegistryState.mode, errors.subject_mode_not_configured)
    return _reply(request, {"mode": mode.value})


async def put_mode(request: web.Request) -> web.Response:
    body = await _body(request)
    raw = body.get("mode")
    try:
        mode = Mode(raw.upper() if isinstance(raw, str) else "")
    except ValueError:
        raise errors.invalid_mode(raw) from None
    await _store(request).set_mode(_subject(request), mode, _flag(request, "force"))
    return _reply(request, {"mode": mode.value})


async def delete_mode(request: web.Request) -> web.Response:
    subject = request.match_info["subject"]
    before = await _store(request).delete_mode(subject)
    return _reply(request, {"mode": before.value})


# ----------------------------------------------------------------------------------------------
# Health


async def healthz(request: web.Request) -> web.Response:
    """Liveness: the process serves HTTP."""
    return _reply(request, {"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """Readiness: the broker answers and the schemas topic is read to its end."""
    ready, detail = await _store(request).readiness()
    return _reply(request, {"status": "ready" if ready else "not ready", **detail}, 200 if ready else 503)


# ----------------------------------------------------------------------------------------------
# Application


def create_app(config: RegistryConfig) -> web.Application:
    """The registry as an aiohttp application; its start-up replays the schemas topic, so
    a runner serves only once the state is complete."""
    middlewares: list[Middleware] = [confluent_errors]
    if config.users_file is not None:
        middlewares.append(basic_auth(RegistryUsers.load(config.users_file)))
    app = web.Application(middlewares=middlewares)
    app[CONFIG] = config
    app[STORE] = SchemaStore(config)

    async def store_context(app: web.Application) -> AsyncIterator[None]:
        await app[STORE].start()
        yield
        await app[STORE].stop()

    app.cleanup_ctx.append(store_context)
    r = app.router
    r.add_get("/", root)
    r.add_get("/healthz", healthz)
    r.add_get("/readyz", readyz)
    r.add_get("/subjects", list_subjects)
    r.add_get("/subjects/{subject}/versions", list_versions)
    r.add_post("/subjects/{subject}/versions", register)
    r.add_get("/subjects/{subject}/versions/{version}", get_version)
    r.add_delete("/subjects/{subject}/versions/{version}", delete_version)
    r.add_get("/subjects/{subject}/versions/{version}/schema", get_version_schema)
    r.add_get("/subjects/{subject}/versions/{version}/referencedby", referenced_by)
    r.add_post("/subjects/{subject}", lookup_schema)
    r.add_delete("/subjects/{subject}", delete_subject)
    r.add_get("/schemas", list_schemas)
    r.add_get("/schemas/types", schema_types)
    r.add_get("/schemas/ids/{id}", get_schema)
    r.add_get("/schemas/ids/{id}/schema", get_schema_text)
    r.add_get("/schemas/ids/{id}/versions", schema_versions)
    r.add_get("/schemas/ids/{id}/subjects", schema_subjects)
    r.add_post("/compatibility/subjects/{subject}/versions", test_compatibility)
    r.add_post("/compatibility/subjects/{subject}/versions/{version}", test_compatibility)
    for path in ("/config", "/config/{subject}"):
        r.add_get(path, get_config)
        r.add_put(path, put_config)
        r.add_delete(path, delete_config)
    r.add_get("/mode", get_mode)
    r.add_put("/mode", put_mode)
    r.add_get("/mode/{subject}", get_mode)
    r.add_put("/mode/{subject}", put_mode)
    r.add_delete("/mode/{subject}", delete_mode)
    description = registry_openapi(RESPONSE_TYPES)

    async def openapi(request: web.Request) -> web.Response:
        return _reply(request, description)

    r.add_get("/openapi.json", openapi)
    return app


def server_ssl_context(config: RegistryConfig) -> ssl.SSLContext | None:
    """The HTTPS context when a certificate is configured (TLS 1.2 at least)."""
    if config.ssl_certfile is None or config.ssl_keyfile is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(config.ssl_certfile), str(config.ssl_keyfile))
    return context


@dataclass
class RunningRegistry:
    """A registry serving HTTP; `stop()` closes the server and the Kafka clients."""

    app: web.Application
    runner: web.AppRunner
    host: str
    port: int

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"{self.app[CONFIG].scheme}://{host}:{self.port}"

    @property
    def store(self) -> SchemaStore:
        return self.app[STORE]

    async def stop(self) -> None:
        await self.runner.cleanup()


async def start_registry(config: RegistryConfig) -> RunningRegistry:
    """Replay the schemas topic, then listen (port 0: any free port)."""
    app = create_app(config)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        host, port = config.listen
        site = web.TCPSite(runner, host, port, ssl_context=server_ssl_context(config))
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return RunningRegistry(app, runner, host, int(runner.addresses[0][1]))


async def serve(config: RegistryConfig) -> None:
    running = await start_registry(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # The one line scripts wait for.
    print(f"streamshop registry ready on {config.scheme}://{running.host}:{running.port}", flush=True)
    log.info("registry ready", listen=f"{running.host}:{running.port}", bootstrap=config.bootstrap)
    await stop.wait()
    log.info("shutting down")
    await running.stop()


def main(args: argparse.Namespace) -> int:
    """`streamshop registry --bootstrap HOST:PORT --listen HOST:PORT`."""
    try:
        config = RegistryConfig.from_env(bootstrap=args.bootstrap, listen=parse_host_port(args.listen))
    except ConfigError as e:
        print(f"streamshop registry: {e}", file=sys.stderr)
        return 2
    try:
        if config.users_file is not None:
            RegistryUsers.load(config.users_file)  # a bad file is a usage error, said before start-up
        server_ssl_context(config)
    except (UsersFileError, ssl.SSLError, OSError) as e:
        print(f"streamshop registry: {e}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(config))
    except (StoreUnavailable, RegistryError) as e:
        print(f"streamshop registry: {e}", file=sys.stderr)
        return 1
    return 0
