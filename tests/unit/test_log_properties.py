"""Property-based tests of the partition log: arbitrary appends with small segments roll,
read back in order from any offset with contiguous offsets, and survive clean and
unclean restarts, torn or corrupt tails of the active segment, and lost or damaged
indexes -- never serving a corrupt batch."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from broker.clock import ManualClock
from broker.log.files import FILES
from broker.log.partition_log import PartitionLog
from broker.protocol.batch import iter_headers, split_batches, validate_batch
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import Record, build_batch, decode_records
from tests.support.examples import examples
from tests.support.logs import START_MS, environment

PROPERTY_SETTINGS = settings(
    max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)

# (key, value, timestamp jitter around the clock) per record
record_specs = st.tuples(
    st.none() | st.binary(max_size=8),
    st.binary(max_size=80),
    st.integers(min_value=-1000, max_value=1000),
)
# (clock advance before the append, records)
batch_specs = st.tuples(st.integers(min_value=0, max_value=3000), st.lists(record_specs, min_size=1, max_size=5))
appends = st.lists(batch_specs, min_size=1, max_size=30)
log_overrides = st.fixed_dictionaries(
    {
        "segment.bytes": st.integers(min_value=700, max_value=3000).map(str),
        "index.interval.bytes": st.sampled_from(["0", "64", "256", "4096"]),
        "segment.ms": st.sampled_from(["5000", "60000", "604800000"]),
    }
)


@dataclass
class Model:
    """What the log must hold: record i has offset i."""

    records: list[Record] = field(default_factory=list)


def append_all(
    log: PartitionLog, clock: ManualClock, specs: list[tuple[int, list[tuple[bytes | None, bytes, int]]]], model: Model
) -> None:
    for advance, recs in specs:
        clock.advance(advance)
        now = clock.now_ms()
        records = [Record(i, now + jitter, key, value) for i, (key, value, jitter) in enumerate(recs)]
        result = log.append(build_batch(records))
        assert not result.duplicate
        assert result.base_offset == len(model.records), "offsets must be contiguous"
        assert result.last_offset == result.base_offset + len(records) - 1
        model.records += [replace(r, offset=result.base_offset + r.offset) for r in records]
    assert log.next_offset == len(model.records)


def read_from(log: PartitionLog, offset: int, max_bytes: int) -> list[Record]:
    """Every record from `offset` to the end, checking each read is whole, valid batches
    in offset order, the first holding `offset`, within `max_bytes` unless a single
    batch is larger."""
    out: list[Record] = []
    while offset < log.next_offset:
        data = log.read(offset, max_bytes)
        assert data, f"empty read at {offset} below the log end {log.next_offset}"
        batches = split_batches(data)
        assert len(data) <= max_bytes or len(batches) == 1
        for i, raw in enumerate(batches):
            header = validate_batch(raw)  # never a corrupt batch
            if i == 0:
                assert header.base_offset <= offset <= header.last_offset
            else:
                assert header.base_offset == offset, "batches must be contiguous"
            _, records = decode_records(raw)
            out += [r for r in records if r.offset >= offset]
            offset = header.last_offset + 1
    assert log.read(log.next_offset, max_bytes) == b""
    return out


def first_at_or_after(model: Model, timestamp: int) -> tuple[int, int] | None:
    for r in model.records:
        if r.timestamp >= timestamp:
            return r.offset, r.timestamp
    return None


def assert_log_holds(log: PartitionLog, model: Model, data: st.DataObject) -> None:
    """Structure, reads from any offset, and lookups by time all match the model."""
    assert log.next_offset == len(model.records)
    segment_bytes = log.config.segment_bytes
    assert log.segments[0].base_offset == 0
    for before, after in zip(log.segments, log.segments[1:], strict=False):
        assert after.base_offset == before.next_offset, "segments must tile the offsets"
    for segment in log.segments:
        assert segment.size <= segment_bytes
        assert segment.size == segment.log_path.stat().st_size
    if log.size_bytes > segment_bytes:
        assert len(log.segments) > 1, "the log must have rolled"

    max_bytes = data.draw(st.integers(min_value=1, max_value=4096), label="max_bytes")
    assert read_from(log, 0, max_bytes) == model.records
    if model.records:
        for offset in data.draw(
            st.lists(st.integers(min_value=0, max_value=len(model.records) - 1), max_size=3), label="offsets"
        ):
            assert read_from(log, offset, max_bytes) == model.records[offset:]
    with pytest.raises(KafkaError) as caught:
        log.read(len(model.records) + 1, 1024)
    assert caught.value.code == ErrorCode.offset_out_of_range

    lowest = min((r.timestamp for r in model.records), default=START_MS)
    highest = max((r.timestamp for r in model.records), default=START_MS)
    for ts in data.draw(
        st.lists(st.integers(min_value=lowest - 10, max_value=highest + 10), max_size=4), label="timestamps"
    ):
        assert log.offset_for_timestamp(ts) == first_at_or_after(model, ts)


def crash(log: PartitionLog) -> None:
    """Process death: the OS keeps every write, nothing still in memory (unflushed index
    entries, the active segment's seal, producer snapshot) reaches the disk."""
    for segment in log.segments:
        FILES.release(segment)
        segment.closed = True


# --- append, roll, read --------------------------------------------------------------


@PROPERTY_SETTINGS
@given(overrides=log_overrides, specs=appends, data=st.data())
def test_appends_roll_and_read_back_in_order_from_any_offset(
    overrides: dict[str, str], specs: list[tuple[int, list[tuple[bytes | None, bytes, int]]]], data: st.DataObject
) -> None:
    """Any sequence of appends with small segment.bytes / segment.ms: offsets are
    contiguous, the log rolls, every read from any offset returns whole valid batches in
    order, and ListOffsets by time finds the first record at or after it."""
    with environment(overrides) as env:
        log = env.open(recover=False)
        model = Model()
        try:
            append_all(log, env.clock, specs, model)
            assert_log_holds(log, model, data)
        finally:
            log.close(clean=True)


@PROPERTY_SETTINGS
@given(overrides=log_overrides, specs=appends, more=appends, data=st.data())
def test_clean_close_and_reopen_keeps_everything(
    overrides: dict[str, str],
    specs: list[tuple[int, list[tuple[bytes | None, bytes, int]]]],
    more: list[tuple[int, list[tuple[bytes | None, bytes, int]]]],
    data: st.DataObject,
) -> None:
    """close(clean=True) then reopen without recovery: same records, same offsets, and
    appends continue at the old log end."""
    with environment(overrides) as env:
        model = Model()
        log = env.open(recover=False)
        append_all(log, env.clock, specs, model)
        segments = [s.base_offset for s in log.segments]
        log.close(clean=True)
        log = env.open(recover=False)
        try:
            assert log.truncated_bytes == 0
            assert [s.base_offset for s in log.segments] == segments
            assert_log_holds(log, model, data)
            append_all(log, env.clock, more, model)
            assert_log_holds(log, model, data)
        finally:
            log.close(clean=True)


@PROPERTY_SETTINGS
@given(overrides=log_overrides, specs=appends, more=appends, hard=st.booleans(), data=st.data())
def test_unclean_shutdown_then_recovery_keeps_everything(
    overrides: dict[str, str],
    specs: list[tuple[int, list[tuple[bytes | None, bytes, int]]]],
    more: list[tuple[int, list[tuple[bytes | None, bytes, int]]]],
    hard: bool,
    data: st.DataObject,
) -> None:
    """close(clean=False) (no seal, no snapshot) or a hard crash (not even the index
    entries still in memory are written), then reopen with recover=True: every record
    written is there, nothing is truncated, and appends continue at the right offset."""
    with environment(overrides) as env:
        model = Model()
        log = env.open(recover=False)
        append_all(log, env.clock, specs, model)
        if hard:
            crash(log)
        else:
            log.close(clean=False)
        log = env.open(recover=True)
        try:
            assert log.truncated_bytes == 0
            assert_log_holds(log, model, data)
            append_all(log, env.clock, more, model)
            assert_log_holds(log, model, data)
        finally:
            log.close(clean=True)
        log = env.open(recover=False)
        try:
            assert_log_holds(log, model, data)
        finally:
            log.close(clean=True)


# --- torn and corrupt tails ----------------------------------------------------------

damage = st.one_of(
    st.tuples(st.just("truncate"), st.floats(min_value=0, max_value=1), st.binary(max_size=0)),
    st.tuples(st.just("garbage"), st.just(1.0), st.binary(min_size=1, max_size=300)),
    st.tuples(st.just("truncate+garbage"), st.floats(min_value=0, max_value=1), st.binary(min_size=1, max_size=300)),
    st.tuples(st.just("flip"), st.floats(min_value=0, max_value=1), st.binary(min_size=1, max_size=1)),
)


@PROPERTY_SETTINGS
@given(overrides=log_overrides, specs=appends, harm=damage, data=st.data())
def test_torn_or_corrupt_active_segment_recovers_exactly_the_valid_prefix(
    overrides: dict[str, str],
    specs: list[tuple[int, list[tuple[bytes | None, bytes, int]]]],
    harm: tuple[str, float, bytes],
    data: st.DataObject,
) -> None:
    """After a crash the active segment is cut anywhere, has garbage appended, or has
    one byte of a batch changed (anywhere the CRC, length or magic covers): recovery
    keeps exactly the whole valid batches before the damage, truncates the rest, never
    serves a corrupt batch, and the next append gets the next offset."""
    kind, where, garbage = harm
    with environment(overrides) as env:
        model = Model()
        log = env.open(recover=False)
        append_all(log, env.clock, specs, model)
        active = log.active
        path, base = active.log_path, active.base_offset
        crash(log)

        content = path.read_bytes()
        batches = [(pos, h) for pos, h in iter_headers(content)]
        assert sum(h.size for _, h in batches) == len(content)
        if kind == "flip":
            # A byte the broker can detect: not the base offset (0-7) nor the leader
            # epoch (12-15), which are outside the CRC by design.
            index = min(int(where * len(batches)), len(batches) - 1) if batches else 0
            if batches:
                pos, header = batches[index]
                candidates = [*range(8, 12), *range(16, header.size)]
                rel = candidates[min(int(where * len(candidates)), len(candidates) - 1)]
                mask = garbage[0] or 1
                damaged = bytearray(content)
                damaged[pos + rel] ^= mask
                content = bytes(damaged)
                valid_end = pos
            else:
                valid_end = 0
        else:
            cut = int(where * len(content))
            # Garbage that happens to repeat the byte it overwrites is no damage there.
            assume(not garbage or cut == len(content) or garbage[0] != content[cut])
            content = content[:cut] + garbage
            valid_end = max([p + h.size for p, h in batches if p + h.size <= cut], default=0)
        path.write_bytes(content)
        kept_active = [h for p, h in batches if p + h.size <= valid_end]
        expected_next = kept_active[-1].last_offset + 1 if kept_active else base
        model.records = model.records[:expected_next]

        log = env.open(recover=True)
        try:
            assert log.truncated_bytes == len(content) - valid_end
            assert log.active.size == valid_end
            assert log.next_offset == expected_next
            assert_log_holds(log, model, data)
            append_all(log, env.clock, [(1, [(b"k", b"after-recovery", 0)])], model)
            assert_log_holds(log, model, data)
        finally:
            log.close(clean=True)


# --- indexes -------------------------------------------------------------------------

index_damage = st.sampled_from(["delete", "empty-file", "torn-entry", "cut-entry", "zeros-appended", "out-of-order"])


def damage_index(path: Path, how: str, entry_size: int) -> None:
    if how == "delete":
        path.unlink(missing_ok=True)
        return
    content = path.read_bytes() if path.exists() else b""
    if how == "empty-file":
        content = b""
    elif how == "torn-entry":
        content += b"\x00\x01\x02"  # a partial entry, as from a torn write
    elif how == "cut-entry":
        content = content[: max(len(content) - 3, 1)] if content else b"\x07"
    elif how == "zeros-appended":
        content += bytes(entry_size * 2)  # a preallocated, never-written tail
    else:  # out-of-order: the entries reversed, plus one pointing past the log
        entries = [content[i : i + entry_size] for i in range(0, len(content), entry_size)]
        content = b"".join(reversed(entries)) + b"\x7f" * entry_size
    path.write_bytes(content)


@PROPERTY_SETTINGS
@given(
    overrides=log_overrides,
    specs=appends,
    targets=st.lists(
        st.tuples(st.integers(min_value=0, max_value=100), st.booleans(), index_damage), min_size=1, max_size=4
    ),
    recover=st.booleans(),
    data=st.data(),
)
def test_missing_or_damaged_indexes_are_rebuilt_and_reads_stay_correct(
    overrides: dict[str, str],
    specs: list[tuple[int, list[tuple[bytes | None, bytes, int]]]],
    targets: list[tuple[int, bool, str]],
    recover: bool,
    data: st.DataObject,
) -> None:
    """Delete, empty, tear or scramble the .index / .timeindex of any segments after a
    clean shutdown: reopening rebuilds them (with or without recovery), reads from any
    offset and lookups by time stay correct, and the rebuilt files load cleanly next
    time."""
    with environment(overrides) as env:
        model = Model()
        log = env.open(recover=False)
        append_all(log, env.clock, specs, model)
        segments = [(s.offset_index.path, s.time_index.path) for s in log.segments]
        log.close(clean=True)
        for which, time_index, how in targets:
            offset_path, time_path = segments[which % len(segments)]
            damage_index(time_path if time_index else offset_path, how, 12 if time_index else 8)

        log = env.open(recover=recover)
        try:
            assert log.truncated_bytes == 0
            assert_log_holds(log, model, data)
        finally:
            log.close(clean=True)
        for offset_path, time_path in segments:
            assert offset_path.exists()
            assert time_path.exists()
            assert offset_path.stat().st_size % 8 == 0
            assert time_path.stat().st_size % 12 == 0
        log = env.open(recover=False)
        try:
            assert_log_holds(log, model, data)
        finally:
            log.close(clean=True)


def test_empty_time_index_of_a_closed_segment_is_rebuilt_so_time_lookups_and_retention_see_it() -> None:
    """Regression (found by the property above): a zero-length .timeindex -- what a
    crash can leave of a file that was never fsynced -- passed the sanity check, so the
    segment's max timestamp read as -1: lookups by time skipped it and retention stopped
    at it forever.  It must be rebuilt from the log instead."""
    overrides = {"segment.bytes": "700", "retention.ms": "60000"}
    with environment(overrides) as env:
        model = Model()
        log = env.open(recover=False)
        append_all(log, env.clock, [(10, [(b"k", b"x" * 200, 0)])] * 8, model)
        assert len(log.segments) >= 3
        first = log.segments[0]
        first_max = first.max_timestamp
        log.close(clean=True)
        first.time_index.path.write_bytes(b"")

        log = env.open(recover=False)
        try:
            assert log.segments[0].max_timestamp == first_max
            assert log.offset_for_timestamp(START_MS) == (0, model.records[0].timestamp)
            env.clock.advance(60_001 + 10 * 8)
            segments = len(log.segments)
            assert log.apply_retention() == segments  # all expired; the active one rolled away
            assert [s.size for s in log.segments] == [0]
            assert log.log_start_offset == len(model.records)
        finally:
            log.close(clean=True)


def test_closed_segment_with_rebuilt_index_keeps_its_max_timestamp_across_restarts() -> None:
    """Regression (found by the index property): a closed segment whose indexes were
    rebuilt on start lost the roll-time max-timestamp entry; after the next restart the
    segment looked older than it is, so retention deleted records younger than
    retention.ms and lookups by time skipped them."""
    overrides = {"segment.bytes": "700", "index.interval.bytes": "4096", "retention.ms": "60000"}
    with environment(overrides) as env:
        model = Model()
        log = env.open(recover=False)
        append_all(log, env.clock, [(10_000, [(b"k", b"v" * 150, 0)])] * 8, model)
        first = log.segments[0]
        assert first.next_offset == 3, "three batches, ten seconds apart, in the first segment"
        newest_in_first = model.records[2].timestamp
        assert first.max_timestamp == newest_in_first
        log.close(clean=True)
        first.offset_index.path.unlink()  # forces a rebuild of both indexes

        log = env.open(recover=False)
        log.close(clean=True)
        log = env.open(recover=False)  # loads the rebuilt indexes
        try:
            assert log.segments[0].max_timestamp == newest_in_first
            assert log.offset_for_timestamp(newest_in_first - 5_000) == (2, newest_in_first)
            # The first segment's oldest record is past retention, its newest is not.
            assert env.clock.now_ms() - model.records[0].timestamp > 60_000
            assert env.clock.now_ms() - newest_in_first <= 60_000
            assert log.apply_retention() == 0
            assert read_from(log, 0, 1 << 20) == model.records
        finally:
            log.close(clean=True)
