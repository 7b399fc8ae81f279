"""The asyncio TCP server: accept, dispatch, and the limits every client is held to.

`Connection` (connection.py) reads frames and writes responses in order; this module decodes
a frame, runs its handler and turns whatever goes wrong into a closed connection, as Kafka
does: a frame that cannot be parsed (bad size, unknown API key, unsupported version other
than ApiVersions, a body that does not match its schema) and a handler that fails close that
one connection.  Nothing raised escapes; each failure is counted and logged with the client's
address, rate-limited, with a traceback only the first time a failure is seen at one place.
A request of many entries is decoded, and its answer encoded, off the event loop (offload.py).

Limits, by Kafka's names: `max.connections` (also kept below the process's descriptor limit,
so sockets cannot starve the log of files), `max.connections.per.ip` and its overrides,
`connections.max.idle.ms`, `socket.request.max.bytes`, `queued.max.request.bytes`.
"""

from __future__ import annotations

import asyncio
import inspect
import resource
import ssl
import time
import traceback
from collections.abc import Callable
from typing import Literal

import structlog
from kio.static.protocol import Entity

from broker import offload
from broker.collector import CollectorPause
from broker.connection import Connection, Frames, Pending
from broker.core import Broker
from broker.handlers import APIS, BY_KEY, Services
from broker.handlers.api_versions import API_KEY as API_VERSIONS
from broker.handlers.api_versions import unsupported_version_response
from broker.handlers.base import (
    CLOSE_CONNECTION,
    NO_RESPONSE,
    Api,
    Outcome,
    RequestContext,
    Serial,
    Signal,
    throttled,
    with_throttle,
)
from broker.heap import HeapTrimmer
from broker.listeners import Listener
from broker.netlimits import ConnectionCounts, MemoryPool, ThrottledLog
from broker.protocol.codec import MalformedRequest, decode_request, encode_response, frame_raw_response, peek_header
from broker.protocol.fetch_codec import RawResponse
from broker.quotas import PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE, quota_user
from broker.security.tls import TlsLayer

log = structlog.get_logger(__name__)

PRODUCE = 0
# Not held to request quotas, as in Kafka: what a client needs to learn it is throttled.
QUOTA_EXEMPT = frozenset({17, 18, 36})  # SaslHandshake, ApiVersions, SaslAuthenticate

_DESCRIPTORS_KEPT = 256  # never handed to sockets: log files, snapshots, the admin API


