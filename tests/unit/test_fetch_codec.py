"""The hand-rolled FetchResponse encoder produces exactly what kio's decoder reads,
for every version the broker advertises."""

from __future__ import annotations

import uuid

import pytest
from kio.serial import entity_reader

from broker.handlers.fetch import MAX_VERSION, MIN_VERSION
from broker.protocol.codec import frame_raw_response, response_type
from broker.protocol.fetch_codec import FetchPartition, FetchTopic, encode_fetch_response

TOPIC_A = uuid.uuid4()
TOPIC_B = uuid.uuid4()


def _topics() -> list[FetchTopic]:
    return [
        FetchTopic(
            "orders",
            TOPIC_A,
            [
                FetchPartition(0, 0, 120, 120, 3, b"\x01" * 300),
                FetchPartition(1, 0, 0, 0, 0, b""),
                FetchPartition(2, 1, 7, 7, 5, None),
            ],
        ),
        FetchTopic("ünïcode.topic", TOPIC_B, [FetchPartition(5, 3, -1, -1, -1, b"")]),
    ]


@pytest.mark.parametrize("version", range(MIN_VERSION, MAX_VERSION + 1))
def test_fetch_response_decodes_with_kio(version: int) -> None:
    raw = encode_fetch_response(version, _topics(), error=0, session_id=0, throttle_ms=7)
    frame = b"".join(frame_raw_response(42, raw))
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert int.from_bytes(frame[4:8], "big") == 42
    body_at = 9 if raw.flexible else 8
    cls = response_type(1, version)
    decoded, size = entity_reader(cls)(frame, body_at)
    assert body_at + size == len(frame)
    assert decoded.throttle_time.total_seconds() == pytest.approx(0.007)
    expected = _topics()
    assert len(decoded.responses) == len(expected)
    for got, want in zip(decoded.responses, expected, strict=True):
        if version >= 13:
            assert got.topic_id == want.topic_id
        else:
            assert got.topic == want.name
        assert [p.partition_index for p in got.partitions] == [p.index for p in want.partitions]
        for gp, wp in zip(got.partitions, want.partitions, strict=True):
            assert int(gp.error_code) == wp.error
            assert gp.high_watermark == wp.high_watermark
            assert gp.last_stable_offset == wp.last_stable_offset
            if version >= 5:
                assert gp.log_start_offset == wp.log_start_offset
            if version >= 11:
                assert gp.preferred_read_replica == -1
            assert gp.aborted_transactions is None
            assert gp.records == wp.records
