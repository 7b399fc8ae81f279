"""Raw Kafka wire-protocol helpers for tests that must control every byte a client sends
(idempotent sequence numbers, malformed frames...).  Requests and responses are `kio`
entities; framing is done here, over a plain blocking socket.

    from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
    response = send_request("127.0.0.1", port, InitProducerIdRequest(...))

A request entity carries its own API key and version (`__api_key__`, `__version__`), so
the header and the response type follow from it.
"""

from __future__ import annotations

import asyncio
import datetime
import io
import itertools
import socket
import struct
import threading
from types import TracebackType
from typing import Any

from kio.index import load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.types import TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records, i16, i32, i32Timedelta, i64

_I32 = struct.Struct(">i")
API_VERSIONS_KEY = 18
CLIENT_ID = "streamshop-tests"


def encode_request(request: Any, correlation_id: int, client_id: str | None = CLIENT_ID) -> bytes:
    """A size-prefixed request frame: header v1 (classic) or v2 (flexible) plus the body."""
    api_key = int(request.__api_key__)
    version = int(request.__version__)
    buf = io.BytesIO()
    fields: dict[str, Any] = {
        "request_api_key": i16(api_key),
        "request_api_version": i16(version),
        "correlation_id": i32(correlation_id),
        "client_id": client_id,
    }
    header: Any = RequestHeaderV2(**fields) if request.__flexible__ else RequestHeaderV1(**fields)
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


def ms(value: int) -> i32Timedelta:
    """kio int32 timedelta fields (timeouts) from milliseconds."""
    return i32Timedelta.parse(datetime.timedelta(milliseconds=value))


# --- convenience requests -----------------------------------------------------------------


def init_producer_id(conn: KafkaConnection) -> tuple[int, int]:
    """(producer id, epoch) for an idempotent, non-transactional producer."""
    from kio.schema.init_producer_id.v4.request import InitProducerIdRequest

    response = conn.request(InitProducerIdRequest(transactional_id=None, transaction_timeout=ms(60_000)))
    if response.error_code != 0:
        raise AssertionError(f"InitProducerId failed: {response.error_code!r}")
    return int(response.producer_id), int(response.producer_epoch)


def produce(conn: KafkaConnection, topic: str, partition: int, records: bytes, acks: int = -1) -> Any:
    """Produce v9 of one batch (or several) to one partition; returns its
    PartitionProduceResponse (error_code, base_offset, ...)."""
    from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

    request = ProduceRequest(
        transactional_id=None,
        acks=i16(acks),
        timeout=ms(10_000),
        topic_data=(
            TopicProduceData(
                name=TopicName(topic),
                partition_data=(PartitionProduceData(index=i32(partition), records=Records(records)),),
            ),
        ),
    )
    response = conn.request(request)
    return response.responses[0].partition_responses[0]


def fetch(
    conn: KafkaConnection,
    topic: str,
    offsets: dict[int, int],
    *,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    max_bytes: int = 0x7FFFFFFF,
    partition_max_bytes: int = 1 << 20,
) -> dict[int, Any]:
    """Fetch v12 from {partition: offset} (in that order); returns {partition: PartitionData}."""
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

    request = FetchRequest(
        max_wait=ms(max_wait_ms),
        min_bytes=i32(min_bytes),
        max_bytes=i32(max_bytes),
        topics=(
            FetchTopic(
                topic=TopicName(topic),
                partitions=tuple(
                    FetchPartition(partition=i32(p), fetch_offset=i64(o), partition_max_bytes=i32(partition_max_bytes))
                    for p, o in offsets.items()
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    response = conn.request(request)
    return {p.partition_index: p for t in response.responses for p in t.partitions}


# --- fault injection ------------------------------------------------------------------------


class FaultProxy:
    """A TCP proxy in front of a broker, on its own event loop thread, that can cut a
    client's connection right after the broker answered a request of a given API: the
    request took effect but the client never sees the answer, so it retries.  This is
    how tests provoke real client retries without touching the broker.

    Clients must reach the broker only through the proxy: point the broker's advertised
    address at `proxy.port` (e.g. `broker.advertised = ("127.0.0.1", proxy.port)`)."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="fault-proxy")
        self.server: Any = None
        self.port = 0
        self.drops: dict[int, int] = {}  # api key -> responses still to drop
        self.dropped: list[int] = []  # api keys of the responses dropped so far
        self._tasks: set[Any] = set()

    def start(self) -> FaultProxy:
        self.thread.start()
        self.server = self._run(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = int(self.server.sockets[0].getsockname()[1])
        return self

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def drop_responses(self, api_key: int, count: int = 1) -> None:
        """Cut the connection instead of forwarding the next `count` responses to `api_key`."""

        async def arm() -> None:
            self.drops[api_key] = self.drops.get(api_key, 0) + count

        self._run(arm())

    async def _handle(self, client_reader: Any, client_writer: Any) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        broker_writer = None
        try:
            broker_reader, broker_writer = await asyncio.open_connection(*self.target)
            pending: dict[int, int] = {}  # correlation id -> api key

            async def upstream() -> None:
                while True:
                    size = await client_reader.readexactly(4)
                    body = await client_reader.readexactly(_I32.unpack(size)[0])
                    api_key, _, correlation_id = struct.unpack_from(">hhi", body, 0)
                    pending[correlation_id] = api_key
                    broker_writer.write(size + body)
                    await broker_writer.drain()

            async def downstream() -> None:
                while True:
                    size = await broker_reader.readexactly(4)
                    body = await broker_reader.readexactly(_I32.unpack(size)[0])
                    api_key = pending.pop(_I32.unpack_from(body, 0)[0], -1)
                    if self.drops.get(api_key, 0) > 0:
                        self.drops[api_key] -= 1
                        self.dropped.append(api_key)
                        return  # cut: the client loses this response and any in flight
                    client_writer.write(size + body)
                    await client_writer.drain()

            pumps = [asyncio.ensure_future(upstream()), asyncio.ensure_future(downstream())]
            try:
                await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for pump in pumps:
                    pump.cancel()
                await asyncio.gather(*pumps, return_exceptions=True)
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            for writer in (client_writer, broker_writer):
                if writer is not None:
                    writer.close()
            self._tasks.discard(task)

    def close(self) -> None:
        async def shutdown() -> None:
            self.server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
            await self.server.wait_closed()

        if self.server is not None:
            self._run(shutdown())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
