"""Raw Kafka wire-protocol helpers for tests that must control every byte a client sends
(idempotent sequence numbers, malformed frames...).  Requests and responses are `kio`
entities; framing is done here, over a plain blocking socket.

    from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
    response = send_request("127.0.0.1", port, InitProducerIdRequest(...))

A request entity carries its own API key and version (`__api_key__`, `__version__`), so
the header and the response type follow from it.
"""

from __future__ import annotations

import datetime
import io
import itertools
import socket
import struct
from types import TracebackType
from typing import Any

from kio.index import load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer

_I32 = struct.Struct(">i")
API_VERSIONS_KEY = 18
CLIENT_ID = "streamshop-tests"


def encode_request(request: Any, correlation_id: int, client_id: str | None = CLIENT_ID) -> bytes:
    """A size-prefixed request frame: header v1 (classic) or v2 (flexible) plus the body."""
    api_key = int(request.__api_key__)
    version = int(request.__version__)
    buf = io.BytesIO()
    if request.__flexible__:
        header: Any = RequestHeaderV2(
            request_api_key=api_key, request_api_version=version, correlation_id=correlation_id, client_id=client_id
        )
    else:
        header = RequestHeaderV1(
            request_api_key=api_key, request_api_version=version, correlation_id=correlation_id, client_id=client_id
        )
    entity_writer(type(header))(buf, header)
    entity_writer(type(request))(buf, request)
    body = buf.getvalue()
    return _I32.pack(len(body)) + body


def decode_response(request: Any, frame: bytes) -> tuple[int, Any]:
    """(correlation id, response entity) of a response frame without its size prefix.

    Flexible responses use header v1 (one tagged-fields byte after the correlation id),
    except ApiVersions, which always answers with header v0."""
    api_key = int(request.__api_key__)
    response_type: Any = load_response_schema(api_key, int(request.__version__))
    (correlation_id,) = _I32.unpack_from(frame, 0)
    pos = 4
    if response_type.__flexible__ and api_key != API_VERSIONS_KEY:
        pos += 1  # empty tagged fields of response header v1
    response, size = entity_reader(response_type)(frame, pos)
    if pos + size != len(frame):
        raise ValueError(f"{response_type.__name__}: {len(frame) - pos - size} trailing bytes in the response")
    return correlation_id, response


class KafkaConnection:
    """One TCP connection to a broker; requests are answered in order."""

    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self._ids = itertools.count(1)

    def __enter__(self) -> KafkaConnection:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _read_exactly(self, n: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < n:
            chunk = self.sock.recv(n - len(chunks))
            if not chunk:
                raise ConnectionError(f"connection closed after {len(chunks)} of {n} bytes")
            chunks += chunk
        return bytes(chunks)

    def read_frame(self) -> bytes:
        """The next response frame, without its size prefix.  Raises ConnectionError
        when the broker closes the connection."""
        (size,) = _I32.unpack(self._read_exactly(4))
        return self._read_exactly(size)

    def request(self, request: Any) -> Any:
        """Send one request and return the decoded response entity."""
        correlation_id = next(self._ids)
        self.send_bytes(encode_request(request, correlation_id))
        got, response = decode_response(request, self.read_frame())
        if got != correlation_id:
            raise ValueError(f"correlation id {got} does not match the request's {correlation_id}")
        return response


def send_request(host: str, port: int, request: Any, timeout: float = 10.0) -> Any:
    """Send `request` (a kio request entity, which fixes the API version) on a new
    connection and return the response entity."""
    with KafkaConnection(host, port, timeout) as conn:
        return conn.request(request)


def parse_bootstrap(bootstrap: str) -> tuple[str, int]:
    host, port = bootstrap.rsplit(":", 1)
    return host, int(port)


def ms(value: int) -> datetime.timedelta:
    """kio timedelta fields (timeouts) from milliseconds."""
    return datetime.timedelta(milliseconds=value)
