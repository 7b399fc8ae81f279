"""Log compaction for `cleanup.policy=compact` (and `compact,delete`).

A pass over one partition:
1. map every key in the closed segments to its latest offset;
2. rewrite the closed segments keeping only those records, dropping tombstones whose
   segment is older than `delete.retention.ms`; batches keep their base and last offsets
   (a filtered batch still spans its original range, as in Kafka), untouched batches are
   copied byte for byte, and consecutive small segments are merged up to `segment.bytes`;
3. swap the result in: `.cleaned` files are renamed to `.swap`, the old segments
   deleted, then `.swap` renamed to `.log`.  A crash at any point is finished or rolled
   back on start by `complete_interrupted_swaps`.

Offsets never change.  The active segment is never cleaned.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from broker.log.segment import LogSegment, fsync_dir, segment_name
from broker.protocol.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    iter_headers,
    peek_offset_and_length,
)
from broker.protocol.records import build_batch, decode_records

if TYPE_CHECKING:
    from broker.log.partition_log import PartitionLog

CHECKPOINT = "cleaner-offset-checkpoint"


@dataclass(frozen=True)
class CleanStats:
    segments_before: int
    segments_after: int
    bytes_before: int
    bytes_after: int
    records_removed: int


def _read_all_batches(path: Path) -> list[bytes]:
    data = path.read_bytes()
    out = []
    for pos, header in iter_headers(data):
        out.append(data[pos : pos + header.size])
    return out


def first_dirty_offset(log: PartitionLog) -> int:
    path = log.directory / CHECKPOINT
    try:
        return int(path.read_text())
    except (FileNotFoundError, ValueError):
        return log.log_start_offset


def dirty_ratio(log: PartitionLog) -> float:
    closed = log.segments[:-1]
    total = sum(s.size for s in closed)
    if total == 0:
        return 0.0
    start = first_dirty_offset(log)
    dirty = sum(s.size for s in closed if s.next_offset > start)
    return dirty / total


def needs_cleaning(log: PartitionLog) -> bool:
    return log.config.compact and len(log.segments) > 1 and dirty_ratio(log) >= log.config.min_cleanable_dirty_ratio


def clean(log: PartitionLog) -> CleanStats | None:
    """One compaction pass over the closed segments of `log` (loop thread)."""
    now = log.clock.now_ms()
    # Records younger than min.compaction.lag.ms stay untouched: stop at the first
    # segment that holds any.
    closed: list[LogSegment] = []
    for segment in log.segments[:-1]:
        if now - segment.max_timestamp < log.config.min_compaction_lag_ms:
            break
        closed.append(segment)
    if not closed:
        return None
    batches_per_segment = [_read_all_batches(s.log_path) for s in closed]

    latest: dict[bytes | None, int] = {}
    for batches in batches_per_segment:
        for raw in batches:
            _, records = decode_records(raw)
            for record in records:
                latest[record.key] = record.offset

    tombstone_horizon = now - log.config.delete_retention_ms
    groups: list[tuple[list[LogSegment], bytearray]] = []
    removed = 0
    for segment, batches in zip(closed, batches_per_segment, strict=True):
        out = bytearray()
        drop_tombstones = segment.max_timestamp < tombstone_horizon
        for raw in batches:
            header, records = decode_records(raw)
            kept = [r for r in records if latest.get(r.key) == r.offset and not (r.value is None and drop_tombstones)]
            removed += len(records) - len(kept)
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
                    partition_leader_epoch=header.partition_leader_epoch,
                )
        if groups and len(groups[-1][1]) + len(out) <= log.config.segment_bytes:
            groups[-1][0].append(segment)
            groups[-1][1].extend(out)
        else:
            groups.append(([segment], out))

    bytes_before = sum(s.size for s in closed)
    for members, data in groups:
        _swap_in(log, members, bytes(data))
    (log.directory / CHECKPOINT).write_text(str(log.active.base_offset))
    return CleanStats(
        segments_before=len(closed),
        segments_after=len(groups),
        bytes_before=bytes_before,
        bytes_after=sum(len(d) for _, d in groups),
        records_removed=removed,
    )


def _swap_in(log: PartitionLog, members: list[LogSegment], data: bytes) -> None:
    base = members[0].base_offset
    cleaned = log.directory / f"{segment_name(base)}.log.cleaned"
    with open(cleaned, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    swap = cleaned.with_suffix(".swap")
    os.replace(cleaned, swap)
    fsync_dir(log.directory)
    for segment in members:
        segment.delete()
    final = log.directory / f"{segment_name(base)}.log"
    os.replace(swap, final)
    fsync_dir(log.directory)
    replacement = LogSegment(
        log.directory, base, index_interval_bytes=log.config.index_interval_bytes, created_ms=log.clock.now_ms()
    )
    replacement.rebuild()
    replacement.seal()
    replacement.next_offset = max(replacement.next_offset, members[-1].next_offset)
    i = log.segments.index(members[0])
    log.segments[i : i + len(members)] = [replacement]


def complete_interrupted_swaps(directory: Path) -> None:
    """Recovery: drop half-written `.cleaned` files; finish swaps that got as far as
    `.swap` (every old segment the swap replaces lies inside its offset range)."""
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
