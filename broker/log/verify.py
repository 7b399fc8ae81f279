"""`streamshop broker verify`: check a data directory offline, as Kafka's
`kafka-dump-log --verify-index-only` and `--deep-iteration` do.

Every batch of every segment: its length, magic, CRC and offsets (growing, within the
segment's range); every offset-index entry must point at the batch that ends at its offset
(Kafka's layout; entries written by earlier versions name the batch's first offset, also
accepted), every time-index entry must be in order and inside the segment.  `deep` also opens
every batch (decompression and record framing).  Read-only: safe beside a running broker,
though the active segments may then be caught mid-write.
"""

from __future__ import annotations

import os
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from broker.log.index import OFFSET_ENTRY, TIME_ENTRY
from broker.protocol.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    InvalidBatch,
    parse_header,
    peek_offset_and_length,
    validate_batch,
)
from broker.protocol.records import decode_records


@dataclass
class SegmentReport:
    path: Path
    batches: int = 0
    records: int = 0
    index_entries: int = 0
    problems: list[str] = field(default_factory=list)


def _batches(path: Path, problems: list[str]) -> Iterator[tuple[int, bytes]]:
    """(position, raw batch) for each batch; a bad length or a torn tail is a problem."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        pos = 0
        while pos < size:
            head = os.pread(f.fileno(), LOG_OVERHEAD, pos)
            if len(head) < LOG_OVERHEAD:
                problems.append(f"position {pos}: {size - pos} trailing bytes, not a batch")
                return
            _, length = peek_offset_and_length(head, 0)
            if length < HEADER_SIZE or pos + length > size:
                problems.append(f"position {pos}: batch length {length} runs past the end ({size} bytes)")
                return
            yield pos, os.pread(f.fileno(), length, pos)
            pos += length


def verify_segment(path: Path, *, deep: bool) -> SegmentReport:
    report = SegmentReport(path)
    base = int(path.name.split(".")[0])
    starts: dict[int, int] = {}  # batch last offset (and base offset, as older entries) -> position
    last_offset = base - 1
    problems: list[str] = []
    for position, raw in _batches(path, problems):
        bounds = parse_header(raw)  # the index is judged apart from the CRC
        starts[bounds.base_offset] = starts[bounds.last_offset] = position
        try:
            header = validate_batch(raw)
        except InvalidBatch as e:
            problems.append(f"position {position}: {e}")
            continue
        if header.base_offset <= last_offset:
            problems.append(f"position {position}: offset {header.base_offset} after {last_offset}")
        last_offset = header.last_offset
        report.batches += 1
        report.records += header.records_count
        if deep:
            try:
                decode_records(raw)
            except InvalidBatch as e:
                problems.append(f"offset {header.base_offset}: records do not decode: {e}")
    report.problems.extend(f"{path.name}: {p}" for p in problems)
    # An empty segment has nothing to index: its index files are made with its first batch.
    empty = path.stat().st_size == 0
    _check_offset_index(path.with_suffix(".index"), base, starts, report, empty=empty)
    _check_time_index(path.with_suffix(".timeindex"), base, last_offset, report, empty=empty)
    return report


def _entries(path: Path, entry: struct.Struct, report: SegmentReport, *, empty: bool) -> Iterator[tuple[int, int]]:
    """The whole entries of an index file (a torn entry is a problem, and so is a missing
    file, unless its segment is `empty`)."""
    if not path.exists():
        if not empty:
            report.problems.append(f"{path.name}: missing (rebuilt at the next start)")
        return
    data = path.read_bytes()
    if len(data) % entry.size:
        report.problems.append(f"{path.name}: {len(data)} bytes, not a whole number of entries")
    for values in entry.iter_unpack(data[: len(data) - len(data) % entry.size]):
        report.index_entries += 1
        yield values


def _check_offset_index(path: Path, base: int, starts: dict[int, int], report: SegmentReport, *, empty: bool) -> None:
    for rel, pos in _entries(path, OFFSET_ENTRY, report, empty=empty):
        if starts.get(base + rel) != pos:
            report.problems.append(
                f"{path.name}: offset {base + rel} -> position {pos}: no batch ends (or starts) there"
            )


def _check_time_index(path: Path, base: int, last_offset: int, report: SegmentReport, *, empty: bool) -> None:
    last_ts = None
    for ts, rel in _entries(path, TIME_ENTRY, report, empty=empty):
        if last_ts is not None and ts <= last_ts:
            report.problems.append(f"{path.name}: timestamp {ts} after {last_ts}")
        if base + rel > last_offset:
            report.problems.append(f"{path.name}: offset {base + rel} is past the segment's last {last_offset}")
        last_ts = ts


def verify(data_dir: Path, *, deep: bool = False, out: TextIO | None = None) -> int:
    """Check every partition directory; print a line per problem and a summary.  Returns the
    number of problems found."""
    stream = out if out is not None else sys.stdout
    problems = segments = batches = records = entries = 0
    partitions = sorted(p for p in data_dir.iterdir() if p.is_dir() and "-" in p.name)
    for directory in partitions:
        for log_path in sorted(directory.glob("*.log")):
            report = verify_segment(log_path, deep=deep)
            segments += 1
            batches += report.batches
            records += report.records
            entries += report.index_entries
            for problem in report.problems:
                print(f"{directory.name}/{problem}", file=stream)
            problems += len(report.problems)
    print(
        f"{len(partitions)} partitions, {segments} segments, {batches} batches, {records} records, "
        f"{entries} index entries checked{' (records decoded)' if deep else ''}: "
        f"{problems} problem{'s' if problems != 1 else ''}",
        file=stream,
    )
    return problems
