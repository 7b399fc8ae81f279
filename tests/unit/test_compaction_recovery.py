"""Log compaction (`broker/log/cleaner.py`) and recovery: the cleaner keeps the latest
record per key in the closed segments without changing offsets or touching the active
segment, keeps tombstones for delete.retention.ms, composes with retention for
`compact,delete`; a crash in the middle of a segment swap is repaired on start with no
loss and no duplication; and idempotent-producer state survives restarts."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.clock import ManualClock
from broker.log.cleaner import clean, complete_interrupted_swaps
from broker.log.files import FILES
from broker.log.partition_log import PartitionLog
from broker.protocol.batch import split_batches, validate_batch
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import Record, build_batch, decode_records
from tests.support.examples import examples
from tests.support.logs import START_MS, Env, environment

DELETE_RETENTION_MS = 3_600_000
PROPERTY_SETTINGS = settings(
    max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
COMPACT = {
    "cleanup.policy": "compact",
    "segment.bytes": "600",
    "index.interval.bytes": "128",
    "delete.retention.ms": str(DELETE_RETENTION_MS),
    "min.cleanable.dirty.ratio": "0.01",
}

# (key, value or None for a tombstone)
keyed_records = st.tuples(
    st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f"]),
    st.one_of(st.none(), st.binary(max_size=60), st.binary(max_size=60)),
)
keyed_batches = st.tuples(
    st.integers(min_value=0, max_value=2000),  # clock advance
    st.lists(keyed_records, min_size=1, max_size=4),
    st.sampled_from([0, 1, 4]),  # none, gzip, zstd
)


def append(
    log: PartitionLog,
    clock: ManualClock,
    records: list[tuple[bytes | None, bytes | None]],
    *,
    advance: int = 10,
    compression: int = 0,
    producer: tuple[int, int, int] | None = None,
) -> list[Record]:
    clock.advance(advance)
    now = clock.now_ms()
    built = [Record(i, now, key, value) for i, (key, value) in enumerate(records)]
    pid, epoch, seq = producer or (-1, -1, -1)
    result = log.append(
        build_batch(built, compression=compression, producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    )
    assert not result.duplicate
    return [replace(r, offset=result.base_offset + r.offset) for r in built]


def read_from(log: PartitionLog, offset: int = 0, max_bytes: int = 1 << 20) -> list[Record]:
    """Every record from `offset`, checking each read returns whole, valid batches in
    increasing offset order, the first one holding `offset` or the next kept one."""
    out: list[Record] = []
    while offset < log.next_offset:
        data = log.read(offset, max_bytes)
        if not data:
            break  # only compaction gaps remain before the log end
        for raw in split_batches(data):
            header = validate_batch(raw)
            assert header.last_offset >= offset
            _, records = decode_records(raw)
            assert all(header.base_offset <= r.offset <= header.last_offset for r in records)
            out += [r for r in records if r.offset >= offset]
            offset = header.last_offset + 1
    return out


def segment_records(log: PartitionLog) -> list[list[Record]]:
    """Records of each segment, read from its file."""
    out = []
    for segment in log.segments:
        records: list[Record] = []
        for raw in split_batches(segment.log_path.read_bytes()):
            validate_batch(raw)
            records += decode_records(raw)[1]
        out.append(records)
    return out


def expected_after_clean(closed: list[Record], drop_tombstones: bool) -> list[Record]:
    latest: dict[bytes | None, int] = {}
    for r in closed:
        latest[r.key] = r.offset
    return [r for r in closed if latest[r.key] == r.offset and not (drop_tombstones and r.value is None)]


def assert_tiles(log: PartitionLog) -> None:
    for before, after in zip(log.segments, log.segments[1:], strict=False):
        assert before.base_offset < after.base_offset
        assert before.next_offset <= after.base_offset


def files(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir()}


# --- compaction ------------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(batches=st.lists(keyed_batches, min_size=2, max_size=25), expire_tombstones=st.booleans(), data=st.data())
def test_clean_keeps_only_the_latest_record_per_key_in_closed_segments_at_unchanged_offsets(
    batches: list[tuple[int, list[tuple[bytes | None, bytes | None]], int]],
    expire_tombstones: bool,
    data: st.DataObject,
) -> None:
    """After clean(log): each key appears once in the closed segments, as its latest
    record there, at its original offset with its original value; tombstones stay until
    delete.retention.ms has passed, then go; the active segment's bytes are untouched;
    reads from any offset and lookups by time see exactly the kept records; a second
    pass changes nothing; a restart keeps the result."""
    with environment(COMPACT) as env:
        log = env.open()
        try:
            written: list[Record] = []
            for advance, records, codec in batches:
                written += append(log, env.clock, records, advance=advance, compression=codec)
            active_base = log.active.base_offset
            active_bytes = log.active.log_path.read_bytes()
            closed = [r for r in written if r.offset < active_base]
            active = [r for r in written if r.offset >= active_base]
            next_offset = log.next_offset
            if expire_tombstones:
                env.clock.advance(DELETE_RETENTION_MS + 10_000)
            expected = expected_after_clean(closed, drop_tombstones=expire_tombstones) + active

            stats = clean(log)
            if not closed:
                assert stats is None
            else:
                assert stats is not None
                assert stats.records_removed == len(closed) - (len(expected) - len(active))
            assert log.next_offset == next_offset
            assert log.active.base_offset == active_base
            assert log.active.log_path.read_bytes() == active_bytes
            assert_tiles(log)
            kept_closed = [r for seg in segment_records(log)[:-1] for r in seg]
            keys = [r.key for r in kept_closed]
            assert len(keys) == len(set(keys)), "a key survived twice in the closed segments"
            assert all(s.size <= log.config.segment_bytes for s in log.segments)
            assert read_from(log) == expected
            by_offset = {r.offset: r for r in expected}
            for offset in data.draw(st.lists(st.integers(0, next_offset - 1), max_size=3), label="offsets"):
                assert read_from(log, offset, data.draw(st.integers(1, 2048), label="max_bytes")) == [
                    r for r in expected if r.offset >= offset
                ]
                if offset in by_offset:
                    assert read_from(log, offset)[0] == by_offset[offset]
            for ts in data.draw(st.lists(st.integers(START_MS, env.clock.now_ms()), max_size=3), label="timestamps"):
                first = next(((r.offset, r.timestamp) for r in expected if r.timestamp >= ts), None)
                assert log.offset_for_timestamp(ts) == first

            again = clean(log)
            assert again is None or again.records_removed == 0
            assert read_from(log) == expected
        finally:
            log.close(clean=True)
        log = env.open(recover=False)
        try:
            assert read_from(log) == expected
            assert log.next_offset == next_offset
        finally:
            log.close(clean=True)


def _compacted_log(env: Env, *, rewrite_b: bool = True) -> tuple[PartitionLog, list[Record]]:
    """Keys a, b, c rewritten every second for twelve rounds, about one batch per
    segment; round 5 deletes `b` (a tombstone) and writes `d` once.  Unless `rewrite_b`,
    `b` is never written again, so its tombstone stays its latest record."""
    log = env.open()
    written: list[Record] = []
    for round_ in range(12):
        keys = (b"a", b"b", b"c") if rewrite_b or round_ < 5 else (b"a", b"c")
        batch: list[tuple[bytes | None, bytes | None]] = [
            (key, f"{key.decode()}-{round_}".encode() * 40) for key in keys
        ]
        if round_ == 5:
            batch = [(b"b", None), (b"d", b"only-once")]
        written += append(log, env.clock, batch, advance=1000)
    assert len(log.segments) >= 8
    return log, written


def test_tombstone_is_kept_until_delete_retention_ms_has_passed_then_dropped() -> None:
    """A tombstone that is the latest record of its key stays through cleaning (so
    consumers catch up on the delete) until its segment is older than
    delete.retention.ms; the next clean drops it, and nothing of its key remains."""
    with environment(COMPACT) as env:
        log, written = _compacted_log(env, rewrite_b=False)
        try:
            log.roll()  # every record written so far is in a closed segment
            append(log, env.clock, [(b"e", b"in-the-active-segment")])
            clean(log)
            closed = [r for seg in segment_records(log)[:-1] for r in seg]
            assert [(r.key, r.value) for r in closed if r.key == b"b"] == [(b"b", None)]
            assert {r.key for r in closed} == {b"a", b"b", b"c", b"d"}

            env.clock.advance(DELETE_RETENTION_MS - 60_000)  # not yet
            clean(log)
            closed = [r for seg in segment_records(log)[:-1] for r in seg]
            assert [(r.key, r.value) for r in closed if r.key == b"b"] == [(b"b", None)]

            env.clock.advance(60_000 + 30_000)  # every closed segment is now older than the horizon
            stats = clean(log)
            assert stats is not None
            assert stats.records_removed == 1
            closed = [r for seg in segment_records(log)[:-1] for r in seg]
            assert b"b" not in {r.key for r in closed}
            assert {r.key for r in closed} == {b"a", b"c", b"d"}
            latest = {r.key: r for r in written}
            for record in closed:
                assert record == latest[record.key], "offsets and values must not change"
        finally:
            log.close(clean=True)


def test_tombstone_superseded_by_a_newer_value_goes_at_once_and_the_value_stays() -> None:
    """A key deleted then written again: the tombstone is not its latest record, so the
    first clean drops it with the older values and keeps the new value."""
    with environment(COMPACT) as env:
        log, _ = _compacted_log(env)  # `b` is written again after its tombstone
        try:
            append(log, env.clock, [(b"f", b"roll")])
            log.roll()
            clean(log)
            closed = [r for seg in segment_records(log)[:-1] for r in seg]
            b_records = [r for r in closed if r.key == b"b"]
            assert [r.value for r in b_records] == [b"b-11" * 40]
        finally:
            log.close(clean=True)


def test_compact_delete_applies_retention_and_compaction_while_compact_alone_never_deletes() -> None:
    """`compact,delete`: segments past retention.ms are deleted (log start advances),
    and what remains is still compacted.  `compact` alone keeps every segment."""
    for policy, deletes in (("compact,delete", True), ("compact", False)):
        with environment({**COMPACT, "cleanup.policy": policy, "retention.ms": "20000"}) as env:
            log, written = _compacted_log(env)
            try:
                clean(log)
                before = read_from(log)
                first, last_closed = log.segments[0], log.segments[-2]
                assert first.max_timestamp < last_closed.max_timestamp
                # Now the first segment's newest record is just past retention.ms, the last
                # closed segment's is not.
                env.clock.advance(first.max_timestamp + 20_000 + 1 - env.clock.now_ms())
                now = env.clock.now_ms()
                assert now - last_closed.max_timestamp <= 20_000
                expired = 0
                for segment in log.segments[:-1]:
                    if now - segment.max_timestamp <= 20_000:
                        break
                    expired += 1
                deleted = log.apply_retention()
                if not deletes:
                    assert deleted == 0
                    assert log.log_start_offset == 0
                    assert read_from(log) == before
                    continue
                assert deleted == expired >= 1
                start = log.log_start_offset
                assert start == log.segments[0].base_offset > 0
                assert read_from(log, start) == [r for r in before if r.offset >= start]
                assert all(now - s.max_timestamp <= 20_000 for s in log.segments[:-1])
                with pytest.raises(KafkaError) as caught:
                    log.read(start - 1, 1024)
                assert caught.value.code == ErrorCode.offset_out_of_range
                # Compaction still works on what is left.
                append(log, env.clock, [(b"a", b"newest-a")])
                log.roll()
                clean(log)
                closed = [r for seg in segment_records(log)[:-1] for r in seg]
                assert [r.value for r in closed if r.key == b"a"] == [b"newest-a"]
                assert written[-1].offset < log.next_offset
            finally:
                log.close(clean=True)


# --- interrupted swaps -----------------------------------------------------------------


@contextmanager
def cleaned_copy(env: Env, log: PartitionLog) -> Iterator[tuple[Path, list[Record], list[int]]]:
    """Close `log`, clean a copy of its directory: (copy dir, its records, its segment
    bases).  The original directory stays uncleaned."""
    log.close(clean=True)
    copy = env.directory.with_name("copy")
    shutil.copytree(env.directory, copy)
    other = env.open(directory=copy)
    try:
        clean(other)
        records = read_from(other)
        bases = [s.base_offset for s in other.segments]
    finally:
        other.close(clean=True)
    yield copy, records, bases


def test_leftover_cleaned_file_is_discarded_on_start_with_no_loss() -> None:
    """A crash while writing `.log.cleaned` (before the swap began): on start the
    half-written file is deleted and the old segments serve every record as before;
    cleaning again gives the same result as an uninterrupted clean."""
    with environment(COMPACT) as env:
        log, written = _compacted_log(env)
        with cleaned_copy(env, log) as (copy, cleaned_records, _):
            cleaned_first = (copy / f"{0:020d}.log").read_bytes()
            (env.directory / f"{0:020d}.log.cleaned").write_bytes(cleaned_first[: len(cleaned_first) // 2])
            for recover in (True, False):
                log = env.open(recover=recover)
                try:
                    assert not any(name.endswith(".cleaned") for name in files(env.directory))
                    assert read_from(log) == written
                finally:
                    log.close(clean=True)
                (env.directory / f"{0:020d}.log.cleaned").write_bytes(cleaned_first)
            log = env.open()
            try:
                clean(log)
                assert read_from(log) == cleaned_records
            finally:
                log.close(clean=True)


@pytest.mark.parametrize("old_deleted", [0, 1, 2], ids=["none-deleted", "first-deleted", "two-deleted"])
@pytest.mark.parametrize("recover", [True, False])
def test_interrupted_swap_is_completed_on_start_with_no_loss_or_duplication(old_deleted: int, recover: bool) -> None:
    """A crash after `.log.cleaned` became `.log.swap`, with none, the first or the first
    two old segments already deleted: on start the swap is finished -- the replaced old
    segments go, the swap becomes the segment -- and the log equals an uninterrupted
    clean: no record lost, none served twice, offsets unchanged."""
    with environment(COMPACT) as env:
        log, written = _compacted_log(env)
        old_bases = [s.base_offset for s in log.segments]
        with cleaned_copy(env, log) as (copy, cleaned_records, cleaned_bases):
            # Crash in the middle of swapping the first group of the clean.
            group_end = cleaned_bases[1]
            replaced = [b for b in old_bases if b < group_end]
            assert len(replaced) >= 3, "the first group must merge several old segments"
            swap = env.directory / f"{0:020d}.log.swap"
            swapped = (copy / f"{0:020d}.log").read_bytes()
            swap.write_bytes(swapped)
            swap_last = max(validate_batch(raw).last_offset for raw in split_batches(swapped))
            assert swap_last < group_end
            for base in replaced[:old_deleted]:
                for suffix in (".log", ".index", ".timeindex"):
                    (env.directory / f"{base:020d}{suffix}").unlink()

            log = env.open(recover=recover)
            try:
                names = files(env.directory)
                assert not any(n.endswith((".swap", ".cleaned")) for n in names)
                # As in Kafka, the old segments replaced are those whose base offset lies in
                # the swap's offset range; later members of the group (whose records were
                # all compacted away) stay, uncleaned, until the next pass.
                assert [s.base_offset for s in log.segments] == [0, *[b for b in old_bases if b > swap_last]]
                expected = [r for r in cleaned_records if r.offset <= swap_last] + [
                    r
                    for r in written
                    if r.offset > swap_last and r.offset >= min(b for b in old_bases if b > swap_last)
                ]
                got = read_from(log)
                assert got == expected
                offsets = [r.offset for r in got]
                assert offsets == sorted(set(offsets)), "a record is served twice"
                assert log.next_offset == written[-1].offset + 1
                # The repaired log keeps working: appends and a further clean.
                more = append(log, env.clock, [(b"a", b"after-repair")])
                assert more[0].offset == written[-1].offset + 1
                log.roll()
                clean(log)
                assert [r.value for r in read_from(log) if r.key == b"a"] == [b"after-repair"]
            finally:
                log.close(clean=True)


def test_complete_interrupted_swaps_on_an_empty_swap_removes_only_the_replaced_segment() -> None:
    """Every record of the first segment was compacted away: the swap file is empty.
    Finishing it replaces exactly that segment (now empty) and keeps all later ones."""
    with environment(COMPACT) as env:
        log, written = _compacted_log(env)
        bases = [s.base_offset for s in log.segments]
        log.close(clean=True)
        (env.directory / f"{0:020d}.log.swap").write_bytes(b"")
        complete_interrupted_swaps(env.directory)
        assert (env.directory / f"{0:020d}.log").stat().st_size == 0
        log = env.open(recover=True)
        try:
            assert [s.base_offset for s in log.segments] == bases
            assert read_from(log) == [r for r in written if r.offset >= bases[1]]
        finally:
            log.close(clean=True)


# --- producer state --------------------------------------------------------------------

PID, EPOCH = 4242, 0


def _idempotent_log(env: Env) -> tuple[PartitionLog, list[tuple[bytes, int]]]:
    """Batches of one producer, sequences 0.., over several segments.  Returns the log
    and, per batch, (bytes as the client sent them, base offset)."""
    log = env.open()
    sent: list[tuple[bytes, int]] = []
    seq = 0
    for i in range(10):
        records = [Record(j, env.clock.now_ms(), b"k", f"v{i}-{j}".encode() * 10) for j in range(3)]
        raw = build_batch(records, producer_id=PID, producer_epoch=EPOCH, base_sequence=seq)
        result = log.append(raw)
        assert not result.duplicate
        sent.append((raw, result.base_offset))
        seq += len(records)
        env.clock.advance(10)
    assert len(log.segments) >= 3
    return log, sent


def _assert_dedup(log: PartitionLog, sent: list[tuple[bytes, int]]) -> None:
    """The last five batches are recognised as retries: same offsets, nothing written;
    a batch that skips a sequence is out of order; the next one is appended."""
    end = log.next_offset
    for raw, base in sent[-5:]:
        result = log.append(raw)
        assert result.duplicate
        assert result.base_offset == base
    assert log.next_offset == end
    last_seq = 3 * len(sent) - 1
    gap = build_batch(
        [Record(0, START_MS, b"k", b"gap")], producer_id=PID, producer_epoch=EPOCH, base_sequence=last_seq + 2
    )
    with pytest.raises(KafkaError) as caught:
        log.append(gap)
    assert caught.value.code == ErrorCode.out_of_order_sequence_number
    following = build_batch(
        [Record(0, log.clock.now_ms(), b"k", b"next")],
        producer_id=PID,
        producer_epoch=EPOCH,
        base_sequence=last_seq + 1,
    )
    result = log.append(following)
    assert not result.duplicate
    assert result.base_offset == end


@pytest.mark.parametrize("shutdown", ["clean", "unclean", "crash", "crash-no-snapshots"])
def test_duplicate_of_the_last_batches_is_detected_after_restart(shutdown: str) -> None:
    """Idempotent batches, then a restart -- clean (snapshot), unclean (no seal, no
    snapshot), a crash (not even index entries flushed), or a crash with every producer
    snapshot lost: the producer state is rebuilt and a retry of any of the last five
    batches is still a duplicate, not a second copy."""
    with environment({"segment.bytes": "400"}) as env:
        log, sent = _idempotent_log(env)
        if shutdown == "clean":
            log.close(clean=True)
        elif shutdown == "unclean":
            log.close(clean=False)
        else:
            for segment in log.segments:
                FILES.release(segment)
                segment.closed = True
            if shutdown == "crash-no-snapshots":
                for snapshot in env.directory.glob("*.snapshot"):
                    snapshot.unlink()
        log = env.open(recover=shutdown != "clean")
        try:
            _assert_dedup(log, sent)
        finally:
            log.close(clean=True)


def test_batch_lost_in_a_torn_tail_is_not_mistaken_for_a_duplicate() -> None:
    """After a crash that tore the last batches off the active segment, retrying them
    appends them again at the recovered log end (they are gone, so they are not
    duplicates), while retries of surviving batches are still duplicates; a producer
    snapshot taken past the new log end is discarded."""
    with environment({"segment.bytes": "400"}) as env:
        log, sent = _idempotent_log(env)
        log.close(clean=True)  # snapshot at the log end
        log = env.open()
        active = log.active
        more: list[tuple[bytes, int]] = []
        seq = 3 * len(sent)
        for i in range(2):
            records = [Record(0, env.clock.now_ms(), b"k", f"more-{i}".encode())]
            raw = build_batch(records, producer_id=PID, producer_epoch=EPOCH, base_sequence=seq + i)
            more.append((raw, log.append(raw).base_offset))
        path = active.log_path
        for segment in log.segments:
            FILES.release(segment)
            segment.closed = True
        # Tear off both new batches and half of the last old one in the active segment.
        content = path.read_bytes()
        cut = len(content) - sum(len(raw) for raw, _ in more) - len(sent[-1][0]) // 2
        path.write_bytes(content[:cut])

        log = env.open(recover=True)
        try:
            assert log.next_offset == sent[-1][1], "the torn batch and everything after it are gone"
            for raw, base in sent[-5:-1]:
                result = log.append(raw)
                assert result.duplicate
                assert result.base_offset == base
            for raw, _ in [sent[-1], *more]:
                end = log.next_offset
                result = log.append(raw)
                assert not result.duplicate
                assert result.base_offset == end
            values = [r.value for r in read_from(log) if r.value and r.value.startswith(b"more-")]
            assert values == [b"more-0", b"more-1"]
        finally:
            log.close(clean=True)
