"""The asyncio TCP server: framing, dispatch, pipelining and in-order responses.

Each connection has a reader loop and a writer task.  The reader decodes a request and
runs its handler's synchronous part at once, so side effects happen in request order;
what the handler returns (a response or an awaitable of one) is queued, and the writer
sends responses strictly in request order, as Kafka clients require.  Pipelined acks=all
produce requests therefore share fsync rounds instead of waiting for each other.

Anything unparseable (bad size, unknown API key, unsupported version other than
ApiVersions, a body that does not decode) closes that one connection and is logged, as
Kafka does; nothing raised by a handler escapes the connection loop.
"""

from __future__ import annotations

import asyncio
import inspect
import struct
import time
from typing import Any

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


class _Close:
    pass


_CLOSE = _Close()


class KafkaServer:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.max_request = broker.config.get("socket.request.max.bytes")
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        assert self._server is not None
        sock = self._server.sockets[0]
        return int(sock.getsockname()[1])

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._accept, host, port, limit=1 << 20, backlog=1024)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        self.broker.metrics.connections.inc()
        peer = writer.get_extra_info("peername")
        try:
            await self._serve(reader, writer, peer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("connection failed", peer=str(peer))
        finally:
            self._connections.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: Any) -> None:
        queue: asyncio.Queue[Any] = asyncio.Queue(MAX_IN_FLIGHT)
        sender = asyncio.get_running_loop().create_task(self._send(queue, writer))
        try:
            while not sender.done():
                try:
                    size_bytes = await reader.readexactly(4)
                except asyncio.IncompleteReadError:
                    return  # client closed
                (size,) = _SIZE.unpack(size_bytes)
                if size < 8 or size > self.max_request:
                    self._reject(peer, f"request size {size} is outside [8, socket.request.max.bytes={self.max_request}]")
                    return
                frame = await reader.readexactly(size)
                item = self._dispatch(frame, peer)
                if item is NO_RESPONSE:
                    continue
                await queue.put(item)
                if item is _CLOSE:
                    break
        finally:
            if not sender.done():
                await queue.put(_CLOSE)
                try:
                    await sender
                except Exception:
                    log.exception("sending responses failed", peer=str(peer))

    def _reject(self, peer: Any, reason: str) -> None:
        self.broker.metrics.closed_malformed.inc()
        log.warning("closing connection: malformed request", peer=str(peer), reason=reason)

    def _dispatch(self, frame: bytes, peer: Any) -> Any:
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
            header, request = decode_request(frame)
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

    async def _send(self, queue: asyncio.Queue[Any], writer: asyncio.StreamWriter) -> None:
        """Write responses in request order; whatever is ready goes out in one write."""
        frames: list[bytes | bytearray | memoryview] = []
        while True:
            item = await queue.get()
            while True:
                if item is _CLOSE:
                    if frames:
                        writer.writelines(frames)
                        await writer.drain()
                    return
                correlation_id, api, started, result, header_v0 = item
                if isinstance(result, asyncio.Future):
                    if not result.done() and frames:
                        writer.writelines(frames)  # don't hold ready responses behind a long poll
                        frames = []
                    try:
                        result = await result
                    except Exception:
                        log.exception("handler failed; closing connection", api=api.name)
                        return
                if isinstance(result, RawResponse):
                    frames.extend(frame_raw_response(correlation_id, result))
                else:
                    frames.append(encode_response(correlation_id, result, header_v0=header_v0))
                self._observe(api.name, started)
                if queue.empty():
                    break
                item = queue.get_nowait()
            writer.writelines(frames)
            frames = []
            await writer.drain()


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a failure as seen when the connection closed before its response was sent."""
    if not future.cancelled():
        future.exception()
