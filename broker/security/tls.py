"""TLS for the Kafka listeners: contexts from PEM files and a layer between the socket and a
connection.

The layer (`TlsLayer`) is the socket's protocol and the connection's transport.  The
connection exists from the moment the TCP connection is accepted, so connection limits and
idle timeouts hold during the handshake; the handshake must finish within
`authentication.timeout.ms`, and one that fails or stalls is closed and counted, never
raised.  Plaintext is decrypted straight into the connection's buffer, and the connection's
back-pressure (pausing reads) stops decryption as well as the socket.

Writes are encrypted as the socket drains, not when they are made: the layer keeps the
plaintext it is given (references to the connection's buffers, which an answer that repeats
one encoding shares) and encrypts a TLS record at a time while the socket's transport takes
bytes.  Encrypting a whole answer at once would turn a client that does not read into a
ciphertext copy of its answer held for as long as it stays, and would leave the outgoing BIO
(whose buffer only ever grows) as large as the largest answer until the connection is freed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import re
import ssl
from collections.abc import Callable, Iterable
from typing import Any, cast

from kit import tls as kit_tls
from kit.tls import TlsConfigError

_SHORT_NAMES = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "domainComponent": "DC",
    "userId": "UID",
    "streetAddress": "STREET",
}
_READ_CHUNK = 256 * 1024
RECORD = 16 * 1024  # plaintext encrypted per step: one TLS record
HIGH_WATER = 64 * 1024  # the connection's writes pause above this (asyncio's default)

__all__ = ["PrincipalRules", "TlsConfigError", "TlsLayer", "distinguished_name", "server_context"]


def server_context(keystore: str, key_password: str, truststore: str, client_auth: str) -> ssl.SSLContext:
    """`ssl.keystore.location` (PEM: private key and certificate chain), `ssl.key.password`,
    `ssl.truststore.location` (PEM CA certificates) and `ssl.client.auth`."""
    if not keystore:
        raise TlsConfigError("an SSL or SASL_SSL listener needs ssl.keystore.location (a PEM key and certificate)")
    if client_auth != "none" and not truststore:
        raise TlsConfigError(f"ssl.client.auth={client_auth} needs ssl.truststore.location")
    return kit_tls.server_context(
        keystore, key_password=key_password or None, cafile=truststore or None, client_auth=client_auth
    )


def distinguished_name(cert: dict[str, Any]) -> str:
    """The subject as RFC 2253 (most specific first, as Java's X500Principal.getName)."""
    rdns = reversed(cert.get("subject", ()))
    return ",".join("+".join(f"{_SHORT_NAMES.get(k, k)}={_escape(v)}" for k, v in rdn) for rdn in rdns)


def _escape(value: str) -> str:
    out = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" "):
        out = out[:-1] + "\\ "
    return out


class PrincipalRules:
    """`ssl.principal.mapping.rules`: `DEFAULT` and `RULE:pattern/replacement/[LU]`, tried in
    order; the first rule whose pattern matches the whole DN names the principal."""

    _RULE = re.compile(r"RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU])?")

    def __init__(self, raw: str) -> None:
        self.rules: list[tuple[re.Pattern[str], str, str] | None] = []
        rest = raw.strip() or "DEFAULT"
        while rest:
            rest = rest.lstrip(" ,")
            if not rest:
                break
            if rest.startswith("DEFAULT"):
                self.rules.append(None)
                rest = rest[len("DEFAULT") :]
                continue
            m = self._RULE.match(rest)
            if m is None:
                raise TlsConfigError(f"invalid ssl.principal.mapping.rules at {rest[:40]!r}")
            try:
                pattern = re.compile(m.group(1))
            except re.error as e:
                raise TlsConfigError(f"invalid ssl.principal.mapping.rules pattern {m.group(1)!r}: {e}") from None
            self.rules.append((pattern, re.sub(r"\$(\d)", r"\\\1", m.group(2)), m.group(3) or ""))
            rest = rest[m.end() :]

    def apply(self, dn: str) -> str:
        for rule in self.rules:
            if rule is None:
                return dn
            pattern, replacement, case = rule
            if pattern.fullmatch(dn):
                name = pattern.sub(replacement, dn, count=1)
                return name.lower() if case == "L" else name.upper() if case == "U" else name
        raise TlsConfigError(f"no ssl.principal.mapping.rules rule matches {dn!r}")


