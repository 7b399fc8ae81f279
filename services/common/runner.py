"""Running a service process: logging (shipped to the logs.* topics when enabled) and the
aiohttp server, the same way for every service.

Once the server listens, `serve_app` prints one line to stdout (flushed) that supervisors such
as `streamshop up` wait for::

    streamshop <service> ready on <url>[ <key>=<value>]...

``<url>`` is the HTTP base URL with the port actually bound (so ``--port 0`` works; a wildcard
listen address is given as 127.0.0.1).  An app announces more endpoints by filling
``app[READY_FIELDS_KEY]`` (a ``dict[str, str]``) when it is created or during its startup
(``on_startup``/``cleanup_ctx``), e.g. the catcher's ``smtp=127.0.0.1:1025``; keys are
``[A-Za-z0-9_.-]+`` and values contain no whitespace.  `streamshop.broker_process
.parse_service_ready_line` reads the line back.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import re
import signal
import sys
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any, TypeVar

import uvloop
from aiohttp import web

from services.common.auth import ApiKeys
from services.common.config import ServiceConfig
from services.common.log_shipper import LogShipper
from services.common.logging import configure_logging, get_logger

C = TypeVar("C", bound=ServiceConfig)

READY_FIELDS_KEY: web.AppKey[dict[str, str]] = web.AppKey("ready_fields")
_FIELD_KEY = re.compile(r"[A-Za-z0-9_.-]+")
_WILDCARDS = ("", "0.0.0.0", "::")


def ready_line(service: str, url: str, fields: Mapping[str, str] | None = None) -> str:
    """The line `serve_app` prints once listening; ValueError for a field that would not parse back."""
    extra = ""
    for key, value in (fields or {}).items():
        if not _FIELD_KEY.fullmatch(key) or not value or any(c.isspace() for c in value):
            raise ValueError(f"ready-line field {key}={value!r}: key [A-Za-z0-9_.-]+, value without whitespace")
        extra += f" {key}={value}"
    return f"streamshop {service} ready on {url}{extra}"


def base_url(host: str, port: int) -> str:
    """``http://HOST:PORT`` a client can use: a wildcard address becomes loopback."""
    host = "127.0.0.1" if host in _WILDCARDS else host
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def build_shipper(config: ServiceConfig) -> LogShipper | None:
    """The service's own log shipper, or None when `<PREFIX>_LOG_SHIPPING` is off."""
    if not config.log_shipping:
        return None
    return LogShipper(
        service=config.service_name,
        instance=config.instance_id,
        capacity=config.log_buffer_size,
        level=config.log_level,
    )


def serve_app(config: C, create_app: Callable[[C, LogShipper | None], web.Application]) -> int:
    """Configure logging, log the (masked) config, and serve until SIGINT/SIGTERM."""
    shipper = build_shipper(config)
    configure_logging(level=config.log_level, fmt=config.log_format, shipper=shipper)
    get_logger(f"services.{config.service_name}").info("config", **config.as_log_dict())
    # uvloop: the services' hot path is socket and callback work, where it is markedly faster.
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(_serve(create_app(config, shipper), config))
    return 0


async def _serve(app: web.Application, config: ServiceConfig) -> None:
    """What `web.run_app` does (startup, listen, graceful cleanup on SIGINT/SIGTERM), plus the
    ready line, which needs the bound port and so the runner itself."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    try:
        # Startup (the cleanup contexts) can wait tens of seconds on the Kafka client's timeouts
        # when the broker does not answer: a signal meanwhile cancels it, as in `web.run_app`,
        # rather than being seen only once startup is over.  Inside the try: the contexts entered
        # before a failed or cancelled startup are cleaned up too.
        if not await _unless_stopped(runner.setup(), stop):
            return
        await web.TCPSite(runner, config.listen, config.port).start()
        port = int(runner.addresses[0][1])
        fields = app.get(READY_FIELDS_KEY) or {}
        print(ready_line(config.service_name, base_url(config.listen, port), fields), flush=True)
        await stop.wait()
    finally:
        await runner.cleanup()


async def _unless_stopped(work: Coroutine[Any, Any, None], stop: asyncio.Event) -> bool:
    """Run `work` to its end (True; its exception propagates), or cancel it once `stop` is set
    (False)."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()  # we are cancelled ourselves: so is `work`
        raise
    finally:
        stopped.cancel()
    if task.done():
        task.result()
        return True
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return False


def _default(config_cls: type[ServiceConfig], name: str) -> object:
    return next(f.default for f in dataclasses.fields(config_cls) if f.name == name)


def add_port_database_arguments(parser: argparse.ArgumentParser, config_cls: type[ServiceConfig]) -> None:
    """``--port`` and ``--database``, the overrides `run_from_args` applies."""
    port, database = _default(config_cls, "port"), _default(config_cls, "database_path")
    parser.add_argument(
        "--port", type=int, default=None, help=f"HTTP port (env {config_cls.env_name('port')}; default {port})"
    )
    parser.add_argument(
        "--database",
        type=Path,
        default=None,
        help=f"SQLite file (env {config_cls.env_name('database_path')}; default {database})",
    )


def run_from_args(
    args: argparse.Namespace,
    config_cls: type[C],
    create_app: Callable[[C, LogShipper | None], web.Application],
) -> int:
    """Settings from the environment (checked), ``--port`` and ``--database`` of `args` over
    them; serve until SIGINT/SIGTERM.  2 on invalid configuration."""
    try:
        config = config_cls.from_env()
        config.check()
        config.kafka_security  # noqa: B018 - raises ValueError for SASL without credentials
        if config.api_keys_file is not None:
            ApiKeys.load(config.api_keys_file)
    except ValueError as e:  # ConfigError, ApiKeysError, KafkaSecurity's
        sys.stderr.write(f"{config_cls.service_name}: {e}\n")
        return 2
    overrides: dict[str, object] = {}
    if getattr(args, "port", None) is not None:
        overrides["port"] = args.port
    if getattr(args, "database", None) is not None:
        overrides["database_path"] = Path(args.database)
    config = dataclasses.replace(config, **overrides)  # type: ignore[arg-type]
    return serve_app(config, create_app)
