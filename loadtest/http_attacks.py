"""Password guessing against the registry's basic auth and the dashboard's sign-in, from many
client addresses (distinct 127.x.y.z sources), for ``python -m loadtest.guessing``:

- guesses for one user, one from each of 100 addresses at once: how many were checked;
- a guesser on 127.0.0.2 without pause, the owner signing in from 127.0.0.3: admitted or not,
  and how long it took against a control sign-in;
- a flood of unknown names from 200 addresses without pause, then the owner's first sign-in
  from a new address: how long it took against a control, and how many of the flood's
  passwords were hashed while it waited.

The server runs on a loop of its own in a thread; credentials have the production PBKDF2
iterations (`kit.users.ITERATIONS`) unless told otherwise.
"""

from __future__ import annotations

import asyncio
import base64
import tempfile
import threading
import time
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from structlog.testing import capture_logs

from kit.throttle import LoginThrottle
from kit.users import ITERATIONS, Users, hash_password
from registry.auth import basic_auth
from registry.http import confluent_errors
from services.dashboard.app import create_app as create_dashboard
from services.dashboard.config import DashboardConfig

USER, PASSWORD = "ops", "ops-secret"
CONTROL = "ctl"  # signs in for the control: a verified password is cached, so never the owner's
KINDS = ("registry", "dashboard")
_FAILED = {"registry": "registry authentication failed", "dashboard": "dashboard sign-in failed"}


def login_app(kind: str, users_file: Path) -> web.Application:
    """A `kind` server's login in front of one page, as it runs (its own middlewares)."""
    if kind == "registry":  # the registry's own middlewares in front of a listing
        users = Users.load(users_file, LoginThrottle(max_s=30))

        async def subjects(request: web.Request) -> web.Response:
            return web.json_response([])

        app = web.Application(middlewares=[confluent_errors, basic_auth(users)])
        app.router.add_get("/subjects", subjects)
        return app
    config = DashboardConfig(
        listen="127.0.0.1", port=0, bootstrap_servers="127.0.0.1:9", users_file=users_file, log_shipping=False
    )
    return create_dashboard(config)


@contextmanager
def served(kind: str, iterations: int) -> Iterator[str]:
    """The base URL of a fresh `kind` server, on its own loop in a thread."""
    with tempfile.TemporaryDirectory(prefix="bench-logins-") as tmp:
        users_file = Path(tmp) / "users"
        users_file.write_text(
            f"{USER}: {hash_password(PASSWORD, iterations=iterations)},read\n"
            f"{CONTROL}: {hash_password(PASSWORD, iterations=iterations)},read\n"
        )
        ready: list[str] = []
        started, stop = threading.Event(), threading.Event()

        async def serve() -> None:
            runner = web.AppRunner(login_app(kind, users_file))
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            host, port = runner.addresses[0][:2]
            ready.append(f"http://{host}:{port}")
            started.set()
            try:
                await asyncio.to_thread(stop.wait)
            finally:
                await runner.cleanup()

        thread = threading.Thread(target=asyncio.run, args=(serve(),))
        thread.start()
        try:
            if not started.wait(60):
                raise RuntimeError(f"the {kind} server did not start")
            yield ready[0]
        finally:
            stop.set()
            thread.join()


async def _attempt(kind: str, url: str, source: str, user: str, password: str) -> str:
    """ "ok", "wrong" (checked) or "refused" (429, unchecked), from `source`."""
    connector = aiohttp.TCPConnector(local_addr=(source, 0), force_close=True)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        if kind == "registry":
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            async with session.get(url + "/subjects", headers={"Authorization": f"Basic {token}"}) as r:
                status = r.status
        else:
            form = {"user": user, "password": password}
            async with session.post(url + "/login", data=form, allow_redirects=False) as r:
                status = r.status
    return {200: "ok", 303: "ok", 401: "wrong", 429: "refused"}.get(status, str(status))


async def _timed(kind: str, url: str, source: str, user: str = USER) -> tuple[str, float]:
    began = time.monotonic()
    outcome = await _attempt(kind, url, source, user, PASSWORD)
    return outcome, time.monotonic() - began


def _address(n: int, net: int) -> str:
    return f"127.{net}.{n // 250}.{n % 250 + 1}"


