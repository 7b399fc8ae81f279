"""Raw Kafka wire-protocol client for tests that must control every byte a client sends:
idempotent sequence numbers, malformed frames, corrupt batches, unsupported versions.

Requests and responses are `kio` entities; framing is done here, over a plain blocking
socket.  A request entity carries its own API key and version (`__api_key__`,
`__version__`), so the header and the response type follow from it.

A request frame is int32 size + request header (v2 for flexible versions, v1 otherwise)
+ body.  A response frame is int32 size + int32 correlation id + (one tagged-fields byte
when the response version is flexible, except ApiVersions, whose responses always use
header v0) + body.

    with connect(broker.bootstrap) as conn:
        pid, epoch = conn.init_producer_id()
        conn.produce("topic", 0, batch([b"v"], producer_id=pid, producer_epoch=epoch, base_sequence=0))

`FaultProxy` sits between a client and the broker and cuts connections on demand.
"""

from __future__ import annotations

import asyncio
import datetime
import io
import socket
import struct
import threading
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from kio.index import load_response_schema
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.create_topics.v7.request import CreatableTopic, CreatableTopicConfig, CreateTopicsRequest
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.types import BrokerId, TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records, i8, i16, i32, i32Timedelta, i64

from broker.protocol.batch import BatchHeader, split_batches, validate_batch
from broker.protocol.records import Record, build_batch, decode_records

_I32 = struct.Struct(">i")
API_VERSIONS_KEY = 18
CLIENT_ID = "streamshop-tests"
# How long a read may wait for the broker: a guard against a hang, never the thing measured, so
# generous enough for a loaded machine (a test that expects no answer uses `wait_closed`).
DEFAULT_TIMEOUT = 60.0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def ms(value: int) -> i32Timedelta:
    """kio int32 timedelta fields (timeouts) from milliseconds."""
    return i32Timedelta.parse(datetime.timedelta(milliseconds=value))


def parse_bootstrap(bootstrap: str) -> tuple[str, int]:
    host, port = bootstrap.rsplit(":", 1)
    return host, int(port)


# --- framing --------------------------------------------------------------------------------


def header_bytes(
    api_key: int, version: int, correlation_id: int, *, flexible: bool, client_id: str | None = CLIENT_ID
) -> bytes:
    """A request header (v2 for flexible request versions, v1 otherwise), built by kio.
    Any API key and version can be given, so headers of unknown APIs can be sent too."""
    fields: dict[str, Any] = {
        "request_api_key": i16(api_key),
        "request_api_version": i16(version),
        "correlation_id": i32(correlation_id),
        "client_id": client_id,
    }
    header: Any = RequestHeaderV2(**fields) if flexible else RequestHeaderV1(**fields)
    buf = io.BytesIO()
    entity_writer(type(header))(buf, header)
    return buf.getvalue()


def body_bytes(request: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(request))(buf, request)
    return buf.getvalue()


def frame(payload: bytes) -> bytes:
    """`payload` with its int32 size prefix."""
    return _I32.pack(len(payload)) + payload


def encode_request(request: Any, correlation_id: int, *, client_id: str | None = CLIENT_ID) -> bytes:
    """A size-prefixed request frame: header (v1 classic, v2 flexible) plus the body."""
    cls = type(request)
    head = header_bytes(
        int(cls.__api_key__), int(cls.__version__), correlation_id, flexible=bool(cls.__flexible__), client_id=client_id
    )
    return frame(head + body_bytes(request))


def decode_response(api_key: int, version: int, payload: bytes) -> tuple[int, Any]:
    """(correlation id, response entity) of one response frame without its size prefix.

    Flexible responses use header v1 (one tagged-fields byte after the correlation id),
    except ApiVersions, which always answers with header v0.  Asserts the header has no
    tagged fields and the body is consumed exactly."""
    cls: Any = load_response_schema(api_key, version)
    (correlation_id,) = _I32.unpack_from(payload, 0)
    pos = 4
    if cls.__flexible__ and api_key != API_VERSIONS_KEY:
        assert payload[pos] == 0, "unexpected tagged fields in the response header"
        pos += 1
    entity, size = entity_reader(cls)(payload, pos)
    assert pos + size == len(payload), f"{len(payload) - pos - size} trailing bytes after {cls.__name__}"
    return correlation_id, entity


# --- record batches -------------------------------------------------------------------------


