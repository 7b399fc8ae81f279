"""Writes go to the primary: a secondary passes each one on over HTTP and relays the answer.

As Confluent's registry forwards to its leader: the request goes on with its method, path, query,
body and the headers that matter (content type, accept, credentials), marked as forwarded, and
the primary's status, body and content type come back unchanged. A forwarded request that reaches
an instance which is no longer the primary is refused rather than forwarded again, so a role that
moves mid-request never makes a loop. Only a failure to connect is retried (the request was not
sent): once the election names a new primary, the write goes to it. A write the primary took is
read back here before the answer is relayed, so a client reads its own writes from the instance
it wrote through (Confluent's followers answer from a view that may lag the leader's).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import structlog
from aiohttp import web

from registry import errors
from registry.config import RegistryConfig
from registry.election import PrimaryElection
from registry.errors import RegistryError
from registry.http import READ_SYNC_SECONDS, STORE

log = structlog.get_logger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

FORWARDED = "X-Registry-Forwarded"
_PASSED_ON = ("Content-Type", "Accept", "Authorization")

ELECTION: web.AppKey[PrimaryElection] = web.AppKey("election", PrimaryElection)
PEERS: web.AppKey[aiohttp.ClientSession] = web.AppKey("peers", aiohttp.ClientSession)


def peer_session_context(config: RegistryConfig) -> Callable[[web.Application], AsyncIterator[None]]:
    """A cleanup context holding the HTTP client that forwards to the primary."""

    async def context(app: web.Application) -> AsyncIterator[None]:
        ssl_context = ssl.create_default_context(cafile=str(config.peer_ssl_cafile) if config.peer_ssl_cafile else None)
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=ssl_context),
            timeout=aiohttp.ClientTimeout(total=config.write_timeout * 2),
        ) as session:
            app[PEERS] = session
            yield

    return context


def primary_only(handler: Handler) -> Handler:
    """`handler` where this instance is the primary; elsewhere the request is forwarded."""

    async def write(request: web.Request) -> web.StreamResponse:
        election = request.app[ELECTION]
        config = election.config
        deadline = time.monotonic() + config.write_timeout
        while True:
            primary = await election.wait_primary(max(0.0, deadline - time.monotonic()))
            if primary is None:
                raise errors.unknown_primary("no registry instance is elected primary; send the write again")
            if primary.is_self:
                return await handler(request)
            if FORWARDED in request.headers:
                raise errors.forwarding_error("this registry is no longer the primary; send the write again")
            try:
                answer = await _forward(request, primary.url)
            except aiohttp.ClientConnectorError as e:
                # Not sent: the primary is gone. Try again until the group names another.
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise errors.forwarding_error(f"cannot reach the primary at {primary.url}: {e}") from e
                await asyncio.sleep(min(0.25, remaining))
                continue
            except (aiohttp.ClientError, TimeoutError) as e:
                raise errors.forwarding_error(f"error while forwarding the request to the primary: {e}") from e
            if answer.status < 300:
                try:
                    await request.app[STORE].sync(READ_SYNC_SECONDS)
                except RegistryError as e:  # written all the same: this instance catches up later
                    log.warning("forwarded write not yet read back", error=e.message)
            return answer

    return write


async def _forward(request: web.Request, url: str) -> web.Response:
    body = await request.read()
    headers = {name: request.headers[name] for name in _PASSED_ON if name in request.headers}
    headers[FORWARDED] = "1"
    async with request.app[PEERS].request(
        request.method, url.rstrip("/") + request.path_qs, data=body, headers=headers, allow_redirects=False
    ) as answer:
        payload = await answer.read()
        log.debug("write forwarded", primary=url, status=answer.status)
        relayed = web.Response(status=answer.status, body=payload)
        if "Content-Type" in answer.headers:
            relayed.headers["Content-Type"] = answer.headers["Content-Type"]
        return relayed
