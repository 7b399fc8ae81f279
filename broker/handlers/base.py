"""What every handler shares: the signature, the registry entry and small builders."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from broker.core import Broker
from broker.protocol.codec import RequestHeader

# A handler runs its synchronous part immediately, in request order, and returns the
# response entity, an awaitable of it (long poll, fsync), or NO_RESPONSE (acks=0).
Result = Any | Awaitable[Any]
Handler = Callable[[Broker, RequestHeader, Any], Result]


class _NoResponse:
    """acks=0: Kafka sends nothing back."""


class _CloseConnection:
    """acks=0 produce that failed: Kafka closes the connection so the client notices."""


NO_RESPONSE = _NoResponse()
CLOSE_CONNECTION = _CloseConnection()


@dataclass(frozen=True, slots=True)
class Serial:
    """A response the connection must have before it dispatches its next request (work that
    left the event loop, e.g. opening a large compressed batch, must not let a later batch
    of the same producer overtake it)."""

    awaitable: Awaitable[Any]


@dataclass(frozen=True, slots=True)
class Api:
    key: int
    name: str
    min_version: int
    max_version: int
    handler: Handler


# Kafka's ACL operation bits of a topic: READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE,
# DESCRIBE_CONFIGS, ALTER_CONFIGS (what every client may do without an authorizer).
ALL_TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
NOT_REQUESTED_OPERATIONS = -2147483648
