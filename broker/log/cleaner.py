"""Log compaction for `cleanup.policy=compact` (and `compact,delete`).

A pass over one partition runs in three steps so that the event loop only ever does the
short ones:
1. `plan` (loop): pick the closed segments old enough to clean;
2. `build` (any thread): map every key in them to its latest offset (16-byte digests, so the
   map does not grow with key sizes), then rewrite them keeping only those records, dropping
   tombstones whose segment is older than `delete.retention.ms`; batches keep their base and
   last offsets (a filtered batch still spans its original range, as in Kafka), untouched
   batches are copied byte for byte, and consecutive small segments are merged up to
   `segment.bytes`.  Each merged group becomes a complete segment (log, indexes, fsynced) in a
   staging directory, so nothing the partition serves is touched;
3. `install` (loop, one group at a time): the staged log is renamed to `.swap`, the old
   segments deleted, `.swap` renamed to `.log` beside its indexes, and the new segment loaded.
   A crash at any point is finished or rolled back on start by `complete_interrupted_swaps`.

Offsets never change.  The active segment is never cleaned, nor anything at or past the last
stable offset (an open transaction may still abort).  Transaction markers are kept as they
are; the records of aborted transactions are removed and never count as a key's latest value.
A batch that cannot be decoded (stored before produce-time validation existed, or damaged) is
kept as it is and its keys do not count.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import structlog

from broker.log.segment import LogSegment, fsync_dir, segment_name
from broker.protocol.batch import (
    ATTR_TRANSACTIONAL,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    InvalidBatch,
    iter_headers,
    parse_header,
    peek_offset_and_length,
)
from broker.protocol.records import Record, build_batch, decode_records

if TYPE_CHECKING:
    from broker.clock import Clock
    from broker.log.txn_index import AbortedTxn
    from broker.topic_configs import LogConfig

log_ = structlog.get_logger("broker.cleaner")

CHECKPOINT = "cleaner-offset-checkpoint"
STAGING = ".cleaner-staging"


class CleanableLog(Protocol):
    """What a pass reads and changes of a partition's log.  `PartitionLog` is one; it is
    described here rather than imported, as the log calls on this module to recover an
    interrupted swap when it opens."""

    directory: Path
    topic: str
    partition: int
    config: LogConfig
    clock: Clock
    segments: list[LogSegment]
    log_start_offset: int

    @property
    def last_stable_offset(self) -> int: ...

    def aborted_transactions(self, fetch_offset: int, upper_offset: int) -> list[AbortedTxn]: ...

    def retire(self, segments: list[LogSegment]) -> None: ...


@dataclass(frozen=True)
class CleanStats:
    segments_before: int
    segments_after: int
    bytes_before: int
    bytes_after: int
    records_removed: int
    undecodable_batches: int = 0


@dataclass(frozen=True)
class BuildSpec:
    """What the build needs of a plan, and nothing of the live log: it pickles, so the
    build can run in another process (where it does not compete for the interpreter lock
    with the event loop)."""

    directory: Path
    paths: list[Path]
    base_offsets: list[int]
    next_offsets: list[int]
    max_timestamps: list[int]
    now: int
    delete_retention_ms: int
    segment_bytes: int
    index_interval_bytes: int
    aborted: tuple[tuple[int, int, int], ...] = ()  # (producer id, first offset, marker offset)
    # segment.index.bytes, and each segment's (offset, time) index entries: a merged group's
    # indexes must fit too, as Kafka's cleaner groups segments.
    segment_index_bytes: int = 10 * 1024 * 1024
    index_entries: tuple[tuple[int, int], ...] = ()


@dataclass
class CleanPlan:
    """What one pass will clean, captured on the loop: the live segments, and the spec their
    compacted copies are built from."""

    closed: list[LogSegment]
    spec: BuildSpec


@dataclass(frozen=True)
class BuiltGroup:
    members: list[int]  # indexes into the plan's segments
    base_offset: int
    next_offset: int
    size: int


@dataclass
class Built:
    staging: Path
    groups: list[BuiltGroup] = field(default_factory=list)
    bytes_before: int = 0
    records_removed: int = 0
    undecodable: int = 0


@dataclass
class StagedGroup:
    members: list[LogSegment]
    base_offset: int
    next_offset: int
    size: int


@dataclass
class CleanResult:
    """What `build_files` made, with the plan's segments in place of their indexes."""

    built: Built
    groups: list[StagedGroup]
    upto: int  # the offset up to which the pass cleaned (its last segment's end)

    @property
    def staging(self) -> Path:
        return self.built.staging


