"""The hand-rolled OffsetCommitResponse encoder writes, for every version the broker
advertises, exactly the bytes kio's generic writer writes for the same answer."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from broker.handlers.offsets import OFFSET_COMMIT
from broker.protocol.codec import build, encode_response, frame_raw_response, nested
from broker.protocol.errors import ErrorCode
from broker.protocol.fetch_codec import RawResponse
from broker.protocol.offsets_codec import CommitResult, encode_offset_commit_response

VERSIONS = range(OFFSET_COMMIT.min_version, OFFSET_COMMIT.max_version + 1)

partitions = st.lists(
    st.tuples(st.integers(-(2**31), 2**31 - 1), st.sampled_from([int(e) for e in ErrorCode])), max_size=140
)
topics = st.lists(st.tuples(st.text(max_size=200), st.none() | st.uuids(), partitions), max_size=5)


def _kio_frame(version: int, results: list[CommitResult], throttle_ms: int) -> bytes:
    cls = OFFSET_COMMIT.response(version)
    topic_cls = nested(cls, "OffsetCommitResponseTopic")
    part_cls = nested(cls, "OffsetCommitResponsePartition")
    response = build(
        cls,
        throttle_time=throttle_ms,
        topics=tuple(
            build(
                topic_cls,
                name=name,
                topic_id=topic_id if topic_id is not None else uuid.UUID(int=0),
                partitions=tuple(build(part_cls, partition_index=i, error_code=e) for i, e in parts),
            )
            for name, topic_id, parts in results
        ),
    )
    return encode_response(9, response)


def _ours(raw: RawResponse) -> bytes:
    return b"".join(bytes(p) for p in frame_raw_response(9, raw))  # type: ignore[arg-type]


@given(st.sampled_from(list(VERSIONS)), topics, st.integers(0, 2**31 - 1))
def test_every_version_encodes_as_kio_does(version: int, results: list[CommitResult], throttle_ms: int) -> None:
    raw = encode_offset_commit_response(version, results, throttle_ms)
    assert _ours(raw) == _kio_frame(version, results, throttle_ms if version >= 3 else 0)


def test_a_throttle_raised_after_encoding_lands_where_kio_puts_it() -> None:
    results: list[CommitResult] = [("orders", uuid.uuid4(), [(0, 0), (1, int(ErrorCode.unknown_topic_or_partition))])]
    for version in VERSIONS:
        raw = encode_offset_commit_response(version, results).with_throttle(250)
        assert _ours(raw) == _kio_frame(version, results, 250 if version >= 3 else 0)
