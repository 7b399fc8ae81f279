"""One client connection: frames in, responses out in request order, memory bounded.

The kernel reads straight into the connection's buffer (`BufferedProtocol`) and complete
frames are dispatched from it without copies.  The buffer starts small and grows with the
bytes that actually arrive, never with what a size prefix claims; growth beyond the base
buffer draws on the shared `queued.max.request.bytes` pool, and an idle connection gives
its buffer back.  Dispatch runs a handler's synchronous part at once, so side effects
happen in request order; responses are written strictly in request order, those already
complete in one write.

Back-pressure, as Kafka mutes a channel: a connection stops dispatching (and reading) while
too many responses are pending, while the transport cannot take more bytes, while a request
that must finish before the next one starts is running (`Serial`), while the request memory
pool is used up, while a response is being streamed from a file, and, while the response
memory pool is used up, as long as it holds a response not yet sent.  When the connection
closes, everything it was waiting for (long polls, fsync rounds) is cancelled at once.

Record data of a large Fetch answer is never held whole: the answer carries a region of a
segment file, read here a chunk at a time as the socket drains (`_send_file`), the chunk
sized by the response memory pool.  What the connection holds in memory (queued responses,
bytes its transport has not sent) is counted in that pool (`account`).
"""

from __future__ import annotations

import asyncio
import collections
import os
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias, TypeGuard, cast

from broker.handlers import Services
from broker.handlers.base import NO_RESPONSE, Api, Outcome, Response, Signal
from broker.netlimits import MIN_CHUNK, MemoryPool
from broker.protocol.fetch_codec import Buffer, Part, Streamed
from broker.security.session import Session

if TYPE_CHECKING:
    from broker.listeners import Listener

_SIZE = struct.Struct(">i")
BASE_BUFFER = 64 * 1024  # every connection's own buffer, not drawn from the pool
MIN_FREE = 16 * 1024  # free space offered to each read
FIRST_READ = 1024  # the buffer of a connection's first read after being idle
MAX_IN_FLIGHT = 128  # pending responses before a connection stops dispatching
MAX_PENDING_BYTES = 16 * 1024 * 1024
MAX_WRITE_BATCH = 1024 * 1024  # ready responses written in one call, at most (and one more)
FETCH = 1  # rendered response bytes not yet handed to the transport
_EMPTY = bytearray()


Frames: TypeAlias = list[Part]  # a response as written: buffers, and file regions to stream
_BUFFERS = (bytes, bytearray, memoryview)


def _socket_fd(transport: asyncio.Transport) -> int | None:
    sock = transport.get_extra_info("socket")
    return sock.fileno() if sock is not None else None


def _in_memory(parts: Frames) -> TypeGuard[list[Buffer]]:
    return all(isinstance(p, _BUFFERS) for p in parts)


def _size(parts: Sequence[Part]) -> int:
    """Bytes of a response held in memory (its file regions are read as they are sent)."""
    return sum(len(p) for p in parts if isinstance(p, _BUFFERS))


@dataclass(slots=True)
class Pending:
    """A dispatched request whose response is (or will be) written in order."""

    correlation_id: int
    api: Api[Services]
    started: float
    header_v0: bool
    result: Response | None = None  # the response, when complete at dispatch
    future: asyncio.Future[Outcome] | None = None  # or the handler's awaitable
    serial: bool = False  # later requests of the connection wait for this one
    size: int = 0  # bytes of the response held in memory, when known
    frames: list[Buffer] | None = None  # the response as written, when rendered while queued
    streams: bool = False  # part of it is read from a file as it is sent
    throttle_ms: int = 0  # a quota's throttle, written into the response


class Server(Protocol):
    """What a connection needs of the server that accepted it (`server.KafkaServer`): stated
    here, so that this module does not import the server, which imports it."""

    max_request: int
    failed_auth_delay_s: float
    memory: MemoryPool
    responses: MemoryPool

    def admit(self, conn: Connection) -> bool: ...

    def forget(self, conn: Connection) -> None: ...

    def reject(self, conn: Connection, reason: str) -> None: ...

    def dispatch(self, frame: memoryview, conn: Connection) -> Pending | Literal[Signal.NO_RESPONSE] | None: ...

    def render(self, pending: Pending, conn: Connection) -> Frames | None: ...

    def log_failure(self, conn: Connection, api: str, error: BaseException | None) -> None: ...


