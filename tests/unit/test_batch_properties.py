"""Property-based tests of record-batch (magic v2) handling: the header codec, CRC
validation, broker-side patching and batch framing, cross-checked against aiokafka's
own record-batch parser and builder."""

from __future__ import annotations

from dataclasses import replace

import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from broker.protocol.batch import (
    HEADER_SIZE,
    InvalidBatch,
    iter_headers,
    parse_header,
    split_batches,
    stamp_header,
    validate_batch,
    whole_batches_prefix,
)
from broker.protocol.records import Record, build_batch, decode_records
from tests.support.examples import examples


def _stamped(batch: bytes | memoryview, base_offset: int, leader_epoch: int, append_time: int | None) -> bytes:
    """The batch as the log stores it: stamped header followed by the untouched records."""
    header, body = stamp_header(batch, base_offset, leader_epoch, append_time)
    return header + bytes(body)


CODECS = [0, 1, 2, 3, 4]  # none, gzip, snappy, lz4, zstd
PROPERTY_SETTINGS = settings(
    max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)

maybe_bytes = st.none() | st.binary(max_size=64)
header_keys = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
headers = st.lists(st.tuples(header_keys, maybe_bytes), max_size=3).map(tuple)
timestamps = st.integers(min_value=0, max_value=1 << 45)


@st.composite
def record_lists(draw: st.DrawFn, max_records: int = 12, gaps: bool = True) -> list[Record]:
    """1..max_records records with strictly increasing offsets (with gaps, as compaction
    leaves them, when `gaps`), arbitrary timestamps, keys, values and headers."""
    count = draw(st.integers(min_value=1, max_value=max_records))
    offset = draw(st.integers(min_value=0, max_value=1 << 40))
    records = []
    for _ in range(count):
        records.append(
            Record(
                offset=offset,
                timestamp=draw(timestamps),
                key=draw(maybe_bytes),
                value=draw(maybe_bytes),
                headers=draw(headers),
            )
        )
        offset += 1 + (draw(st.integers(min_value=0, max_value=1000)) if gaps else 0)
    return records


@st.composite
def client_batches(draw: st.DrawFn) -> tuple[bytes, list[Record]]:
    """A batch as a producer sends it: offsets 0..n-1 contiguous, any codec."""
    records = draw(record_lists(max_records=6, gaps=False))
    records = [replace(r, offset=i) for i, r in enumerate(records)]
    codec = draw(st.sampled_from(CODECS))
    return build_batch(records, compression=codec), records


def aiokafka_records(data: bytes) -> tuple[DefaultRecordBatch, list[Record]]:
    parsed = DefaultRecordBatch(bytes(data))
    assert parsed.validate_crc()
    out = [Record(r.offset, r.timestamp, r.key, r.value, tuple((k, v) for k, v in r.headers)) for r in parsed]
    return parsed, out


# --- round trips ---------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(records=record_lists(), codec=st.sampled_from(CODECS))
def test_build_then_decode_returns_the_same_records_for_every_codec(records: list[Record], codec: int) -> None:
    """decode_records(build_batch(records)) == records: offsets (with gaps), timestamps,
    null and empty keys, values and headers, under none/gzip/snappy/lz4/zstd."""
    data = build_batch(records, compression=codec)
    header, decoded = decode_records(data)
    assert decoded == records
    assert header.compression == codec
    assert header.records_count == len(records)
    assert header.base_offset == records[0].offset
    assert header.last_offset == records[-1].offset
    assert header.base_timestamp == records[0].timestamp
    assert header.max_timestamp == max(r.timestamp for r in records)
    assert header.size == len(data)


@PROPERTY_SETTINGS
@given(records=record_lists(), codec=st.sampled_from(CODECS))
def test_built_batches_validate_and_parse_identically_in_aiokafka(records: list[Record], codec: int) -> None:
    """Our encoder produces batches aiokafka's parser accepts (CRC included) and reads
    as the same records and header fields."""
    data = build_batch(records, compression=codec)
    header = validate_batch(data)
    parsed, theirs = aiokafka_records(data)
    assert theirs == records
    assert parsed.base_offset == header.base_offset
    assert parsed.last_offset_delta == header.last_offset_delta
    assert parsed.compression_type == codec
    assert parsed.first_timestamp == header.base_timestamp
    assert parsed.max_timestamp == header.max_timestamp
    assert parsed.crc == header.crc


