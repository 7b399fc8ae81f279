"""The bundled broker against frames it cannot parse: frames too small, garbage, cut mid-frame or
half-closed, larger than `socket.request.max.bytes`, unknown API keys and unsupported versions
(ApiVersions too new answered in v0): only that connection is closed and counted.

Each test seeds a topic with records, opens a bystander connection, sends the bad input
on its own connection, then `assert_survived` checks: the bystander connection still gets
answers, a fresh connection can produce, and every record stored before is still readable.
"""

from __future__ import annotations

import contextlib
import datetime
import random
import socket
import struct
from collections.abc import Callable, Iterator

import pytest
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.serial import entity_reader

from tests.support.bad_input import TOPIC, Stored, assert_survived, seed
from tests.support.harness import ThreadBroker
from tests.support.kafka_wire import (
    batch,
    body_bytes,
    connect,
    decode_response,
    encode_request,
    frame,
    header_bytes,
)


@pytest.fixture
def small_requests(broker_factory: Callable[..., ThreadBroker]) -> Iterator[Stored]:
    """A broker whose socket.request.max.bytes is 10000."""
    s = seed(broker_factory(settings={"socket.request.max.bytes": "10000"}, name="small"))
    try:
        yield s
    finally:
        s.bystander.close()


def produce_v9_header(correlation_id: int = 1) -> bytes:
    return header_bytes(0, 9, correlation_id, flexible=True)


@pytest.mark.parametrize(
    ("size", "payload"),
    [
        (0, b""),
        (4, b"\x00\x12\x00\x00"),
        (7, b"\x00\x12\x00\x03\x00\x00\x00"),
        (-1, b""),
        (-(2**31), b""),
    ],
    ids=["zero", "four", "seven", "minus-one", "int32-min"],
)
def test_frame_smaller_than_a_request_header_closes_only_that_connection(
    stored: Stored, size: int, payload: bytes
) -> None:
    """A size prefix below 8 (no room for api key, version and correlation id) or
    negative closes that connection without a response and is counted."""
    before = stored.malformed_closes()
    with connect(stored.broker.bootstrap) as bad:
        bad.send_raw(struct.pack(">i", size) + payload)
        assert bad.wait_closed() == b""
    assert stored.malformed_closes() == before + 1
    assert_survived(stored)


def _garbage_frames() -> dict[str, bytes]:
    rng = random.Random(7)
    produce_body_garbage = produce_v9_header() + bytes([0xFF]) * 20
    metadata = MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    return {
        # api key 0x7fff does not exist
        "random-bytes": b"\x7f\xff" + rng.randbytes(30),
        # Produce v9, client id length says 100 bytes, 2 follow
        "client-id-past-frame": struct.pack(">hhih", 0, 9, 1, 100) + b"ab",
        # Produce v9 (flexible), null client id, then no tagged-fields byte
        "no-tagged-fields": struct.pack(">hhih", 0, 9, 1, -1),
        # flexible header announcing 5 tagged fields that are not there
        "tagged-fields-past-frame": struct.pack(">hhih", 3, 12, 1, -1) + b"\x05\x01",
        # a valid header followed by a body that does not decode
        "garbage-body": produce_body_garbage,
        # a Metadata body cut short
        "truncated-body": header_bytes(3, 12, 1, flexible=True) + body_bytes(metadata)[:1],
    }


@pytest.mark.parametrize("name", list(_garbage_frames()))
def test_garbage_request_closes_only_that_connection(stored: Stored, name: str) -> None:
    """A whole frame whose header or body cannot be parsed closes that connection with
    no response; the broker goes on serving everyone else."""
    before = stored.malformed_closes()
    with connect(stored.broker.bootstrap) as bad:
        bad.send_raw(frame(_garbage_frames()[name]))
        assert bad.wait_closed() == b""
    assert stored.malformed_closes() == before + 1
    assert_survived(stored)


