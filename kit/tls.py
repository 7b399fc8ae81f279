"""TLS contexts from PEM files, the same way for every server and client of the project.

Servers (the broker's SSL listeners, the registry's and the services' HTTPS) take a certificate
chain and key and, for mutual TLS, the CAs that sign client certificates; clients take the CAs
that sign the servers' certificates and, for mutual TLS, their own.  TLS 1.2 at least.
"""

from __future__ import annotations

import ssl
from pathlib import Path

__all__ = ["TlsConfigError", "client_context", "server_context"]


class TlsConfigError(ValueError):
    """A key, certificate or CA file that cannot be used; the message says which and why."""


def server_context(
    certfile: str | Path,
    keyfile: str | Path | None = None,
    *,
    key_password: str | None = None,
    cafile: str | Path | None = None,
    client_auth: str = "none",
) -> ssl.SSLContext:
    """A server context: `certfile` (the chain; with `keyfile` None it holds the key too, as
    Kafka's PEM keystore), `cafile` the CAs trusted for client certificates, `client_auth`
    ``none``, ``requested`` or ``required``."""
    if client_auth not in ("none", "requested", "required"):
        raise TlsConfigError(f"client authentication {client_auth!r}: expected none, requested or required")
    if client_auth != "none" and not cafile:
        raise TlsConfigError(f"client authentication {client_auth} needs the CAs that sign client certificates")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(str(certfile), str(keyfile) if keyfile else None, key_password or None)
        if cafile:
            context.load_verify_locations(str(cafile))
    except (OSError, ssl.SSLError) as e:
        raise TlsConfigError(f"cannot load the TLS key, certificate or CA: {e}") from e
    if client_auth == "required":
        context.verify_mode = ssl.CERT_REQUIRED
    elif client_auth == "requested":
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


def client_context(
    cafile: str | Path | None = None,
    certfile: str | Path | None = None,
    keyfile: str | Path | None = None,
    key_password: str | None = None,
) -> ssl.SSLContext:
    """A verifying client context: the system's CAs unless `cafile`, a client certificate when
    `certfile` is given (mutual TLS)."""
    try:
        context = ssl.create_default_context(cafile=str(cafile) if cafile else None)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if certfile is not None:
            context.load_cert_chain(str(certfile), str(keyfile) if keyfile else None, key_password or None)
    except (OSError, ssl.SSLError) as e:
        raise TlsConfigError(f"cannot load the TLS certificate, key or CA: {e}") from e
    return context
