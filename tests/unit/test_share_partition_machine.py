"""The share partition (KIP-932) as a stateful machine of several members acquiring,
acknowledging, releasing and expiring locks, checking Kafka's guarantees after every step.

Time is the `now` argument throughout: nothing sleeps.
"""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.protocol.errors import ErrorCode, KafkaError
from broker.share.partition import BatchSpan, RecordState, SharePartition
from tests.support.examples import examples
from tests.support.share_partition import LOCK_MS, A, G, R, X, view, whole


def _stored(value: dict[str, object]) -> Any:
    """A value as a replay reads it back."""
    return msgpack.unpackb(msgpack.packb(value))


MEMBERS = ("a", "b", "c")
LIMIT = 3
WINDOW = 12


class SharePartitionMachine(RuleBasedStateMachine):
    """A log that grows (batches, control batches, compaction gaps) and is truncated; three
    members fetch, acknowledge (valid or not), are released, let their locks run out; the
    broker restarts (a snapshot, stored and restored); every other step an update is written
    and replayed over a replica of the stored state.  The model keeps what the members
    hold, how often each record was delivered, what was acknowledged or archived."""

    def __init__(self) -> None:
        super().__init__()
        self.p = SharePartition(0, delivery_limit=LIMIT, max_locks=WINDOW)
        self.log: list[BatchSpan] = []
        self.log_start = 0
        self.log_end = 0
        self.now = 0
        self.held: dict[str, set[int]] = {m: set() for m in MEMBERS}
        self.count: dict[int, int] = {}  # deliveries per offset
        self.accepted: set[int] = set()
        self.rejected: set[int] = set()  # REJECT or GAP
        self.archived: set[int] = set()  # ever seen archived
        self.last_start = 0
        # What a replay would rebuild: the first snapshot, then each update written since.
        self.replica = SharePartition.restore(_stored(self.p.snapshot()), delivery_limit=LIMIT, max_locks=WINDOW)
        self.steps = 0

    # --- the model ---

    def control(self) -> set[int]:
        return {o for batch in self.log if batch.control for o in range(batch.base_offset, batch.last_offset + 1)}

    def data(self) -> set[int]:
        return {o for batch in self.log if not batch.control for o in range(batch.base_offset, batch.last_offset + 1)}

    def done_in_model(self, offset: int) -> bool:
        return offset in self.accepted or offset in self.rejected or self.count.get(offset, 0) >= LIMIT

    # --- rules ---

    @rule(size=st.integers(1, 5), gap=st.sampled_from([0, 0, 0, 1, 3]), control=st.sampled_from([False] * 4 + [True]))
    def produce(self, size: int, gap: int, control: bool) -> None:
        base = self.log_end + gap
        self.log.append(BatchSpan(base, base + (0 if control else size - 1), control))
        self.log_end = self.log[-1].last_offset + 1

    @rule(member=st.sampled_from(MEMBERS), max_records=st.integers(1, 8))
    def fetch(self, member: str, max_records: int) -> None:
        self.p.truncate_to(self.log_start)  # as the coordinator, before every fetch
        offset = self.p.next_fetch_offset()
        if offset is None or offset >= self.log_end:
            return
        batches = [batch for batch in self.log if batch.last_offset >= offset]
        before = {o: (r.state, r.count) for o, r in self.p.records.items()}
        ranges, used = self.p.acquire(member, batches, max_records, self.now, LOCK_MS)
        data = self.data()
        got: list[int] = []
        for r in ranges:
            assert r.first_offset <= r.last_offset
            for o in range(r.first_offset, r.last_offset + 1):
                got.append(o)
                assert o in data, f"{o} is not a data record (a control record or a gap)"
                assert o not in self.accepted, f"{o} was acknowledged, then delivered again"
                assert o not in self.archived, f"{o} was archived, then delivered again"
                assert not any(o in h for h in self.held.values()), f"{o} is held already"
                assert before.get(o, (RecordState.AVAILABLE, 0))[0] == RecordState.AVAILABLE
                self.count[o] = self.count.get(o, 0) + 1
                assert r.delivery_count == self.count[o]
                record = self.p.records[o]
                assert (record.state, record.member, record.count) == (RecordState.ACQUIRED, member, self.count[o])
                assert record.deadline_ms == self.now + LOCK_MS
        assert len(got) == len(set(got))
        assert got == sorted(got)
        if got:
            # Rounded up to a batch's end only: no batch is started once max_records is reached.
            assert len([o for o in got if o < used[-1].base_offset]) < max_records
        assert all(any(batch.base_offset <= o <= batch.last_offset for o in got) for batch in used)
        self.held[member] |= set(got)

    @precondition(lambda self: any(self.held.values()))
    @rule(data=st.data())
    def acknowledge(self, data: st.DataObject) -> None:
        member = data.draw(st.sampled_from([m for m in MEMBERS if self.held[m]]))
        chosen = sorted(data.draw(st.sets(st.sampled_from(sorted(self.held[member])), min_size=1)))
        types = [data.draw(st.sampled_from([A, A, R, X, G])) for _ in chosen]
        batches: list[tuple[int, int, list[int]]] = []
        i = 0
        while i < len(chosen):  # contiguous runs; one type for a run where all agree
            j = i
            while j + 1 < len(chosen) and chosen[j + 1] == chosen[j] + 1:
                j += 1
            run = [int(t) for t in types[i : j + 1]]
            batches.append((chosen[i], chosen[j], run[:1] if len(set(run)) == 1 else run))
            i = j + 1
        self.p.acknowledge(member, batches)
        for offset, t in zip(chosen, types, strict=True):
            self.held[member].discard(offset)
            if t == A:
                self.accepted.add(offset)
            elif t in (X, G):
                self.rejected.add(offset)
            record = self.p.records.get(offset)
            if t == R and self.count[offset] < LIMIT:
                assert record is not None
                assert record.state == RecordState.AVAILABLE
            elif record is not None:
                assert record.state == (RecordState.ACKNOWLEDGED if t == A else RecordState.ARCHIVED)

    @rule(data=st.data(), member=st.sampled_from(MEMBERS), kind=st.sampled_from(["state", "request"]))
    def acknowledge_wrongly(self, data: st.DataObject, member: str, kind: str) -> None:
        """A valid batch (if the member holds anything) followed by a bad one: nothing changes."""
        batches: list[tuple[int, int, list[int]]] = []
        if self.held[member]:
            first = min(self.held[member])
            batches.append((first, first, [int(A)]))
        after = batches[-1][1] + 1 if batches else 0
        if kind == "state":
            lo = max(after, self.p.start - 3, 0)
            candidates = [o for o in range(lo, self.p.end + 3) if o not in self.held[member]]
            if not candidates:
                return
            o = data.draw(st.sampled_from(candidates))
            batches.append((o, o, [data.draw(st.sampled_from([int(A), int(R), int(X)]))]))
            code = ErrorCode.invalid_record_state
        else:
            bad = data.draw(
                st.sampled_from([(after + 2, after + 1, [1]), (after, after + 2, [1, 1]), (after, after, [5])])
            )
            batches.append(bad)
            if batches[0][0] == bad[0]:
                batches.append((bad[0], bad[0], [1]))  # and overlapping
            code = ErrorCode.invalid_request
        before = whole(self.p)
        with pytest.raises(KafkaError) as e:
            self.p.acknowledge(member, batches)
        assert e.value.code == code
        assert whole(self.p) == before

    @rule(member=st.sampled_from(MEMBERS), uncount=st.booleans())
    def release(self, member: str, uncount: bool) -> None:
        """The member left (counted) or its share session closed (uncounted)."""
        assert self.p.release_member(member, uncount=uncount) == bool(self.held[member])
        if uncount:
            for o in self.held[member]:
                self.count[o] -= 1
        self.held[member].clear()

    @rule(ms=st.integers(0, 1_500))
    def time_passes(self, ms: int) -> None:
        self.now += ms
        expired = {
            o for o, r in self.p.records.items() if r.state == RecordState.ACQUIRED and r.deadline_ms <= self.now
        }
        assert self.p.expire_locks(self.now) == bool(expired)
        for h in self.held.values():
            h.difference_update(expired)

    @rule(k=st.integers(1, 6))
    def truncate(self, k: int) -> None:
        self.log_start = min(self.log_end, self.log_start + k)
        self.log = [batch for batch in self.log if batch.last_offset >= self.log_start]
        self.p.truncate_to(self.log_start)
        for h in self.held.values():
            h.difference_update({o for o in h if o < self.log_start})

    @rule()
    def restart(self) -> None:
        before = self.p
        stored = _stored(before.snapshot())
        self.p = SharePartition.restore(stored, delivery_limit=LIMIT, max_locks=WINDOW)
        self.replica = SharePartition.restore(stored, delivery_limit=LIMIT, max_locks=WINDOW)
        assert (self.p.start, self.p.end, self.p.state_epoch) == (before.start, before.end, before.state_epoch)
        for offset, r in before.records.items():
            kept = RecordState.AVAILABLE if r.state == RecordState.ACQUIRED else r.state
            assert view(self.p)[offset] == (kept, r.count, None)
        for h in self.held.values():
            h.clear()  # locks do not survive

    # --- invariants ---

    @invariant()
    def updates_replay_the_state(self) -> None:
        """Every other step an update is written (so one holds the changes of two steps):
        replayed over what was written before, it gives back what a snapshot would store."""
        self.steps += 1
        if self.steps % 2 == 0:
            self.replica.apply(_stored(self.p.changes()))
            assert self.replica.snapshot() == self.p.snapshot()

    @invariant()
    def the_window_is_whole(self) -> None:
        p = self.p
        assert set(p.records) == set(range(p.start, p.end))
        assert p.end - p.start <= WINDOW
        assert p.start >= self.last_start, "the start moved back"
        self.last_start = p.start
        if p.start < p.end:
            assert p.records[p.start].state not in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)

    @invariant()
    def holders_and_counts(self) -> None:
        seen: dict[int, str] = {}
        for member, h in self.held.items():
            for o in h:
                assert o not in seen, f"{o} held by {seen[o]} and {member}"
                seen[o] = member
        acquired = {o: r.member for o, r in self.p.records.items() if r.state == RecordState.ACQUIRED}
        assert acquired == seen
        for o, r in self.p.records.items():
            assert r.count <= LIMIT
            assert r.count == self.count.get(o, 0)
            assert (r.member is None) == (r.state != RecordState.ACQUIRED)
            if r.state == RecordState.ARCHIVED:
                self.archived.add(o)
            if r.state == RecordState.ACKNOWLEDGED:
                assert o in self.accepted
            if o in self.accepted:
                assert r.state == RecordState.ACKNOWLEDGED
        assert all(c <= LIMIT for c in self.count.values())

    @invariant()
    def nothing_is_lost(self) -> None:
        """A data record still in the log, below `end`: in flight, or done for a reason (it
        was accepted, rejected, or delivered as often as allowed)."""
        for o in self.data():
            if self.log_start <= o < self.p.end:
                if o >= self.p.start:
                    assert o in self.p.records
                else:
                    assert self.done_in_model(o), f"{o} was skipped without being consumed"
        for o in self.control():
            assert o not in self.count, f"control record {o} was delivered"


TestSharePartitionMachine = SharePartitionMachine.TestCase
TestSharePartitionMachine.settings = settings(
    max_examples=examples(60),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