class Connection(asyncio.BufferedProtocol):
    def __init__(self, server: Server, listener: Listener) -> None:
        self.server = server
        self.listener = listener
        self.session = Session.open(listener.name, listener.protocol, "")
        self.opened = time.monotonic()
        self.buf = _EMPTY
        self.start = 0  # first unread byte
        self.end = 0  # end of received data
        self.charged = 0  # bytes of `buf` reserved from the request memory pool
        self.last_frame = 0  # size of the last request received whole
        self.queue: collections.deque[Pending] = collections.deque()
        self.pending_bytes = 0
        self.direct: list[Buffer] = []  # answered at dispatch, written at the end of `_process`
        self.direct_bytes = 0
        self.held = 0  # bytes counted in the response pool
        self.pinned = 0  # size of the last chunk streamed, while the transport holds part of it
        self.streaming = False
        self.waiting_responses = False
        self.lost = False
        self.muted = False  # a quota's throttle: nothing is read until it ends
        self._unmute_at: asyncio.TimerHandle | None = None
        self.sender: asyncio.Task[None] | None = None
        self.barrier: asyncio.Future[Outcome] | None = None
        self.transport: asyncio.Transport | None = None
        self.peer: Any = None
        self.host = ""
        self.admitted = False
        self.closing = False
        self.reading = True
        self.writable = True
        self.waiting_memory = False
        self.last_active = time.monotonic()
        self._writable_event: asyncio.Event | None = None

    # --- asyncio.BufferedProtocol ----------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.peer = transport.get_extra_info("peername")
        self.host = str(self.peer[0]) if isinstance(self.peer, tuple) and self.peer else ""
        self.session.host = self.host
        if not self.server.admit(self):
            self.closing = True
            self.transport.abort()
            return
        self.admitted = True

    def get_buffer(self, sizehint: int) -> memoryview:
        if not self.buf:
            # A new or idle connection (its buffer given back): most first reads are a small
            # request or the end of the stream, so start small.  10,000 idle clients
            # leaving at once would otherwise allocate 10,000 base buffers to read EOF.
            self.buf = bytearray(FIRST_READ)
            return memoryview(self.buf)
        if len(self.buf) - self.end < MIN_FREE:
            self._grow(force=True)
        return memoryview(self.buf)[self.end :]

    def buffer_updated(self, nbytes: int) -> None:
        self.end += nbytes
        self.last_active = time.monotonic()
        self._process()

    def eof_received(self) -> bool | None:
        # The client closed its side: stop waiting for long polls now (they change
        # nothing), and close once the other queued responses are written.
        for pending in self.queue:
            if pending.api.key == FETCH and pending.future is not None:
                pending.future.cancel()
        self._close_after_responses()
        return True  # keep the transport open until queued responses are written

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.lost = True
        if self._unmute_at is not None:
            self._unmute_at.cancel()
        self._hold(0)
        if self.waiting_responses:
            self.server.responses.forget(self._responses_available)
            self.waiting_responses = False
        if self.admitted:
            self.admitted = False
            self.server.forget(self)
        if self.waiting_memory:
            self.server.memory.forget(self._memory_available)
            self.waiting_memory = False
        self._release_buffer()
        # Nobody will read these answers: stop waiting for them now (long polls hold
        # buffers and wake-ups until their deadline otherwise).
        for pending in self.queue:
            if pending.future is not None and not pending.future.done():
                pending.future.cancel()
        if self.barrier is not None and not self.barrier.done():
            self.barrier.cancel()
        self.queue.clear()
        if self.sender is not None and not self.sender.done():
            self.sender.cancel()
        for closer in self.session.on_close.values():
            try:
                closer()
            except Exception:
                self.server.log_failure(self, "closing the connection's share sessions", None)
        self.session.on_close.clear()
        if self._writable_event is not None:
            self._writable_event.set()

    def pause_writing(self) -> None:
        self.writable = False
        self._update_reading()

    def resume_writing(self) -> None:
        self.writable = True
        self.last_active = time.monotonic()  # the client is taking its answers
        self.account()
        if self._writable_event is not None:
            self._writable_event.set()
        self._process()

    # --- reading and dispatch --------------------------------------------------------

    def _gated(self) -> bool:
        return (
            self.session.close_after_response
            or self.barrier is not None
            or len(self.queue) >= MAX_IN_FLIGHT
            or self.pending_bytes >= MAX_PENDING_BYTES
            or not self.writable
            or self.streaming
            or self.muted
            or (self.pending_bytes + self.direct_bytes > 0 and self.server.responses.exhausted)
        )

    def _process(self) -> None:
        """Dispatch every complete frame the gate lets through, then make room to read."""
        server = self.server
        direct = self.direct
        while not self.closing and not self._gated():
            available = self.end - self.start
            if available < 4:
                break
            (size,) = _SIZE.unpack_from(self.buf, self.start)
            if size < 8 or size > server.max_request:
                server.reject(
                    self, f"request size {size} is outside [8, socket.request.max.bytes={server.max_request}]"
                )
                self._close_after_responses()
                break
            if available < 4 + size:
                break
            frame = memoryview(self.buf)[self.start + 4 : self.start + 4 + size].toreadonly()  # kio wants read-only
            self.start += 4 + size
            self.last_frame = 4 + size
            try:
                pending = server.dispatch(frame, self)
            finally:
                frame.release()
            if pending is NO_RESPONSE:
                continue
            if pending is None:  # the request closes the connection
                self._close_after_responses()
                break
            if self.session.close_after_response:
                # A failed SASL exchange: read nothing more; after
                # connection.failed.authentication.delay.ms send the answer and close, as Kafka
                # does: the client learns the outcome only then (password guessing slows down),
                # and the close follows the answer at once.
                delay = max(self.server.failed_auth_delay_s, self.session.failure_delay_s)
                asyncio.get_running_loop().call_later(delay, self._answer_and_close, pending)
                break
            if pending.serial:
                self.barrier = pending.future
                assert self.barrier is not None
                self.barrier.add_done_callback(self._barrier_done)
            if pending.future is None and not pending.streams:
                # Complete: rendered now, so that its bytes count (in `direct_bytes` or
                # `pending_bytes`) whatever kind of response it is, until it is sent.
                rendered = server.render(pending, self)
                if rendered is None:
                    self._close_after_responses()
                    break
                assert _in_memory(rendered)  # `streams` is False
                size = _size(rendered)
                if not self.queue and self.sender is None and self.writable and self.direct_bytes < MAX_WRITE_BATCH:
                    direct.extend(rendered)  # nothing ahead of it: written at the end of this pass
                    self.direct_bytes += size
                    continue
                pending.frames, pending.size = rendered, size
            self._enqueue(pending)
        if direct and self.transport is not None:
            self.transport.writelines(direct)
            direct.clear()
            self.direct_bytes = 0
            self.account()
        if self.start == self.end:
            self.start = self.end = 0
            if len(self.buf) > BASE_BUFFER:
                self._release_buffer()  # a large request was read: give its memory back
        free = len(self.buf) - self.end
        if not self.closing and not self._gated() and free < MIN_FREE and free < self._frame_remaining():
            self._grow(force=False)
        self._update_reading()

    def _frame_remaining(self) -> int:
        """Bytes still to come of the frame being received (MIN_FREE when unknown)."""
        unread = self.end - self.start
        if unread < 4:
            return MIN_FREE
        (size,) = _SIZE.unpack_from(self.buf, self.start)
        return max(0, 4 + int(size) - unread)

    def _update_reading(self) -> None:
        gated = self._gated()
        want = not self.closing and not self.waiting_memory and not gated
        if gated and not self.waiting_responses and not self.closing and self.server.responses.exhausted:
            self.waiting_responses = True  # woken when the pool has room again
            self.server.responses.wait(self._responses_available)
        if want == self.reading or self.transport is None or self.transport.is_closing():
            return
        if not want and (self.streaming or not self.writable):
            self._release_buffer()  # waiting on the client to read: the buffer may be long unused
        self.reading = want
        if want:
            self.transport.resume_reading()
        else:
            self.transport.pause_reading()

    def _grow(self, *, force: bool) -> None:
        """Room for the next read: compact, and grow towards the size of the frame being
        received, at most doubling, so a size prefix alone allocates nothing beyond what
        the connection has already sent: up to the size of its last whole frame, a
        producer's next batch gets its buffer at once.  Growth past the base buffer is
        reserved from the shared pool; without `force`, a connection that cannot reserve
        waits for memory (reading paused)."""
        unread = self.end - self.start
        target = max(BASE_BUFFER, unread + MIN_FREE)
        if unread >= 4 and not force:
            (size,) = _SIZE.unpack_from(self.buf, self.start)
            if 0 < size <= self.server.max_request:
                # One allocation and one copy, not one per doubling.
                target = max(target, min(4 + size, max(2 * len(self.buf), self.last_frame)))
        charge = max(0, target - BASE_BUFFER)
        delta = charge - self.charged
        if delta > 0 and not force and not self.server.memory.reserve(delta):
            if not self.waiting_memory:
                self.waiting_memory = True
                self.server.memory.wait(self._memory_available)
            return
        if delta > 0 and force:
            self.server.memory.take(delta)  # a read the transport asks for: at most MIN_FREE more
        # Always a fresh buffer, never an in-place resize: the transport may hold a view.
        fresh = bytearray(target)
        fresh[:unread] = self.buf[self.start : self.end]
        self.buf = fresh
        self.start, self.end = 0, unread
        if delta < 0:
            self.server.memory.release(-delta)
        self.charged = charge

    def _memory_available(self) -> None:
        self.waiting_memory = False
        if self.closing:
            return
        self._grow(force=False)
        self._update_reading()

    def mute(self, throttle_ms: int) -> None:
        """Read no request for `throttle_ms` (a client over its quota), as Kafka mutes the
        channel; responses already due are still written.  A longer throttle extends it."""
        if self.closing:
            return
        loop = asyncio.get_running_loop()
        until = loop.time() + throttle_ms / 1000
        if self._unmute_at is not None:
            if until <= self._unmute_at.when():
                return
            self._unmute_at.cancel()
        self.muted = True
        self._update_reading()
        self._unmute_at = loop.call_at(until, self._unmute)

    def _unmute(self) -> None:
        self.muted = False
        self._unmute_at = None
        if not self.closing:
            self._process()

    def _responses_available(self) -> None:
        self.waiting_responses = False
        if not self.closing:
            self._process()

    def account(self) -> None:
        """Count what this connection holds of responses (queued, or in its transport's
        buffer) in the response pool."""
        transport = self.transport
        if transport is None or self.lost:
            return
        buffered = transport.get_write_buffer_size()
        if not buffered:
            self.pinned = 0
        # A chunk the socket took only part of stays allocated whole until the rest is sent.
        self._hold(self.pending_bytes + self.direct_bytes + max(buffered, self.pinned))

    def _hold(self, held: int) -> None:
        delta = held - self.held
        if delta:
            self.held = held
            if delta > 0:
                self.server.responses.take(delta)
            else:
                self.server.responses.release(-delta)

    def _release_buffer(self) -> None:
        """Drop the buffer (it is allocated again on the next read)."""
        if self.start != self.end:
            return
        self.buf = _EMPTY
        self.start = self.end = 0
        if self.charged:
            self.server.memory.release(self.charged)
            self.charged = 0

    def release_idle_buffer(self) -> None:
        if self.queue or self.closing:
            return
        self._release_buffer()

    # --- responses -------------------------------------------------------------------

    def _enqueue(self, pending: Pending) -> None:
        self.queue.append(pending)
        if pending.size:
            self.pending_bytes += pending.size
            self.account()
        if self.sender is None:
            self.sender = asyncio.get_running_loop().create_task(self._send())

    def _barrier_done(self, future: asyncio.Future[Outcome]) -> None:
        if self.barrier is future:
            self.barrier = None
            if self.session.close_after_response:  # its answer ends the connection (a failed login)
                self._close_after_responses()
            elif not self.closing:
                self._process()

    def _answer_and_close(self, pending: Pending) -> None:
        if self.closing:  # the client left meanwhile
            return
        self._enqueue(pending)
        self._close_after_responses()

    def _close_after_responses(self) -> None:
        if self.closing:
            return
        self.closing = True
        self._update_reading()
        if self.sender is None:
            self.sender = asyncio.get_running_loop().create_task(self._send())

    def close(self) -> None:
        """Close now (idle timeout, broker stopping)."""
        self.closing = True
        if self.transport is not None:
            self.transport.abort()

    async def _send(self) -> None:
        try:
            await self._send_loop()
        except asyncio.CancelledError:
            pass
        except Exception:
            self.server.log_failure(self, "sending responses", None)
            self.close()
        finally:
            self.sender = None

    async def _send_loop(self) -> None:
        """Write responses in request order; whatever is ready goes out in one write, and a
        response with a file region is streamed before the next one is taken."""
        server = self.server
        transport = self.transport
        assert transport is not None
        while self.queue:
            frames: list[Buffer] = []
            streamed: Frames | None = None
            written = 0
            while self.queue:
                pending = self.queue[0]
                if pending.future is not None and not pending.future.done():
                    if frames:
                        break  # don't hold ready responses behind a long poll
                    try:
                        await pending.future
                    except asyncio.CancelledError:
                        task = asyncio.current_task()
                        if task is not None and task.cancelling():
                            raise
                        # the request was abandoned: `render` closes the connection
                    except Exception:
                        pass  # reported by `server.render`
                    continue
                self.queue.popleft()
                self.pending_bytes -= pending.size
                rendered: Frames | None = list(pending.frames) if pending.frames is not None else None
                if rendered is None:
                    rendered = server.render(pending, self)
                pending.frames = None
                if rendered is None:  # the handler failed: Kafka closes the connection
                    if frames:
                        transport.writelines(frames)
                    self.close()
                    return
                written += _size(rendered)
                if not _in_memory(rendered):
                    streamed = rendered
                    break
                frames.extend(rendered)
                if written >= MAX_WRITE_BATCH:
                    break
            if frames:
                transport.writelines(frames)
                self.last_active = time.monotonic()
            if streamed is not None:
                await self._stream(streamed)
            self.account()
            if not self.closing:
                self._process()  # the gate may have opened
            if not self.writable:
                await self._drained()
        if self.closing and not transport.is_closing():
            transport.close()

    async def _drained(self) -> None:
        """Wait until the transport takes bytes again."""
        if self._writable_event is None:
            self._writable_event = asyncio.Event()
        self._writable_event.clear()
        if not self.writable:
            await self._writable_event.wait()

    async def _stream(self, parts: Frames) -> None:
        """Write one response whose record data is read from files as the socket drains;
        the connection dispatches nothing meanwhile (one such response in flight)."""
        assert self.transport is not None
        self.streaming = True
        self._update_reading()
        # Paused as soon as the socket leaves bytes behind, resumed once they are all sent: a
        # client that does not read pins one chunk, not a buffer's worth of them.
        self.transport.set_write_buffer_limits(high=0, low=0)
        try:
            ready: list[Buffer] = []
            for part in parts:
                if isinstance(part, _BUFFERS):
                    ready.append(part)
                    continue
                if ready:
                    self.transport.writelines(ready)
                    ready = []
                await self._send_file(part)
            if ready:
                self.transport.writelines(ready)
        finally:
            self.streaming = False
            if not self.lost:
                self.transport.set_write_buffer_limits()

    async def _send_file(self, region: Streamed) -> None:
        """A chunk at a time, each written only once the transport takes bytes again and
        sized by the response pool, so a client that does not read pins one chunk."""
        transport = self.transport
        assert transport is not None
        pool = self.server.responses
        # Plaintext: the kernel copies from the file to the socket (sendfile) whenever the
        # transport holds nothing that must go first; the transport is used only to wait
        # for a full socket, with a small chunk.
        socket_fd = None if self.listener.tls else _socket_fd(transport)
        fd = region.open()  # OSError (the file was deleted meanwhile): the connection closes
        try:
            position, left = region.position, region.length
            while left > 0:
                if not self.writable:
                    await self._drained()
                if self.lost:
                    return
                if socket_fd is not None and not transport.get_write_buffer_size():
                    try:
                        sent = os.sendfile(socket_fd, fd, position, left)
                    except BlockingIOError:
                        sent = 0
                    except (BrokenPipeError, ConnectionResetError):
                        self.close()  # the client left mid-answer
                        return
                    if sent:
                        position += sent
                        left -= sent
                        self.last_active = time.monotonic()
                        continue
                n = min(left, MIN_CHUNK if socket_fd is not None else pool.chunk())
                data = os.pread(fd, n, position)
                if len(data) != n:
                    raise OSError(f"the file ends {n - len(data)} bytes short of the response being sent")
                transport.write(data)
                self.pinned = n
                position += n
                left -= n
                self.last_active = time.monotonic()
                self.account()
        finally:
            os.close(fd)
