"""The hand-rolled ProduceResponse encoder writes, for every version the broker advertises,
exactly the bytes kio's generic writer writes for the same answer, a throttle raised after
encoding included."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from broker.handlers.produce import MESSAGES
from broker.protocol.codec import build, encode_response, frame_raw_response, nested
from broker.protocol.errors import ErrorCode
from broker.protocol.fetch_codec import RawResponse
from broker.protocol.produce_codec import TopicResult, encode_produce_response

VERSIONS = range(MESSAGES.min_version, MESSAGES.max_version + 1)
I64 = st.integers(-(2**63), 2**63 - 1)
APPEND_TIME = st.just(-1) | st.integers(0, 2**47)  # -1 (CreateTime topics) or a time in ms


@dataclass
class Result:
    partition: int
    error: int
    base_offset: int
    log_append_time: int
    log_start_offset: int
    message: str | None


results = st.builds(
    Result,
    st.integers(-(2**31), 2**31 - 1),
    st.sampled_from([int(e) for e in ErrorCode]),
    I64,
    APPEND_TIME,
    I64,
    st.none() | st.text(max_size=300),
)
topics = st.lists(st.tuples(st.text(max_size=200), st.none() | st.uuids(), st.lists(results, max_size=40)), max_size=5)


def _kio_frame(version: int, topics: list[TopicResult], throttle_ms: int) -> bytes:
    cls = MESSAGES.response(version)
    topic_cls = nested(cls, "TopicProduceResponse")
    part_cls = nested(cls, "PartitionProduceResponse")
    response = build(
        cls,
        throttle_time=throttle_ms,
        responses=tuple(
            build(
                topic_cls,
                name=name,
                topic_id=topic_id if topic_id is not None else uuid.UUID(int=0),
                partition_responses=tuple(
                    build(
                        part_cls,
                        index=p.partition,
                        error_code=ErrorCode(p.error),
                        base_offset=p.base_offset,
                        log_append_time=p.log_append_time,
                        log_start_offset=p.log_start_offset,
                        record_errors=(),
                        error_message=p.message,
                    )
                    for p in partitions
                ),
            )
            for name, topic_id, partitions in topics
        ),
    )
    return encode_response(7, response)


def _ours(raw: RawResponse) -> bytes:
    return b"".join(bytes(p) for p in frame_raw_response(7, raw))  # type: ignore[arg-type]


@given(st.sampled_from(list(VERSIONS)), topics, st.integers(0, 2**31 - 1))
def test_every_version_encodes_as_kio_does(version: int, answer: list[TopicResult], throttle_ms: int) -> None:
    assert _ours(encode_produce_response(version, answer, throttle_ms)) == _kio_frame(version, answer, throttle_ms)


def test_a_throttle_raised_after_encoding_lands_at_the_end_where_kio_puts_it() -> None:
    answer: list[TopicResult] = [
        ("orders", uuid.uuid4(), [Result(0, 0, 41, -1, 0, None), Result(1, 3, -1, -1, -1, "no such partition")])
    ]
    for version in VERSIONS:
        raw = encode_produce_response(version, answer)
        assert _ours(raw.with_throttle(250)) == _kio_frame(version, answer, 250)
        assert _ours(raw.with_throttle(0)) == _kio_frame(version, answer, 0), "a lower throttle changes nothing"
