"""The live tail of the log index over Server-Sent Events.

    GET /logs/tail?service=orders&level=error&q=timeout&backlog=10
    Accept: text/event-stream

Each indexed record matching the filters is sent as one event::

    id: 4711
    event: log
    data: {"id": 4711, "service": "orders", "level": "error", ...}   (the shape of GET /logs items)

The stream starts with the newest `backlog` matching records (oldest first), then follows new
ones in indexing order.  The event id is the record's row id, so a client that reconnects with
``Last-Event-ID`` (browsers' EventSource do it by themselves) resumes right after the last record
it saw, skipping the backlog; only records already removed by retention are missed.

The tail reads the database, not a per-client queue: the indexer wakes the tails after each
commit (`LogFeed.publish`), each tail queries what is new for its filters since its last row.  A
slow client therefore holds no memory and never makes the indexer wait; it simply reads further
behind.  A comment line every `keepalive` seconds keeps proxies from closing an idle stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from dataclasses import replace

from aiohttp import web

from kit.errors import ServiceUnavailable, ValidationError
from services.logs.store import LogQuery, LogStore

__all__ = ["DEFAULT_BACKLOG", "MAX_BACKLOG", "LogFeed", "TailStreams", "parse_backlog", "stream_tail"]

DEFAULT_BACKLOG = 10
MAX_BACKLOG = 500
_BATCH = 200  # records read per query while catching up
_RETRY_MS = 2000  # advised reconnection delay


class LogFeed:
    """Wakes every tail waiting for new records; a generation event swapped on each publish, so
    a waiter that looked at the database before a publish cannot miss it."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.closed = False

    def current(self) -> asyncio.Event:
        return self._event

    def publish(self) -> None:
        event, self._event = self._event, asyncio.Event()
        event.set()

    def close(self) -> None:
        """Ends every tail (the app is shutting down)."""
        self.closed = True
        self.publish()


class TailStreams:
    """Counts the open tails and refuses more than `limit` (503), as each holds a connection."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        if self.open >= self.limit:
            raise ServiceUnavailable(f"too many live tails open (limit {self.limit}); retry later")
        self.open += 1
        try:
            yield
        finally:
            self.open -= 1


def parse_backlog(value: str | None) -> int:
    if value is None:
        return DEFAULT_BACKLOG
    try:
        backlog = int(value)
    except ValueError:
        backlog = -1
    if not 0 <= backlog <= MAX_BACKLOG:
        raise ValidationError(
            {"backlog": f"must be an integer between 0 and {MAX_BACKLOG}"}, "invalid query parameters"
        )
    return backlog


def _last_event_id(request: web.Request) -> int | None:
    value = request.headers.get("Last-Event-ID")
    if value is None:
        return None
    if not (value.isascii() and value.isdigit()):  # "²".isdigit() is True, int() refuses it
        raise ValidationError({"Last-Event-ID": "must be the id of an event of this stream"}, "invalid header")
    return int(value)


async def stream_tail(
    request: web.Request, store: LogStore, feed: LogFeed, query: LogQuery, backlog: int, *, keepalive: float
) -> web.StreamResponse:
    """Serve one tail until the client goes away or the feed closes."""
    resume = _last_event_id(request)
    if resume is not None:
        after, first = resume, []
    else:
        newest = await store.search(replace(query, limit=backlog)) if backlog else []
        # `search` picks the newest by timestamp, but rows arrive out of timestamp order (other
        # clocks, late flushes) and the live part follows row ids: send the backlog in id order and
        # continue after its highest id, so no backlog row comes again live, and the last event id
        # a client saw (its Last-Event-ID on reconnect) is past the whole backlog.
        first = sorted(newest, key=lambda row: int(row["id"]))
        after = int(first[-1]["id"]) if first else await store.last_id()
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )
    await response.prepare(request)
    try:
        await response.write(f"retry: {_RETRY_MS}\n\n".encode())
        await _send(response, first)
        batch = replace(query, limit=_BATCH)
        while not feed.closed:
            woken = feed.current()  # taken before the query: a publish during it is not lost
            rows = await store.after(batch, after)
            if rows:
                await _send(response, rows)
                after = rows[-1]["id"]
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woken.wait(), keepalive)
            if not woken.is_set():
                # Also how a quiet tail learns its client left: aiohttp does not cancel the
                # handler, but writing to a closed connection raises.
                await response.write(b": keepalive\n\n")
    except ConnectionResetError:
        pass  # the client went away: nothing to clean up
    return response


async def _send(response: web.StreamResponse, rows: list[dict[str, object]]) -> None:
    if not rows:
        return
    chunk = "".join(f"id: {row['id']}\nevent: log\ndata: {json.dumps(row, separators=(',', ':'))}\n\n" for row in rows)
    await response.write(chunk.encode())
