"""What a Fetch reads from a partition: a small answer inline, a larger one as a region of
the segment file with the same bytes, record count and end offset; a region outlives the
deletion of its segment once opened, and says so clearly when opened after."""

from __future__ import annotations

import os

import pytest

from broker.log.partition_log import INLINE_MAX, PartitionLog
from broker.log.region import SegmentRegion
from broker.protocol.batch import iter_headers
from broker.protocol.records import Record, build_batch
from tests.support.logs import START_MS, environment

SETTINGS = {"segment.bytes": "1000000"}


def _fill(log: PartitionLog, batches: int, per_batch: int = 20) -> None:
    for b in range(batches):
        log.append(build_batch([Record(i, START_MS + b, None, b"v" * 100) for i in range(per_batch)]))


def _bytes_of(region: SegmentRegion) -> bytes:
    fd = region.open()
    try:
        return os.pread(fd, region.length, region.position)
    finally:
        os.close(fd)


def test_a_small_answer_is_inline_and_a_large_one_a_region_with_the_same_bytes() -> None:
    with environment(SETTINGS) as env:
        log = env.open()
        _fill(log, 200)
        small = log.read_for_fetch(0, 4096)
        assert isinstance(small.data, bytes)
        assert small.data == log.read(0, 4096)
        large = log.read_for_fetch(5, 300_000)
        assert isinstance(large.data, SegmentRegion)
        assert large.size > INLINE_MAX
        data = _bytes_of(large.data)
        assert data == log.read(5, 300_000)
        headers = [h for _, h in iter_headers(data)]
        assert large.records == sum(h.records_count for h in headers)
        assert large.end_offset == headers[-1].last_offset + 1
        committed = log.read_for_fetch(0, 1 << 20, upper=100)  # read_committed below offset 100
        assert committed.end_offset == 100


def test_a_region_opened_before_its_segment_is_deleted_still_reads_and_one_opened_after_fails() -> None:
    with environment(SETTINGS | {"segment.bytes": "100000", "file.delete.delay.ms": "0"}) as env:
        log = env.open()
        _fill(log, 200)
        assert len(log.segments) > 2
        held = log.read_for_fetch(0, 1 << 20).data
        late = log.read_for_fetch(0, 1 << 20).data
        assert isinstance(held, SegmentRegion)
        assert isinstance(late, SegmentRegion)
        fd = held.open()
        expected = log.read(0, 1 << 20)
        log.delete_records(log.segments[1].base_offset)  # the first segment goes
        try:
            assert os.pread(fd, held.length, held.position) == expected
        finally:
            os.close(fd)
        with pytest.raises(FileNotFoundError, match="deleted before its bytes were sent"):
            late.open()


def test_with_file_delete_delay_a_deleted_segment_serves_regions_until_its_files_are_removed() -> None:
    """file.delete.delay.ms: the deleted segment's files are renamed *.deleted at once and
    kept for the delay, so a Fetch answer opened after the deletion still reads its bytes;
    once the delay is over they are removed and such an answer fails as without a delay."""
    with environment(SETTINGS | {"segment.bytes": "100000", "file.delete.delay.ms": "60000"}) as env:
        log = env.open()
        _fill(log, 200)
        first = log.segments[0]
        late = log.read_for_fetch(0, 1 << 20).data
        assert isinstance(late, SegmentRegion)
        expected = log.read(0, 1 << 20)
        names = {p.name for p in env.directory.glob(f"{0:020d}.*")}
        log.delete_records(log.segments[1].base_offset)
        assert {p.name for p in env.directory.glob(f"{0:020d}.*")} == {f"{n}.deleted" for n in names}
        assert log.segments[0] is not first
        assert _bytes_of(late) == expected

        env.clock.advance(59_999)
        assert log.deletions.reap(env.clock.now_ms()) == 0
        assert _bytes_of(late) == expected
        env.clock.advance(1)
        assert log.deletions.reap(env.clock.now_ms()) == 1
        assert list(env.directory.glob(f"{0:020d}.*")) == []
        with pytest.raises(FileNotFoundError, match="deleted before its bytes were sent"):
            late.open()


@pytest.mark.parametrize("value_size", [100, 2000])  # batches of 2 kB (read in chunks) and 40 kB (by headers)
def test_every_way_of_finding_the_batches_serves_what_read_serves(value_size: int) -> None:
    with environment(SETTINGS | {"segment.bytes": "100000000"}) as env:
        log = env.open()
        for b in range(60):
            log.append(build_batch([Record(i, START_MS + b, None, b"v" * value_size) for i in range(20)]))
        for offset, max_bytes, upper in ((0, 1 << 20, None), (7, 50_000, None), (25, 1, None), (0, 1 << 20, 410)):
            got = log.read_for_fetch(offset, max_bytes, upper)
            expected = log.read(offset, max_bytes, upper)
            data = got.data if isinstance(got.data, bytes) else _bytes_of(got.data)
            assert data == expected
            headers = [h for _, h in iter_headers(expected)]
            assert got.records == sum(h.records_count for h in headers)
            assert got.end_offset == headers[-1].last_offset + 1
