"""Reading Server-Sent Events streams in tests (the logs service's tail, the dashboard's copy)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp


async def read_sse(response: aiohttp.ClientResponse, count: int, within: float = 30) -> list[dict[str, Any]]:
    """The next `count` `log` events of an SSE stream, as {"id": int, "data": {...}}."""
    found: list[dict[str, Any]] = []
    event: dict[str, str] = {}
    async with asyncio.timeout(within):
        while len(found) < count:
            line = (await response.content.readline()).decode().rstrip("\n")
            if line == "":
                if event.get("event") == "log":
                    found.append({"id": int(event["id"]), "data": json.loads(event["data"])})
                event = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(": ")
                event[name] = value
    return found
