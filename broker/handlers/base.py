"""What every handler shares: the request context, what a handler returns, the API table
entry, and the typing that ties each handler to kio's classes of the versions it serves."""

from __future__ import annotations

import dataclasses
import datetime
import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, Generic, TypeAlias, TypeVar, cast

from kio.static.protocol import Entity

from broker.protocol.codec import RequestHeader, response_type
from broker.protocol.fetch_codec import RawResponse
from broker.security.session import Session


@dataclass(frozen=True, slots=True)
class RequestContext:
    """One request as its handler sees it: its header and who sent it.

    `principal` and `listener` are the session's as the request arrived: what the request
    is authorized as.  `session` is the connection's own, which the SASL handlers change."""

    session: Session
    principal: str
    listener: str
    client_id: str | None
    client_host: str
    api_key: int
    api_version: int
    correlation_id: int

    @classmethod
    def of(cls, header: RequestHeader, session: Session) -> RequestContext:
        return cls(
            session,
            session.principal,
            session.listener,
            header.client_id,
            header.client_host,
            header.api_key,
            header.api_version,
            header.correlation_id,
        )


def throttled(ctx: RequestContext, throttle_ms: int) -> int:
    """A quota's throttle for this request: the connection is muted that long after it (as
    Kafka mutes the channel), and the response says so in `throttle_time_ms`."""
    ctx.session.mute_ms = max(ctx.session.mute_ms, throttle_ms)
    return throttle_ms


def with_throttle(response: Entity, throttle_ms: int) -> Entity:
    """`response` with `throttle_time_ms` raised to `throttle_ms` (responses without the field
    are returned as they are)."""
    current = getattr(response, "throttle_time", None)
    if not isinstance(current, datetime.timedelta) or current >= datetime.timedelta(milliseconds=throttle_ms):
        return response
    return dataclasses.replace(response, throttle_time=datetime.timedelta(milliseconds=throttle_ms))


class Signal(enum.Enum):
    """What a handler returns instead of a response."""

    NO_RESPONSE = "acks=0: Kafka sends nothing back"
    CLOSE_CONNECTION = "an acks=0 produce failed: Kafka closes the connection so the client notices"


NO_RESPONSE: Final = Signal.NO_RESPONSE
CLOSE_CONNECTION: Final = Signal.CLOSE_CONNECTION

T = TypeVar("T")
# A response: a kio entity, or one encoded already (Fetch, Metadata).
Response: TypeAlias = Entity | RawResponse
Outcome: TypeAlias = Response | Signal
# A handler runs its synchronous part at once, in request order, and returns its answer or
# an awaitable of it (long poll, fsync).
Answer: TypeAlias = T | Awaitable[T]


@dataclass(frozen=True, slots=True)
class Serial:
    """A response the connection must have before it dispatches its next request (work that
    left the event loop, e.g. opening a large compressed batch, must not let a later batch
    of the same producer overtake it)."""

    awaitable: Awaitable[Outcome]


Result: TypeAlias = Answer[Outcome] | Serial
# What a handler is given of the broker: the protocol its module names (e.g. `FetchBroker`);
# the table's entries all take the one object that satisfies every such protocol.
Hub = TypeVar("Hub")
Handler: TypeAlias = Callable[[Hub, RequestContext, Entity], Result]

Req = TypeVar("Req")
Resp = TypeVar("Resp")


class Messages(Generic[Req, Resp]):
    """An API's key and the versions the broker serves, typed with kio's request and response
    classes of those versions: `Messages[ProduceRequest, ProduceResponse]`, with the unions
    of broker/handlers/kio_types.py.  tests/unit/test_handler_types.py checks that each
    union holds exactly the classes of the versions served."""

    __slots__ = ("key", "max_version", "min_version")

    def __init__(self, key: int, min_version: int, max_version: int) -> None:
        self.key = key
        self.min_version = min_version
        self.max_version = max_version

    def response(self, version: int) -> type[Resp]:
        """The response class of one version (loaded by kio's index on first use)."""
        return cast("type[Resp]", response_type(self.key, version))


@dataclass(frozen=True, slots=True)
class Api(Generic[Hub]):
    """An entry of the API table, whose handler takes a `Hub`."""

    key: int
    name: str
    min_version: int
    max_version: int
    handler: Handler[Hub]


def serve(name: str, messages: Messages[Req, Resp], handler: Callable[[Hub, RequestContext, Req], Result]) -> Api[Hub]:
    """The table entry of one API.  The dispatcher hands `handler` kio's decoding of a frame
    of this API, an instance of the class of the frame's version, which is one of `Req`'s:
    the cast only forgets, for the table, which request type each entry takes.  `Hub` is the
    table's: a handler taking less of the broker (its module's protocol) fits any table whose
    hub provides that."""
    return Api(messages.key, name, messages.min_version, messages.max_version, cast("Handler[Hub]", handler))


# Kafka's ACL operation bits of a topic: READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE,
# DESCRIBE_CONFIGS, ALTER_CONFIGS (what every client may do without an authorizer).
ALL_TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
NOT_REQUESTED_OPERATIONS = -2147483648
