"""A bare Kafka-protocol client over a blocking socket, for tests that must send bytes
no real client would: malformed frames, corrupt batches, unsupported versions.

Requests are kio entities; the frame is int32 size + request header + body.  Responses
are int32 size + int32 correlation id + (one tagged-fields byte when the response version
is flexible, except ApiVersions, whose responses always use header v0) + body.
"""

from __future__ import annotations

import datetime
import io
import socket
import struct
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from kio.index import load_response_schema
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.create_topics.v7.request import CreatableTopic, CreatableTopicConfig, CreateTopicsRequest
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer

from broker.protocol.batch import split_batches, validate_batch
from broker.protocol.records import Record, build_batch, decode_records

API_VERSIONS_KEY = 18
_I32 = struct.Struct(">i")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def header_bytes(
    api_key: int, version: int, correlation_id: int, *, flexible: bool, client_id: str | None = "raw"
) -> bytes:
    """A request header (v2 for flexible request versions, v1 otherwise), built by kio."""
    buf = io.BytesIO()
    if flexible:
        entity_writer(RequestHeaderV2)(
            buf,
            RequestHeaderV2(
                request_api_key=api_key, request_api_version=version, correlation_id=correlation_id, client_id=client_id
            ),
        )
    else:
        entity_writer(RequestHeaderV1)(
            buf,
            RequestHeaderV1(
                request_api_key=api_key, request_api_version=version, correlation_id=correlation_id, client_id=client_id
            ),
        )
    return buf.getvalue()


def body_bytes(request: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(request))(buf, request)
    return buf.getvalue()


def frame(payload: bytes) -> bytes:
    return _I32.pack(len(payload)) + payload


def request_frame(request: Any, correlation_id: int, *, client_id: str | None = "raw") -> bytes:
    cls = type(request)
    head = header_bytes(
        int(cls.__api_key__), int(cls.__version__), correlation_id, flexible=bool(cls.__flexible__), client_id=client_id
    )
    return frame(head + body_bytes(request))


def decode_response(api_key: int, version: int, payload: bytes) -> tuple[int, Any]:
    """(correlation id, response entity) of one response frame without its size prefix.
    Asserts the body is consumed exactly."""
    cls = load_response_schema(api_key, version)
    (correlation_id,) = _I32.unpack_from(payload, 0)
    pos = 4
    if cls.__flexible__ and api_key != API_VERSIONS_KEY:
        assert payload[pos] == 0, "unexpected tagged fields in the response header"
        pos += 1
    entity, size = entity_reader(cls)(payload, pos)
    assert pos + size == len(payload), f"{len(payload) - pos - size} trailing bytes after {cls.__name__}"
    return correlation_id, entity


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


class ConnectionClosed(Exception):
    """The broker closed the connection."""


class RawClient:
    """One blocking connection.  Use as a context manager so the socket is closed."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 15.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self._next_correlation = 1

    def __enter__(self) -> RawClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def correlation_id(self) -> int:
        cid = self._next_correlation
        self._next_correlation += 1
        return cid

    # --- raw bytes -------------------------------------------------------------------

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
        """One response frame's payload (correlation id onwards)."""
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

    # --- requests --------------------------------------------------------------------

    def send(self, request: Any, *, client_id: str | None = "raw") -> int:
        cid = self.correlation_id()
        self.send_raw(request_frame(request, cid, client_id=client_id))
        return cid

    def receive(self, api_key: int, version: int, correlation_id: int) -> Any:
        got, response = decode_response(api_key, version, self.recv_frame())
        assert got == correlation_id, f"correlation id {got}, expected {correlation_id}"
        return response

    def request(self, request: Any) -> Any:
        cls = type(request)
        cid = self.send(request)
        return self.receive(int(cls.__api_key__), int(cls.__version__), cid)

    # --- common requests -------------------------------------------------------------

    def api_versions(self) -> Any:
        return self.request(ApiVersionsRequest(client_software_name="raw", client_software_version="1"))

    def create_topic(self, name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> Any:
        response = self.request(
            CreateTopicsRequest(
                topics=(
                    CreatableTopic(
                        name=name,
                        num_partitions=partitions,
                        replication_factor=-1,
                        assignments=(),
                        configs=tuple(CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()),
                    ),
                ),
                timeout=datetime.timedelta(seconds=10),
            )
        )
        return response.topics[0]

    def produce(self, topic: str, partition: int, records: bytes | None, *, acks: int = -1) -> Any:
        """Produce v9; returns the partition response (None for acks=0: nothing is read)."""
        request = ProduceRequest(
            acks=acks,
            timeout=datetime.timedelta(seconds=10),
            topic_data=(
                TopicProduceData(name=topic, partition_data=(PartitionProduceData(index=partition, records=records),)),
            ),
        )
        if acks == 0:
            self.send(request)
            return None
        response = self.request(request)
        return response.responses[0].partition_responses[0]

    def fetch(self, topic: str, partition: int, offset: int, *, max_bytes: int = 16 << 20) -> Any:
        """Fetch v12 without waiting; returns the partition response."""
        response = self.request(
            FetchRequest(
                max_wait=datetime.timedelta(0),
                min_bytes=0,
                max_bytes=max_bytes,
                topics=(
                    FetchTopic(
                        topic=topic,
                        partitions=(
                            FetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=max_bytes),
                        ),
                    ),
                ),
                forgotten_topics_data=(),
            )
        )
        assert response.error_code.value == 0, response.error_code
        return response.responses[0].partitions[0]

    def list_offsets(self, topic: str, partition: int, timestamp: int) -> Any:
        response = self.request(
            ListOffsetsRequest(
                replica_id=-1,
                isolation_level=0,
                topics=(
                    ListOffsetsTopic(
                        name=topic, partitions=(ListOffsetsPartition(partition_index=partition, timestamp=timestamp),)
                    ),
                ),
            )
        )
        return response.topics[0].partitions[0]

    def metadata(self, topics: list[str] | None, *, allow_auto_create: bool = False) -> Any:
        return self.request(
            MetadataRequest(
                topics=None if topics is None else tuple(MetadataRequestTopic(topic_id=None, name=t) for t in topics),
                allow_auto_topic_creation=allow_auto_create,
                include_topic_authorized_operations=False,
            )
        )

    def read_all(self, topic: str, partition: int = 0) -> list[Record]:
        """Every record from offset 0 to the high watermark, decoded (CRC checked)."""
        out: list[Record] = []
        offset = 0
        while True:
            part = self.fetch(topic, partition, offset)
            assert part.error_code.value == 0, part.error_code
            if offset >= part.high_watermark:
                return out
            assert part.records, f"no records at {offset} below the high watermark {part.high_watermark}"
            for raw in split_batches(part.records):
                validate_batch(raw)
                header, records = decode_records(raw)
                out.extend(r for r in records if r.offset >= offset)
                offset = header.last_offset + 1