def test_requests_before_a_garbage_frame_are_answered_then_the_connection_closes(stored: Stored) -> None:
    """Pipelined: a produce and an ApiVersions sent before a garbage frame are executed and
    answered in order; only then is the connection closed."""
    with connect(stored.broker.bootstrap) as bad:
        value = b"pipelined-before-garbage"
        produce = ProduceRequest(
            acks=-1,
            timeout=datetime.timedelta(seconds=10),
            topic_data=(
                TopicProduceData(name=TOPIC, partition_data=(PartitionProduceData(index=0, records=batch([value])),)),
            ),
        )
        versions = ApiVersionsRequest(client_software_name="raw", client_software_version="1")
        bad.send_raw(encode_request(produce, 1) + encode_request(versions, 2) + frame(b"\x7f\xff" + bytes(10)))
        received = bad.wait_closed()
    frames = []
    pos = 0
    while pos < len(received):
        (size,) = struct.unpack_from(">i", received, pos)
        frames.append(received[pos + 4 : pos + 4 + size])
        pos += 4 + size
    assert pos == len(received)
    assert len(frames) == 2
    cid, produced = decode_response(0, 9, frames[0])
    assert cid == 1
    partition = produced.responses[0].partition_responses[0]
    assert partition.error_code == ErrorCode.none
    assert partition.base_offset == len(stored.values)
    stored.values.append(value)
    cid, answered = decode_response(18, 3, frames[1])
    assert cid == 2
    assert answered.error_code == ErrorCode.none
    assert_survived(stored)


@pytest.mark.parametrize("sent", [2, 4, 40, -1], ids=["half-size-prefix", "size-only", "partial-header", "all-but-100"])
def test_connection_closed_mid_frame_loses_nothing(stored: Stored, sent: int) -> None:
    """A client that disconnects in the middle of a frame (size prefix, header or body)
    leaves the broker serving and the log intact; the half-sent produce is not applied.
    In the last case the whole Produce request with a valid batch is sent, but the size
    prefix promised 100 more bytes."""
    request = ProduceRequest(
        acks=-1,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            TopicProduceData(
                name=TOPIC, partition_data=(PartitionProduceData(index=0, records=batch([b"never-complete"] * 5)),)
            ),
        ),
    )
    whole = encode_request(request, 1)
    promised = struct.pack(">i", len(whole) - 4 + 100) + whole[4:]
    data = promised if sent == -1 else promised[:sent]
    with connect(stored.broker.bootstrap) as bad:
        bad.send_raw(data)
    assert_survived(stored)


def test_half_closed_connection_mid_frame_is_closed_by_the_broker(stored: Stored) -> None:
    """A client that sends part of a frame and then shuts down its sending side gets the
    connection closed by the broker (no response, no hang)."""
    with connect(stored.broker.bootstrap) as bad:
        bad.send_raw(struct.pack(">i", 200) + produce_v9_header() + b"\x00" * 10)
        bad.sock.shutdown(socket.SHUT_WR)
        assert bad.wait_closed() == b""
    assert_survived(stored)


def test_frame_larger_than_socket_request_max_bytes_closes_the_connection(small_requests: Stored) -> None:
    """A size prefix above socket.request.max.bytes closes the connection before the body
    is read (Kafka's InvalidReceiveException); the broker keeps serving."""
    before = small_requests.malformed_closes()
    with connect(small_requests.broker.bootstrap) as bad:
        bad.send_raw(struct.pack(">i", 10_001))
        assert bad.wait_closed() == b""
    assert small_requests.malformed_closes() == before + 1
    assert_survived(small_requests)


def _produce_frame_of_size(payload_size: int, value_byte: bytes = b"x") -> bytes:
    """A Produce v9 request frame whose payload (after the size prefix) is exactly `payload_size`."""

    def make(value_len: int) -> bytes:
        request = ProduceRequest(
            acks=-1,
            timeout=datetime.timedelta(seconds=10),
            topic_data=(
                TopicProduceData(
                    name=TOPIC,
                    partition_data=(PartitionProduceData(index=0, records=batch([value_byte * value_len])),),
                ),
            ),
        )
        return encode_request(request, 1)

    length = payload_size
    for _ in range(10):
        data = make(length)
        excess = len(data) - 4 - payload_size
        if excess == 0:
            return data
        length -= excess
    raise AssertionError("could not size the request")


