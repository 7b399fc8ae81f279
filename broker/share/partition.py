"""One partition of a share group (KIP-932): which records are in flight, with whom, how
often they were delivered, and where the group's consumption starts.

The records between the start offset (Kafka's SPSO) and `end` (one past the last record
ever acquired) each have a state.  A fetch acquires available records for one member under
a time-limited lock; the member accepts, releases or rejects them; a lock that runs out
releases them.  A released record is delivered again until its delivery count reaches the
limit, then archived.  The start offset moves over every record at its head that is done
(acknowledged or archived), so the in-flight window stays bounded by `max_locks`.

Sans-io: the caller reads the log, keeps time and persists `snapshot()`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from broker.protocol.errors import ErrorCode, KafkaError
from broker.replay import is_int


class RecordState(enum.IntEnum):
    """Kafka's persisted codes (ACQUIRED is never persisted: a lock does not survive)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(enum.IntEnum):
    GAP = 0  # no record at that offset (compacted away, a transaction marker)
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


DONE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
# The widest window a stored state may have: group.share.partition.max.record.locks's maximum.
# A record claiming more is refused at replay instead of allocating one entry per offset.
MAX_WINDOW = 10_000


@dataclass(slots=True)
class InFlight:
    state: RecordState
    count: int  # deliveries so far
    member: str | None = None  # the holder of the lock, while ACQUIRED
    deadline_ms: int = 0


@dataclass(frozen=True, slots=True)
class BatchSpan:
    """A record batch as read from the log: its offsets, and whether it is never delivered (a
    control batch, or an aborted transaction's batch read committed)."""

    base_offset: int
    last_offset: int
    control: bool


@dataclass(frozen=True, slots=True)
class Acquired:
    first_offset: int
    last_offset: int
    delivery_count: int