async def distributed(kind: str, iterations: int) -> dict[str, float]:
    with served(kind, iterations) as url:
        guesses = [_attempt(kind, url, _address(n, 10), USER, f"guess-{n}") for n in range(100)]
        outcomes = await asyncio.gather(*guesses)
    return {"guesses": 100, "checked": outcomes.count("wrong"), "refused": outcomes.count("refused")}


async def slow_guesser(kind: str, iterations: int) -> dict[str, float]:
    with served(kind, iterations) as url:
        _, control_s = await _timed(kind, url, "127.0.0.4", CONTROL)
        stop = asyncio.Event()

        async def guesser() -> None:
            attempt = 0
            while not stop.is_set():
                await _attempt(kind, url, "127.0.0.2", USER, f"guess-{attempt}")
                attempt += 1
                await asyncio.sleep(0.05)

        guessing = asyncio.create_task(guesser())
        try:
            await asyncio.sleep(10)  # past the free failures
            owner = [await _timed(kind, url, "127.0.0.3") for _ in range(3)]
        finally:
            stop.set()
            await guessing
    return {
        "owner_admitted": sum(outcome == "ok" for outcome, _ in owner),
        "owner_logins": len(owner),
        "owner_max_s": max(took for _, took in owner),
        "control_s": control_s,
    }


async def flood(kind: str, iterations: int, addresses: int = 200) -> dict[str, float]:
    with served(kind, iterations) as url:
        _, control_s = await _timed(kind, url, "127.0.0.4", CONTROL)
        stop = asyncio.Event()

        async def flooder(n: int) -> None:
            attempt = 0
            while not stop.is_set():
                if await _attempt(kind, url, _address(n, 20), f"nobody-{n}-{attempt}", "guess") == "refused":
                    await asyncio.sleep(0.05)
                attempt += 1

        with capture_logs() as logged:

            def failures() -> list[MutableMapping[str, Any]]:
                return [entry for entry in logged if entry["event"] == _FAILED[kind]]

            flooders = [asyncio.create_task(flooder(n)) for n in range(addresses)]
            try:
                began = time.monotonic()
                while len(failures()) < addresses:  # every address has failed once
                    if time.monotonic() - began > 600:
                        raise TimeoutError("the flood made no progress")
                    await asyncio.sleep(0.1)
                flooding_s = time.monotonic() - began
                before = len(failures())
                outcome, took_s = await _timed(kind, url, "127.0.0.3")
                hashed = len(failures()) - before
            finally:
                stop.set()
                await asyncio.gather(*flooders)
    return {
        "admitted": float(outcome == "ok"),
        "first_login_s": took_s,
        "control_s": control_s,
        "flood_hashed_meanwhile": hashed,
        "flooding_s": flooding_s,
    }


async def measure_all(iterations: int = ITERATIONS) -> dict[str, Any]:
    out: dict[str, Any] = {"iterations": iterations}
    for kind in KINDS:
        out[kind] = {
            "distributed": await distributed(kind, iterations),
            "slow_guesser": await slow_guesser(kind, iterations),
            "flood": await flood(kind, iterations),
        }
    return out


def report(figures: dict[str, Any]) -> list[str]:
    lines = []
    for kind in KINDS:
        d, s, f = figures[kind]["distributed"], figures[kind]["slow_guesser"], figures[kind]["flood"]
        lines += [
            f"{kind}: 100 addresses guessing one user at once: {d['checked']:.0f} guesses checked,"
            f" {d['refused']:.0f} refused unchecked",
            f"{kind}: a guesser on 127.0.0.2, the owner on 127.0.0.3: {s['owner_admitted']:.0f} of"
            f" {s['owner_logins']:.0f} sign-ins admitted, longest {s['owner_max_s'] * 1000:.0f} ms"
            f" (control {s['control_s'] * 1000:.0f} ms)",
            f"{kind}: first-login delay under a flood of unknown names from 200 addresses:"
            f" {f['first_login_s'] * 1000:.0f} ms (control {f['control_s'] * 1000:.0f} ms),"
            f" {f['flood_hashed_meanwhile']:.0f} flood passwords hashed meanwhile,"
            f" {'admitted' if f['admitted'] else 'NOT admitted'}",
        ]
    return lines
