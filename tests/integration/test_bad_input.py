"""Bad input over raw sockets: every case gets the error code Kafka returns (or, for an
unparseable frame, that one connection is closed and counted), the broker keeps serving
other connections, and nothing already stored is lost.

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
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.create_partitions.v3.request import CreatePartitionsRequest, CreatePartitionsTopic
from kio.schema.create_topics.v7.request import CreatableTopic, CreatableTopicConfig, CreateTopicsRequest
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v13.request import FetchPartition as FetchPartitionV13
from kio.schema.fetch.v13.request import FetchRequest as FetchRequestV13
from kio.schema.fetch.v13.request import FetchTopic as FetchTopicV13
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.serial import entity_reader

from tests.support.harness import ThreadBroker
from tests.support.kafka_wire import (
    KafkaConnection,
    batch,
    body_bytes,
    connect,
    decode_response,
    encode_request,
    frame,
    header_bytes,
)

TOPIC = "stored"
SEED_BATCHES = 4
TOPIC_RESOURCE = 2
SET, APPEND = 0, 2


@dataclass
class Stored:
    """A broker with records already stored, and a connection opened before the bad input."""

    broker: ThreadBroker
    bystander: KafkaConnection
    values: list[bytes] = field(default_factory=list)

    def malformed_closes(self) -> float:
        value = self.broker.broker.metrics.registry.get_sample_value("streamshop_connections_closed_malformed_total")
        return float(value or 0.0)


def seed(broker: ThreadBroker) -> Stored:
    with connect(broker.bootstrap) as c:
        assert c.create_topic(TOPIC, 1).error_code == ErrorCode.none
        values = []
        for i in range(SEED_BATCHES):
            chunk = [f"seed-{i}-{j}".encode() for j in range(3)]
            result = c.produce(TOPIC, 0, batch(chunk))
            assert result.error_code == ErrorCode.none
            values += chunk
        assert [r.value for r in c.read_all(TOPIC)] == values
    return Stored(broker, connect(broker.bootstrap), values)


@pytest.fixture
def stored(broker: ThreadBroker) -> Iterator[Stored]:
    s = seed(broker)
    try:
        yield s
    finally:
        s.bystander.close()


@pytest.fixture
def small_requests(broker_factory: Callable[..., ThreadBroker]) -> Iterator[Stored]:
    """A broker whose socket.request.max.bytes is 10000."""
    s = seed(broker_factory(settings={"socket.request.max.bytes": "10000"}, name="small"))
    try:
        yield s
    finally:
        s.bystander.close()


def assert_survived(stored: Stored) -> None:
    """The broker still serves an old and a new connection, and lost nothing."""
    assert stored.bystander.api_versions().error_code == ErrorCode.none
    with connect(stored.broker.bootstrap) as fresh:
        assert fresh.api_versions().error_code == ErrorCode.none
        value = f"after-{len(stored.values)}".encode()
        result = fresh.produce(TOPIC, 0, batch([value]))
        assert result.error_code == ErrorCode.none
        assert result.base_offset == len(stored.values), "offsets moved: something was appended or lost"
        stored.values.append(value)
        assert [r.value for r in fresh.read_all(TOPIC)] == stored.values
        assert [r.offset for r in fresh.read_all(TOPIC)] == list(range(len(stored.values)))
    # The old connection reads the same thing.
    assert [r.value for r in stored.bystander.read_all(TOPIC)] == stored.values


def flip(data: bytes, position: int, mask: int = 0x01) -> bytes:
    out = bytearray(data)
    out[position] ^= mask
    return bytes(out)


def set_byte(data: bytes, position: int, value: int) -> bytes:
    out = bytearray(data)
    out[position] = value
    return bytes(out)


def batch_of_size(size: int, rng: random.Random) -> tuple[bytes, bytes]:
    """A one-record batch of exactly `size` bytes (incompressible value) and its value."""
    value_len = size - len(batch([b""]))
    for _ in range(5):
        value = rng.randbytes(value_len)
        data = batch([value])
        if len(data) == size:
            return data, value
        value_len -= len(data) - size
    raise AssertionError(f"cannot build a batch of {size} bytes")


def produce_v9_header(correlation_id: int = 1) -> bytes:
    return header_bytes(0, 9, correlation_id, flexible=True)


# --- framing -------------------------------------------------------------------------


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


# --- record batches ------------------------------------------------------------------

# Positions inside the CRC-covered region (21..end) of a batch: attributes, last offset
# delta, base timestamp, producer id, records count, and the record bytes; and the CRC
# field itself.
CRC_POSITIONS = {
    "crc": 17,
    "attributes": 22,
    "last-offset-delta": 26,
    "base-timestamp": 34,
    "producer-id": 50,
    "records-count": 60,
    "record-body": -1,
}


@pytest.mark.parametrize("where", list(CRC_POSITIONS))
@pytest.mark.parametrize("acks", [1, -1])
def test_batch_with_wrong_crc_is_rejected_with_corrupt_message(stored: Stored, where: str, acks: int) -> None:
    """A batch whose CRC32C does not match its bytes gets CORRUPT_MESSAGE (2) and is not
    stored; the connection stays usable."""
    good = batch([b"will-be-corrupted", b"second"])
    bad_batch = flip(good, CRC_POSITIONS[where] % len(good), 0x10)
    with connect(stored.broker.bootstrap) as client:
        result = client.produce(TOPIC, 0, bad_batch, acks=acks)
        assert result.error_code == ErrorCode.corrupt_message
        assert result.base_offset == -1
        assert client.list_offsets(TOPIC, 0, -1).offset == len(stored.values)
    assert_survived(stored)


@pytest.mark.parametrize("magic", [0, 1, 3, 255])
def test_batch_with_wrong_magic_is_rejected_with_invalid_record(stored: Stored, magic: int) -> None:
    """Produce v3+ accepts only magic v2 batches: any other magic byte is INVALID_RECORD (87)."""
    bad_batch = set_byte(batch([b"wrong-magic"]), 16, magic)
    with connect(stored.broker.bootstrap) as client:
        result = client.produce(TOPIC, 0, bad_batch)
        assert result.error_code == ErrorCode.invalid_record
        assert client.list_offsets(TOPIC, 0, -1).offset == len(stored.values)
    assert_survived(stored)


def test_records_field_that_is_not_whole_batches_is_rejected_with_corrupt_message(stored: Stored) -> None:
    """A records field cut short (batch length pointing past the end) or shorter than a
    batch header is CORRUPT_MESSAGE; nothing is stored."""
    good = batch([b"truncated-in-request"] * 3)
    with connect(stored.broker.bootstrap) as client:
        for records in (good[:-5], good[:40], good + good[:30]):
            result = client.produce(TOPIC, 0, records)
            assert result.error_code == ErrorCode.corrupt_message
        assert client.list_offsets(TOPIC, 0, -1).offset == len(stored.values)
    assert_survived(stored)


def test_batch_larger_than_max_message_bytes_is_rejected_with_message_too_large(stored: Stored) -> None:
    """A batch above the topic's max.message.bytes gets MESSAGE_TOO_LARGE (10) and is not
    stored; one of exactly max.message.bytes is accepted."""
    limit = 1000
    rng = random.Random(1)
    with connect(stored.broker.bootstrap) as client:
        assert client.create_topic("limited", 1, {"max.message.bytes": str(limit)}).error_code == ErrorCode.none
        exact, exact_value = batch_of_size(limit, rng)
        too_big, _ = batch_of_size(limit + 1, rng)
        result = client.produce("limited", 0, too_big)
        assert result.error_code == ErrorCode.message_too_large
        assert client.list_offsets("limited", 0, -1).offset == 0
        result = client.produce("limited", 0, exact)
        assert result.error_code == ErrorCode.none
        assert [r.value for r in client.read_all("limited")] == [exact_value]
    assert_survived(stored)


def test_batch_larger_than_broker_message_max_bytes_is_rejected(broker_factory: Callable[..., ThreadBroker]) -> None:
    """The broker-wide default (message.max.bytes) applies to topics without an override."""
    s = seed(broker_factory(settings={"message.max.bytes": "2000"}, name="limited"))
    try:
        with connect(s.broker.bootstrap) as client:
            result = client.produce(TOPIC, 0, batch([b"z" * 3000]))
            assert result.error_code == ErrorCode.message_too_large
        assert_survived(s)
    finally:
        s.bystander.close()


# --- unknown topics and partitions ---------------------------------------------------


@pytest.mark.parametrize(("topic", "partition"), [("no-such-topic", 0), (TOPIC, 1), (TOPIC, 999), (TOPIC, -1)])
def test_produce_to_unknown_topic_or_partition_gets_unknown_topic_or_partition(
    stored: Stored, topic: str, partition: int
) -> None:
    """Produce to a topic or partition that does not exist: UNKNOWN_TOPIC_OR_PARTITION (3)."""
    with connect(stored.broker.bootstrap) as client:
        result = client.produce(topic, partition, batch([b"nowhere"]))
        assert result.error_code == ErrorCode.unknown_topic_or_partition
        assert result.base_offset == -1
    assert_survived(stored)


@pytest.mark.parametrize(("topic", "partition"), [("no-such-topic", 0), (TOPIC, 1), (TOPIC, -1)])
def test_fetch_from_unknown_topic_or_partition_gets_unknown_topic_or_partition(
    stored: Stored, topic: str, partition: int
) -> None:
    """Fetch (v12, by name) of a topic or partition that does not exist: error 3, no records."""
    with connect(stored.broker.bootstrap) as client:
        part = client.fetch_partition(topic, partition, 0)
        assert part.error_code == ErrorCode.unknown_topic_or_partition
        assert not part.records
    assert_survived(stored)


def test_fetch_by_unknown_topic_id_gets_unknown_topic_id(stored: Stored) -> None:
    """Fetch v13+ addresses topics by id: an unknown id is UNKNOWN_TOPIC_ID (100)."""
    with connect(stored.broker.bootstrap) as client:
        response = client.request(
            FetchRequestV13(
                max_wait=datetime.timedelta(0),
                min_bytes=0,
                topics=(
                    FetchTopicV13(
                        topic_id=uuid.uuid4(),
                        partitions=(FetchPartitionV13(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),),
                    ),
                ),
                forgotten_topics_data=(),
            )
        )
        assert response.responses[0].partitions[0].error_code == ErrorCode.unknown_topic_id
    assert_survived(stored)


@pytest.mark.parametrize(("topic", "partition"), [("no-such-topic", 0), (TOPIC, 3)])
@pytest.mark.parametrize("timestamp", [-1, -2, 0])
def test_list_offsets_of_unknown_topic_or_partition_gets_unknown_topic_or_partition(
    stored: Stored, topic: str, partition: int, timestamp: int
) -> None:
    """ListOffsets (latest, earliest, by time) for a missing topic or partition: error 3."""
    with connect(stored.broker.bootstrap) as client:
        part = client.list_offsets(topic, partition, timestamp)
        assert part.error_code == ErrorCode.unknown_topic_or_partition
        assert part.offset == -1
    assert_survived(stored)


def test_metadata_for_unknown_topic_without_auto_creation_gets_unknown_topic_or_partition(stored: Stored) -> None:
    """Metadata with allow_auto_topic_creation=false does not create the topic: error 3."""
    with connect(stored.broker.bootstrap) as client:
        response = client.metadata(["not-there"], allow_auto_create=False)
        assert [(t.name, t.error_code) for t in response.topics] == [
            ("not-there", ErrorCode.unknown_topic_or_partition)
        ]
        listed = {t.name for t in client.metadata(None).topics}
        assert "not-there" not in listed
    assert_survived(stored)


# --- topic names ---------------------------------------------------------------------

INVALID_NAMES = ["", ".", "..", "x" * 250, "has space", "slash/name", "colon:name", "umlaut-ü", "star*", "tab\tname"]


@pytest.mark.parametrize("name", INVALID_NAMES, ids=lambda n: repr(n)[:20])
def test_create_topics_with_invalid_name_gets_invalid_topic_exception(stored: Stored, name: str) -> None:
    """Kafka's topic-name rules (non-empty, not '.'/'..', at most 249 of [a-zA-Z0-9._-]):
    anything else is INVALID_TOPIC_EXCEPTION (17) and nothing is created."""
    with connect(stored.broker.bootstrap) as client:
        result = client.create_topic(name, 1)
        assert result.error_code == ErrorCode.invalid_topic_exception
        assert result.error_message
        assert {t.name for t in client.metadata(None).topics} == {TOPIC}
    assert_survived(stored)


def test_topic_name_of_249_allowed_characters_is_accepted(stored: Stored) -> None:
    """The boundary of the name rules: 249 characters of letters, digits, '.', '_', '-'."""
    name = ("aZ09._-" * 36)[:249]
    with connect(stored.broker.bootstrap) as client:
        assert client.create_topic(name, 1).error_code == ErrorCode.none
        assert name in {t.name for t in client.metadata(None).topics}
    assert_survived(stored)


@pytest.mark.parametrize("name", ["has space", "..", "x" * 250, "umlaut-ü"], ids=lambda n: repr(n)[:20])
def test_metadata_with_invalid_topic_name_gets_invalid_topic_exception_and_creates_nothing(
    stored: Stored, name: str
) -> None:
    """Metadata for an invalid name, even with auto-creation allowed, is
    INVALID_TOPIC_EXCEPTION (17) and creates nothing; valid names in the same request
    are still answered."""
    with connect(stored.broker.bootstrap) as client:
        response = client.request(
            MetadataRequest(
                topics=(
                    MetadataRequestTopic(topic_id=None, name=name),
                    MetadataRequestTopic(topic_id=None, name=TOPIC),
                ),
                allow_auto_topic_creation=True,
                include_topic_authorized_operations=False,
            )
        )
        by_name = {t.name: t for t in response.topics}
        assert by_name[name].error_code == ErrorCode.invalid_topic_exception
        assert by_name[name].partitions == ()
        assert by_name[TOPIC].error_code == ErrorCode.none
        assert len(by_name[TOPIC].partitions) == 1
        assert {t.name for t in client.metadata(None).topics} == {TOPIC}
    assert_survived(stored)


# --- configs -------------------------------------------------------------------------

INVALID_CONFIGS: list[dict[str, str | None]] = [
    {"no.such.config": "1"},
    {"retention.ms": "one week"},
    {"retention.ms": "-2"},
    {"segment.bytes": "1"},
    {"cleanup.policy": "forever"},
    {"message.timestamp.type": "WallClock"},
    {"compression.type": "brotli"},
    {"min.cleanable.dirty.ratio": "1.5"},
    {"max.message.bytes": "2147483648"},
    {"retention.ms": None},
]


@pytest.mark.parametrize("configs", INVALID_CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_create_topics_with_invalid_config_gets_invalid_config(stored: Stored, configs: dict[str, str | None]) -> None:
    """An unknown config name or an unparseable / out-of-range value is INVALID_CONFIG (40)
    and the topic is not created."""
    with connect(stored.broker.bootstrap) as client:
        response = client.request(
            CreateTopicsRequest(
                topics=(
                    CreatableTopic(
                        name="configured",
                        num_partitions=1,
                        replication_factor=-1,
                        assignments=(),
                        configs=tuple(CreatableTopicConfig(name=k, value=v) for k, v in configs.items()),
                    ),
                ),
                timeout=datetime.timedelta(seconds=10),
            )
        )
        assert response.topics[0].error_code == ErrorCode.invalid_config
        assert response.topics[0].error_message
        assert {t.name for t in client.metadata(None).topics} == {TOPIC}
    assert_survived(stored)


def _describe_topic_configs(client: KafkaConnection, topic: str) -> dict[str, str | None]:
    response = client.request(
        DescribeConfigsRequest(
            resources=(
                DescribeConfigsResource(resource_type=TOPIC_RESOURCE, resource_name=topic, configuration_keys=None),
            )
        )
    )
    result = response.results[0]
    assert result.error_code == ErrorCode.none
    return {c.name: c.value for c in result.configs}


@pytest.mark.parametrize(
    "ops",
    [
        [("no.such.config", SET, "1")],
        [("retention.ms", SET, "soon")],
        [("segment.bytes", SET, "0")],
        [("cleanup.policy", SET, "keep")],
        [("retention.ms", SET, None)],
        [("retention.ms", APPEND, "5")],
        [("retention.ms", SET, "1234"), ("segment.ms", SET, "never")],
    ],
    ids=["unknown", "not-int", "out-of-range", "bad-policy", "null-value", "append-non-list", "one-bad-of-two"],
)
def test_incremental_alter_configs_with_invalid_config_gets_invalid_config_and_changes_nothing(
    stored: Stored, ops: list[tuple[str, int, str | None]]
) -> None:
    """An invalid operation is INVALID_CONFIG (40); the resource is altered all or
    nothing, so a valid change next to an invalid one is not applied either."""
    with connect(stored.broker.bootstrap) as client:
        before = _describe_topic_configs(client, TOPIC)
        response = client.request(
            IncrementalAlterConfigsRequest(
                resources=(
                    AlterConfigsResource(
                        resource_type=TOPIC_RESOURCE,
                        resource_name=TOPIC,
                        configs=tuple(AlterableConfig(name=n, config_operation=op, value=v) for n, op, v in ops),
                    ),
                ),
                validate_only=False,
            )
        )
        assert response.responses[0].error_code == ErrorCode.invalid_config
        assert _describe_topic_configs(client, TOPIC) == before
    assert_survived(stored)


def test_incremental_alter_configs_of_unknown_topic_gets_unknown_topic_or_partition(stored: Stored) -> None:
    with connect(stored.broker.bootstrap) as client:
        response = client.request(
            IncrementalAlterConfigsRequest(
                resources=(
                    AlterConfigsResource(
                        resource_type=TOPIC_RESOURCE,
                        resource_name="no-such-topic",
                        configs=(AlterableConfig(name="retention.ms", config_operation=SET, value="1000"),),
                    ),
                ),
                validate_only=False,
            )
        )
        assert response.responses[0].error_code == ErrorCode.unknown_topic_or_partition
    assert_survived(stored)


# --- partitions and replication ------------------------------------------------------


def _create(client: KafkaConnection, name: str, partitions: int, replication: int) -> object:
    response = client.request(
        CreateTopicsRequest(
            topics=(
                CreatableTopic(
                    name=name, num_partitions=partitions, replication_factor=replication, assignments=(), configs=()
                ),
            ),
            timeout=datetime.timedelta(seconds=10),
        )
    )
    return response.topics[0]


@pytest.mark.parametrize("partitions", [0, -2, -1000])
def test_create_topics_with_invalid_partition_count_gets_invalid_partitions(stored: Stored, partitions: int) -> None:
    """A partition count of 0 or below -1 (-1 means the broker default) is INVALID_PARTITIONS (37)."""
    with connect(stored.broker.bootstrap) as client:
        result = _create(client, "counted", partitions, -1)
        assert result.error_code == ErrorCode.invalid_partitions  # type: ignore[attr-defined]
        assert {t.name for t in client.metadata(None).topics} == {TOPIC}
    assert_survived(stored)


@pytest.mark.parametrize("replication", [2, 3, 0, -2])
def test_create_topics_with_replication_factor_other_than_one_gets_invalid_replication_factor(
    stored: Stored, replication: int
) -> None:
    """A single broker cannot hold more than one replica; 0 and values below -1 are invalid
    too: INVALID_REPLICATION_FACTOR (38), nothing created."""
    with connect(stored.broker.bootstrap) as client:
        result = _create(client, "replicated", 1, replication)
        assert result.error_code == ErrorCode.invalid_replication_factor  # type: ignore[attr-defined]
        assert {t.name for t in client.metadata(None).topics} == {TOPIC}
    assert_survived(stored)


@pytest.mark.parametrize("count", [1, 2, 0], ids=["equal", "fewer", "zero"])
def test_create_partitions_to_fewer_or_equal_count_gets_invalid_partitions(stored: Stored, count: int) -> None:
    """CreatePartitions can only grow a topic: a count at or below the current one is
    INVALID_PARTITIONS (37) and the topic keeps its partitions and records."""
    with connect(stored.broker.bootstrap) as client:
        assert client.create_topic("grown", 2).error_code == ErrorCode.none
        response = client.request(
            CreatePartitionsRequest(
                topics=(CreatePartitionsTopic(name="grown", count=count, assignments=None),),
                timeout=datetime.timedelta(seconds=10),
                validate_only=False,
            )
        )
        assert response.results[0].error_code == ErrorCode.invalid_partitions
        topics = {t.name: t for t in client.metadata(["grown"]).topics}
        assert len(topics["grown"].partitions) == 2
    assert_survived(stored)


def test_create_partitions_of_unknown_topic_gets_unknown_topic_or_partition(stored: Stored) -> None:
    with connect(stored.broker.bootstrap) as client:
        response = client.request(
            CreatePartitionsRequest(
                topics=(CreatePartitionsTopic(name="no-such-topic", count=4, assignments=None),),
                timeout=datetime.timedelta(seconds=10),
                validate_only=False,
            )
        )
        assert response.results[0].error_code == ErrorCode.unknown_topic_or_partition
    assert_survived(stored)


# --- acks=0 --------------------------------------------------------------------------


def test_successful_acks_0_produce_gets_no_response_and_keeps_the_connection(stored: Stored) -> None:
    """The control for the failure cases: acks=0 that succeeds sends nothing back, and
    the next request on the same connection is answered."""
    with connect(stored.broker.bootstrap) as client:
        client.produce(TOPIC, 0, batch([b"fire-and-forget"]), acks=0)
        assert client.api_versions().error_code == ErrorCode.none  # the next frame is this answer
        stored.values.append(b"fire-and-forget")
    assert_survived(stored)


@pytest.mark.parametrize("case", ["wrong-crc", "wrong-magic", "unknown-topic", "unknown-partition", "truncated-batch"])
def test_failed_acks_0_produce_closes_the_connection(stored: Stored, case: str) -> None:
    """acks=0 has no response to carry an error, so Kafka closes the connection to let
    the client notice; nothing is stored."""
    good = batch([b"acks-0-failure"])
    topic, partition, records = TOPIC, 0, good
    if case == "wrong-crc":
        records = flip(good, len(good) - 1)
    elif case == "wrong-magic":
        records = set_byte(good, 16, 1)
    elif case == "unknown-topic":
        topic = "no-such-topic"
    elif case == "unknown-partition":
        partition = 7
    else:
        records = good[:-3]
    with connect(stored.broker.bootstrap) as client:
        client.produce(topic, partition, records, acks=0)
        assert client.wait_closed() == b""
    assert_survived(stored)