def test_produce_request_larger_than_socket_request_max_bytes_closes_and_stores_nothing(
    small_requests: Stored,
) -> None:
    """A complete, valid Produce request of 10001 bytes exceeds the 10000-byte limit: the
    connection is closed and none of its records is stored; one of exactly 10000 bytes is
    accepted."""
    with connect(small_requests.broker.bootstrap) as bad:
        # The broker may close before the whole request is sent.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            bad.send_raw(_produce_frame_of_size(10_001, b"n"))
        assert bad.wait_closed() == b""
    assert_survived(small_requests)
    with connect(small_requests.broker.bootstrap) as ok:
        ok.send_raw(_produce_frame_of_size(10_000, b"y"))
        _, response = decode_response(0, 9, ok.recv_frame())
        partition = response.responses[0].partition_responses[0]
        assert partition.error_code == ErrorCode.none
        assert partition.base_offset == len(small_requests.values)
        records = ok.read_all(TOPIC)
    assert {r.value[:1] for r in records if r.value and len(r.value) > 100} == {b"y"}
    small_requests.values.append(records[-1].value or b"")
    assert_survived(small_requests)


# --- API keys and versions -----------------------------------------------------------


@pytest.mark.parametrize("api_key", [1000, 32767, -1], ids=["1000", "32767", "minus-one"])
def test_unknown_api_key_closes_the_connection(stored: Stored, api_key: int) -> None:
    """An API key the broker does not implement: no response, connection closed."""
    before = stored.malformed_closes()
    with connect(stored.broker.bootstrap) as bad:
        bad.send_raw(frame(header_bytes(api_key, 0, 1, flexible=False)))
        assert bad.wait_closed() == b""
    assert stored.malformed_closes() == before + 1
    assert_survived(stored)


@pytest.mark.parametrize(
    ("api_key", "version"),
    [(0, 2), (0, 14), (1, 3), (1, 99), (3, 14), (19, 1), (37, 4), (44, 2)],
    ids=[
        "produce-v2",
        "produce-v14",
        "fetch-v3",
        "fetch-v99",
        "metadata-v14",
        "create-topics-v1",
        "create-partitions-v4",
        "incremental-alter-configs-v2",
    ],
)
def test_unsupported_version_of_known_api_closes_the_connection(stored: Stored, api_key: int, version: int) -> None:
    """A version outside the advertised range of an implemented API (other than
    ApiVersions): Kafka closes the connection; so does the broker."""
    before = stored.malformed_closes()
    with connect(stored.broker.bootstrap) as bad:
        advertised = {a.api_key: (a.min_version, a.max_version) for a in bad.api_versions().api_keys}
        low, high = advertised[api_key]
        assert not low <= version <= high, "the case must use a version the broker does not advertise"
        bad.send_raw(frame(header_bytes(api_key, version, 7, flexible=True) + b"\x00" * 16))
        assert bad.wait_closed() == b""
    assert stored.malformed_closes() == before + 1
    assert_survived(stored)


@pytest.mark.parametrize("version", [5, 127], ids=["v5", "v127"])
def test_api_versions_too_new_is_answered_in_v0_with_unsupported_version_and_the_api_list(
    stored: Stored, version: int
) -> None:
    """ApiVersions newer than the broker's: the response is ApiVersionsResponse v0 (header
    v0, no tagged fields) with UNSUPPORTED_VERSION and the full API list, and the
    connection stays open so the client can retry with a version it finds there."""
    with connect(stored.broker.bootstrap) as client:
        # The body is in some future format the broker cannot know; it must not be parsed.
        client.send_raw(frame(header_bytes(18, version, 42, flexible=True) + b"\x07future\x021\x00\xde\xad"))
        payload = client.recv_frame()
        (cid,) = struct.unpack_from(">i", payload, 0)
        assert cid == 42
        response, size = entity_reader(ApiVersionsResponseV0)(payload, 4)
        assert 4 + size == len(payload), "the response must be exactly a v0 body after header v0"
        assert response.error_code == ErrorCode.unsupported_version
        listed = {int(a.api_key): (int(a.min_version), int(a.max_version)) for a in response.api_keys}
        assert listed[18] == (0, 4)
        assert {0, 1, 2, 3, 19, 32, 37, 44} <= set(listed)
        # The same connection then negotiates normally, and the lists agree.
        retried = client.api_versions()
        assert retried.error_code == ErrorCode.none
        assert {int(a.api_key): (int(a.min_version), int(a.max_version)) for a in retried.api_keys} == listed
    assert_survived(stored)
