"""The catcher's inbox and the logs service's live tail, passed through the dashboard so that
the browser talks to one origin only (no CORS, one port to open).

    GET /api/inbox          -> 200 {"items": [{"id", "from", "to": [...], "subject", "received_at"}], "total": n}
                               (the catcher's GET /messages, newest first, the latest INBOX_LIMIT)
    GET /api/instances      -> 200 {"items": [{"service", "instance", "lines", "errors", "requests", "last_seen"}]}
                               (the logs service's GET /logs/instances: who logged in the last five minutes)
    GET /api/logs/tail?...  -> the logs service's GET /logs/tail Server-Sent Events, byte for byte
                               (query string and Last-Event-ID forwarded; its own 4xx/503 answers too)

An upstream that cannot be reached, or answers what it should not, is a 502
``{"error": "upstream_unavailable", ...}`` naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import aiohttp
from aiohttp import web

from kit.errors import ServiceError

__all__ = ["INBOX_LIMIT", "UpstreamUnavailable", "fetch_inbox", "fetch_instances", "proxy_tail"]

INBOX_LIMIT = 20
_INBOX_FIELDS = ("id", "from", "to", "subject", "received_at")
_UPSTREAM_TIMEOUT = aiohttp.ClientTimeout(total=5)
_INSTANCE_FIELDS = {"service": str, "instance": str, "lines": int, "errors": int, "requests": int, "last_seen": str}
# A tail lasts as long as the browser keeps it open: no total timeout, only the connection's.
_TAIL_TIMEOUT = aiohttp.ClientTimeout(total=None, connect=5, sock_connect=5, sock_read=None)
# How often a tail with nothing to pass on checks that the browser is still there, so a closed
# page releases its upstream stream promptly even when the logs service is quiet.
_CLIENT_CHECK_S = 1.0
_PASSED_HEADERS = ("Content-Type", "Cache-Control", "X-Accel-Buffering")


class UpstreamUnavailable(ServiceError):
    status = 502
    code = "upstream_unavailable"
    default_message = "an upstream service is unavailable"


def _unavailable(name: str, url: str, problem: str) -> UpstreamUnavailable:
    return UpstreamUnavailable(f"the {name} at {url} is unavailable: {problem}", details={"upstream": name, "url": url})


def _bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


async def _get_json(
    session: aiohttp.ClientSession, upstream: str, url: str, token: str | None, params: dict[str, str] | None = None
) -> Any:
    """The JSON body of a 200 answer to GET `url`; anything else is `UpstreamUnavailable` naming `upstream`."""
    try:
        async with session.get(url, params=params, headers=_bearer(token), timeout=_UPSTREAM_TIMEOUT) as response:
            if response.status != 200:
                raise _unavailable(upstream, url, f"HTTP {response.status}")
            return await response.json()
    except (aiohttp.ClientError, TimeoutError, ValueError) as e:
        raise _unavailable(upstream, url, str(e) or type(e).__name__) from e


async def fetch_inbox(session: aiohttp.ClientSession, catcher_url: str, token: str | None = None) -> dict[str, Any]:
    url = f"{catcher_url.rstrip('/')}/messages"
    body = await _get_json(session, "catcher", url, token, {"limit": str(INBOX_LIMIT)})
    try:
        items = [{name: item.get(name) for name in _INBOX_FIELDS} for item in body["items"]]
        total = int(body["total"])
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise _unavailable("catcher", url, "unexpected answer to GET /messages") from e
    return {"items": items, "total": total}


async def fetch_instances(session: aiohttp.ClientSession, logs_url: str, token: str | None = None) -> dict[str, Any]:
    url = f"{logs_url.rstrip('/')}/logs/instances"
    body = await _get_json(session, "logs service", url, token)
    try:
        # Only the fields the page shows, each of its type: the page renders what it is given.
        items = [{name: kind(item[name]) for name, kind in _INSTANCE_FIELDS.items()} for item in body["items"]]
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise _unavailable("logs service", url, "unexpected answer to GET /logs/instances") from e
    return {"items": items}


async def proxy_tail(
    request: web.Request, session: aiohttp.ClientSession, logs_url: str, token: str | None = None
) -> web.StreamResponse:
    url = f"{logs_url.rstrip('/')}/logs/tail"
    if request.query_string:
        url += f"?{request.query_string}"
    headers = {"Accept": "text/event-stream", **_bearer(token)}
    if "Last-Event-ID" in request.headers:
        headers["Last-Event-ID"] = request.headers["Last-Event-ID"]
    try:
        upstream = await session.get(url, headers=headers, timeout=_TAIL_TIMEOUT)
    except (aiohttp.ClientError, TimeoutError) as e:
        raise _unavailable("logs service", url, str(e) or type(e).__name__) from e
    async with upstream:
        if upstream.status != 200:
            # Its own answer (422 bad filter, 503 too many tails...) is the browser's to see.
            body = await upstream.read()
            if upstream.status >= 500 and upstream.content_type != "application/json":
                raise _unavailable("logs service", url, f"HTTP {upstream.status}")
            return web.Response(status=upstream.status, body=body, content_type=upstream.content_type)
        response = web.StreamResponse(
            headers={name: upstream.headers[name] for name in _PASSED_HEADERS if name in upstream.headers}
        )
        await response.prepare(request)
        with contextlib.suppress(ConnectionResetError, aiohttp.ClientPayloadError):
            await _pump(request, upstream, response)
        # Leaving `async with` closes the upstream connection: the logs service ends its tail.
    return response


async def _pump(request: web.Request, upstream: aiohttp.ClientResponse, response: web.StreamResponse) -> None:
    while not _client_gone(request):
        try:
            chunk = await asyncio.wait_for(upstream.content.readany(), _CLIENT_CHECK_S)
        except TimeoutError:
            continue
        if not chunk:
            return  # the logs service ended the stream (it is shutting down)
        await response.write(chunk)


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()