def _batches(path: Path) -> Iterator[bytes]:
    data = path.read_bytes()
    for pos, header in iter_headers(data):
        yield data[pos : pos + header.size]


def _key_digest(key: bytes | None) -> bytes:
    return b"" if key is None else hashlib.blake2b(key, digest_size=16).digest()


def _aborted(header: BatchHeader, aborted: tuple[tuple[int, int, int], ...]) -> bool:
    if not header.is_transactional or header.is_control:
        return False
    return any(pid == header.producer_id and first <= header.base_offset < marker for pid, first, marker in aborted)


def _decoded(raw: bytes) -> list[Record] | None:
    try:
        return decode_records(raw)[1]
    except InvalidBatch:
        return None


def first_dirty_offset(log: CleanableLog) -> int:
    path = log.directory / CHECKPOINT
    try:
        return int(path.read_text())
    except (FileNotFoundError, ValueError):
        return log.log_start_offset


def dirty_ratio(log: CleanableLog) -> float:
    closed = log.segments[:-1]
    total = sum(s.size for s in closed)
    if total == 0:
        return 0.0
    start = first_dirty_offset(log)
    dirty = sum(s.size for s in closed if s.next_offset > start)
    return dirty / total


def needs_cleaning(log: CleanableLog) -> bool:
    if not (log.config.compact and len(log.segments) > 1):
        return False
    return dirty_ratio(log) >= log.config.min_cleanable_dirty_ratio or compaction_overdue(log)


def compaction_overdue(log: CleanableLog) -> bool:
    """max.compaction.lag.ms: a closed dirty segment whose first batch is older than this
    must be cleaned whatever the dirty ratio (Kafka's maxCompactionDelay)."""
    start = first_dirty_offset(log)
    horizon = log.clock.now_ms() - log.config.max_compaction_lag_ms
    return any(0 < s.first_batch_timestamp < horizon for s in log.segments[:-1] if s.next_offset > start and s.size > 0)


def plan(log: CleanableLog) -> CleanPlan | None:
    """The closed segments to clean (loop thread).  Records younger than
    min.compaction.lag.ms stay untouched: stop at the first segment that holds any."""
    now = log.clock.now_ms()
    stable = log.last_stable_offset
    closed: list[LogSegment] = []
    for segment in log.segments[:-1]:
        if now - segment.max_timestamp < log.config.min_compaction_lag_ms or segment.next_offset > stable:
            break
        closed.append(segment)
    if not closed:
        return None
    end = closed[-1].next_offset
    spec = BuildSpec(
        directory=log.directory,
        paths=[s.log_path for s in closed],
        base_offsets=[s.base_offset for s in closed],
        next_offsets=[s.next_offset for s in closed],
        max_timestamps=[s.max_timestamp for s in closed],
        now=now,
        delete_retention_ms=log.config.delete_retention_ms,
        segment_bytes=log.config.segment_bytes,
        index_interval_bytes=log.config.index_interval_bytes,
        aborted=tuple(
            (t.producer_id, t.first_offset, t.last_offset) for t in log.aborted_transactions(closed[0].base_offset, end)
        ),
        segment_index_bytes=log.config.segment_index_bytes,
        index_entries=tuple((len(s.offset_index.rel_offsets), len(s.time_index.timestamps)) for s in closed),
    )
    return CleanPlan(closed, spec)


def build(plan: CleanPlan) -> CleanResult:
    """`build_files` and `attach`, in this thread (the synchronous `clean`)."""
    return attach(plan, build_files(plan.spec))


def attach(plan: CleanPlan, built: Built) -> CleanResult:
    groups = [
        StagedGroup([plan.closed[i] for i in g.members], g.base_offset, g.next_offset, g.size) for g in built.groups
    ]
    return CleanResult(built, groups, upto=plan.closed[-1].next_offset)


