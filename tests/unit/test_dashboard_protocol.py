"""The requests the dashboard adds to aiokafka, as kio's message classes (services/dashboard/kafka_requests.py):
the version each picks from what a broker advertises (none: unsupported, which the reader answers
with unknown sizes, or with aiokafka's older ListGroups and unknown group types), each request's
frame as aiokafka's connection writes it read back by the broker's own decoder, and answers read
the way aiokafka's connection hands them over."""

from __future__ import annotations

import io
import struct
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiokafka.errors import IncompatibleBrokerVersion
from kio.schema.describe_transactions.v0.response import DescribeTransactionsResponse, TransactionState
from kio.schema.errors import ErrorCode
from kio.schema.list_groups.v5 import ListGroupsResponse
from kio.schema.list_groups.v5.response import ListedGroup
from kio.schema.types import GroupId, ProducerId, TransactionalId
from kio.serial import entity_reader
from kio.static.primitive import i16, i32Timedelta

from broker.protocol.codec import decode_request
from services.dashboard.kafka_reader import (
    DESCRIBE_LOG_DIRS,
    DESCRIBE_QUORUM,
    LIST_GROUP_TYPES,
    LIST_TRANSACTIONS,
    _Admin,
    describe_transactions,
)
from services.dashboard.kafka_requests import KioRequest, RawAnswer, UndecodableResponse, encode_entity
from services.dashboard.share_groups import describe_share_group_offsets, share_group_describe

# Each request as the dashboard sends it, the versions its broker advertises, and the frame (size
# prefix left out) that the requests declared with aiokafka's protocol types sent before: the
# wire is unchanged.  Correlation id 7, client id "cid".
REQUESTS: dict[str, tuple[KioRequest[Any], dict[int, tuple[int, int]], str]] = {
    "DescribeLogDirs v1": (DESCRIBE_LOG_DIRS, {35: (0, 4)}, "00230001000000070003636964ffffffff"),
    "DescribeQuorum v0": (
        DESCRIBE_QUORUM,
        {55: (0, 2)},
        "003700000000000700036369640002135f5f636c75737465725f6d657461646174610200000000000000",
    ),
    "ListTransactions v0": (
        LIST_TRANSACTIONS,
        {66: (0, 2)},
        "004200000000000700036369640004084f6e676f696e670e50726570617265436f6d6d69740d5072657061726541626f72740100",
    ),
    "DescribeTransactions v0": (
        describe_transactions(["a", "bé"]),
        {65: (0, 0)},
        "00410000000000070003636964000302610462c3a900",
    ),
    "ListGroups v5": (LIST_GROUP_TYPES, {16: (0, 5)}, "0010000500000007000363696400010100"),
    "ShareGroupDescribe v1": (
        share_group_describe(["g1", "g2"]),
        {77: (1, 1)},
        "004d000100000007000363696400030367310367320000",
    ),
    "DescribeShareGroupOffsets v0": (
        describe_share_group_offsets(["g1", "g2"]),
        {90: (0, 0)},
        "005a000000000007000363696400030367310000036732000000",
    ),
}


def frame(request: KioRequest[Any], versions: dict[int, tuple[int, int]]) -> bytes:
    """What aiokafka's connection writes (after the size prefix): header, then body."""
    struct_ = request.prepare(versions)
    return bytes(struct_.build_request_header(correlation_id=7, client_id="cid").encode() + struct_.encode())


@pytest.mark.parametrize("name", list(REQUESTS))
def test_each_request_round_trips_through_kio_and_keeps_its_wire_bytes(name: str) -> None:
    request, versions, wire = REQUESTS[name]
    sent = frame(request, versions)
    header, decoded = decode_request(sent)
    assert (header.api_key, header.api_version) == (request.API_KEY, int(type(request.body).__version__))
    assert (header.correlation_id, header.client_id) == (7, "cid")
    assert decoded == request.body
    assert sent.hex() == wire


def test_describe_log_dirs_v0_is_the_v1_message_under_version_0() -> None:
    sent = frame(DESCRIBE_LOG_DIRS, {35: (0, 0)})  # a broker before Kafka 2.0
    assert sent.hex() == "00230000000000070003636964ffffffff"
    body, size = entity_reader(type(DESCRIBE_LOG_DIRS.body))(sent, len(sent) - 4)
    assert (body, size) == (DESCRIBE_LOG_DIRS.body, 4)  # topics: null, i.e. all of them


def test_the_newest_version_the_broker_speaks_is_picked() -> None:
    assert DESCRIBE_LOG_DIRS.prepare({35: (1, 4)}).API_VERSION == 1  # Kafka 4: v1..v4
    assert DESCRIBE_LOG_DIRS.prepare({35: (0, 1)}).API_VERSION == 1
    assert DESCRIBE_LOG_DIRS.prepare({35: (0, 0)}).API_VERSION == 0  # brokers before Kafka 2.0
    assert LIST_GROUP_TYPES.prepare({16: (0, 5)}).API_VERSION == 5