@PROPERTY_SETTINGS
@given(
    records=record_lists(max_records=8, gaps=False),
    codec=st.sampled_from(CODECS),
    producer=st.tuples(
        st.integers(min_value=-1, max_value=(1 << 62)),
        st.integers(min_value=-1, max_value=32767),
        st.integers(min_value=-1, max_value=(1 << 31) - 1),
    ),
)
def test_aiokafka_built_batches_validate_and_decode_to_the_same_records(
    records: list[Record], codec: int, producer: tuple[int, int, int]
) -> None:
    """A batch built by aiokafka's producer code (any codec, idempotent fields) passes
    validate_batch and decodes to exactly what was appended."""
    producer_id, epoch, sequence = producer
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=0,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        batch_size=1 << 30,
    )
    expected = []
    for i, r in enumerate(records):
        assert builder.append(i, r.timestamp, r.key, r.value, list(r.headers)) is not None
        expected.append(replace(r, offset=i))
    data = bytes(builder.build())
    header = validate_batch(data)
    assert header.producer_id == producer_id
    assert header.producer_epoch == epoch
    assert header.base_sequence == sequence
    assert header.records_count == len(records)
    assert header.compression == codec
    _, decoded = decode_records(data)
    assert decoded == expected


# --- CRC -----------------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(batch=client_batches(), data=st.data())
def test_any_single_byte_change_in_the_crc_covered_region_is_rejected(
    batch: tuple[bytes, list[Record]], data: st.DataObject
) -> None:
    """Flipping any bits of any one byte from the CRC field (17) to the end makes
    validate_batch raise, and never as a valid batch: CRC32C catches every error burst
    of up to 32 bits."""
    raw, _ = batch
    position = data.draw(st.integers(min_value=17, max_value=len(raw) - 1), label="position")
    mask = data.draw(st.integers(min_value=1, max_value=255), label="mask")
    corrupted = bytearray(raw)
    corrupted[position] ^= mask
    with pytest.raises(InvalidBatch) as caught:
        validate_batch(corrupted)
    assert caught.value.kind == "corrupt"
    # aiokafka agrees the CRC no longer matches.
    assert not DefaultRecordBatch(bytes(corrupted)).validate_crc()


@PROPERTY_SETTINGS
@given(batch=client_batches(), data=st.data())
def test_changes_outside_the_crc_are_caught_by_length_and_magic_checks_or_are_broker_fields(
    batch: tuple[bytes, list[Record]], data: st.DataObject
) -> None:
    """Bytes 0..16 are not CRC-covered: base offset (0-7) and leader epoch (12-15) are
    the broker's to patch, so a change there still validates (with the new value); a
    changed batch length (8-11) or magic (16) is rejected."""
    raw, _ = batch
    position = data.draw(st.integers(min_value=0, max_value=16), label="position")
    mask = data.draw(st.integers(min_value=1, max_value=255), label="mask")
    changed = bytearray(raw)
    changed[position] ^= mask
    if position < 8 or 12 <= position < 16:
        header = validate_batch(changed)
        assert header == replace(
            parse_header(raw),
            base_offset=parse_header(changed).base_offset,
            partition_leader_epoch=parse_header(changed).partition_leader_epoch,
        )
    else:
        with pytest.raises(InvalidBatch) as caught:
            validate_batch(changed)
        assert caught.value.kind == ("magic" if position == 16 else "corrupt")


@PROPERTY_SETTINGS
@given(batch=client_batches(), cut=st.integers(min_value=1, max_value=200))
def test_truncated_batch_is_rejected(batch: tuple[bytes, list[Record]], cut: int) -> None:
    raw, _ = batch
    assume(cut < len(raw))
    with pytest.raises(InvalidBatch):
        validate_batch(raw[: len(raw) - cut])


# --- patching for append -------------------------------------------------------------


