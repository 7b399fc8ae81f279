"""Readiness checks: async callables that return (anything) when a dependency is reachable and
raise when it is not.  `/readyz` runs them concurrently, each with a timeout."""

from __future__ import annotations

import asyncio
import sqlite3
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from kit.settings import parse_host_port

__all__ = ["Check", "broker_check", "http_check", "run_checks", "sqlite_check"]

Check = Callable[[], Awaitable[object]]


async def run_checks(checks: Mapping[str, Check], limit: float) -> tuple[bool, dict[str, dict[str, Any]]]:
    """Run every check at once, each for at most `limit` seconds: (all ok, per-check results
    with `ok`, `duration_ms` and, on failure, `error`)."""

    async def one(check: Check) -> dict[str, Any]:
        start = time.perf_counter()
        try:
            async with asyncio.timeout(limit):
                await check()
        except TimeoutError:
            result: dict[str, Any] = {"ok": False, "error": f"timed out after {limit}s"}
        except Exception as e:
            # Readiness is for operators: say what failed, briefly, without a traceback.
            result = {"ok": False, "error": f"{type(e).__name__}: {e}"[:300]}
        else:
            result = {"ok": True}
        result["duration_ms"] = round((time.perf_counter() - start) * 1000, 3)
        return result

    names = list(checks)
    results = await asyncio.gather(*(one(checks[n]) for n in names))
    report = dict(zip(names, results, strict=True))
    return all(r["ok"] for r in results), report


def broker_check(bootstrap_servers: str) -> Check:
    """Reachable when a TCP connection to any bootstrap server opens.  (A Kafka-level check
    needs a client with the security settings; the producer can offer one as another check.)"""
    servers = [parse_host_port(s, default_host="127.0.0.1") for s in bootstrap_servers.split(",") if s.strip()]

    async def check() -> None:
        errors: list[str] = []
        for server in servers:
            try:
                _, writer = await asyncio.open_connection(server.host, server.port)
            except OSError as e:
                errors.append(f"{server}: {e.strerror or e}")
                continue
            writer.close()
            await writer.wait_closed()
            return
        raise ConnectionError("; ".join(errors) or "no bootstrap servers")

    return check


def http_check(url: str, auth: tuple[str, str] | None = None, ssl_context: ssl.SSLContext | None = None) -> Check:
    """Reachable when GET `url` answers 2xx (e.g. the registry's ``/subjects``)."""

    async def check() -> None:
        tls: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        headers = {"Authorization": aiohttp.BasicAuth(*auth).encode()} if auth else {}
        async with aiohttp.ClientSession() as session, session.get(url, ssl=tls, headers=headers) as response:
            if response.status >= 300:
                raise ConnectionError(f"GET {url}: HTTP {response.status}")

    return check


def postgres_target(url: str) -> str:
    """`host:port/name` of a PostgreSQL URL, for messages: never the user's password."""
    parts = urlsplit(url)
    return f"{parts.hostname or 'localhost'}:{parts.port or 5432}{parts.path or '/'}"


def sqlite_check(path: Path) -> Check:
    """Reachable when the database file opens read-write (never created by the check) and
    answers ``SELECT 1``; runs in a thread because sqlite3 blocks."""

    def probe() -> None:
        conn = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=1.0)
        try:
            conn.execute("SELECT 1").fetchone()
        finally:
            conn.close()

    async def check() -> None:
        await asyncio.to_thread(probe)

    return check
