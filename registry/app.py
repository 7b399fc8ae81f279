"""The schema registry's HTTP API: Confluent Schema Registry's REST API for Avro schemas.

`create_app(config)` builds the aiohttp application; its start-up replays the `_schemas` topic
(see `registry.store`) before the server accepts a request. `streamshop registry` runs
it (`main`). Requests and answers use Confluent's media types and error bodies, so Confluent's
clients, serializers and tools work against it unchanged.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from kit import process
from kit.app import create_base_app
from kit.process import FAIL_KEY, LISTENING_KEY
from kit.settings import ConfigError, HttpSettings
from kit.throttle import LoginThrottle
from kit.users import Users
from registry.auth import basic_auth
from registry.config import RegistryConfig
from registry.election import PrimaryElection
from registry.forward import ELECTION, peer_session_context, primary_only
from registry.http import CONFIG, RESPONSE_TYPES, STORE, confluent_errors, reply, store_of
from registry.openapi import registry_openapi
from registry.routes import compatibility, schemas, settings, subjects
from registry.store import SchemaStore, StoreUnavailable

__all__ = ["RunningRegistry", "create_app", "main", "start_registry"]


async def healthz(request: web.Request) -> web.Response:
    """Liveness: the process serves HTTP."""
    return reply(request, {"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """Readiness: the broker answers and the schemas topic is read to its end."""
    ready, detail = await store_of(request).readiness()
    return reply(request, {"status": "ready" if ready else "not ready", **detail}, 200 if ready else 503)


def create_app(config: RegistryConfig) -> web.Application:
    """The registry as an aiohttp application on the kit's base app (request ids, access log,
    ``/metrics``) with Confluent's error body; its start-up replays the schemas topic, so a
    runner serves only once the state is complete."""
    auth = (
        [basic_auth(Users.load(config.users_file, LoginThrottle(max_s=config.login_throttle_max_s)))]
        if config.users_file is not None
        else []
    )
    app = create_base_app(config, errors=confluent_errors, probes=False, middlewares=auth)
    app[CONFIG] = config

    def lost(reason: str) -> None:
        fail = app.get(FAIL_KEY)  # under `serve_app`: the process stops with the reason
        if fail is not None:
            fail(reason)

    store = SchemaStore(config, on_lost=lost)
    election = PrimaryElection(config, on_change=store.follow, on_confirmed=store.confirmed)
    app[STORE] = store
    app[ELECTION] = election

    async def store_context(app: web.Application) -> AsyncIterator[None]:
        await store.start()
        yield
        await election.stop()  # leave the group first: another instance takes the role at once
        await store.stop()

    async def join_group(url: str) -> None:
        await election.start(url)  # once listening: the group learns where to forward writes

    app.cleanup_ctx.append(store_context)
    app.cleanup_ctx.append(peer_session_context(config))
    listening: list[Callable[[str], Awaitable[None]]] = [join_group]
    app[LISTENING_KEY] = listening
    r = app.router
    r.add_get("/", subjects.root)
    r.add_get("/healthz", healthz)
    r.add_get("/readyz", readyz)
    r.add_get("/subjects", subjects.list_subjects)
    r.add_get("/subjects/{subject}/versions", subjects.list_versions)
    r.add_post("/subjects/{subject}/versions", primary_only(subjects.register))
    r.add_get("/subjects/{subject}/versions/{version}", subjects.get_version)
    r.add_delete("/subjects/{subject}/versions/{version}", primary_only(subjects.delete_version))
    r.add_get("/subjects/{subject}/versions/{version}/schema", subjects.get_version_schema)
    r.add_get("/subjects/{subject}/versions/{version}/referencedby", subjects.referenced_by)
    r.add_post("/subjects/{subject}", subjects.lookup_schema)
    r.add_delete("/subjects/{subject}", primary_only(subjects.delete_subject))
    r.add_get("/schemas", schemas.list_schemas)
    r.add_get("/schemas/types", schemas.schema_types)
    r.add_get("/schemas/ids/{id}", schemas.get_schema)
    r.add_get("/schemas/ids/{id}/schema", schemas.get_schema_text)
    r.add_get("/schemas/ids/{id}/versions", schemas.schema_versions)
    r.add_get("/schemas/ids/{id}/subjects", schemas.schema_subjects)
    r.add_post("/compatibility/subjects/{subject}/versions", compatibility.check)
    r.add_post("/compatibility/subjects/{subject}/versions/{version}", compatibility.check)
    for path in ("/config", "/config/{subject}"):
        r.add_get(path, settings.get_config)
        r.add_put(path, primary_only(settings.put_config))
        r.add_delete(path, primary_only(settings.delete_config))
    r.add_get("/mode", settings.get_mode)
    r.add_put("/mode", primary_only(settings.put_mode))
    r.add_get("/mode/{subject}", settings.get_mode)
    r.add_put("/mode/{subject}", primary_only(settings.put_mode))
    r.add_delete("/mode/{subject}", primary_only(settings.delete_mode))
    description = registry_openapi(RESPONSE_TYPES)

    async def openapi(request: web.Request) -> web.Response:
        return reply(request, description)

    r.add_get("/openapi.json", openapi)
    return app


@dataclass
class RunningRegistry:
    """A registry serving HTTP in this process (tests, benchmarks); `stop()` closes the server
    and the Kafka clients."""

    app: web.Application
    runner: web.AppRunner
    config: HttpSettings
    port: int

    @property
    def url(self) -> str:
        return process.base_url(self.config.listen, self.port, self.config.scheme)

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
        await web.TCPSite(runner, config.listen, config.port, ssl_context=config.server_ssl_context()).start()
        running = RunningRegistry(app, runner, config, int(runner.addresses[0][1]))
        for listening in app[LISTENING_KEY]:
            await listening(running.url)
    except BaseException:
        await runner.cleanup()
        raise
    return running


def main(overrides: dict[str, object] | None = None) -> int:
    """`streamshop registry`: settings from ``REGISTRY_*`` (flags in `overrides` win); serve until
    SIGINT/SIGTERM.  2 for a setting that cannot be used, 1 when the store cannot start."""

    def body() -> int:
        config = process.load(RegistryConfig, overrides)
        if config.users_file is not None:
            Users.load(config.users_file)  # a bad file is a usage error, said before start-up
        problems = config.check_kafka_security()
        if problems:
            raise ConfigError(problems)
        try:
            return process.serve_app(config, lambda: create_app(config))
        except StoreUnavailable as e:
            raise process.StartupError(str(e)) from e

    return process.main("streamshop registry", body)