def build_files(plan: BuildSpec) -> Built:
    """Write the compacted segments into the staging directory.  It reads closed segments'
    files, which nothing else writes, and touches no live state: safe in a worker thread or
    another process (the broker uses a process, `cleaner_worker`: hundreds of thousands of
    records decoded in a thread would hold the interpreter lock against the event loop)."""
    latest: dict[bytes, int] = {}
    undecodable = 0
    for path in plan.paths:
        for raw in _batches(path):
            header = parse_header(raw)
            if header.is_control or _aborted(header, plan.aborted):
                continue
            records = _decoded(raw)
            if records is None:
                undecodable += 1
                continue
            for record in records:
                latest[_key_digest(record.key)] = record.offset

    staging = plan.directory / STAGING
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    result = Built(staging=staging, undecodable=undecodable)
    tombstone_horizon = plan.now - plan.delete_retention_ms
    pending: list[tuple[list[int], bytearray]] = []
    pending_entries = (0, 0)  # index entries of the pending group's members
    for segment, (path, max_ts) in enumerate(zip(plan.paths, plan.max_timestamps, strict=True)):
        out = bytearray()
        drop_tombstones = max_ts < tombstone_horizon
        size = 0
        for raw in _batches(path):
            size += len(raw)
            header = parse_header(raw)
            if header.is_control:
                out += raw  # markers stay: read_committed readers need them to end aborts
                continue
            if _aborted(header, plan.aborted):
                result.records_removed += header.records_count
                continue
            records = _decoded(raw)
            if records is None:
                out += raw  # kept as stored: the cleaner never drops what it cannot read
                continue
            kept = [
                r
                for r in records
                if latest.get(_key_digest(r.key)) == r.offset and not (r.value is None and drop_tombstones)
            ]
            result.records_removed += len(records) - len(kept)
            if len(kept) == len(records):
                out += raw
            elif kept:
                out += build_batch(
                    kept,
                    base_offset=header.base_offset,
                    last_offset=header.last_offset,
                    compression=header.compression,
                    log_append_time=header.is_log_append_time,
                    producer_id=header.producer_id,
                    producer_epoch=header.producer_epoch,
                    base_sequence=header.base_sequence,
                    attributes_extra=ATTR_TRANSACTIONAL if header.is_transactional else 0,
                    partition_leader_epoch=header.partition_leader_epoch,
                )
        result.bytes_before += size
        entries = plan.index_entries[segment] if plan.index_entries else (0, 0)
        merged = (pending_entries[0] + entries[0], pending_entries[1] + entries[1])
        if (
            pending
            and len(pending[-1][1]) + len(out) <= plan.segment_bytes
            and merged[0] * 8 <= plan.segment_index_bytes
            and merged[1] * 12 <= plan.segment_index_bytes
        ):
            pending[-1][0].append(segment)
            pending[-1][1].extend(out)
            pending_entries = merged
        else:
            if pending:
                result.groups.append(_stage(plan, staging, *pending.pop()))
            pending.append(([segment], out))
            pending_entries = entries
    if pending:
        result.groups.append(_stage(plan, staging, *pending.pop()))
    fsync_dir(staging)
    return result


