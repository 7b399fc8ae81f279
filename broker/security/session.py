"""Who is on a connection: its listener, its principal, and where SASL stands.

On a SASL listener a connection may send only ApiVersions, SaslHandshake and
SaslAuthenticate until it has authenticated (KIP-152 framing: every token travels in a
SaslAuthenticate request).  With `connections.max.reauth.ms` the session expires: the client
is told the lifetime and must re-authenticate, as the same principal, before it ends; a
request after the end closes the connection, as Kafka does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.security.acls import ANONYMOUS
from broker.security.scram import ScramServer

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
PRE_AUTH_APIS = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})


@dataclass(slots=True)
class Session:
    listener: str
    protocol: str
    host: str
    principal: str = ANONYMOUS
    authenticated: bool = True
    mechanism: str | None = None  # chosen by SaslHandshake, cleared when the exchange ends
    exchange: ScramServer | None = None
    expires_at: float | None = None  # time.monotonic() seconds, with connections.max.reauth.ms
    authenticated_once: bool = False
    close_after_response: bool = False
    failure_delay_s: float = 0.0  # a failed login's answer waits at least this long
    mute_ms: int = 0  # a quota's throttle, owed by the connection: it reads nothing that long
    extra: dict[str, object] = field(default_factory=dict)
    # Run when the connection ends: share sessions live as long as their connection (Kafka's).
    on_close: dict[object, Callable[[], None]] = field(default_factory=dict)

    @classmethod
    def open(cls, listener: str, protocol: str, host: str) -> Session:
        return cls(listener, protocol, host, authenticated=protocol not in ("SASL_PLAINTEXT", "SASL_SSL"))

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def expired(self) -> bool:
        return self.expires_at is not None and time.monotonic() >= self.expires_at

    def admits(self, api_key: int) -> str | None:
        """Why this request may not be handled now (the connection closes), or None."""
        if api_key in PRE_AUTH_APIS:
            return None
        if not self.authenticated:
            return "request before SASL authentication completed"
        if self.mechanism is not None:
            return "request during SASL re-authentication"
        if self.expired():
            return "SASL session expired (connections.max.reauth.ms) without re-authentication"
        return None
