"""A process's `main`, the same for every streamshop process: settings checked before anything
starts (a bad one is exit status 2 with one line naming it), logging configured once, the
settings logged (secrets masked), uvloop, and a clean stop on SIGINT/SIGTERM.

An HTTP process (`serve_app`) prints one line to stdout (flushed) once it listens, which
supervisors such as `streamshop up` wait for::

    streamshop <name> ready on <url>[ <key>=<value>]...

``<url>`` is the base URL with the port actually bound (so port 0 works; a wildcard listen
address is given as 127.0.0.1).  An app announces more endpoints by filling
``app[READY_FIELDS_KEY]`` (a ``dict[str, str]``) when it is created or during its startup
(``on_startup``/``cleanup_ctx``), e.g. the catcher's ``smtp=127.0.0.1:1025``; keys are
``[A-Za-z0-9_.-]+`` and values contain no whitespace.  `streamshop.broker_process
.parse_service_ready_line` reads the line back.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import re
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, TypeVar

import uvloop
from aiohttp import web
from structlog.typing import Processor

from kit import telemetry
from kit.logging import configure_logging, get_logger
from kit.settings import ConfigError, HttpSettings, ProcessSettings, Settings
from kit.tls import TlsConfigError

__all__ = [
    "FAIL_KEY",
    "LISTENING_KEY",
    "READY_FIELDS_KEY",
    "StartupError",
    "base_url",
    "load",
    "main",
    "ready_line",
    "run",
    "serve_app",
    "signal_child",
    "start_logging",
]

S = TypeVar("S", bound=Settings)

READY_FIELDS_KEY: web.AppKey[dict[str, str]] = web.AppKey("ready_fields")
# Called with the base URL once the server listens (before the ready line): what needs the bound
# port, such as announcing it to peers.
LISTENING_KEY: web.AppKey[list[Callable[[str], Awaitable[None]]]] = web.AppKey("listening")
# Set by `serve_app` before startup: an app that can no longer serve calls it with the reason,
# and the process stops with exit status 1 and that reason on stderr.
FAIL_KEY: web.AppKey[Callable[[str], None]] = web.AppKey("fail")
_FIELD_KEY = re.compile(r"[A-Za-z0-9_.-]+")
_WILDCARDS = ("", "0.0.0.0", "::")


class StartupError(Exception):
    """The process cannot start, or can no longer serve, for a reason outside its settings (a
    data directory in use, a store that cannot be read or was lost); `main` prints it and exits 1."""


def signal_child(proc: asyncio.subprocess.Process, signum: int) -> None:
    """Send `signum` to a child the loop watches, if it has not exited.

    Not `proc.send_signal`/`proc.kill`: on the standard loop they call `Popen.poll()` first,
    which can reap a child that has just exited before the loop's watcher does; the watcher
    then logs "Unknown child process" and reports exit status 255 instead of the real one."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signum)


def main(program: str, body: Callable[[], int]) -> int:
    """Run `body`; a setting that cannot be used is exit status 2, a `StartupError` 1, each
    with one line on stderr that names the program and the problem (never a traceback)."""
    try:
        return body()
    except ConfigError as e:
        print(f"{program}: invalid configuration: {e}", file=sys.stderr)
        return 2
    except TlsConfigError as e:
        print(f"{program}: {e}", file=sys.stderr)
        return 2
    except StartupError as e:
        print(f"{program}: {e}", file=sys.stderr)
        return 1


def load(cls: type[S], overrides: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None) -> S:
    """`cls.from_env` (flags in `overrides` win); `ConfigError` for `main` to report."""
    return cls.from_env(environ, overrides=overrides)


def start_logging(settings: ProcessSettings, name: str, *, tap: Processor | None = None) -> Any:
    """Configure logging from the process's settings; log them (masked) and any deprecated
    names they were read from.  The logger named `name`."""
    configure_logging(level=settings.log_level, fmt=settings.log_format, tap=tap)
    log = get_logger(name)
    log.info("config", **settings.as_log_dict())
    for message in settings.deprecations:
        log.warning("deprecated setting", problem=message)
    return log


def run(coroutine: Coroutine[Any, Any, None]) -> None:
    """Run the process's top coroutine on uvloop (the hot paths are socket and callback work,
    where it is markedly faster than the default loop)."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(coroutine)


def stop_event() -> asyncio.Event:
    """An event set by SIGINT or SIGTERM (call from inside the running loop)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


def ready_line(service: str, url: str, fields: Mapping[str, str] | None = None) -> str:
    """The line `serve_app` prints once listening; ValueError for a field that would not parse back."""
    extra = ""
    for key, value in (fields or {}).items():
        if not _FIELD_KEY.fullmatch(key) or not value or any(c.isspace() for c in value):
            raise ValueError(f"ready-line field {key}={value!r}: key [A-Za-z0-9_.-]+, value without whitespace")
        extra += f" {key}={value}"
    return f"streamshop {service} ready on {url}{extra}"


def base_url(host: str, port: int, scheme: str = "http") -> str:
    """``http://HOST:PORT`` a client can use: a wildcard address becomes loopback."""
    host = "127.0.0.1" if host in _WILDCARDS else host
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def serve_app(
    config: HttpSettings,
    create_app: Callable[[], web.Application],
    *,
    tap: Processor | None = None,
) -> int:
    """Configure logging (every rendered line also through `tap`), log the (masked) settings,
    and serve the app until SIGINT/SIGTERM, HTTPS when the settings have a certificate."""
    start_logging(config, f"{config.service_name}.main", tap=tap)
    ssl_context = config.server_ssl_context()  # a bad certificate fails here, before the app starts
    telemetry.configure(config.service_name)  # before the app: the HTTP instrumentation wraps it
    try:
        run(_serve(create_app(), config, ssl_context))
    finally:
        telemetry.shutdown()
    return 0


async def _serve(app: web.Application, config: HttpSettings, ssl_context: Any) -> None:
    """What `web.run_app` does (startup, listen, graceful cleanup on SIGINT/SIGTERM), plus the
    ready line, which needs the bound port and so the runner itself."""
    stop = stop_event()
    failure: list[str] = []

    def fail(reason: str) -> None:
        failure.append(reason)
        stop.set()

    app[FAIL_KEY] = fail
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    try:
        # Startup (the cleanup contexts) can wait tens of seconds on a Kafka client's timeouts
        # when the broker does not answer: a signal meanwhile cancels it, as in `web.run_app`,
        # rather than being seen only once startup is over.  Inside the try: the contexts entered
        # before a failed or cancelled startup are cleaned up too.
        if not await unless_stopped(runner.setup(), stop):
            return
        await web.TCPSite(
            runner, config.listen, config.port, ssl_context=ssl_context, reuse_port=config.reuse_port or None
        ).start()
        port = int(runner.addresses[0][1])
        url = base_url(config.listen, port, config.scheme)
        for listening in app.get(LISTENING_KEY, ()):
            await listening(url)
        settle_heap()
        fields = app.get(READY_FIELDS_KEY) or {}
        print(ready_line(config.service_name, url, fields), flush=True)
        await stop.wait()
    finally:
        await runner.cleanup()
    if failure:
        raise StartupError(failure[0])


def settle_heap() -> None:
    """Once started: collect, then move every object alive (modules, schemas, clients: hundreds
    of thousands, living as long as the process) out of the cyclic collector's view.  Its full
    collections scan every tracked object; a service's took 20 to 80 ms under load, stalling
    every request in flight, and after this took under 4 ms."""
    gc.collect()
    gc.freeze()


async def unless_stopped(work: Awaitable[None], stop: asyncio.Event) -> bool:
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
