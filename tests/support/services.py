"""Serving an aiohttp application in-process for a test: `serve_app(app)` binds it to
127.0.0.1 on a port the OS picks and yields its base URL with a client session; `ServedApp`
holds the three for a service publishing through an outbox (services.common.outbox_service)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from services.common.outbox_service import RELAY_KEY

__all__ = ["ServedApp", "serve_app"]


@asynccontextmanager
async def serve_app(app: web.Application) -> AsyncIterator[tuple[str, aiohttp.ClientSession]]:
    """Start `app` (running its startup and cleanup contexts) and yield ``(base_url, session)``;
    the session is closed and the app cleaned up on exit."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        async with aiohttp.ClientSession() as session:
            yield f"http://{host}:{port}", session
    finally:
        await runner.cleanup()


@dataclass
class ServedApp:
    """An outbox service's app served by `serve_app`: its base URL, the app and the session."""

    url: str
    app: web.Application
    session: aiohttp.ClientSession

    async def drained(self, within: float = 10.0) -> None:
        """Wait until the relay has published every outbox row."""
        outbox = self.app[RELAY_KEY].outbox
        deadline = time.monotonic() + within
        while await outbox.pending_count():
            assert time.monotonic() < deadline, "outbox not drained"
            await asyncio.sleep(0.05)
