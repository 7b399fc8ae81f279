"""SaslHandshake (v1) and SaslAuthenticate (v0-2): PLAIN and SCRAM-SHA-256/512.

A failed exchange is answered (SASL_AUTHENTICATION_FAILED with the reason, or
UNSUPPORTED_SASL_MECHANISM / ILLEGAL_SASL_STATE) and the connection closed, as Kafka does.
PLAIN passwords are checked against the user's stored SCRAM credential, so one store serves
every mechanism and no password is kept.  SaslHandshake v0 (tokens without SaslAuthenticate
framing) is not offered.
"""

from __future__ import annotations

import asyncio
import functools
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Protocol

import structlog

from broker.handlers.base import Messages, RequestContext, Result, Serial
from broker.handlers.services import HasConfig, HasMetrics, HasSecurity
from broker.protocol.codec import build
from broker.protocol.errors import ErrorCode
from broker.security.acls import parse_principal
from broker.security.scram import (
    MECHANISMS,
    AuthenticationFailed,
    ScramCredential,
    ScramServer,
    check_password,
    make_credential,
    parse_plain,
)
from broker.security.session import Session
from kit.throttle import GateFull

if TYPE_CHECKING:
    from broker.handlers.kio_types import (
        SaslAuthenticateRequest,
        SaslAuthenticateResponse,
        SaslHandshakeRequest,
        SaslHandshakeResponse,
    )

log = structlog.get_logger(__name__)

HANDSHAKE: Messages[SaslHandshakeRequest, SaslHandshakeResponse] = Messages(17, 1, 1)
AUTHENTICATE: Messages[SaslAuthenticateRequest, SaslAuthenticateResponse] = Messages(36, 0, 2)
_PLAIN_ORDER = tuple(reversed(MECHANISMS))  # PLAIN checks a user's SCRAM-SHA-512 credential first


class SaslBroker(HasSecurity, HasConfig, HasMetrics, Protocol):
    """What the SASL requests use of the broker."""


@functools.lru_cache(maxsize=8)
def _decoy_credential(mechanism: str, iterations: int, salt_length: int) -> ScramCredential:
    """What an unknown PLAIN user's password is hashed against: the shape of a real credential."""
    return make_credential(mechanism, "not a password", iterations, b"s" * salt_length)


def handshake(broker: SaslBroker, ctx: RequestContext, request: SaslHandshakeRequest) -> SaslHandshakeResponse:
    cls = HANDSHAKE.response(ctx.api_version)
    security = broker.security
    session = ctx.session
    enabled = tuple(security.mechanisms)

    def answer(error: ErrorCode) -> SaslHandshakeResponse:
        if error != ErrorCode.none:
            session.close_after_response = True
            broker.metrics.authentication(request.mechanism, "malformed")
        return build(cls, error_code=error, mechanisms=enabled)

    if not session.sasl or session.mechanism is not None:
        return answer(ErrorCode.illegal_sasl_state)
    if session.authenticated_once and (security.reauth_ms <= 0 or request.mechanism != session.extra.get("mechanism")):
        return answer(ErrorCode.illegal_sasl_state)  # re-authentication: the same mechanism
    if request.mechanism not in enabled:
        return answer(ErrorCode.unsupported_sasl_mechanism)
    session.mechanism = request.mechanism
    session.exchange = None
    return answer(ErrorCode.none)


def authenticate(broker: SaslBroker, ctx: RequestContext, request: SaslAuthenticateRequest) -> Result:
    cls = AUTHENTICATE.response(ctx.api_version)
    security = broker.security
    session = ctx.session
    mechanism = session.mechanism
    token = bytes(request.auth_bytes)
    if mechanism is None:
        return _fail(
            broker,
            session,
            cls,
            None,
            "SaslAuthenticate before SaslHandshake",
            result="malformed",
            error=ErrorCode.illegal_sasl_state,
        )
    if len(token) > security.max_sasl_bytes:
        return _fail(
            broker, session, cls, mechanism, "SASL token exceeds sasl.server.max.receive.size", result="malformed"
        )
    user = ""
    try:
        if mechanism == "PLAIN":
            user, password = parse_plain(token)
            # PBKDF2 takes milliseconds: in a thread, with this connection's next request held
            # back until the answer (a flood of guesses must not stall every other client).
            return Serial(_plain(broker, session, cls, user, password))
        if session.exchange is not None:  # the proof: checked only while the user's keys are open
            _admit(broker, session, _scram_user(session))
        reply, done = _scram_step(broker, session, mechanism, token)
        if not done:  # the first message named the user
            _admit(broker, session, _scram_user(session))
    except _Throttled as e:
        return _refused(broker, session, cls, mechanism, user or _scram_user(session), wait_s=e.wait_s)
    except AuthenticationFailed as e:
        return _conclude(broker, session, cls, mechanism, user=user or _scram_user(session), error=e)
    return _conclude(broker, session, cls, mechanism, user=done, reply=reply, done=done)