def descriptor_headroom(kept: int) -> int:
    """How many sockets fit under RLIMIT_NOFILE while keeping `kept` descriptors for files."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 31
    return max(1, soft - kept)


class KafkaServer:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        config = broker.config
        self.max_request: int = config.values.socket_request_max_bytes
        self.max_elements: int = config.values.request_max_elements
        self.idle_ms: int = config.values.connections_max_idle_ms
        self.failed_auth_delay_s: float = config.values.connection_failed_authentication_delay_ms / 1000
        metrics = broker.metrics
        self.memory = MemoryPool(
            max(config.values.queued_max_request_bytes, self.max_request)
            if config.values.queued_max_request_bytes > 0
            else -1,
            metrics.request_memory.set,
        )
        self.quotas = broker.quotas
        self.responses = MemoryPool(config.values.queued_max_response_bytes, metrics.response_memory.set)
        kept = _DESCRIPTORS_KEPT + broker.files_reserved()
        self.counts = ConnectionCounts(
            min(config.values.max_connections, descriptor_headroom(kept)),
            config.values.max_connections_per_ip,
            config.values.max_connections_per_ip_overrides,
        )
        self.connections: set[Connection] = set()
        self.heap = HeapTrimmer()
        self.collector = CollectorPause()  # off while a large request is served
        self._servers: dict[str, asyncio.Server] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._warn = ThrottledLog(log)
        self._traced: set[tuple[str, str, str]] = set()

    @property
    def port(self) -> int:
        """The first listener's port."""
        return next(iter(self.ports.values()))

    @property
    def ports(self) -> dict[str, int]:
        return {name: int(server.sockets[0].getsockname()[1]) for name, server in self._servers.items()}

    async def start(self) -> None:
        """Bind every listener (`listeners`, or `--listen` as one PLAINTEXT listener)."""
        loop = asyncio.get_running_loop()
        for listener in self.broker.security.listeners:
            self._servers[listener.name] = await loop.create_server(
                self._factory(listener), listener.host, listener.port, backlog=1024
            )
        self._sweeper = loop.create_task(self._sweep(), name="idle-connections")

    def _factory(self, listener: Listener) -> Callable[[], asyncio.BaseProtocol]:
        security = self.broker.security
        metrics = self.broker.metrics
        if not listener.tls:
            return lambda: Connection(self, listener)
        ctx = security.tls
        assert ctx is not None

        def tls_connection() -> asyncio.BaseProtocol:
            conn = Connection(self, listener)

            def failed(reason: str) -> None:
                metrics.tls_failures.labels(reason).inc()
                self._warn.warning("TLS handshake failed", peer=str(conn.peer), reason=reason)

            def established(tls: ssl.SSLObject) -> None:
                if not listener.sasl:
                    conn.session.principal = security.ssl_principal(tls)

            return TlsLayer(ctx, conn, security.auth_timeout_s, failed, established)

        return tls_connection

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        for server in self._servers.values():
            server.close()
        senders = [c.sender for c in self.connections if c.sender is not None]
        for conn in list(self.connections):
            conn.close()
        await asyncio.gather(*senders, return_exceptions=True)
        for server in self._servers.values():
            await server.wait_closed()

    # --- connections -----------------------------------------------------------------

    def admit(self, conn: Connection) -> bool:
        reason = self.counts.admit(conn.host)
        if reason is not None:
            self.broker.metrics.connections_rejected.labels(reason).inc()
            self._warn.warning("connection refused", peer=str(conn.peer), limit=reason)
            return False
        self.connections.add(conn)
        self.broker.metrics.connections.inc()
        self.broker.metrics.connections_open.inc()
        return True

    def forget(self, conn: Connection) -> None:
        self.counts.release(conn.host)
        self.connections.discard(conn)
        self.broker.metrics.connections_open.dec()
        self.heap.connection_closed()

    async def _sweep(self) -> None:
        """Close connections idle for `connections.max.idle.ms` (nothing read, and nothing
        pending or nothing of it taken by the client); give back the buffers of connections
        quiet for a second; bring each one's count of held response bytes up to date."""
        while True:
            await asyncio.sleep(1.0 if self.idle_ms < 0 else min(1.0, max(self.idle_ms / 4000, 0.01)))
            self.heap.maybe_trim()  # after a burst of closes, give their freed memory back
            now = time.monotonic()
            deadline = self.broker.security.auth_timeout_s
            for conn in list(self.connections):
                if not conn.session.authenticated and now - conn.opened > deadline:
                    self.close_unauthenticated(conn, "authentication did not finish within authentication.timeout.ms")
                    continue
                conn.account()
                if conn.barrier is not None or ((conn.queue or conn.sender is not None) and conn.writable):
                    continue  # working; a client that takes no bytes of its answers is idle
                quiet = now - conn.last_active
                if 0 <= self.idle_ms < quiet * 1000:
                    self.broker.metrics.connections_idle_closed.inc()
                    log.debug("closing idle connection", peer=str(conn.peer), idle_ms=round(quiet * 1000))
                    conn.close()
                elif quiet >= 1.0:
                    conn.release_idle_buffer()

    # --- failures --------------------------------------------------------------------

    def reject(self, conn: Connection, reason: str) -> None:
        self.broker.metrics.closed_malformed.inc()
        self._warn.warning("closing connection: malformed request", peer=str(conn.peer), reason=reason)

    def close_unauthenticated(self, conn: Connection, reason: str) -> None:
        self.broker.metrics.authentication_closed.labels(reason.split(" (", maxsplit=1)[0]).inc()
        self._warn.warning("closing connection: authentication", peer=str(conn.peer), reason=reason)
        conn.close()

    def log_failure(self, conn: Connection, api: str, error: BaseException | None) -> None:
        """One line per failure (rate-limited), a traceback the first time it happens at a place."""
        self.broker.metrics.request_failures.labels(api).inc()
        where = ""
        if error is not None and error.__traceback__ is not None:
            last = traceback.extract_tb(error.__traceback__)[-1]
            where = f"{last.filename}:{last.lineno}"
        key = (api, type(error).__name__, where)
        if error is not None and key not in self._traced:
            self._traced.add(key)
            log.error("request failed; closing connection", api=api, peer=str(conn.peer), exc_info=error)
            return
        self._warn.warning(
            "request failed; closing connection",
            api=api,
            peer=str(conn.peer),
            error=f"{type(error).__name__}: {error}" if error is not None else "",
            at=where,
        )

    # --- requests --------------------------------------------------------------------

    def dispatch(self, frame: memoryview, conn: Connection) -> Pending | Literal[Signal.NO_RESPONSE] | None:
        """Decode and handle one frame: a Pending response, NO_RESPONSE, or None to close."""
        started = time.perf_counter()
        try:
            api_key, api_version, correlation_id = peek_header(frame)
        except MalformedRequest as e:
            self.reject(conn, str(e))
            return None
        api = BY_KEY.get(api_key)
        if api is None:
            self.reject(conn, f"unknown API key {api_key}")
            return None
        if not api.min_version <= api_version <= api.max_version:
            if api_key == API_VERSIONS:
                return Pending(correlation_id, api, started, True, unsupported_version_response(APIS))
            self.reject(conn, f"{api.name} v{api_version} is not supported (v{api.min_version}-v{api.max_version})")
            return None
        refused = conn.session.admits(api_key)
        if refused is not None:
            self.broker.metrics.authentication_closed.labels(refused.split(" (")[0]).inc()
            self._warn.warning("closing connection: authentication", peer=str(conn.peer), reason=refused, api=api.name)
            return None
        if api_key != API_VERSIONS and offload.is_large(frame, api_key, api_version):
            # Served whole before the connection's next request is read (`serial`).
            large = asyncio.ensure_future(self._serve_large(bytes(frame), conn, api, started))
            large.add_done_callback(_retrieve)
            return Pending(correlation_id, api, started, False, future=large, serial=True)
        try:
            header, request = decode_request(frame, conn.host, self.max_elements)
        except MalformedRequest as e:
            self.reject(conn, str(e))
            return None
        ctx = RequestContext.of(header, conn.session)
        try:
            result = api.handler(self.broker, ctx, request)
        except Exception as e:
            self.log_failure(conn, api.name, e)
            return None
        throttle_ms = 0
        if self.quotas.entities:
            throttle_ms = self._charge(ctx, len(frame), started)
            self._mute_owed(conn)  # before the next request is dispatched, even if it is already read
        if result is NO_RESPONSE:
            self._observe(api.name, started)
            return NO_RESPONSE
        if result is CLOSE_CONNECTION:
            self._warn.warning("closing connection after a failed acks=0 produce", peer=str(conn.peer))
            return None
        header_v0 = api_key == API_VERSIONS
        serial = isinstance(result, Serial)
        if isinstance(result, Serial):
            result = result.awaitable
        if inspect.isawaitable(result):
            # Start now: an acks=all produce joins the current fsync round and a long
            # poll registers for appends, without waiting for earlier responses to go out.
            future: asyncio.Future[Outcome] = asyncio.ensure_future(result)
            future.add_done_callback(_retrieve)
            return Pending(
                correlation_id, api, started, header_v0, future=future, serial=serial, throttle_ms=throttle_ms
            )
        if isinstance(result, RawResponse):
            held = [len(p) for p in result.parts if isinstance(p, bytes | bytearray | memoryview)]
            pending = Pending(
                correlation_id, api, started, header_v0, result=result, size=sum(held), throttle_ms=throttle_ms
            )
            pending.streams = len(held) < len(result.parts)
            return pending
        return Pending(correlation_id, api, started, header_v0, result=result, throttle_ms=throttle_ms)

    async def _serve_large(self, frame: bytes, conn: Connection, api: Api[Services], started: float) -> Outcome:
        """`dispatch` for a request of many entries: decoded, and its answer encoded, in a
        worker thread; the handler runs on the loop, for some APIs a chunk of entries at a
        time (`offload`)."""
        with self.collector.held():
            header, request = await offload.run(lambda: decode_request(frame, conn.host, self.max_elements))
            ctx = RequestContext.of(header, conn.session)
            owned: list[Entity] = [request]  # the only references, for `offload.release`
            del request
            outcome = await offload.handled(api.handler, self.broker, ctx, owned[0])
            if not isinstance(outcome, Signal):
                if self.quotas.entities:
                    throttle_ms = self._charge(ctx, len(frame), started)
                    if isinstance(outcome, RawResponse):
                        outcome = outcome.with_throttle(throttle_ms) if throttle_ms else outcome
                    elif throttle_ms:
                        outcome = with_throttle(outcome, throttle_ms)
                if not isinstance(outcome, RawResponse):
                    owned.append(outcome)
                    outcome = await offload.encoded(outcome)
            await offload.release(owned)
            return outcome

    def _charge(self, ctx: RequestContext, size: int, started: float) -> int:
        """Record a request against its client's produce and request quotas; the throttle."""
        if ctx.api_key in QUOTA_EXEMPT:
            return 0
        quotas, user, client = self.broker.quotas, quota_user(ctx.principal), ctx.client_id or ""
        throttle_ms = 0
        if ctx.api_key == PRODUCE:
            throttle_ms = quotas.throttle_ms(PRODUCER_BYTE_RATE, user, client, size)
        busy = quotas.throttle_ms(REQUEST_PERCENTAGE, user, client, (time.perf_counter() - started) * 100)
        return throttled(ctx, max(throttle_ms, busy))

    def _mute_owed(self, conn: Connection) -> None:
        owed = conn.session.mute_ms
        if owed:
            conn.session.mute_ms = 0
            conn.mute(owed)

    def render(self, pending: Pending, conn: Connection) -> Frames | None:
        """The response frames, or None when the handler failed (close the connection)."""
        result = pending.result
        future = pending.future
        if future is not None:
            if future.cancelled():
                return None
            error = future.exception()
            if isinstance(error, MalformedRequest):  # a large request decoded off the loop
                self.reject(conn, str(error))
                return None
            if error is not None:
                self.log_failure(conn, pending.api.name, error)
                return None
            outcome = future.result()
            if outcome is NO_RESPONSE:  # acks=0 work that finished off the event loop
                self._observe(pending.api.name, pending.started)
                return []
            if outcome is CLOSE_CONNECTION:
                self._warn.warning("closing connection after a failed acks=0 produce", peer=str(conn.peer))
                return None
            result = outcome
        try:
            if isinstance(result, RawResponse):
                if pending.throttle_ms:
                    result = result.with_throttle(pending.throttle_ms)
                frames = frame_raw_response(pending.correlation_id, result)
            else:
                assert result is not None  # a Pending holds its response or the awaitable of it
                if pending.throttle_ms:
                    result = with_throttle(result, pending.throttle_ms)
                frames = [encode_response(pending.correlation_id, result, header_v0=pending.header_v0)]
        except Exception as e:
            self.log_failure(conn, pending.api.name, e)
            return None
        self._observe(pending.api.name, pending.started)
        self._mute_owed(conn)
        return frames

    def _observe(self, api: str, started: float) -> None:
        self.broker.metrics.handled(api, time.perf_counter() - started)


def _retrieve(future: asyncio.Future[Outcome]) -> None:
    """Mark a failure as seen when the connection closed before its response was sent."""
    if not future.cancelled():
        future.exception()