def batch(
    values: Sequence[bytes | None],
    *,
    keys: Sequence[bytes | None] | None = None,
    timestamp: int | None = None,
    compression: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """A magic-v2 batch as a client would send it (base offset 0)."""
    ts = now_ms() if timestamp is None else timestamp
    keys = keys if keys is not None else [None] * len(values)
    records = [Record(i, ts, k, v) for i, (k, v) in enumerate(zip(keys, values, strict=True))]
    return build_batch(
        records,
        compression=compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )


PRODUCE_V9 = (0, 9)


def create_topics_request(name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> CreateTopicsRequest:
    """CreateTopics v7 of one topic, the broker's default replication."""
    return CreateTopicsRequest(
        topics=(
            CreatableTopic(
                name=TopicName(name),
                num_partitions=i32(partitions),
                replication_factor=i16(-1),
                assignments=(),
                configs=tuple(CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()),
            ),
        ),
        timeout=ms(10_000),
    )


def produce_request(topic: str, partition: int, records: bytes | None, *, acks: int = -1) -> ProduceRequest:
    """A Produce v9 request of one batch (or several) to one partition."""
    return ProduceRequest(
        transactional_id=None,
        acks=i16(acks),
        timeout=ms(10_000),
        topic_data=(
            TopicProduceData(
                name=TopicName(topic),
                partition_data=(
                    PartitionProduceData(index=i32(partition), records=None if records is None else Records(records)),
                ),
            ),
        ),
    )


# --- the connection -------------------------------------------------------------------------


class ConnectionClosed(ConnectionError):
    """The broker closed (or reset) the connection."""


class KafkaConnection:
    """One blocking TCP connection to a broker; requests are answered in order.  Use as a
    context manager so the socket is closed."""

    def __init__(self, host: str, port: int, timeout: float = DEFAULT_TIMEOUT, *, source: str | None = None) -> None:
        # `source`: the local address to connect from (any of 127/8 on loopback: another client host).
        self.sock = socket.create_connection(
            (host, port), timeout=timeout, source_address=(source, 0) if source else None
        )
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self._next_correlation = 1

    def __enter__(self) -> KafkaConnection:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def correlation_id(self) -> int:
        """The next correlation id of this connection (1, 2, ...)."""
        cid = self._next_correlation
        self._next_correlation += 1
        return cid

    # --- raw bytes ----------------------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _recv_exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            try:
                chunk = self.sock.recv(n - len(out))
            except ConnectionResetError as e:
                raise ConnectionClosed("connection reset by the broker") from e
            if not chunk:
                raise ConnectionClosed(f"connection closed after {len(out)} of {n} bytes")
            out += chunk
        return bytes(out)

    def recv_frame(self) -> bytes:
        """The next response frame's payload (correlation id onwards).  Raises
        ConnectionClosed when the broker closes the connection."""
        (size,) = _I32.unpack(self._recv_exactly(4))
        assert size >= 4, f"response frame of {size} bytes"
        return self._recv_exactly(size)

    def wait_closed(self, timeout: float = 10.0) -> bytes:
        """Block until the broker closes the connection; returns whatever bytes it sent
        before closing (callers usually assert that is nothing).  Fails on timeout."""
        received = bytearray()
        deadline = time.monotonic() + timeout
        self.sock.settimeout(0.5)
        try:
            while True:
                try:
                    chunk = self.sock.recv(65536)
                except TimeoutError:
                    if time.monotonic() > deadline:
                        raise AssertionError(f"broker did not close the connection within {timeout}s") from None
                    continue
                except ConnectionResetError:
                    return bytes(received)
                if not chunk:
                    return bytes(received)
                received += chunk
        finally:
            self.sock.settimeout(self.timeout)

    # --- requests -----------------------------------------------------------------------

    def send(self, request: Any, *, client_id: str | None = CLIENT_ID) -> int:
        """Send one request without reading its response; returns its correlation id."""
        cid = self.correlation_id()
        self.send_raw(encode_request(request, cid, client_id=client_id))
        return cid

    def receive(self, api_key: int, version: int, correlation_id: int) -> Any:
        """Read the next response, which must answer `correlation_id`."""
        got, response = decode_response(api_key, version, self.recv_frame())
        assert got == correlation_id, f"correlation id {got}, expected {correlation_id}"
        return response

    def request(self, request: Any) -> Any:
        """Send one request and return the decoded response entity."""
        cls = type(request)
        cid = self.send(request)
        return self.receive(int(cls.__api_key__), int(cls.__version__), cid)

    # --- common requests ----------------------------------------------------------------

    def api_versions(self) -> Any:
        return self.request(ApiVersionsRequest(client_software_name="raw", client_software_version="1"))

    def create_topic(self, name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> Any:
        return self.request(create_topics_request(name, partitions, configs)).topics[0]

    def init_producer_id(self) -> tuple[int, int]:
        """(producer id, epoch) for an idempotent, non-transactional producer."""
        response = self.request(InitProducerIdRequest(transactional_id=None, transaction_timeout=ms(60_000)))
        if response.error_code != 0:
            raise AssertionError(f"InitProducerId failed: {response.error_code!r}")
        return int(response.producer_id), int(response.producer_epoch)

    def produce(self, topic: str, partition: int, records: bytes | None, *, acks: int = -1) -> Any:
        """Produce v9 of one batch (or several) to one partition; returns its
        PartitionProduceResponse (error_code, base_offset, ...), or None for acks=0
        (there is no response to read)."""
        request = produce_request(topic, partition, records, acks=acks)
        if acks == 0:
            self.send(request)
            return None
        response = self.request(request)
        return response.responses[0].partition_responses[0]

    def _fetch(
        self,
        topic: str,
        offsets: dict[int, int],
        *,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        partition_max_bytes: int,
        isolation: int = 0,
    ) -> Any:
        """The whole Fetch v12 response for {partition: offset} (in that order)."""
        request = FetchRequest(
            isolation_level=i8(isolation),
            max_wait=ms(max_wait_ms),
            min_bytes=i32(min_bytes),
            max_bytes=i32(max_bytes),
            topics=(
                FetchTopic(
                    topic=TopicName(topic),
                    partitions=tuple(
                        FetchPartition(
                            partition=i32(p), fetch_offset=i64(o), partition_max_bytes=i32(partition_max_bytes)
                        )
                        for p, o in offsets.items()
                    ),
                ),
            ),
            forgotten_topics_data=(),
        )
        return self.request(request)

    def fetch(
        self,
        topic: str,
        offsets: dict[int, int],
        *,
        max_wait_ms: int = 0,
        min_bytes: int = 1,
        max_bytes: int = 0x7FFFFFFF,
        partition_max_bytes: int = 1 << 20,
        isolation: int = 0,
    ) -> dict[int, Any]:
        """Fetch v12 from {partition: offset} (in that order); returns {partition: PartitionData}.
        `isolation` 1 is read_committed."""
        response = self._fetch(
            topic,
            offsets,
            max_wait_ms=max_wait_ms,
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            partition_max_bytes=partition_max_bytes,
            isolation=isolation,
        )
        return {p.partition_index: p for t in response.responses for p in t.partitions}

    def fetch_partition(self, topic: str, partition: int, offset: int, *, max_bytes: int = 16 << 20) -> Any:
        """Fetch v12 of one partition without waiting; asserts the request-level error
        code is none and returns the partition response."""
        response = self._fetch(
            topic, {partition: offset}, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes, partition_max_bytes=max_bytes
        )
        assert response.error_code.value == 0, response.error_code
        return response.responses[0].partitions[0]

    def list_offsets(self, topic: str, partition: int, timestamp: int, *, isolation: int = 0) -> Any:
        """ListOffsets v7 of one partition (timestamp -1 latest, -2 earliest; isolation 1 is
        read_committed)."""
        response = self.request(
            ListOffsetsRequest(
                replica_id=BrokerId(i32(-1)),
                isolation_level=i8(isolation),
                topics=(
                    ListOffsetsTopic(
                        name=TopicName(topic),
                        partitions=(ListOffsetsPartition(partition_index=i32(partition), timestamp=i64(timestamp)),),
                    ),
                ),
            )
        )
        return response.topics[0].partitions[0]

    def metadata(self, topics: list[str] | None, *, allow_auto_create: bool = False) -> Any:
        """Metadata v12 of `topics` (None: all topics)."""
        return self.request(
            MetadataRequest(
                topics=None
                if topics is None
                else tuple(MetadataRequestTopic(topic_id=None, name=TopicName(t)) for t in topics),
                allow_auto_topic_creation=allow_auto_create,
                include_topic_authorized_operations=False,
            )
        )

    def read_all(self, topic: str, partition: int = 0) -> list[Record]:
        """Every record from offset 0 to the high watermark, decoded (CRC checked)."""
        return [r for _, records in self.read_batches(topic, partition) for r in records]

    def read_batches(self, topic: str, partition: int = 0) -> list[tuple[BatchHeader, list[Record]]]:
        """Every batch from offset 0 to the high watermark with its records, decoded (CRC
        checked); records below a batch's fetch offset are left out."""
        out: list[tuple[BatchHeader, list[Record]]] = []
        offset = 0
        while True:
            part = self.fetch_partition(topic, partition, offset)
            assert part.error_code.value == 0, part.error_code
            if offset >= part.high_watermark:
                return out
            assert part.records, f"no records at {offset} below the high watermark {part.high_watermark}"
            for raw in split_batches(part.records):
                validate_batch(raw)
                header, records = decode_records(raw)
                out.append((header, [r for r in records if r.offset >= offset]))
                offset = header.last_offset + 1


def connect(bootstrap: str, timeout: float = DEFAULT_TIMEOUT) -> KafkaConnection:
    """A connection to the broker at "host:port"."""
    return KafkaConnection(*parse_bootstrap(bootstrap), timeout=timeout)


def send_request(host: str, port: int, request: Any, timeout: float = DEFAULT_TIMEOUT) -> Any:
    """Send `request` (a kio request entity, which fixes the API version) on a new
    connection and return the response entity."""
    with KafkaConnection(host, port, timeout) as conn:
        return conn.request(request)


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
