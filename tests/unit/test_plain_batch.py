"""The broker's fast encodings of its own records are byte for byte the general encoder's:
`build_plain_batch` (broker/protocol/records.py) against `build_batch` of the same records,
the two-byte varint shortcut against the zigzag loop, and the batch of a commit on
`__consumer_offsets` (broker/coordinator/records.py) against `build_batch` of its records,
for the edge cases of a commit: empty and maximal metadata, negative leader epochs and
offsets, many partitions (offset deltas past one varint byte), tombstones."""

from __future__ import annotations

import msgpack
import pytest

from broker.coordinator.config import CoordinatorConfig
from broker.coordinator.offsets import commit_records
from broker.coordinator.records import Rec, decode, encode_batch
from broker.protocol.records import Record, _varint, build_batch, build_plain_batch, decode_records

NOW = 1_765_000_000_123
MAX_METADATA = CoordinatorConfig().max_metadata_bytes


def _zigzag_loop(value: int) -> bytes:
    """The zigzag varint the long way, as Kafka's ByteUtils writes it."""
    raw = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def _general(pairs: list[tuple[bytes | None, bytes | None]], timestamp: int) -> bytes:
    return build_batch([Record(i, timestamp, key, value) for i, (key, value) in enumerate(pairs)])


def test_varint_agrees_with_the_zigzag_loop_on_every_width() -> None:
    values = [*range(-20_000, 20_000), 8191, 8192, -8193, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)]
    assert [_varint(v) for v in values] == [_zigzag_loop(v) for v in values]


@pytest.mark.parametrize(
    "pairs",
    [
        [(b"k", b"v")],
        [(None, None)],
        [(b"", b"")],
        [(b"key", None), (None, b"value")],
        [(b"k" * 63, b"v" * 64), (b"k" * 1023, b"v" * 1024), (b"k" * 1000, b"v" * 17), (b"k" * 8191, b"v" * 8192)],
        [(b"k" * 20_000, b"v"), (b"k" * 1010, b"v" * 5), (b"k" * 1011, b"v" * 5), (b"k", b"v" * 1017)],
        [(f"key-{i}".encode(), bytes(i % 300)) for i in range(200)],  # offset deltas past 63
    ],
    ids=["one", "null-key-and-value", "empty", "tombstone", "long-fields", "records-near-1024", "many"],
)
@pytest.mark.parametrize("timestamp", [0, NOW, -1])
def test_plain_batch_is_the_general_batch(pairs: list[tuple[bytes | None, bytes | None]], timestamp: int) -> None:
    plain = build_plain_batch(pairs, timestamp)
    assert plain == _general(pairs, timestamp)
    header, records = decode_records(plain)
    assert header.records_count == len(pairs)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in records] == [
        (i, timestamp, k, v) for i, (k, v) in enumerate(pairs)
    ]


def test_plain_batch_refuses_no_records() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        build_plain_batch([], NOW)


def _commit(partitions: int, epoch: int, metadata: str) -> dict[tuple[str, int], tuple[int, int, str]]:
    return {(f"topic-{p % 3}", p): (p * 1_000_003 - 5, epoch, metadata) for p in range(partitions)}


@pytest.mark.parametrize(
    ("partitions", "epoch", "metadata"),
    [
        (12, -1, ""),
        (12, 0, "m"),
        (1, 2**31 - 1, "x" * MAX_METADATA),  # the longest metadata a commit may carry
        (3, -(2**31), "é" * (MAX_METADATA // 2)),  # multi-byte characters
        (100, 7, ""),  # offset deltas past one varint byte
        (1000, -1, "meta"),
    ],
)
def test_commit_batch_is_the_general_batch(partitions: int, epoch: int, metadata: str) -> None:
    records: list[Rec] = commit_records("group-" + "g" * partitions, _commit(partitions, epoch, metadata), NOW)
    records.append((["o", "group", "gone", 3], None))  # a tombstone among them
    pack = msgpack.Packer().pack
    general = build_batch([Record(i, NOW, pack(k), None if v is None else pack(v)) for i, (k, v) in enumerate(records)])
    assert encode_batch(records, NOW) == general
    assert encode_batch(records, NOW, msgpack.Packer()) == general
    _, decoded = decode_records(general)
    assert [decode(r) for r in decoded] == records
