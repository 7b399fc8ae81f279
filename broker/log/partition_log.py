"""The log of one partition: an ordered list of segments, the last one active.

Appends validate each batch once (size, magic, CRC, offsets, timestamps, producer
sequence) and write it with its broker-assigned offsets; reads return whole batches
as stored.  Rolling, retention and recovery live here; compaction is in `cleaner.py`.
"""

from __future__ import annotations

import os
import random
import shutil
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import structlog

from broker.clock import Clock
from broker.log import log_start, validator
from broker.log.deletions import DeferredDeletes
from broker.log.log_dir import LogDir
from broker.log.producer_state import BatchMeta, ProducerStateError, ProducerStateManager
from broker.log.region import FetchRead, SegmentRegion
from broker.log.segment import DELETED, LogSegment, fsync_dir
from broker.log.txn_index import AbortedTxn, TxnIndex
from broker.protocol.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_PRODUCER_ID,
    BatchHeader,
    InvalidBatch,
    iter_headers,
    parse_header,
    peek_offset_and_length,
    stamp_header,
    validate_batch,
)
from broker.protocol.control import ControlType, InvalidMarker, build_marker, read_marker
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import Record, build_batch, decode_records
from broker.topic_configs import LogConfig

_OFFSET_DELTA_LIMIT = 0x7FFFFFFF
WALK_CHUNK = 1 << 20  # read at a time when finding the batches a Fetch serves
INLINE_MAX = 64 * 1024  # a Fetch answer up to this size is sent from memory, larger ones from the file
LARGE_BATCH = 16 * 1024  # batches found by their headers alone (`_header_walk`) from this size
TXN_INDEX = "aborted.txnindex"
STORAGE_LOG_INTERVAL_S = 10.0  # a partition's write failures are logged at most this often

log = structlog.get_logger(__name__)
_INLINE_RECOMPRESS_RECORDS = 2_000  # records decoded and re-encoded on the event loop


@dataclass(frozen=True, slots=True)
class OpenedBatch:
    """A validated client batch and the bytes to store (the client's, or recompressed)."""

    header: BatchHeader
    stored: memoryview | bytes


@dataclass(frozen=True, slots=True)
class AppendResult:
    base_offset: int
    last_offset: int
    log_append_time: int  # -1 for CreateTime topics
    log_start_offset: int
    duplicate: bool = False


_BATCH_ERRORS = {
    "corrupt": ErrorCode.corrupt_message,
    "magic": ErrorCode.invalid_record,
    "invalid": ErrorCode.invalid_record,
}
_PRODUCER_ERRORS = {
    "out_of_order_sequence": ErrorCode.out_of_order_sequence_number,
    "invalid_producer_epoch": ErrorCode.invalid_producer_epoch,
}


_SCRATCH = threading.local()  # each thread's buffer for reading segments in `_walk`


def _scratch(n: int) -> memoryview:
    """A buffer of `n` bytes: the thread's reused one, or a fresh one when larger.  Reading
    into one buffer leaves no freed chunks behind to fragment the heap between held ones."""
    if n > WALK_CHUNK:
        return memoryview(bytearray(n))
    buf: bytearray | None = getattr(_SCRATCH, "buf", None)
    if buf is None:
        buf = _SCRATCH.buf = bytearray(WALK_CHUNK)
    return memoryview(buf)[:n]


def _header_walk(
    segment: LogSegment, position: int, end: int, max_bytes: int, upper: int | None
) -> tuple[int, int, int] | None:
    """(bytes, records, end offset) of the batches a Fetch serves from the active segment,
    found from their headers alone, one read of a header per batch: its batches were checked
    on append, and large ones are not worth reading whole only to find where they end.  None
    when the first batch is small (reading a chunk of them is cheaper than a read each)."""
    total = records = 0
    end_offset = -1
    pos = position
    while pos < end:
        raw = segment.read(pos, HEADER_SIZE)
        if len(raw) < HEADER_SIZE:
            break
        header = parse_header(raw)
        if pos == position and header.size < LARGE_BATCH:
            return None
        if header.size < HEADER_SIZE or pos + header.size > end:
            break
        if (total and total + header.size > max_bytes) or (upper is not None and header.base_offset >= upper):
            break
        total += header.size
        records += header.records_count
        end_offset = header.last_offset + 1
        pos += header.size
    return total, records, end_offset