@PROPERTY_SETTINGS
@given(
    batch=client_batches(),
    base_offset=st.integers(min_value=0, max_value=(1 << 62)),
    leader_epoch=st.integers(min_value=-1, max_value=(1 << 31) - 1),
    append_time=st.none() | timestamps,
)
def test_stamp_header_sets_broker_fields_and_keeps_the_crc_valid(
    batch: tuple[bytes, list[Record]], base_offset: int, leader_epoch: int, append_time: int | None
) -> None:
    """stamp_header writes the base offset and leader epoch, and for LogAppendTime
    the timestamp type and max timestamp; the result validates (CRC redone when needed),
    every record keeps its key, value, headers and relative offset, and with
    LogAppendTime every record reads back with the append time."""
    raw, records = batch
    original = validate_batch(raw)
    patched = _stamped(memoryview(raw), base_offset, leader_epoch, append_time)
    assert len(patched) == len(raw)
    header = validate_batch(patched)
    assert header.base_offset == base_offset
    assert header.partition_leader_epoch == leader_epoch
    assert header.last_offset == base_offset + original.last_offset_delta
    _, decoded = decode_records(bytes(patched))
    parsed, theirs = aiokafka_records(bytes(patched))
    assert theirs == decoded
    if append_time is None:
        assert patched[16:] == raw[16:], "CreateTime: nothing inside the CRC may change"
        assert header.crc == original.crc
        expected = [replace(r, offset=base_offset + r.offset) for r in records]
    else:
        assert header.is_log_append_time
        assert parsed.timestamp_type == 1
        assert header.max_timestamp == append_time
        assert header.base_timestamp == original.base_timestamp
        expected = [replace(r, offset=base_offset + r.offset, timestamp=append_time) for r in records]
    assert decoded == expected


# --- framing: split_batches, whole_batches_prefix, iter_headers ----------------------


@st.composite
def concatenations(draw: st.DrawFn) -> list[bytes]:
    batches = draw(st.lists(client_batches(), min_size=1, max_size=5))
    out = []
    offset = 0
    for raw, records in batches:
        out.append(_stamped(raw, offset, 0, None))
        offset += len(records)
    return out


@PROPERTY_SETTINGS
@given(batches=concatenations())
def test_split_batches_returns_each_batch_of_a_concatenation(batches: list[bytes]) -> None:
    """split_batches(b1 + b2 + ...) == [b1, b2, ...]; iter_headers sees the same batches
    at the same positions; the whole buffer is whole batches."""
    data = b"".join(batches)
    assert [bytes(b) for b in split_batches(data)] == batches
    positions = [0]
    for b in batches[:-1]:
        positions.append(positions[-1] + len(b))
    assert [(pos, h.size) for pos, h in iter_headers(data)] == list(zip(positions, map(len, batches), strict=True))
    assert whole_batches_prefix(data) == len(data)


@PROPERTY_SETTINGS
@given(batches=concatenations(), data=st.data())
def test_truncated_concatenation_keeps_exactly_the_whole_batch_prefix(
    batches: list[bytes], data: st.DataObject
) -> None:
    """Cut anywhere: whole_batches_prefix and iter_headers find exactly the batches that
    fit; split_batches (a produce request must be whole batches) accepts the cut only on
    a batch boundary and rejects it as corrupt anywhere else."""
    joined = b"".join(batches)
    cut = data.draw(st.integers(min_value=0, max_value=len(joined)), label="cut")
    truncated = joined[:cut]
    boundaries = [0]
    for b in batches:
        boundaries.append(boundaries[-1] + len(b))
    fitting = max(b for b in boundaries if b <= cut)
    kept = boundaries.index(fitting)
    assert whole_batches_prefix(truncated) == fitting
    assert [pos for pos, _ in iter_headers(truncated)] == boundaries[:kept]
    if cut == fitting:
        assert [bytes(b) for b in split_batches(truncated)] == batches[:kept]
    else:
        with pytest.raises(InvalidBatch) as caught:
            split_batches(truncated)
        assert caught.value.kind == "corrupt"


@PROPERTY_SETTINGS
@given(batches=concatenations(), tail=st.binary(min_size=1, max_size=HEADER_SIZE - 1))
def test_a_tail_shorter_than_a_header_is_never_a_batch(batches: list[bytes], tail: bytes) -> None:
    """Fewer than 61 trailing bytes cannot be a batch, whatever they contain."""
    joined = b"".join(batches)
    assert whole_batches_prefix(joined + tail) == len(joined)
    assert len(list(iter_headers(joined + tail))) == len(batches)
    with pytest.raises(InvalidBatch):
        split_batches(joined + tail)