class SharePartition:
    def __init__(self, start: int, *, delivery_limit: int, max_locks: int) -> None:
        self.start = start
        self.end = start
        self.records: dict[int, InFlight] = {}  # every offset in [start, end)
        self.delivery_limit = delivery_limit
        self.max_locks = max_locks
        self.state_epoch = 0
        # Persistence's bookkeeping: the offsets whose stored state (ACQUIRED is stored as
        # AVAILABLE) or delivery count changed since the last write, how many updates were
        # written since the last snapshot, and whether the next write must be a snapshot.
        self.dirty: set[int] = set()
        self.updates = 0
        self.needs_snapshot = True

    # --- acquiring ---------------------------------------------------------------------

    def next_fetch_offset(self) -> int | None:
        """Where a fetch should read from: the first available record in flight, else the
        end; None when the window is full and nothing in it is available."""
        for offset in range(self.start, self.end):
            if self.records[offset].state == RecordState.AVAILABLE:
                return offset
        return self.end if self.end - self.start < self.max_locks else None

    def acquire(
        self, member: str, batches: Iterable[BatchSpan], max_records: int, now: int, lock_ms: int
    ) -> tuple[list[Acquired], list[BatchSpan]]:
        """Acquire for `member` what it may have of `batches` (read from the log from
        `next_fetch_offset()` on), up to `max_records` (rounded up to the batch's end, as
        Kafka's batch-optimised mode); returns the ranges acquired and the batches that hold
        them (the only ones worth sending)."""
        ranges: list[Acquired] = []
        used: list[BatchSpan] = []
        taken = 0
        cursor = self.next_fetch_offset()  # where the batches were read from
        cursor = self.end if cursor is None else cursor
        for batch in batches:
            if taken >= max_records:
                break
            if batch.base_offset > cursor:
                self._vanished(cursor, batch.base_offset)
            cursor = max(cursor, batch.last_offset + 1)
            got = False
            for offset in range(max(batch.base_offset, self.start), batch.last_offset + 1):
                if offset >= self.end:
                    if not self._extend(offset, batch.control):
                        break
                    if batch.control:
                        continue
                record = self.records[offset]
                if record.state != RecordState.AVAILABLE:
                    continue
                if record.count >= self.delivery_limit:
                    # Delivered as often as allowed, its last lock died with a restart (an acquired
                    # record is stored as available, with its count): done, not delivered again.
                    self._settle(offset, record, RecordState.ARCHIVED)
                    continue
                self.dirty.add(offset)  # its delivery count
                record.state, record.member = RecordState.ACQUIRED, member
                record.count += 1
                record.deadline_ms = now + lock_ms
                _add(ranges, offset, record.count)
                taken += 1
                got = True
            if got:
                used.append(batch)
            if self.end - self.start >= self.max_locks:
                self._advance()  # a head archived on the way (control records) frees the window
                if self.next_fetch_offset() is None:
                    break
        self._advance()
        return ranges, used

    def _extend(self, offset: int, control: bool) -> bool:
        """Take `offset` (at or past `end`) into the window; offsets skipped on the way have
        no record (compaction, DeleteRecords, a transaction's markers), and a control record is
        never delivered: both are done.  With nothing in flight the start moves straight to
        `offset`, however wide the gap before it: what is not there takes no place in the
        window (as Kafka moves its start offset to the first batch it acquires)."""
        if offset - self.start >= self.max_locks:
            self._advance()  # the window's head may be done already (archived on the way)
            if self.start == self.end:
                self.start = self.end = offset
            elif offset - self.start >= self.max_locks:
                return False
        for missing in range(self.end, offset):
            self.records[missing] = InFlight(RecordState.ARCHIVED, 0)
            self.dirty.add(missing)
        self.records[offset] = InFlight(RecordState.ARCHIVED if control else RecordState.AVAILABLE, 0)
        self.dirty.add(offset)
        self.end = offset + 1
        return True

    def _vanished(self, first: int, end: int) -> None:
        """The log holds no record in [first, end) any more (compacted since it was taken into
        the window): what is available there is archived, or it would be read again and again."""
        for offset in range(max(first, self.start), min(end, self.end)):
            record = self.records[offset]
            if record.state == RecordState.AVAILABLE:
                self._settle(offset, record, RecordState.ARCHIVED)

    # --- acknowledging -----------------------------------------------------------------

    def acknowledge(self, member: str, batches: Sequence[tuple[int, int, Sequence[int]]]) -> None:
        """Apply a member's acknowledgements: all of them, or none (INVALID_RECORD_STATE when
        any names a record it does not hold, INVALID_REQUEST when one is malformed)."""
        previous = -1
        for first, last, types in batches:  # the request's shape first, as Kafka's KafkaApis
            if first > last or first < 0:
                raise KafkaError(ErrorCode.invalid_request, f"acknowledgement batch {first}-{last} is empty")
            if first <= previous:
                # In order, none overlapping: an offset named twice would be settled twice
                # (accepted, then released for redelivery).
                raise KafkaError(
                    ErrorCode.invalid_request,
                    f"acknowledgement batch {first}-{last} overlaps or precedes offset {previous}",
                )
            previous = last
            span = last - first + 1
            if len(types) not in (1, span):
                raise KafkaError(
                    ErrorCode.invalid_request,
                    f"acknowledgement batch {first}-{last} has {len(types)} types for {span} offsets",
                )
            if any(t not in AckType._value2member_map_ for t in types):
                raise KafkaError(ErrorCode.invalid_request, f"unknown acknowledge type in {list(types)}")
        plan: list[tuple[int, InFlight, AckType]] = []
        for first, last, types in batches:
            for offset in range(first, last + 1):
                record = self.records.get(offset)
                if record is None or record.state != RecordState.ACQUIRED or record.member != member:
                    raise KafkaError(
                        ErrorCode.invalid_record_state,
                        f"the record at offset {offset} is not acquired by member {member}",
                    )
                plan.append((offset, record, AckType(types[0] if len(types) == 1 else types[offset - first])))
        for offset, record, ack in plan:
            if ack == AckType.ACCEPT:
                self._settle(offset, record, RecordState.ACKNOWLEDGED)
            elif ack == AckType.RELEASE:
                self._release(offset, record)
            else:
                self._settle(offset, record, RecordState.ARCHIVED)
        self._advance()

    def release_member(self, member: str, *, uncount: bool = False) -> bool:
        """Release every record `member` holds.  When its share session closed (`uncount`),
        those deliveries did not happen as far as the limit goes, as Kafka counts them: the
        member never handed them to its application, or handed them without a word back."""
        held = [(o, r) for o, r in self.records.items() if r.state == RecordState.ACQUIRED and r.member == member]
        for offset, record in held:
            if uncount:
                record.count = max(0, record.count - 1)
            self._release(offset, record)
        self._advance()
        return bool(held)

    def expire_locks(self, now: int) -> bool:
        expired = [(o, r) for o, r in self.records.items() if r.state == RecordState.ACQUIRED and r.deadline_ms <= now]
        for offset, record in expired:
            self._release(offset, record)
        self._advance()
        return bool(expired)

    def next_deadline(self) -> int | None:
        deadlines = [r.deadline_ms for r in self.records.values() if r.state == RecordState.ACQUIRED]
        return min(deadlines) if deadlines else None

    def _release(self, offset: int, record: InFlight) -> None:
        """Available again, unless it has been delivered as often as allowed."""
        done = record.count >= self.delivery_limit
        self._settle(offset, record, RecordState.ARCHIVED if done else RecordState.AVAILABLE)

    def _settle(self, offset: int, record: InFlight, state: RecordState) -> None:
        record.state, record.member, record.deadline_ms = state, None, 0
        self.dirty.add(offset)

    def _advance(self) -> None:
        while self.start < self.end and self.records[self.start].state in DONE:
            del self.records[self.start]
            self.dirty.discard(self.start)  # the start says it: what is below is done
            self.start += 1

    # --- the log moved under us, or an operator moved the start ------------------------

    def truncate_to(self, log_start: int) -> None:
        """Records below the log's start are gone (retention, DeleteRecords): skip them."""
        if log_start <= self.start:
            return
        for offset in range(self.start, min(self.end, log_start)):
            del self.records[offset]
            self.dirty.discard(offset)
        self.start = log_start
        self.end = max(self.end, log_start)
        self._advance()  # the new head may be done already

    def reset(self, start: int) -> None:
        """AlterShareGroupOffsets (the group is empty: nothing is acquired)."""
        self.records.clear()
        self.dirty.clear()
        self.start = self.end = start
        self.state_epoch += 1
        self.needs_snapshot = True

    # --- persistence ---------------------------------------------------------------------

    def backlog(self, log_end: int) -> int:
        """Records the group is not done with: those past the window, and those in it that are
        neither acknowledged nor archived (a share group's lag: records finish out of order)."""
        pending = sum(1 for r in self.records.values() if r.state not in DONE)
        return max(0, log_end - max(self.end, self.start)) + pending

    def in_flight(self) -> int:
        return sum(1 for r in self.records.values() if r.state == RecordState.ACQUIRED)

    def snapshot(self) -> dict[str, object]:
        """What survives a restart: the start, and runs of records past it that are done or
        were delivered before (an acquired record is stored as available: its lock dies with
        the broker, its delivery count does not)."""
        return {
            "start": self.start,
            "end": self.end,
            "epoch": self.state_epoch,
            "runs": self._runs(range(self.start, self.end)),
        }

    def changes(self) -> dict[str, object]:
        """An update's value: the start, the end, and runs of the records in the window whose
        stored state or delivery count changed since the last write (which it forgets), so
        that an acknowledgement costs what it changed, not the window."""
        value: dict[str, object] = {
            "start": self.start,
            "end": self.end,
            "epoch": self.state_epoch,
            "runs": self._runs(sorted(o for o in self.dirty if self.start <= o < self.end)),
        }
        self.dirty.clear()
        return value

    def _runs(self, offsets: Iterable[int]) -> list[list[int]]:
        """[first, last, state, count] of consecutive `offsets` alike (ascending)."""
        runs: list[list[int]] = []
        for offset in offsets:
            record = self.records[offset]
            state = RecordState.AVAILABLE if record.state == RecordState.ACQUIRED else record.state
            if runs and runs[-1][1] == offset - 1 and runs[-1][2] == state and runs[-1][3] == record.count:
                runs[-1][1] = offset
            else:
                runs.append([offset, offset, int(state), record.count])
        return runs

    def apply(self, value: dict[str, object]) -> None:
        """Replay an update (`changes()`) over the state it followed; ValueError, and nothing
        changed, when it is malformed or of another epoch (written before a reset).  What it
        says below the start replayed so far is done already, and ignored."""
        start, end, runs = _window(value)
        if value.get("epoch") != self.state_epoch:
            raise ValueError(f"a share partition update of epoch {value.get('epoch')} follows epoch {self.state_epoch}")
        start, end = max(start, self.start), max(end, self.end)
        for offset in range(self.start, min(start, self.end)):
            del self.records[offset]
        self.start, self.end = start, max(self.end, start)
        for offset in range(self.end, end):
            self.records[offset] = InFlight(RecordState.ARCHIVED, 0)
        self.end = end
        for first, last, state, count in runs:
            for offset in range(max(first, start), last + 1):
                self.records[offset] = InFlight(RecordState(state), count)
        self._advance()

    @classmethod
    def restore(cls, value: dict[str, object], *, delivery_limit: int, max_locks: int) -> SharePartition:
        start, end, runs = _window(value)
        epoch = value.get("epoch")
        if not is_int(epoch):
            raise ValueError("share partition state is malformed")
        assert isinstance(epoch, int)
        part = cls(start, delivery_limit=delivery_limit, max_locks=max_locks)
        part.end, part.state_epoch, part.needs_snapshot = end, epoch, False
        for offset in range(start, end):
            part.records[offset] = InFlight(RecordState.ARCHIVED, 0)
        for first, last, state, count in runs:
            for offset in range(first, last + 1):
                part.records[offset] = InFlight(RecordState(state), count)
        part._advance()
        return part