_DETACHED = asyncio.BufferedProtocol()  # the connection of a layer whose socket closed


def _ignore(_: Any) -> None:
    pass


class TlsLayer(asyncio.Protocol, asyncio.Transport):
    """Both sides of TLS: `asyncio.Protocol` to the socket, `asyncio.Transport` to `inner`."""

    def __init__(
        self,
        ctx: ssl.SSLContext,
        inner: asyncio.BufferedProtocol,
        timeout_s: float,
        on_failure: Callable[[str], None],
        on_established: Callable[[ssl.SSLObject], None],
    ) -> None:
        super().__init__()
        self.ctx = ctx
        self.inner = inner
        self.timeout_s = timeout_s
        self.on_failure = on_failure
        self.on_established = on_established
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.tls = ctx.wrap_bio(self.incoming, self.outgoing, server_side=True)
        self.raw: asyncio.Transport | None = None
        self.established = False
        self.paused = False
        self.closing = False
        self._timer: asyncio.TimerHandle | None = None
        self._drain_scheduled = False
        self._plain: collections.deque[memoryview] = collections.deque()  # written, not yet encrypted
        self._plain_size = 0
        self._raw_paused = False  # the socket's transport holds more than its high-water mark
        self._inner_paused = False
        self._high, self._low = HIGH_WATER, HIGH_WATER // 4
        self._close_when_sent = False

    # --- the socket side -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        raw = self.raw = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        # Paused as soon as the socket leaves ciphertext behind, resumed once all of it is sent:
        # the kernel's buffer is the one that absorbs bursts; ours holds at most one record.
        raw.set_write_buffer_limits(high=0, low=0)
        self._timer = asyncio.get_running_loop().call_later(self.timeout_s, self._expired)
        self.inner.connection_made(self)

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self.incoming.write(data)
        if not self.established:
            self._handshake()
        if self.established and not self.paused:
            self._decrypt()

    def eof_received(self) -> bool | None:
        if not self.established or self.closing:
            self.abort()
            return False
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        if self._timer is not None:
            self._timer.cancel()
        self._drop_plain()
        self.inner.connection_lost(exc)
        # Let go of the connection and the callbacks that hold it: the connection holds this
        # layer as its transport, and without this cycle both (and the SSL object with its
        # buffers) are freed when the client leaves, not at the garbage collector's next
        # full pass, which an idle broker may not reach for a long time.
        self.inner = _DETACHED
        self.on_failure = _ignore
        self.on_established = _ignore

    def pause_writing(self) -> None:
        self._raw_paused = True

    def resume_writing(self) -> None:
        self._raw_paused = False
        self._pump()

    def _expired(self) -> None:
        if not self.established and not self.closing:
            self.on_failure("timeout")
            self.abort()

    def _handshake(self) -> None:
        try:
            self.tls.do_handshake()
        except ssl.SSLWantReadError:
            self._flush()
            return
        except (ssl.SSLError, ValueError) as e:
            self._flush()  # the alert, if any, tells the client why
            self.on_failure(getattr(e, "reason", None) or type(e).__name__)
            self.abort()
            return
        self.established = True
        if self._timer is not None:
            self._timer.cancel()
        self._flush()
        self.on_established(self.tls)

    def _decrypt(self) -> None:
        inner = self.inner
        while not self.paused and not self.closing:
            buf = memoryview(inner.get_buffer(_READ_CHUNK))
            try:
                n = cast(int, self.tls.read(min(len(buf), _READ_CHUNK), buf))  # typeshed: bytes
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                n = 0
            except ssl.SSLError as e:
                self.on_failure(getattr(e, "reason", None) or type(e).__name__)
                self.abort()
                return
            if n == 0:  # the peer's close_notify: answer it, then close once responses are out
                self._flush()
                if self.inner.eof_received() is not True:
                    self.close()
                return
            inner.buffer_updated(n)
        self._flush()

    def _flush(self) -> None:
        if self.outgoing.pending and self.raw is not None and not self.raw.is_closing():
            self.raw.write(self.outgoing.read())

    # --- the connection side ---------------------------------------------------------

    def write(self, data: Any) -> None:
        self.writelines((data,))

    def writelines(self, list_of_data: Iterable[Any]) -> None:
        if self.closing or not self.established:
            return
        for data in list_of_data:
            if len(data):
                view = memoryview(data).cast("B")
                self._plain.append(view)
                self._plain_size += len(view)
        self._pump()

    def _pump(self) -> None:
        """Encrypt queued plaintext a record at a time while the socket's transport takes it;
        then tell the connection whether it may write more."""
        plain = self._plain
        try:
            while plain and not self._raw_paused and not self.is_closing():
                head = plain[0]
                n = min(len(head), RECORD)
                self.tls.write(head[:n])
                self._plain_size -= n
                if n == len(head):
                    plain.popleft()
                else:
                    plain[0] = head[n:]
                self._flush()
        except ssl.SSLError as e:
            self.on_failure(getattr(e, "reason", None) or type(e).__name__)
            self.abort()
            return
        if self._close_when_sent and not plain:
            self._close_when_sent = False
            self._close_now()
            return
        size = self.get_write_buffer_size()
        if not self._inner_paused and size > self._high:
            self._inner_paused = True
            self.inner.pause_writing()
        elif self._inner_paused and size <= self._low:
            self._inner_paused = False
            self.inner.resume_writing()

    def _drop_plain(self) -> None:
        self._plain.clear()
        self._plain_size = 0

    def pause_reading(self) -> None:
        if not self.paused and self.raw is not None:
            self.paused = True
            self.raw.pause_reading()

    def resume_reading(self) -> None:
        if self.paused and self.raw is not None:
            self.paused = False
            self.raw.resume_reading()
            if not self._drain_scheduled:  # plaintext may already be waiting in the BIO
                self._drain_scheduled = True
                asyncio.get_running_loop().call_soon(self._drain)

    def _drain(self) -> None:
        self._drain_scheduled = False
        if self.established and not self.paused and not self.closing:
            self._decrypt()

    def is_reading(self) -> bool:
        return not self.paused

    def is_closing(self) -> bool:
        return self.closing or self.raw is None or self.raw.is_closing()

    def close(self) -> None:
        if self.closing or self.raw is None:
            return
        if self._plain:  # what was written goes out first, then close_notify
            self._close_when_sent = True
            return
        self._close_now()

    def _close_now(self) -> None:
        assert self.raw is not None
        self.closing = True
        if self.established:
            with contextlib.suppress(ssl.SSLError):  # our close_notify is out; the peer's is not awaited
                self.tls.unwrap()
            self._flush()
        self.raw.close()

    def abort(self) -> None:
        self.closing = True
        self._drop_plain()
        if self.raw is not None:
            self.raw.abort()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "ssl_object":
            return self.tls
        if name == "peercert":
            return self.tls.getpeercert() if self.established else default
        return self.raw.get_extra_info(name, default) if self.raw is not None else default

    def get_write_buffer_size(self) -> int:
        return self._plain_size + (self.raw.get_write_buffer_size() if self.raw is not None else 0)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        """Limits on what the connection has written and the socket has not sent (plaintext
        not yet encrypted and ciphertext not yet sent), as asyncio's transports count them."""
        self._high = HIGH_WATER if high is None else high
        self._low = self._high // 4 if low is None else low
        if self._inner_paused and self.get_write_buffer_size() <= self._low:
            self._inner_paused = False
            self.inner.resume_writing()
        elif not self._inner_paused and self.get_write_buffer_size() > self._high:
            self._inner_paused = True
            self.inner.pause_writing()

    def can_write_eof(self) -> bool:
        return False
