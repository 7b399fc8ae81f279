"""Kafka requests that kio's generated message classes encode and decode, sent through an
aiokafka client's connections, for the APIs aiokafka does not declare.

aiokafka's connection asks a request for `prepare(versions)` (the broker's ApiVersions ranges) and
is handed a struct that gives the request header, the body and the reader of the answer: here all
three are kio's.  The version is picked as aiokafka picks its own: the newest the broker speaks,
`IncompatibleBrokerVersion` when the broker does not advertise the API at all and
`NotImplementedError` when it speaks none of the versions asked for, so a caller tells an
unsupported API apart from a failure the same way for either kind of request.

The answer is read after the connection has handed it over (`ask`): a body kio cannot read fails
that one request with `UndecodableResponse`, never the connection's reader and the requests
queued behind it.
"""

from __future__ import annotations

import io
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from aiokafka.errors import IncompatibleBrokerVersion, KafkaError
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32
from kio.static.protocol import Entity, Payload

__all__ = ["KioRequest", "Send", "UndecodableResponse", "ask", "encode_entity"]

R = TypeVar("R", bound=Payload)

# How a caller sends a request to one broker: `AIOKafkaAdminClient._send_request` and the like.
Send = Callable[[Any, int], Awaitable[Any]]


class UndecodableResponse(KafkaError):  # type: ignore[misc]  # aiokafka ships no types
    """The broker's answer is not one kio can read as the expected response."""


def encode_entity(entity: Entity) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


class _Encoded:
    """What aiokafka expects of a request header: something that encodes itself."""

    def __init__(self, entity: Entity) -> None:
        self.entity = entity

    def encode(self) -> bytes:
        return encode_entity(self.entity)


class RawAnswer(Generic[R]):
    """A response body as the connection received it, read by `read`."""

    def __init__(self, response: type[R], body: bytes) -> None:
        self.response = response
        self.body = body

    def read(self) -> R:
        try:
            entity, size = entity_reader(self.response)(self.body, 0)
        except Exception as e:  # kio raises a variety of errors on bad input
            raise UndecodableResponse(f"cannot read {self.response.__name__}: {e}") from e
        if size != len(self.body):
            raise UndecodableResponse(f"{len(self.body) - size} bytes after {self.response.__name__}")
        return entity


class _Reader(Generic[R]):
    """aiokafka's RESPONSE_TYPE: `decode` is called with the frame after the response header."""

    def __init__(self, response: type[R]) -> None:
        self.response = response

    def decode(self, data: io.BytesIO) -> RawAnswer[R]:
        return RawAnswer(self.response, data.read())


class KioRequestStruct(Generic[R]):
    """One request at the version picked for one connection, in the shape aiokafka sends."""

    def __init__(self, body: Payload, version: int, response: type[R]) -> None:
        self.body = body
        self.API_KEY = int(type(body).__api_key__)
        self.API_VERSION = version
        self.FLEXIBLE_VERSION = bool(type(body).__flexible__)
        self.RESPONSE_TYPE = _Reader(response)

    def build_request_header(self, correlation_id: int, client_id: str) -> _Encoded:
        fields: dict[str, Any] = {
            "request_api_key": i16(self.API_KEY),
            "request_api_version": i16(self.API_VERSION),
            "correlation_id": i32(correlation_id),
            "client_id": client_id,
        }
        return _Encoded(RequestHeaderV2(**fields) if self.FLEXIBLE_VERSION else RequestHeaderV1(**fields))

    def encode(self) -> bytes:
        return encode_entity(self.body)

    def parse_response_header(self, data: io.BytesIO) -> ResponseHeaderV0 | ResponseHeaderV1:
        start = data.tell()
        header: ResponseHeaderV0 | ResponseHeaderV1
        if self.FLEXIBLE_VERSION:
            header, size = entity_reader(ResponseHeaderV1)(data.getvalue(), start)
        else:
            header, size = entity_reader(ResponseHeaderV0)(data.getvalue(), start)
        data.seek(start + size)
        return header

    def __repr__(self) -> str:  # aiokafka logs each request it sends at debug level
        return f"{self.body!r} (v{self.API_VERSION})"


class KioRequest(Generic[R]):
    """A kio request entity `body` with the versions it may be sent as (its own by default;
    more only where Kafka's versions share one layout) and the kio response type that reads the
    answer."""

    def __init__(self, body: Payload, response: type[R], versions: Sequence[int] | None = None) -> None:
        if int(response.__api_key__) != int(type(body).__api_key__):
            raise ValueError(f"{type(body).__name__} is not answered by {response.__name__}")
        self.API_KEY = int(type(body).__api_key__)
        self.body = body
        self.response = response
        self.versions = tuple(sorted(versions if versions is not None else (int(type(body).__version__),)))

    def prepare(self, versions: Mapping[int, tuple[int, int]]) -> KioRequestStruct[R]:
        name = type(self.body).__name__
        if self.API_KEY not in versions:
            raise IncompatibleBrokerVersion(f"{name} cannot be used if the API version is unknown")
        lowest, highest = versions[self.API_KEY]
        for version in reversed(self.versions):
            if lowest <= version <= highest:
                return KioRequestStruct(self.body, version, self.response)
        raise NotImplementedError(f"Support for {name} v{lowest} has not yet been added")


async def ask(send: Send, request: KioRequest[R], node_id: int) -> R:
    """The answer of broker `node_id` to `request`, read by kio."""
    answer: RawAnswer[R] = await send(request, node_id)
    return answer.read()