class PartitionLog:
    def __init__(
        self,
        directory: Path,
        topic: str,
        partition: int,
        config: LogConfig,
        clock: Clock,
        *,
        recover: bool,
        deletions: DeferredDeletes | None = None,
        log_dir: LogDir | None = None,
    ) -> None:
        self.directory = directory
        # Shared by every partition of the directory: one I/O error takes them all offline.
        self.log_dir = LogDir(directory.parent) if log_dir is None else log_dir
        self.topic = topic
        self.partition = partition
        self.config = config
        self.clock = clock
        if not directory.exists():
            directory.mkdir(parents=True)
            fsync_dir(directory.parent)
        self.producer_state = ProducerStateManager(directory)
        self.segments: list[LogSegment] = []
        self.truncated_bytes = 0
        self.corrupt_batches_served = 0  # refused reads of batches that fail their CRC on disk
        self.unreadable_markers = 0  # control batches found at recovery that are not valid markers
        self.txn_index = TxnIndex(directory / TXN_INDEX)
        self.deletions = DeferredDeletes() if deletions is None else deletions
        self._retired: list[LogSegment] = []  # renamed *.deleted, their removal still due
        self.unflushed_messages = 0  # records appended since flush.messages last asked for an fsync
        self.rolled = False  # a segment was rolled since the last append's check (fsynced then)
        self._storage_logged = -STORAGE_LOG_INTERVAL_S  # when a write failure was last logged
        self._storage_unlogged = 0
        self._load(recover)

    # --- loading ---------------------------------------------------------------------

    def _load(self, recover: bool) -> None:
        from broker.log.cleaner import complete_interrupted_swaps

        complete_interrupted_swaps(self.directory)
        names = os.listdir(self.directory)
        for name in names:
            if name.endswith(DELETED):  # deleted before the last stop, their delay not over: as Kafka
                (self.directory / name).unlink()
        now = self.clock.now_ms()
        bases = sorted(int(name.split(".")[0]) for name in names if name.endswith(".log"))
        for i, base in enumerate(bases):
            segment = LogSegment(
                self.directory, base, index_interval_bytes=self.config.index_interval_bytes, created_ms=now
            )
            # After an unclean shutdown only the active segment can have a torn tail;
            # closed ones are rebuilt only if their indexes fail the sanity check.
            is_active = i == len(bases) - 1
            self.truncated_bytes += segment.load(recover=recover and is_active)
            if not is_active:
                # A rebuilt index lacks the max-timestamp entry written on roll; without it
                # the next start would understate the segment's newest timestamp.
                segment.seal()
            self.segments.append(segment)
        if not self.segments:
            self.segments.append(self._new_segment(0))
        self.active.roll_jitter_ms = self._roll_jitter()
        stored_start = log_start.read(self.directory)
        self.log_start_offset = max(self.segments[0].base_offset, stored_start)
        self.next_offset = max(self.segments[-1].next_offset, self.segments[-1].base_offset)
        # The index is derived from the markers: what a truncating recovery cut goes too.
        self.txn_index.truncate_to(self.next_offset)
        self.txn_index.drop_before(self.log_start_offset)
        self._rebuild_producer_state()

    def _new_segment(self, base_offset: int) -> LogSegment:
        segment = LogSegment(
            self.directory,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            created_ms=self.clock.now_ms(),
        )
        segment.roll_jitter_ms = self._roll_jitter()
        # The new file's directory entry must be durable before its data can be.
        fsync_dir(self.directory)
        return segment

    def _roll_jitter(self) -> int:
        """segment.jitter.ms: how much sooner than segment.ms this segment rolls, drawn as
        Kafka draws it (below the smaller of the jitter and segment.ms)."""
        bound = min(self.config.segment_jitter_ms, self.config.segment_ms)
        return random.randrange(bound) if bound > 0 else 0

    def _rebuild_producer_state(self) -> None:
        start = self.producer_state.load_snapshot(self.next_offset)
        for segment in self.segments:
            if segment.next_offset <= start:
                continue
            for position, header in segment.headers_from(0):
                if header.base_offset < start:
                    continue
                self.producer_state.update(header)
                if header.is_control and header.producer_id != NO_PRODUCER_ID:
                    self._replay_marker(segment.read(position, header.size), header)

    def _replay_marker(self, raw: bytes, header: BatchHeader) -> None:
        """A marker found by the recovery scan ends its transaction, as its append did; the
        aborts the index lacks (written after the last flush of the index) are added back."""
        try:
            marker = read_marker(raw)
        except InvalidMarker:
            # Only the broker writes control batches and this one passed its CRC: a marker
            # of a future version, say.  The transaction stays open rather than be guessed.
            self.unreadable_markers += 1
            return
        self._end_transaction(marker.producer_id, marker.control, header.base_offset)

    def _end_transaction(self, producer_id: int, control: ControlType, marker_offset: int) -> None:
        first = self.producer_state.end_transaction(producer_id)
        if (
            control == ControlType.ABORT
            and first is not None
            and marker_offset > self.txn_index.last_offset
            and marker_offset >= self.log_start_offset  # a scan meets markers retention already dropped
        ):
            lso = self.producer_state.first_unstable_offset()
            stable = marker_offset + 1 if lso is None else lso
            self.txn_index.append(AbortedTxn(producer_id, first, marker_offset, stable))

    # --- properties ------------------------------------------------------------------

    @property
    def active(self) -> LogSegment:
        return self.segments[-1]

    @property
    def high_watermark(self) -> int:
        # Single node: a record is committed once appended (Kafka's single-replica rule).
        return self.next_offset

    @property
    def last_stable_offset(self) -> int:
        """Below it every transaction is decided: the end of what read_committed may read."""
        first = self.producer_state.first_unstable_offset()
        return self.high_watermark if first is None else min(first, self.high_watermark)

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # --- append ----------------------------------------------------------------------

    def _validate(self, batch: memoryview, now: int) -> BatchHeader:
        try:
            header = validate_batch(batch)
        except InvalidBatch as e:
            raise KafkaError(_BATCH_ERRORS[e.kind], str(e)) from e
        if header.size > self.config.max_message_bytes:
            raise KafkaError(
                ErrorCode.message_too_large,
                f"batch of {header.size} bytes exceeds max.message.bytes={self.config.max_message_bytes}",
            )
        if header.size > self.config.segment_bytes:
            raise KafkaError(
                ErrorCode.record_list_too_large,
                f"batch of {header.size} bytes exceeds segment.bytes={self.config.segment_bytes}",
            )
        if header.records_count != header.last_offset_delta + 1 or header.records_count == 0:
            raise KafkaError(ErrorCode.invalid_record, "record count does not match the last offset delta")
        if header.is_control:
            raise KafkaError(ErrorCode.invalid_record, "clients may not write control batches")
        if header.is_transactional and (header.producer_id == NO_PRODUCER_ID or header.base_sequence < 0):
            raise KafkaError(ErrorCode.invalid_record, "a transactional batch needs a producer id and sequence")
        if not self.config.log_append_time:
            for ts in (header.base_timestamp, header.max_timestamp):
                if ts < 0:
                    continue
                if now - ts > self.config.timestamp_before_max_ms or ts - now > self.config.timestamp_after_max_ms:
                    raise KafkaError(
                        ErrorCode.invalid_timestamp,
                        f"timestamp {ts} is out of the accepted range around {now}",
                    )
        return header

    def _prepare(self, batch: memoryview, header: BatchHeader) -> memoryview | bytes:
        """Recompression, when the topic pins a codec other than the producer's."""
        if self.config.compression is None or header.compression == self.config.compression:
            return batch
        try:
            _, records = decode_records(batch)
        except InvalidBatch as e:
            raise KafkaError(_BATCH_ERRORS[e.kind], str(e)) from e
        return build_batch(
            records,
            compression=self.config.compression or 0,
            level=self.config.compression_level,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
        )

    def open_batch(self, batch: memoryview, *, limit: int, inline: bool) -> OpenedBatch:
        """Everything about one client batch that needs no log state: header, CRC, payload
        (`validator`), the topic's rules and recompression.  Safe in a worker thread.
        Raises KafkaError; with `inline`, raises PayloadTooLarge when the work is too big
        for the event loop (the caller runs it again in a worker with `inline=False`)."""
        header = self._validate(batch, self.clock.now_ms())
        recompress = self.config.compression is not None and header.compression != self.config.compression
        if inline and (
            (header.compression == 0 and header.size > validator.INLINE_BYTES)
            or (recompress and header.records_count > _INLINE_RECOMPRESS_RECORDS)
        ):
            raise validator.PayloadTooLarge
        validator.check(header, batch, limit=limit, need_keys=self.config.compact, inline=inline)
        return OpenedBatch(header, self._prepare(batch, header))

    def append(self, batch: memoryview | bytes, opened: OpenedBatch | None = None) -> AppendResult:
        """Append one client batch (opened by `open_batch`, or opened here with the default
        limit).  Raises KafkaError."""
        self._check_online()
        now = self.clock.now_ms()
        view = memoryview(batch)
        if opened is None:
            opened = self.open_batch(view, limit=validator.DEFAULT_LIMIT, inline=False)
        header = opened.header
        try:
            duplicate = self.producer_state.check(header)
        except ProducerStateError as e:
            raise KafkaError(_PRODUCER_ERRORS[e.kind], str(e)) from e
        if duplicate is not None:
            return self._duplicate_result(duplicate)
        prepared = opened.stored
        base = self.next_offset
        header_bytes, body = stamp_header(prepared, base, 0, now if self.config.log_append_time else None)
        written = parse_header(header_bytes)
        try:
            self._maybe_roll(header.size, now)
            self.active.append([header_bytes, body], [written])
        except OSError as e:
            # Out of room, nothing of the batch stays (the segment cut it off) and no state
            # moved, so the log takes the producer's retry once the disk has room again; any
            # other error takes the directory offline.
            self.log_dir.failed_write(e, "write")
            raise self._storage_error(e) from e
        self.producer_state.update(written)
        self.next_offset = written.last_offset + 1
        self.unflushed_messages += written.records_count
        return AppendResult(
            base_offset=base,
            last_offset=written.last_offset,
            log_append_time=now if self.config.log_append_time else -1,
            log_start_offset=self.log_start_offset,
        )

    def _check_online(self) -> None:
        """KAFKA_STORAGE_ERROR once the directory is offline: nothing is written or served."""
        if self.log_dir.offline:
            raise KafkaError(ErrorCode.kafka_storage_error, str(self.log_dir.offline_error()))

    def _storage_error(self, e: OSError) -> KafkaError:
        """KAFKA_STORAGE_ERROR for a write the disk refused (full, EFBIG, I/O error), logged as
        Kafka logs it, at most once per partition every few seconds: clients retry, and a full
        disk must not also fill the log."""
        now = time.monotonic()
        if now - self._storage_logged >= STORAGE_LOG_INTERVAL_S:
            log.error(
                "cannot write to the log",
                topic=self.topic,
                partition=self.partition,
                directory=str(self.directory),
                error=str(e),
                failures_not_logged=self._storage_unlogged,
            )
            self._storage_logged, self._storage_unlogged = now, 0
        else:
            self._storage_unlogged += 1
        return KafkaError(ErrorCode.kafka_storage_error, f"cannot write {self.topic}-{self.partition}: {e}")

    def append_internal(self, batch: bytes) -> AppendResult:
        """Append a batch the broker built itself (internal topics): no client checks.
        Raises OSError (LogDirOffline once the directory is offline)."""
        self.log_dir.check()
        header_bytes, body = stamp_header(batch, self.next_offset, 0, None)
        written = parse_header(header_bytes)
        try:
            self._maybe_roll(len(batch), self.clock.now_ms())
            self.active.append([header_bytes, body], [written])
        except OSError as e:
            self.log_dir.failed_write(e, "write")
            raise
        self.next_offset = written.last_offset + 1
        return AppendResult(written.base_offset, written.last_offset, -1, self.log_start_offset)

    def append_marker(
        self, producer_id: int, producer_epoch: int, control: ControlType, *, coordinator_epoch: int
    ) -> AppendResult:
        """Write the marker that ends `producer_id`'s transaction here (the transaction
        coordinator's, at commit or abort).  A marker of an older epoch than the partition
        knows is INVALID_PRODUCER_EPOCH, as in Kafka."""
        self._check_online()
        now = self.clock.now_ms()
        entry = self.producer_state.producers.get(producer_id)
        if entry is not None and producer_epoch < entry.epoch:
            raise KafkaError(
                ErrorCode.invalid_producer_epoch,
                f"marker epoch {producer_epoch} of producer {producer_id} is older than {entry.epoch}",
            )
        batch = build_marker(
            producer_id, producer_epoch, control, coordinator_epoch=coordinator_epoch, offset=0, timestamp=now
        )
        header_bytes, body = stamp_header(batch, self.next_offset, 0, None)
        written = parse_header(header_bytes)
        try:
            self._maybe_roll(len(batch), now)
            self.active.append([header_bytes, body], [written])
        except OSError as e:
            self.log_dir.failed_write(e, "write")
            raise self._storage_error(e) from e
        self.next_offset = written.last_offset + 1
        self.producer_state.update(written)
        self._end_transaction(producer_id, control, written.base_offset)
        return AppendResult(written.base_offset, written.last_offset, -1, self.log_start_offset)

    def aborted_transactions(self, fetch_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """The aborted transactions a read_committed fetch of [fetch_offset, upper_offset)
        must be told of."""
        return list(self.txn_index.overlapping(fetch_offset, upper_offset))

    def _duplicate_result(self, meta: BatchMeta) -> AppendResult:
        return AppendResult(
            base_offset=meta.first_offset,
            last_offset=meta.last_offset,
            log_append_time=meta.timestamp if self.config.log_append_time else -1,
            log_start_offset=self.log_start_offset,
            duplicate=True,
        )

    # --- rolling ---------------------------------------------------------------------

    def _maybe_roll(self, incoming: int, now: int) -> None:
        active = self.active
        if active.size == 0:
            return
        since = active.first_batch_timestamp if active.first_batch_timestamp >= 0 else active.created_ms
        if (
            active.size + incoming > self.config.segment_bytes
            or now - since > self.config.max_segment_ms - active.roll_jitter_ms
            or active.index_full(self.config.segment_index_bytes)
            or self.next_offset - active.base_offset > _OFFSET_DELTA_LIMIT
        ):
            self.roll()

    def roll(self) -> LogSegment:
        """Close the active segment and start a new one at the log end offset."""
        if self.active.size == 0:
            return self.active
        self.active.seal()
        self.producer_state.write_snapshot(self.next_offset)
        segment = self._new_segment(self.next_offset)
        self.segments.append(segment)
        self.rolled = True
        return segment

    # --- read ------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, upper: int | None = None) -> bytes:
        """Whole batches from `offset`, at most `max_bytes` unless the first batch alone
        is larger (then just it, as Kafka does so that consumers always progress), and only
        those that begin below `upper` (the last stable offset, for read_committed)."""
        data = self._walk(offset, max_bytes, upper, inline_max=None).data
        assert isinstance(data, bytes)
        return data

    def read_for_fetch(self, offset: int, max_bytes: int, upper: int | None = None) -> FetchRead:
        """`read` for a Fetch: up to INLINE_MAX bytes inline, a larger answer as a region of
        the segment file, sent as the client's socket drains instead of held in memory."""
        return self._walk(offset, max_bytes, upper, inline_max=INLINE_MAX)

    def _walk(self, offset: int, max_bytes: int, upper: int | None, inline_max: int | None) -> FetchRead:
        """The batches to serve, found by reading the segment in chunks of at most WALK_CHUNK
        (or one batch, when larger): a Fetch of a 50 MB answer never holds 50 MB at once.
        Batches of a closed segment are CRC-checked as they are served (the active one's were
        checked on append, and at recovery after a crash): a corrupt batch is never served; the
        valid batches before it are, and when it comes first, CORRUPT_MESSAGE."""
        self._check_online()
        found = self._locate(offset, upper)
        if found is None:
            return FetchRead(b"", offset, 0)
        segment, position = found
        verify = segment is not self.active
        end = segment.size
        if not verify and inline_max is not None:
            walked = _header_walk(segment, position, end, max_bytes, upper)
            if walked is not None:
                size, count, last = walked
                if size == 0:
                    return FetchRead(b"", offset, 0)
                if size <= inline_max:
                    return FetchRead(segment.read(position, size), last, count)
                return FetchRead(SegmentRegion(segment, position, size), last, count)
        total = records = 0
        end_offset = offset
        kept: list[bytes] | None = []  # the bytes read, while they may still be returned inline
        pos = position
        while pos < end:
            chunk = segment.read_into(pos, _scratch(min(WALK_CHUNK, end - pos, max(max_bytes - total, HEADER_SIZE))))
            if len(chunk) >= LOG_OVERHEAD:
                _, size = peek_offset_and_length(chunk, 0)
                if size > len(chunk) and pos + size <= end and (total == 0 or total + size <= max_bytes):
                    chunk = segment.read_into(pos, _scratch(size))  # larger than a chunk: the first, or it fits
            taken = 0
            stop = False
            for rel, header in iter_headers(chunk):
                if (total and total + header.size > max_bytes) or (upper is not None and header.base_offset >= upper):
                    stop = True
                    break
                if verify:
                    try:
                        validate_batch(chunk[rel : rel + header.size])
                    except InvalidBatch as e:
                        self.corrupt_batches_served += 1
                        if total == 0:
                            raise KafkaError(
                                ErrorCode.corrupt_message,
                                f"{self.topic}-{self.partition}: a batch at position {pos + rel} of "
                                f"{segment.log_path.name} is corrupt on disk: {e}",
                            ) from None
                        stop = True
                        break
                total += header.size
                taken += header.size
                records += header.records_count
                end_offset = header.last_offset + 1
            if kept is not None:
                kept.append(bytes(chunk[:taken]))
                if inline_max is not None and total > inline_max:
                    kept = None  # served from the file instead
            if stop or taken == 0:
                break
            pos += taken
        if total == 0:
            return FetchRead(b"", offset, 0)
        if kept is not None:
            return FetchRead(kept[0] if len(kept) == 1 else b"".join(kept), end_offset, records)
        return FetchRead(SegmentRegion(segment, position, total), end_offset, records)

    def _locate(self, offset: int, upper: int | None) -> tuple[LogSegment, int] | None:
        """The segment and position of the batch holding `offset`; None when there is
        nothing to read there (the end of the log, or at or past `upper`)."""
        if offset == self.next_offset or (upper is not None and upper <= offset <= self.next_offset):
            return None
        if offset < self.log_start_offset or offset > self.next_offset:
            raise KafkaError(
                ErrorCode.offset_out_of_range,
                f"offset {offset} is outside [{self.log_start_offset}, {self.next_offset}]",
            )
        i = max(0, bisect_right(self.segments, offset, key=lambda seg: seg.base_offset) - 1)
        for segment in self.segments[i:]:
            found = segment.find_position(offset)
            if found is not None:  # compaction can leave gaps: the offset lives in a later segment
                return segment, found[0]
        return None

    def records(self, on_skip: Callable[[int, str], None] | None = None) -> Iterator[Record]:
        """Every record from the log start, decoded (replaying the internal topics).  A batch
        that cannot be read is passed to `on_skip(offset, reason)` and skipped, or, without
        it, raises KafkaError."""
        offset = self.log_start_offset
        while offset < self.next_offset:
            try:
                data = self.read(offset, 1 << 20)
            except KafkaError as e:
                if on_skip is None:
                    raise
                on_skip(offset, e.message or e.code.name)
                offset = self._after_batch_at(offset)
                continue
            if not data:
                return
            for position, header in iter_headers(data):
                try:
                    _, records = decode_records(data[position : position + header.size])
                except InvalidBatch as e:
                    if on_skip is None:
                        raise KafkaError(ErrorCode.corrupt_message, str(e)) from e
                    on_skip(header.base_offset, str(e))
                    records = []
                yield from records
                offset = header.last_offset + 1

    def _after_batch_at(self, offset: int) -> int:
        """The offset after the batch holding `offset` (its header is trusted as far as its
        length: it was validated when it was written), or the log end."""
        for segment in self.segments:
            found = segment.find_position(offset)
            if found is not None:
                return found[1].last_offset + 1
        return self.next_offset

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp`."""
        self._check_online()
        for segment in self.segments:
            if segment.max_timestamp < timestamp:
                continue
            start = max(segment.time_index.lookup(timestamp), self.log_start_offset)
            found = segment.find_position(start)
            if found is None:
                continue
            for position, header in segment.headers_from(found[0]):
                if header.max_timestamp < timestamp:
                    continue
                raw = segment.read(position, header.size)
                try:
                    _, records = decode_records(raw)
                except InvalidBatch as e:  # never stored by this broker's validator: damage
                    raise KafkaError(
                        ErrorCode.corrupt_message, f"{self.topic}-{self.partition}: a stored batch cannot be read: {e}"
                    ) from e
                for record in records:
                    if record.timestamp >= timestamp and record.offset >= self.log_start_offset:
                        return record.offset, record.timestamp
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp (ListOffsets -3)."""
        self._check_online()
        best: tuple[int, int] | None = None
        for segment in self.segments:
            if segment.max_timestamp >= 0 and (best is None or segment.max_timestamp > best[1]):
                best = (segment.base_offset, segment.max_timestamp)
        if best is None:
            return None
        return self.offset_for_timestamp(best[1])

    # --- retention -------------------------------------------------------------------

    def apply_retention(self) -> int:
        """Delete whole segments past retention.ms / retention.bytes; returns the count."""
        if not self.config.delete or self.log_dir.offline:
            return 0
        now = self.clock.now_ms()
        doomed = 0
        if self.config.retention_ms >= 0:
            for segment in self.segments:
                if segment.size == 0 or segment.max_timestamp < 0:
                    break
                if now - segment.max_timestamp <= self.config.retention_ms:
                    break
                doomed += 1
        if self.config.retention_bytes >= 0:
            total = self.size_bytes
            for segment in self.segments[:doomed]:
                total -= segment.size
            for segment in self.segments[doomed:-1]:
                if total - segment.size < self.config.retention_bytes:
                    break
                total -= segment.size
                doomed += 1
        return self._drop_head(doomed)

    def delete_records(self, offset: int) -> int:
        """DeleteRecords: records below `offset` (-1: the high watermark) are gone for
        readers at once; segments wholly below it are deleted. Returns the new log start."""
        self._check_online()
        if offset == -1:
            offset = self.high_watermark
        if offset < 0 or offset > self.high_watermark:
            raise KafkaError(
                ErrorCode.offset_out_of_range,
                f"cannot delete before offset {offset}: the partition holds "
                f"[{self.log_start_offset}, {self.high_watermark})",
            )
        if offset <= self.log_start_offset:
            return self.log_start_offset
        doomed = 0
        for segment in self.segments:
            if segment.next_offset > offset or (segment is self.active and segment.size == 0):
                break
            doomed += 1
        self._drop_head(doomed)
        self.advance_log_start(offset)
        return self.log_start_offset

    def _drop_head(self, doomed: int) -> int:
        """Delete the first `doomed` segments; the log starts at the next one."""
        if doomed == 0:
            return 0
        if doomed >= len(self.segments):
            self.roll()  # the active segment goes too: roll so it can
        victims = self.segments[:doomed]
        self.segments = self.segments[doomed:]
        self.advance_log_start(self.segments[0].base_offset)
        self.retire(victims)
        return len(victims)

    def retire(self, segments: list[LogSegment]) -> None:
        """Delete segments the log no longer holds, after file.delete.delay.ms (`deletions`)."""
        delay = self.config.file_delete_delay_ms
        if delay == 0:
            for segment in segments:
                segment.delete()
            return
        due = self.clock.now_ms() + delay
        self._retired = [s for s in self._retired if not s.deleted]
        for segment in segments:
            for earlier in self._retired:
                if earlier.base_offset == segment.base_offset:
                    earlier.delete()  # a compacted segment's replacement deleted in turn: the names are taken
            segment.mark_deleted()
            self.deletions.add(segment, due)
            self._retired.append(segment)

    def advance_log_start(self, offset: int) -> None:
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            log_start.write(self.directory, offset)  # durable once `sync_log_start` ran
            self.txn_index.drop_before(offset)

    def sync_log_start(self) -> None:
        """fsync the log start file and its directory (blocking: a worker thread's job), so
        records DeleteRecords removed stay removed after a machine crash."""
        try:
            log_start.sync(self.directory)
        except OSError as e:
            self.log_dir.failed_write(e, "fsync")
            raise

    # --- durability and lifecycle ----------------------------------------------------

    def dirty_segments(self) -> list[LogSegment]:
        return [s for s in self.segments if s.dirty and not s.closed]

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        for segment in self.segments:
            segment.index_interval_bytes = config.index_interval_bytes

    def close(self, *, clean: bool) -> None:
        clean = clean and not self.log_dir.offline  # an offline directory is not written again
        if clean:
            self.active.seal()
            self.producer_state.write_snapshot(self.next_offset)
        for segment in self.segments:
            if clean and segment.dirty:
                segment.fsync()
            segment.close()
        for segment in self._retired:
            segment.close()  # their files go at the next start

    def delete(self) -> None:
        for segment in [*self.segments, *self._retired]:
            segment.close()
        shutil.rmtree(self.directory, ignore_errors=True)


__all__ = ["HEADER_SIZE", "TXN_INDEX", "AppendResult", "PartitionLog"]