def _stage(plan: BuildSpec, staging: Path, members: list[int], data: bytearray) -> BuiltGroup:
    base = plan.base_offsets[members[0]]
    with open(staging / f"{segment_name(base)}.log", "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    segment = LogSegment(staging, base, index_interval_bytes=plan.index_interval_bytes, created_ms=plan.now)
    try:
        segment.rebuild()
        segment.seal()
        for path in (segment.offset_index.path, segment.time_index.path):
            with open(path, "rb") as f:
                os.fsync(f.fileno())
        next_offset = max(segment.next_offset, plan.next_offsets[members[-1]])
    finally:
        segment.close()
    return BuiltGroup(members=members, base_offset=base, next_offset=next_offset, size=len(data))


def _members_in_place(log: CleanableLog, group: StagedGroup) -> int | None:
    """Where the group's segments still are in the log, or None if retention changed them."""
    members = group.members
    try:
        i = log.segments.index(members[0])
    except ValueError:
        return None
    if log.segments[i : i + len(members)] != members or i + len(members) >= len(log.segments):
        return None
    return i


def begin_install(log: CleanableLog, group: StagedGroup, staging: Path) -> Path | None:
    """First step of swapping a staged group in (loop thread): its log file renamed to a
    `.swap` beside the segments.  The caller makes that rename durable (`fsync_dir`, off the
    loop if it likes) before `commit_install`.  None, changing nothing, when the group's
    segments changed meanwhile."""
    if _members_in_place(log, group) is None:
        return None
    swap = log.directory / f"{segment_name(group.base_offset)}.log.swap"
    os.replace(staging / f"{segment_name(group.base_offset)}.log", swap)
    return swap


def commit_install(log: CleanableLog, group: StagedGroup, staging: Path, swap: Path) -> bool:
    """Second step (loop thread): the old segments go, the new one takes their place, in the
    files and in the log; a crash from here on finishes the swap at the next start.  If the
    segments changed while the rename was made durable, the swap is dropped instead and
    False returned.  The caller makes the final names durable afterwards."""
    i = _members_in_place(log, group)
    if i is None:
        swap.unlink(missing_ok=True)
        return False
    name = segment_name(group.base_offset)
    log.retire(list(group.members))  # renamed out of the way at once, removed after file.delete.delay.ms
    for suffix in (".index", ".timeindex"):
        os.replace(staging / f"{name}{suffix}", log.directory / f"{name}{suffix}")
    os.replace(swap, log.directory / f"{name}.log")
    replacement = LogSegment(
        log.directory,
        group.base_offset,
        index_interval_bytes=log.config.index_interval_bytes,
        created_ms=log.clock.now_ms(),
    )
    replacement.load(recover=False)
    replacement.next_offset = max(replacement.next_offset, group.next_offset)
    log.segments[i : i + len(group.members)] = [replacement]
    return True


def install(log: CleanableLog, group: StagedGroup, staging: Path) -> bool:
    """Swap one staged group in, all at once (the synchronous `clean`).  Returns False,
    leaving the partition as it was, when its segments changed meanwhile."""
    swap = begin_install(log, group, staging)
    if swap is None:
        return False
    fsync_dir(log.directory)
    installed = commit_install(log, group, staging, swap)
    fsync_dir(log.directory)
    return installed


def finish(log: CleanableLog, result: CleanResult, installed: int) -> CleanStats:
    """Record how far the partition is clean and drop the staging directory (loop thread)."""
    shutil.rmtree(result.staging, ignore_errors=True)
    if installed == len(result.groups):
        # Up to where this pass looked, not the log's end: segments rolled while it was
        # building are still dirty.
        (log.directory / CHECKPOINT).write_text(str(result.upto))
    built = result.built
    if built.undecodable:
        log_.warning(
            "compaction kept batches it could not decode",
            topic=log.topic,
            partition=log.partition,
            batches=built.undecodable,
        )
    return CleanStats(
        segments_before=sum(len(g.members) for g in result.groups),
        segments_after=len(result.groups),
        bytes_before=built.bytes_before,
        bytes_after=sum(g.size for g in result.groups),
        records_removed=built.records_removed,
        undecodable_batches=built.undecodable,
    )


def discard(result: CleanResult) -> None:
    shutil.rmtree(result.staging, ignore_errors=True)


def clean(log: CleanableLog) -> CleanStats | None:
    """One whole compaction pass at once (tests, and the synchronous `run_cleaner`)."""
    chosen = plan(log)
    if chosen is None:
        return None
    result = build(chosen)
    installed = sum(install(log, group, result.staging) for group in result.groups)
    return finish(log, result, installed)


def complete_interrupted_swaps(directory: Path) -> None:
    """Recovery: drop a staging directory and half-written `.cleaned` files; finish swaps
    that got as far as `.swap` (every old segment the swap replaces lies inside its offset
    range)."""
    shutil.rmtree(directory / STAGING, ignore_errors=True)
    for cleaned in directory.glob("*.log.cleaned"):
        cleaned.unlink()
    for swap in directory.glob("*.log.swap"):
        base = int(swap.name.split(".")[0])
        data = swap.read_bytes()
        last = base
        pos = 0
        while len(data) - pos >= HEADER_SIZE:
            _, size = peek_offset_and_length(data, pos)
            if size < LOG_OVERHEAD or pos + size > len(data):
                break
            last = int.from_bytes(data[pos : pos + 8], "big") + int.from_bytes(data[pos + 23 : pos + 27], "big")
            pos += size
        for old in directory.glob("*.log"):
            old_base = int(old.name.split(".")[0])
            if base <= old_base <= last:
                for suffix in (".log", ".index", ".timeindex"):
                    (directory / f"{segment_name(old_base)}{suffix}").unlink(missing_ok=True)
        for suffix in (".index", ".timeindex"):
            (directory / f"{segment_name(base)}{suffix}").unlink(missing_ok=True)
        os.replace(swap, directory / f"{segment_name(base)}.log")