def test_a_broker_without_the_api_is_told_apart_from_one_without_the_version() -> None:
    with pytest.raises(IncompatibleBrokerVersion):
        DESCRIBE_LOG_DIRS.prepare({18: (0, 4)})  # not advertised at all
    with pytest.raises(NotImplementedError):
        DESCRIBE_LOG_DIRS.prepare({35: (2, 4)})  # only flexible versions
    with pytest.raises(NotImplementedError):
        LIST_GROUP_TYPES.prepare({16: (0, 4)})  # an older Kafka: the reader falls back to aiokafka's
    with pytest.raises(IncompatibleBrokerVersion):
        LIST_GROUP_TYPES.prepare({18: (0, 4)})


def answer_frame(correlation_id: int, response: Any, flexible: bool) -> bytes:
    """A response frame after its size prefix: correlation id, header tags, body."""
    return struct.pack(">i", correlation_id) + (b"\x00" if flexible else b"") + encode_entity(response)


def received(request: KioRequest[Any], versions: dict[int, tuple[int, int]], payload: bytes) -> Any:
    """The answer as aiokafka's connection reads it: header by the request struct, then its
    RESPONSE_TYPE, then read by kio."""
    struct_ = request.prepare(versions)
    data = io.BytesIO(payload)
    assert struct_.parse_response_header(data).correlation_id == 7
    return struct_.RESPONSE_TYPE.decode(data).read()


def test_list_groups_v5_answer_is_read_with_each_group_type() -> None:
    groups = (
        ListedGroup(group_id=GroupId("billing"), protocol_type="consumer", group_state="Stable", group_type="classic"),
        ListedGroup(group_id=GroupId("kip848"), protocol_type="consumer", group_state="Empty", group_type="consumer"),
    )
    response = ListGroupsResponse(
        throttle_time=i32Timedelta.parse(timedelta(0)), error_code=ErrorCode.none, groups=groups
    )
    assert received(LIST_GROUP_TYPES, {16: (0, 5)}, answer_frame(7, response, flexible=True)) == response
    with pytest.raises(UndecodableResponse):  # a byte after the body: not the response asked for
        received(LIST_GROUP_TYPES, {16: (0, 5)}, answer_frame(7, response, flexible=True) + b"\x00")


def described(start: datetime) -> DescribeTransactionsResponse:
    return DescribeTransactionsResponse(
        throttle_time=i32Timedelta.parse(timedelta(0)),
        transaction_states=(
            TransactionState(
                error_code=ErrorCode.none,
                transactional_id=TransactionalId("t"),
                transaction_state="Empty",
                transaction_timeout=i32Timedelta.parse(timedelta(seconds=60)),
                transaction_start_time=start,
                producer_id=ProducerId(5),
                producer_epoch=i16(0),
                topics=(),
            ),
        ),
    )


def test_a_transaction_without_start_time_fails_only_its_answer() -> None:
    """Kafka says -1 for the start of a transaction that has none; kio reads the field as a
    timestamp and cannot: the request fails with UndecodableResponse (the reader then describes
    the ids one by one), not the connection."""
    request = describe_transactions(["t"])
    ok = described(datetime.fromtimestamp(1_700_000_000, UTC))
    assert received(request, {65: (0, 0)}, answer_frame(7, ok, flexible=True)) == ok
    none = answer_frame(7, ok, flexible=True).replace(struct.pack(">q", 1_700_000_000_000), struct.pack(">q", -1))
    with pytest.raises(UndecodableResponse):
        received(request, {65: (0, 0)}, none)


def test_a_request_is_paired_with_its_own_response_type() -> None:
    with pytest.raises(ValueError):
        KioRequest(DESCRIBE_LOG_DIRS.body, ListGroupsResponse)


class _Answering(_Admin):
    """The reader's admin client answering DescribeTransactions from `states` (id: start time in
    ms, -1 for none), each answer encoded as a broker would; no connection is made."""

    def __init__(self, states: dict[str, int]) -> None:  # no aiokafka client: nothing is sent
        self.states = states
        self.asked: list[tuple[str, ...]] = []

    async def _send_request(self, request: KioRequest[Any], node_id: int) -> RawAnswer[Any]:
        ids = tuple(str(t) for t in request.body.transactional_ids)
        self.asked.append(ids)
        epoch = datetime.fromtimestamp(0, UTC)
        body = encode_entity(
            DescribeTransactionsResponse(
                throttle_time=i32Timedelta.parse(timedelta(0)),
                transaction_states=tuple(
                    replace(
                        described(epoch).transaction_states[0],
                        transactional_id=TransactionalId(t),
                        transaction_state="Ongoing",
                    )
                    for t in ids
                ),
            )
        )
        for t in ids:  # each start time, written over the epoch's 0 in id order
            at = body.index(struct.pack(">q", 0))
            body = body[:at] + struct.pack(">q", self.states[t]) + body[at + 8 :]
        return RawAnswer(request.response, body)


async def test_transactions_described_together_are_described_one_by_one_when_one_has_no_start() -> None:
    admin = _Answering({"a": 1_000, "gone": -1, "b": 2_000})
    found = await admin._describe_transactions(["a", "gone", "b"], node_id=1)
    assert [(t.transactional_id, t.transaction_start_time.timestamp()) for t in found] == [("a", 1.0), ("b", 2.0)]
    assert admin.asked == [("a", "gone", "b"), ("a",), ("gone",), ("b",)]
    whole = _Answering({"a": 1_000, "b": 2_000})
    assert len(await whole._describe_transactions(["a", "b"], node_id=1)) == 2
    assert whole.asked == [("a", "b")]  # readable: one request, as before