async def _plain(
    broker: SaslBroker, session: Session, cls: type[SaslAuthenticateResponse], user: str, password: str
) -> SaslAuthenticateResponse:
    security = broker.security
    throttle = security.throttle
    # One hash at a time, each admitted only once the one before it has counted (asked again
    # in the slot): concurrent guesses queued together would otherwise all be checked before
    # the first failure closed the name.  Known devices and addresses without failures are
    # hashed first, and a flood from addresses with failures queues only so far.
    wait = throttle.blocked_for(user, session.host)
    try:
        if wait > 0:
            raise _Throttled(wait)
        async with security.plain_hashing.slot(throttle.priority(user, session.host)):
            wait = throttle.blocked_for(user, session.host)
            if wait > 0:
                raise _Throttled(wait)
            try:
                done = await asyncio.get_running_loop().run_in_executor(
                    _hashing(), _check_plain, broker, user, password
                )
            except AuthenticationFailed as e:
                response = _conclude(broker, session, cls, "PLAIN", user=user, error=e)
            else:
                response = _conclude(broker, session, cls, "PLAIN", user=user, done=done)
    except _Throttled as e:
        response = _refused(broker, session, cls, "PLAIN", user, wait_s=e.wait_s)
    except GateFull:
        response = _refused(broker, session, cls, "PLAIN", user, wait_s=0.0)
    if session.close_after_response:  # the connection closes after this answer: delay it first
        base = broker.config.values.connection_failed_authentication_delay_ms / 1000
        await asyncio.sleep(max(base, session.failure_delay_s))
    return response


def _refused(
    broker: SaslBroker,
    session: Session,
    cls: type[SaslAuthenticateResponse],
    mechanism: str,
    user: str,
    *,
    wait_s: float,
) -> SaslAuthenticateResponse:
    """A login for a name inside its throttle window: refused unchecked, answered when the window
    ends, then closed."""
    session.failure_delay_s = wait_s
    log.info("authentication refused: too many failures", client=session.host, principal=f"User:{user}")
    return _fail(broker, session, cls, mechanism, "Authentication failed: too many failed attempts", result="throttled")


def _fail(
    broker: SaslBroker,
    session: Session,
    cls: type[SaslAuthenticateResponse],
    mechanism: str | None,
    message: str,
    *,
    result: str,
    error: ErrorCode = ErrorCode.sasl_authentication_failed,
) -> SaslAuthenticateResponse:
    """A failed step: answered, counted, and the connection closed after the answer."""
    session.close_after_response = True
    broker.metrics.authentication(mechanism, result)
    return build(cls, error_code=error, error_message=message, auth_bytes=b"", session_lifetime=0)


def _conclude(
    broker: SaslBroker,
    session: Session,
    cls: type[SaslAuthenticateResponse],
    mechanism: str,
    *,
    user: str,
    reply: bytes = b"",
    done: str = "",
    error: AuthenticationFailed | None = None,
) -> SaslAuthenticateResponse:
    """The answer to a step of the exchange: failed (`error`), to be continued (`done` empty),
    or authenticated as `done`."""
    security = broker.security
    if error is not None:
        if user:  # a password was checked (a malformed message names nobody)
            session.failure_delay_s = security.throttle.failed(user, session.host)
            # As Kafka: each failed authentication logged with the client's address and principal.
            log.info(
                "failed authentication",
                client=session.host,
                principal=f"User:{user}",
                mechanism=mechanism,
                error=str(error),
            )
        return _fail(broker, session, cls, mechanism, str(error), result="failed")
    if not done:
        return build(cls, error_code=ErrorCode.none, error_message=None, auth_bytes=reply, session_lifetime=0)
    security.throttle.succeeded(done, session.host)
    principal = f"User:{done}"
    try:
        parse_principal(principal)
    except ValueError:
        return _fail(broker, session, cls, mechanism, "user name is not a valid principal", result="failed")
    if session.authenticated_once and principal != session.principal:
        return _fail(broker, session, cls, mechanism, "re-authentication must use the same principal", result="failed")
    session.principal = principal
    session.authenticated = session.authenticated_once = True
    session.extra["mechanism"] = mechanism
    session.mechanism = None
    session.exchange = None
    lifetime = security.reauth_ms
    session.expires_at = time.monotonic() + lifetime / 1000 if lifetime > 0 else None
    broker.metrics.authentication(mechanism, "ok")
    return build(cls, error_code=ErrorCode.none, error_message=None, auth_bytes=reply, session_lifetime=lifetime)


@functools.cache
def _hashing() -> ThreadPoolExecutor:
    """One thread for PLAIN's password hashing: a flood takes at most one core, and the event
    loop keeps the rest."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="sasl-plain")


class _Throttled(Exception):
    def __init__(self, wait_s: float) -> None:
        super().__init__(f"throttled for {wait_s:.1f} s")
        self.wait_s = wait_s


def _scram_user(session: Session) -> str:
    return (session.exchange.user if session.exchange is not None else None) or ""


def _admit(broker: SaslBroker, session: Session, user: str) -> None:
    """Refuse, unchecked, a login for a user name whose windows from this address are closed."""
    wait = broker.security.throttle.blocked_for(user, session.host)
    if wait > 0:
        raise _Throttled(wait)


def _check_plain(broker: SaslBroker, user: str, password: str) -> str:
    store = broker.security.store
    for mechanism in _PLAIN_ORDER:
        credential = store.credential(user, mechanism)
        if credential is not None:
            if check_password(mechanism, credential, password):
                return user
            break
    else:  # the same work as for the credential most users have
        mechanism, iterations, salt_length = store.decoy(_PLAIN_ORDER)
        check_password(mechanism, _decoy_credential(mechanism, iterations, salt_length), password)
    raise AuthenticationFailed("Authentication failed: Invalid username or password")


def _scram_step(broker: SaslBroker, session: Session, mechanism: str, token: bytes) -> tuple[bytes, str]:
    """(reply, user once the exchange succeeded, else "")."""
    if session.exchange is None:
        store = broker.security.store
        _, iterations, salt_length = store.decoy((mechanism,))
        session.exchange = ScramServer(
            mechanism,
            lambda user: store.credential(user, mechanism),
            broker.security.secret,
            decoy=(iterations, salt_length),
        )
        return session.exchange.first(token), ""
    exchange = session.exchange
    reply = exchange.final(token)
    assert exchange.user is not None
    return reply, exchange.user
