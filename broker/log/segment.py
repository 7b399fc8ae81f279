"""One log segment: `{base_offset:020d}.log` plus its `.index` and `.timeindex`.

A segment has a single owner (its PartitionLog).  Appends go straight to the OS with
os.write (that is what `acks=1` waits for); fsync is done by the group-commit flusher.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path

from broker.log.files import FILES
from broker.log.index import IndexCorrupt, OffsetIndex, TimeIndex
from broker.protocol.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    InvalidBatch,
    iter_headers,
    parse_header,
    peek_offset_and_length,
    validate_batch,
)


def fsync_dir(directory: Path) -> None:
    """Make a directory's entries (new, renamed or deleted files) durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_durably(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write `path` whole so that a machine crash leaves the old content or the new, never an
    empty or partial file: a temporary file, fsynced, renamed over it, and the directory fsynced.
    The temporary file is made anew with `mode`, so a private file is never briefly readable."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


DELETED = ".deleted"  # suffix of a deleted segment's files awaiting file.delete.delay.ms


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def _rename_deleted(path: Path) -> Path:
    target = path.with_name(path.name + DELETED)
    with contextlib.suppress(FileNotFoundError):  # an index never written (no entry yet)
        path.replace(target)
    return target


class LogSegment:
    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        created_ms: int,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        name = segment_name(base_offset)
        self.log_path = directory / f"{name}.log"
        self.offset_index = OffsetIndex(directory / f"{name}.index", base_offset)
        self.time_index = TimeIndex(directory / f"{name}.timeindex", base_offset)
        # Opened on use through the shared cache of descriptors (`files.FILES`).
        self._fd = -1
        self._pins = 0
        try:
            self.size = os.stat(self.log_path).st_size
        except FileNotFoundError:
            os.close(os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644))
            self.size = 0
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.created_ms = created_ms
        self.first_batch_timestamp = -1
        self._bytes_since_index = 0
        self._bytes_since_time_index = 0
        self.write_seq = 0  # appends (and truncations) so far
        self.durable_seq = 0  # write_seq covered by the last completed fsync
        self.closed = False
        self.deleted = False
        self.roll_jitter_ms = 0  # segment.jitter.ms: drawn for each active segment
        self.index_mismatches = 0  # offset-index entries found wrong when used
        self._checked_entries: set[int] = set()  # positions of entries found right

    # --- loading and recovery --------------------------------------------------------

    def load(self, *, recover: bool) -> int:
        """Load indexes, or rebuild them by scanning.  Returns bytes truncated from a torn
        or corrupt tail (only when `recover` is set, i.e. after an unclean shutdown)."""
        if not recover:
            try:
                if not self.offset_index.path.exists() or not self.time_index.path.exists():
                    raise IndexCorrupt("index missing")
                self.offset_index.load(self.size)
                self._load_tail_from_index()
                self.time_index.load(self.next_offset)
                self.max_timestamp = self.time_index.max_timestamp
                if self.max_timestamp < self.first_batch_timestamp:
                    # The first batch always gets a time entry: an empty or cut time index
                    # would hide the segment from retention and from lookups by time.
                    raise IndexCorrupt("time index is behind the log")
                return 0
            except IndexCorrupt:
                pass
        return self.rebuild()

    def _load_tail_from_index(self) -> None:
        """Find next_offset by walking headers from the last offset-index entry."""
        _, pos = self.offset_index.lookup(1 << 62)
        last = None
        while pos < self.size:
            header = self._read_header(pos)
            # An index entry off a batch boundary reads garbage: a length below a header's
            # would walk backwards (or stand still) instead of reaching the end.
            if header is None or header.size < HEADER_SIZE or pos + header.size > self.size:
                raise IndexCorrupt("log does not end on a batch boundary")
            last = header
            pos += header.size
        if last is not None:
            self.next_offset = last.last_offset + 1
        first = self._read_header(0) if self.size >= HEADER_SIZE else None
        if first is not None:
            self.first_batch_timestamp = first.max_timestamp
            self.next_offset = max(self.next_offset, first.last_offset + 1)

    def rebuild(self) -> int:
        """Scan every batch (CRC checked), rebuild both indexes, truncate a bad tail."""
        self.offset_index.reset()
        self.time_index.reset()
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.first_batch_timestamp = -1
        self._bytes_since_index = self._bytes_since_time_index = 0
        pos = 0
        with FILES.use(self) as fd:
            # Read what the disk holds, not the page cache: after a failed writeback the kernel
            # may keep pages it never wrote, marked clean.  Dirty pages stay (they are written).
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            while self.size - pos >= HEADER_SIZE:
                _, size = peek_offset_and_length(os.pread(fd, LOG_OVERHEAD, pos), 0)
                if size < HEADER_SIZE or pos + size > self.size:
                    break  # torn write: the length points past the end of the file
                try:
                    header = validate_batch(os.pread(fd, size, pos))
                except InvalidBatch:
                    break  # corrupt: never serve it, drop it and everything after it
                if header.base_offset < self.next_offset:
                    break  # offsets must grow; anything else is garbage
                self._index_batch(header, pos)
                pos += size
            truncated = self.size - pos
            if truncated:
                os.ftruncate(fd, pos)
                self.size = pos
                self.write_seq += 1
        self.flush_indexes()
        return truncated

    # --- append ----------------------------------------------------------------------

    def _index_batch(self, header: BatchHeader, position: int) -> None:
        if self.first_batch_timestamp < 0:
            self.first_batch_timestamp = header.max_timestamp
        if self._bytes_since_index >= self.index_interval_bytes or position == 0:
            # As Kafka: an entry names the batch's last offset (kafka-dump-log checks this).
            self.offset_index.append(header.last_offset, position)
            self._bytes_since_index = 0
        self._bytes_since_index += header.size
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            if self._bytes_since_time_index >= self.index_interval_bytes or position == 0:
                self.time_index.maybe_append(header.max_timestamp, header.last_offset)
                self._bytes_since_time_index = 0
        self._bytes_since_time_index += header.size
        self.next_offset = header.last_offset + 1

    def append(self, parts: Sequence[bytes | bytearray | memoryview], headers: list[BatchHeader]) -> None:
        """Write already-validated, offset-patched batches, given as buffers in order
        (a vectored write: the records are never copied in user space)."""
        position = self.size
        total = sum(len(p) for p in parts)
        with FILES.use(self) as fd:
            try:
                written = os.pwritev(fd, parts, position)
                if written < total:  # short writes are legal for regular files (and a full disk)
                    rest = b"".join(bytes(p) for p in parts)[written:]
                    while rest:
                        n = os.pwrite(fd, rest, position + written)
                        written += n
                        rest = rest[n:]
            except OSError:
                # Disk full or an I/O error: cut what was written so the log still ends on
                # a batch boundary and the next append (once there is room) is whole.
                os.ftruncate(fd, position)
                raise
        for header in headers:
            self._index_batch(header, position)
            position += header.size
        self.size = position
        self.write_seq += 1

    # --- read ------------------------------------------------------------------------

    def _read_header(self, position: int) -> BatchHeader | None:
        with FILES.use(self) as fd:
            raw = os.pread(fd, HEADER_SIZE, position)
        if len(raw) < HEADER_SIZE:
            return None
        return parse_header(raw)

    def find_position(self, offset: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= `offset`."""
        entry, pos = self.offset_index.lookup(offset)
        if pos and pos not in self._checked_entries and not self._entry_holds(entry, pos):
            # A wrong index entry would make the scan below skip records or read garbage as
            # headers: drop the index from here on (rebuilt by the next start) and scan.
            self.index_mismatches += 1
            self.offset_index.truncate_at(entry)
            pos = self.offset_index.lookup(offset)[1]
        elif pos:
            self._checked_entries.add(pos)  # checked once: a consumer reads on from it
        while pos < self.size:
            # Read a few headers per syscall: batches between sparse index entries are small.
            with FILES.use(self) as fd:
                raw = os.pread(fd, min(self.index_interval_bytes * 2, self.size - pos) + HEADER_SIZE, pos)
            advanced = False
            for rel, header in iter_headers(raw):
                if header.last_offset >= offset:
                    return pos + rel, header
                advanced = True
                next_pos = pos + rel + header.size
            if not advanced:
                header_or_none = self._read_header(pos)
                if header_or_none is None:
                    return None
                if header_or_none.last_offset >= offset:
                    return pos, header_or_none
                next_pos = pos + header_or_none.size
            pos = next_pos
        return None

    def _entry_holds(self, offset: int, position: int) -> bool:
        """An index entry is right when the batch at `position` ends at `offset` (or, as
        entries written before the broker followed Kafka's layout, starts there)."""
        header = self._read_header(position)
        return (
            header is not None
            and offset in (header.last_offset, header.base_offset)
            and header.magic == 2
            and header.size >= HEADER_SIZE
            and position + header.size <= self.size
        )

    def read(self, position: int, max_bytes: int) -> bytes:
        with FILES.use(self) as fd:
            return os.pread(fd, max(0, min(max_bytes, self.size - position)), position)

    def read_into(self, position: int, buf: memoryview) -> memoryview:
        """Read up to len(buf) bytes from `position` into `buf`; the part of it filled."""
        n = max(0, min(len(buf), self.size - position))
        with FILES.use(self) as fd:
            got = os.preadv(fd, [buf[:n]], position)
        return buf[:got]

    def headers_from(self, position: int = 0) -> list[tuple[int, BatchHeader]]:
        """All batch headers from `position` to the end (used by offset-by-time lookups,
        producer-state rebuilds and the cleaner)."""
        out: list[tuple[int, BatchHeader]] = []
        pos = position
        while pos < self.size:
            header = self._read_header(pos)
            if header is None:
                break
            out.append((pos, header))
            pos += header.size
        return out

    # --- lifecycle -------------------------------------------------------------------

    def flush_indexes(self) -> None:
        self.offset_index.flush()
        self.time_index.flush()

    def index_full(self, max_index_bytes: int) -> bool:
        """segment.index.bytes: Kafka's indexes are files of that size at most, so a segment
        whose offset (8-byte entries) or time (12-byte) index has no room left rolls."""
        return (
            len(self.offset_index.rel_offsets) >= max_index_bytes // 8
            or len(self.time_index.timestamps) >= max_index_bytes // 12
        )

    @property
    def dirty(self) -> bool:
        return self.durable_seq < self.write_seq

    def fsync(self) -> None:
        """Synchronous fsync (clean shutdown); the flusher does its own in a thread."""
        seq = self.write_seq
        with FILES.use(self) as fd:
            os.fdatasync(fd)
        self.durable_seq = seq

    def dup_fd(self) -> int:
        """A descriptor of its own for a worker thread (the cache may close the shared one)."""
        with FILES.use(self) as fd:
            return os.dup(fd)

    def seal(self) -> None:
        """On roll: record the final max timestamp so a reload needs no scan."""
        if self.max_timestamp >= 0:
            last_rel = self.time_index.rel_offsets[-1] if self.time_index.rel_offsets else 0
            if self.max_timestamp > self.time_index.max_timestamp:
                self.time_index.maybe_append(self.max_timestamp, max(self.next_offset - 1, self.base_offset + last_rel))
        self.flush_indexes()

    def close(self) -> None:
        if not self.closed:
            self.flush_indexes()
            FILES.release(self)
            self.closed = True

    def mark_deleted(self) -> None:
        """file.delete.delay.ms: the first step of deleting a segment the log no longer holds,
        as Kafka's: its files renamed `*.deleted` (never loaded again, and removed on the next
        start), while a Fetch already answering from it still reads them.  `delete` follows."""
        self.flush_indexes()
        self.offset_index.path = _rename_deleted(self.offset_index.path)
        self.time_index.path = _rename_deleted(self.time_index.path)
        self.log_path = _rename_deleted(self.log_path)  # reopened by this name if evicted meanwhile

    def delete(self) -> None:
        if self.deleted:
            return  # its names may be another segment's by now
        self.deleted = True
        self.close()
        for path in (self.log_path, self.offset_index.path, self.time_index.path):
            path.unlink(missing_ok=True)
