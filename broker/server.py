"""The asyncio TCP server: framing, dispatch, pipelining and in-order responses.

Each connection is a `BufferedProtocol`: the kernel reads straight into the
connection's buffer and complete frames are dispatched from it, without the copies a
StreamReader makes (measured: those were the largest cost of the produce path after
the socket itself).  Dispatch decodes a request and runs its handler's synchronous part
at once, so side effects happen in request order; what the handler returns (a response
or an awaitable of one) is queued, and a sender task writes responses strictly in
request order, as Kafka clients require, batching those already complete into one
write.  Pipelined acks=all produce requests therefore share fsync rounds.

Anything unparseable (bad size, unknown API key, unsupported version other than
ApiVersions, a body that does not decode) closes that one connection and is logged, as
Kafka does; nothing raised by a handler escapes the connection.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import struct
import time
from typing import Any, cast

import structlog

from broker.core import Broker
from broker.handlers import APIS, BY_KEY
from broker.handlers.api_versions import API_KEY as API_VERSIONS
from broker.handlers.api_versions import unsupported_version_response
from broker.handlers.base import CLOSE_CONNECTION, NO_RESPONSE
from broker.protocol.codec import MalformedRequest, decode_request, encode_response, frame_raw_response, peek_header
from broker.protocol.fetch_codec import RawResponse

log = structlog.get_logger(__name__)

_SIZE = struct.Struct(">i")
MAX_IN_FLIGHT = 128  # queued responses per connection before we stop reading
_BUFFER = 1 << 20  # initial receive buffer; grows to fit a large frame
_MIN_FREE = 64 * 1024  # free space offered to each recv


class _Close:
    pass


_CLOSE = _Close()


class KafkaServer:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.max_request = broker.config.get("socket.request.max.bytes")
        self._server: asyncio.Server | None = None
        self.connections: set[Connection] = set()

    @property
    def port(self) -> int:
        assert self._server is not None
        sock = self._server.sockets[0]
        return int(sock.getsockname()[1])

    async def start(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: Connection(self), host, port, backlog=1024)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.abort()
        await asyncio.gather(*(c.sender for c in self.connections if c.sender), return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def _reject(self, peer: Any, reason: str) -> None:
        self.broker.metrics.closed_malformed.inc()
        log.warning("closing connection: malformed request", peer=str(peer), reason=reason)

    def _dispatch(self, frame: bytes | memoryview, peer: Any) -> Any:
        """Returns NO_RESPONSE, _CLOSE or (correlation id, api, started, response|awaitable)."""
        started = time.perf_counter()
        try:
            api_key, api_version, correlation_id = peek_header(frame)
        except MalformedRequest as e:
            self._reject(peer, str(e))
            return _CLOSE
        api = BY_KEY.get(api_key)
        if api is None:
            self._reject(peer, f"unknown API key {api_key}")
            return _CLOSE
        if not api.min_version <= api_version <= api.max_version:
            if api_key == API_VERSIONS:
                return (correlation_id, api, started, unsupported_version_response(APIS), True)
            self._reject(peer, f"{api.name} v{api_version} is not supported (v{api.min_version}-v{api.max_version})")
            return _CLOSE
        try:
            header, request = decode_request(frame, _host(peer))
        except MalformedRequest as e:
            self._reject(peer, str(e))
            return _CLOSE
        try:
            result = api.handler(self.broker, header, request)
        except Exception:
            log.exception("handler failed; closing connection", api=api.name, peer=str(peer))
            return _CLOSE
        if result is NO_RESPONSE:
            self._observe(api.name, started)
            return NO_RESPONSE
        if result is CLOSE_CONNECTION:
            log.warning("closing connection after a failed acks=0 produce", peer=str(peer))
            return _CLOSE
        if inspect.isawaitable(result):
            # Start now: an acks=all produce joins the current fsync round and a long
            # poll registers for appends, without waiting for earlier responses to go out.
            result = asyncio.ensure_future(result)
            result.add_done_callback(_retrieve)
        return (correlation_id, api, started, result, api_key == API_VERSIONS)

    def _observe(self, api: str, started: float) -> None:
        self.broker.metrics.requests.labels(api).inc()
        self.broker.metrics.latency.labels(api).observe(time.perf_counter() - started)

    def render(self, correlation_id: int, result: Any, header_v0: bool) -> list[bytes | bytearray | memoryview]:
        if isinstance(result, RawResponse):
            return frame_raw_response(correlation_id, result)
        return [encode_response(correlation_id, result, header_v0=header_v0)]


class Connection(asyncio.BufferedProtocol):
    """One client connection: frames in, responses out in request order."""

    def __init__(self, server: KafkaServer) -> None:
        self.server = server
        self.buf = bytearray(_BUFFER)
        self.start = 0  # first unread byte
        self.end = 0  # end of received data
        self.queue: collections.deque[Any] = collections.deque()
        self.ready = asyncio.Event()
        self.transport: asyncio.Transport | None = None
        self.sender: asyncio.Task[None] | None = None
        self.peer: Any = None
        self.closing = False
        self.paused = False
        self._writable = asyncio.Event()
        self._writable.set()

    # --- asyncio.BufferedProtocol ----------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.peer = transport.get_extra_info("peername")
        self.server.connections.add(self)
        self.server.broker.metrics.connections.inc()
        self.sender = asyncio.get_running_loop().create_task(self._send())

    def get_buffer(self, sizehint: int) -> memoryview:
        if len(self.buf) - self.end < _MIN_FREE:
            self._make_room(_MIN_FREE)
        return memoryview(self.buf)[self.end :]

    def buffer_updated(self, nbytes: int) -> None:
        self.end += nbytes
        while not self.closing:
            available = self.end - self.start
            if available < 4:
                break
            (size,) = _SIZE.unpack_from(self.buf, self.start)
            if size < 8 or size > self.server.max_request:
                self.server._reject(
                    self.peer, f"request size {size} is outside [8, socket.request.max.bytes={self.server.max_request}]"
                )
                self._enqueue(_CLOSE)
                break
            if available < 4 + size:
                if len(self.buf) - self.start < 4 + size:
                    self._make_room(4 + size - available)  # a frame larger than the buffer
                break
            frame = memoryview(self.buf)[self.start + 4 : self.start + 4 + size].toreadonly()  # kio wants read-only
            self.start += 4 + size
            item = self.server._dispatch(frame, self.peer)
            if item is not NO_RESPONSE:
                self._enqueue(item)
        if self.start == self.end:
            self.start = self.end = 0
        if len(self.queue) >= MAX_IN_FLIGHT and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def eof_received(self) -> bool | None:
        self._enqueue(_CLOSE)
        return True  # keep the transport open until queued responses are written

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.server.connections.discard(self)
        self._writable.set()
        if self.sender is not None and not self.sender.done():
            self.sender.cancel()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # --- internals -------------------------------------------------------------------

    def _make_room(self, needed: int) -> None:
        """Move unread bytes to a fresh buffer with at least `needed` bytes free.  A new
        bytearray, never an in-place resize: the transport may still hold a view of the
        old one."""
        unread = self.end - self.start
        size = max(_BUFFER, unread + needed)
        fresh = bytearray(size)
        fresh[:unread] = self.buf[self.start : self.end]
        self.buf = fresh
        self.start, self.end = 0, unread

    def _enqueue(self, item: Any) -> None:
        if item is _CLOSE:
            self.closing = True
            if self.transport is not None:
                self.transport.pause_reading()  # nothing more will be read from it
        self.queue.append(item)
        self.ready.set()

    def abort(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.abort()

    async def _send(self) -> None:
        """Write responses in request order; whatever is ready goes out in one write."""
        try:
            await self._send_loop()
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("sending responses failed", peer=str(self.peer))
        finally:
            if self.transport is not None and not self.transport.is_closing():
                self.transport.close()

    async def _send_loop(self) -> None:
        assert self.transport is not None
        transport = self.transport
        server = self.server
        frames: list[bytes | bytearray | memoryview] = []
        while True:
            await self.ready.wait()
            self.ready.clear()
            while self.queue:
                item = self.queue.popleft()
                if item is _CLOSE:
                    if frames:
                        transport.writelines(frames)
                    return
                correlation_id, api, started, result, header_v0 = item
                if isinstance(result, asyncio.Future):
                    if not result.done() and frames:
                        transport.writelines(frames)  # don't hold ready responses behind a long poll
                        frames = []
                    try:
                        result = await result
                    except Exception:
                        log.exception("handler failed; closing connection", api=api.name)
                        return
                frames.extend(server.render(correlation_id, result, header_v0))
                server._observe(api.name, started)
            if frames:
                transport.writelines(frames)
                frames = []
            if self.paused and len(self.queue) < MAX_IN_FLIGHT // 2:
                self.paused = False
                transport.resume_reading()
            await self._writable.wait()


def _host(peer: Any) -> str:
    return str(peer[0]) if isinstance(peer, tuple) and peer else ""


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a failure as seen when the connection closed before its response was sent."""
    if not future.cancelled():
        future.exception()