def _window(value: dict[str, object]) -> tuple[int, int, list[tuple[int, int, int, int]]]:
    """A stored state's start, end and runs, checked: a window no broker writes, runs out of
    order, overlapping or outside it are refused before anything is allocated for them."""
    start, end, epoch, runs = value.get("start"), value.get("end"), value.get("epoch"), value.get("runs")
    if not (is_int(start) and is_int(end) and is_int(epoch) and isinstance(runs, list)):
        raise ValueError("share partition state is malformed")
    assert isinstance(start, int)
    assert isinstance(end, int)
    if not 0 <= start <= end or end - start > MAX_WINDOW:
        raise ValueError(f"share partition window {start}-{end} is impossible")
    checked: list[tuple[int, int, int, int]] = []
    after = start  # runs are written in order, without overlap: restoring is linear in the window
    for run in runs:
        if not (isinstance(run, list) and len(run) == 4 and all(is_int(x) for x in run)):
            raise ValueError("a run of share partition state is malformed")
        first, last, state, count = run
        if not (after <= first <= last < end) or state not in RecordState._value2member_map_ or count < 0:
            raise ValueError(f"a run of share partition state is out of range: {run}")
        kept = RecordState.AVAILABLE if state == RecordState.ACQUIRED else state
        checked.append((first, last, kept, count))
        after = last + 1
    return start, end, checked


def _add(ranges: list[Acquired], offset: int, count: int) -> None:
    last = ranges[-1] if ranges else None
    if last is not None and last.last_offset == offset - 1 and last.delivery_count == count:
        ranges[-1] = Acquired(last.first_offset, offset, count)
    else:
        ranges.append(Acquired(offset, offset, count))
