"""What the disk hands back may be damaged: a wrong index entry is noticed when used and
never makes a read skip records; a batch that fails its CRC in a closed segment is never
served (the valid batches before it are); the descriptor cache bounds open files."""

from __future__ import annotations

import struct

import pytest

from broker.log.files import FILES
from broker.log.partition_log import PartitionLog
from broker.protocol.batch import split_batches
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import Record, build_batch, decode_records
from tests.support.logs import START_MS, environment

SETTINGS = {"segment.bytes": "20000", "index.interval.bytes": "512"}


def _fill(log: PartitionLog, batches: int, per_batch: int = 5) -> list[bytes]:
    values = []
    for b in range(batches):
        records = []
        for i in range(per_batch):
            value = f"b{b:04d}-r{i}".encode() * 8
            values.append(value)
            records.append(Record(i, START_MS + b, f"k{b}".encode(), value))
        log.append(build_batch(records))
    return values


def _read_from(log: PartitionLog, offset: int) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    while offset < log.next_offset:
        data = log.read(offset, 1 << 20)
        for raw in split_batches(data):
            _, records = decode_records(raw)
            out.extend((r.offset, r.value or b"") for r in records if r.offset >= offset)
        offset = out[-1][0] + 1
    return out


def test_a_shifted_index_entry_is_detected_and_reads_skip_nothing() -> None:
    with environment(SETTINGS) as env:
        log = env.open()
        values = _fill(log, 120)
        assert len(log.segments) > 2
        log.close(clean=True)
        first = env.directory / f"{0:020d}.index"
        data = bytearray(first.read_bytes())
        assert len(data) >= 8 * 4
        rel, pos = struct.unpack_from(">II", data, 8 * 2)
        struct.pack_into(">II", data, 8 * 2, rel, pos + 7)  # a few bytes into the batch
        first.write_bytes(bytes(data))

        log = env.open()  # the entry still passes the load-time order check
        try:
            target = rel + 2  # an offset the bad entry would be used for
            assert _read_from(log, target) == list(enumerate(values))[target:]
            assert log.segments[0].index_mismatches == 1
            # The wrong entry (and those after it) are gone from the file: a later start and
            # later lookups do not meet it again.
            assert len(first.read_bytes()) == 8 * 2
            assert _read_from(log, target)[0] == (target, values[target])
            assert log.segments[0].index_mismatches == 1
        finally:
            log.close(clean=True)


def test_a_corrupt_batch_in_a_closed_segment_is_never_served() -> None:
    with environment(SETTINGS) as env:
        log = env.open()
        values = _fill(log, 120)
        closed = log.segments[0]
        batches = split_batches(log.read(0, closed.size))
        assert len(batches) > 4
        victim_position = sum(len(b) for b in batches[:3])
        victim_offset = 15  # 3 batches of 5 records before it
        log.close(clean=True)
        with open(closed.log_path, "r+b") as f:  # one flipped byte in the 4th batch's records
            f.seek(victim_position + 70)
            byte = f.read(1)
            f.seek(victim_position + 70)
            f.write(bytes([byte[0] ^ 0x40]))

        log = env.open()
        try:
            # From before it: the valid batches, and not one byte of the corrupt one.
            served = [r for raw in split_batches(log.read(0, 1 << 20)) for r in decode_records(raw)[1]]
            assert [r.value for r in served] == values[:victim_offset]
            # At it: CORRUPT_MESSAGE, never its bytes.
            with pytest.raises(KafkaError) as e:
                log.read(victim_offset, 1 << 20)
            assert e.value.code == ErrorCode.corrupt_message
            assert log.corrupt_batches_served == 2
            # Past it: served as before.
            after = victim_offset + 5
            assert _read_from(log, after)[0] == (after, values[after])
        finally:
            log.close(clean=True)


def test_open_segment_files_stay_within_the_cache_capacity() -> None:
    saved = FILES.capacity
    FILES.configure(20)
    try:
        with environment({"segment.bytes": "2000"}) as env:
            logs = [env.open(directory=env.directory.parent / f"p-{i}") for i in range(30)]
            for i, log in enumerate(logs):
                for b in range(5):
                    log.append(build_batch([Record(0, START_MS, b"k", f"{i}-{b}".encode() * 50)]))
                assert FILES.open_count() <= 20
            for i, log in enumerate(logs):
                got = [r.value for raw in split_batches(log.read(0, 1 << 20)) for r in decode_records(raw)[1]]
                assert got[0] == f"{i}-0".encode() * 50
                assert FILES.open_count() <= 20
            assert FILES.evicted > 0
            for log in logs:
                log.close(clean=True)
    finally:
        FILES.configure(saved)


def test_an_unreadable_log_start_file_never_stops_the_start_and_loses_no_record() -> None:
    """A crash can leave `log-start-offset` empty or torn: the log opens from its first
    segment, every record still there, instead of failing to start."""
    with environment(SETTINGS) as env:
        plog = env.open()
        for i in range(3):
            plog.append(build_batch([Record(0, START_MS, None, b"v%d" % i)]))
        plog.close(clean=True)
        for damage in (b"", b"4\x00garbage", b"-7"):
            (env.directory / "log-start-offset").write_bytes(damage)
            again = env.open(recover=True)
            assert again.log_start_offset == 0
            assert [r.value for r in again.records()] == [b"v0", b"v1", b"v2"]
            again.close(clean=True)
