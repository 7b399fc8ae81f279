"""The share group coordinator (KIP-932): share groups' members, their share sessions, and
the state of every share partition, kept in the compacted internal topic
`__share_group_state` (msgpack keys and values, like `__consumer_offsets`).

One group's records all go to one partition of that topic (`crc32(group) % partitions`), so
a request that changes several of its share partitions costs one fsync.  Acknowledgements
and a share partition's first start offset are answered only once fsynced; an acquisition
writes nothing (as Kafka: a delivery count is stored with the acknowledgement or release
that follows, so a crash may deliver a record once more than counted, never lose one).

Members are held in memory only: after a restart a member's next heartbeat is told
UNKNOWN_MEMBER_ID and it rejoins under the same id, as after a coordinator move in Kafka.
The records it held were released by the restart anyway (locks do not survive).
"""

from __future__ import annotations

import asyncio
import uuid
import zlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

import msgpack
import structlog

from broker.clock import Clock
from broker.coordinator.coordinator import COORDINATOR_TOPIC_CONFIG
from broker.log.partition_log import PartitionLog
from broker.metadata import MetadataStore
from broker.protocol.batch import iter_headers
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import Record, build_batch
from broker.replay import is_int, need
from broker.share.group import (
    LEAVE_EPOCH,
    ShareGroup,
    ShareHeartbeat,
    ShareHeartbeatResult,
    join_or_beat,
    simple,
    unknown_member,
    validate,
)
from broker.share.partition import Acquired, BatchSpan, SharePartition
from broker.share.sessions import ShareSession, ShareSessions

log = structlog.get_logger(__name__)

STATE_TOPIC = "__share_group_state"
READ_CHUNK = 256 * 1024  # bytes of the log read at a time while acquiring
LOCK_SCAN_IDLE_MS = 1000  # with no lock held, how often the tick looks again anyway
# Updates written between two snapshots of a share partition (Kafka's
# share.coordinator.snapshot.update.records.per.snapshot, 500 there): what a replay applies
# at most on top of a snapshot, and what a snapshot's cost is spread over.
SNAPSHOT_EVERY = 128
Key = tuple[str, uuid.UUID, int]  # group, topic id, partition
Rec = tuple[list[object], dict[str, object] | None]
Sync = Callable[[Iterable[PartitionLog]], Awaitable[None]]


@dataclass(frozen=True)
class ShareConfig:
    state_partitions: int = 50
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    lock_duration_ms: int = 30_000
    delivery_limit: int = 5
    max_locks: int = 2_000
    max_size: int = 200
    max_sessions: int = 2_000


@dataclass(frozen=True)
class GroupSettings:
    """A group's own configs (its overrides, else the broker's)."""

    lock_duration_ms: int
    session_timeout_ms: int
    heartbeat_interval_ms: int
    auto_offset_reset: str  # latest | earliest | by_duration
    reset_duration_ms: int | None = None
    read_committed: bool = False  # share.isolation.level


@dataclass(slots=True)
class Fetched:
    records: bytes
    acquired: list[Acquired]


class ShareCoordinator:
    def __init__(
        self,
        store: MetadataStore,
        clock: Clock,
        config: ShareConfig,
        sync: Sync,
        *,
        settings: Callable[[str], GroupSettings],
        other_kind: Callable[[str], str | None],
    ) -> None:
        self.store = store
        self.clock = clock
        self.config = config
        self._sync = sync
        self.settings = settings
        self._other_kind = other_kind  # "consumer"/"classic" when a group of that id exists
        self.groups: dict[str, ShareGroup] = {}
        self.partitions: dict[Key, SharePartition] = {}
        self.sessions = ShareSessions(config.max_sessions)
        self._locked: set[Key] = set()  # partitions that may hold acquired records
        # No lock runs out before this (ms): the tick looks at the locks only from then on, not
        # at every turn (a partition's locks are a scan of its window).
        self._next_expiry = 0
        self._waiters: set[asyncio.Future[None]] = set()
        topic = store.get(STATE_TOPIC)
        self.state_partitions = topic.partitions if topic is not None else config.state_partitions
        if topic is not None:
            self._load()

    # --- membership ----------------------------------------------------------------------

    def heartbeat(
        self, req: ShareHeartbeat, resolve: Callable[[str], tuple[uuid.UUID, int] | None]
    ) -> tuple[ShareHeartbeatResult, Awaitable[None] | None]:
        """A ShareGroupHeartbeat; `resolve` gives a topic's id and partition count (None:
        unknown, or not for this member to see)."""
        validate(req)
        now = self.clock.now_ms()
        group = self.groups.get(req.group_id)
        if req.member_epoch == LEAVE_EPOCH:
            if group is not None and req.member_id in group.members:
                self._remove(group, req.member_id, expired=False)
            return ShareHeartbeatResult(LEAVE_EPOCH, None), self._persist_group(req.group_id)
        if group is None:
            kind = self._other_kind(req.group_id)
            if kind is not None:
                raise KafkaError(ErrorCode.group_id_not_found, f"Group {req.group_id} is not a share group.")
            if req.member_epoch != 0:
                raise KafkaError(ErrorCode.unknown_member_id, f"Member {req.member_id} is not a member of the group.")
            group = self.groups[req.group_id] = ShareGroup(req.group_id)
        settings = self.settings(req.group_id)
        member, changed = join_or_beat(group, req, now, settings.session_timeout_ms, self.config.max_size)
        if changed:
            group.epoch += 1
        grew = self._assign(group, resolve)
        durable = self._persist_group(req.group_id) if changed or grew else None
        if member.epoch != group.assignment_epoch:
            member.previous_epoch, member.epoch = member.epoch, group.assignment_epoch
        target = group.target.get(member.member_id, {})
        # Told on joining, when it changed, and when the member's epoch is behind (it missed
        # the answer that told it).
        told = req.member_epoch != member.epoch or target != member.assigned
        member.assigned = target
        return ShareHeartbeatResult(member.epoch, target if told else None), durable

    def _assign(self, group: ShareGroup, resolve: Callable[[str], tuple[uuid.UUID, int] | None]) -> bool:
        """Recompute the target when the group moved on, or a subscribed topic appeared or
        grew (checked at every heartbeat: a dictionary lookup per subscribed topic); True when
        the latter bumped the group epoch (to be stored)."""
        topics: dict[str, tuple[uuid.UUID, int]] = {}
        for name in group.subscribed():
            found = resolve(name)
            if found is not None:
                topics[name] = found
        members = {
            m.member_id: frozenset(topics[t][0] for t in m.topic_names if t in topics) for m in group.members.values()
        }
        target = simple(members, dict(topics.values()))
        bumped = False
        if target != group.target or group.assignment_epoch != group.epoch:
            if target != group.target and group.assignment_epoch == group.epoch:
                group.epoch += 1  # the topics changed under an unchanged membership
                bumped = True
            group.target = target
            group.assignment_epoch = group.epoch
        return bumped

    def _remove(self, group: ShareGroup, member_id: str, *, expired: bool) -> None:
        """A member leaves.  One that left by itself keeps its share session: its last
        acknowledgements (a final ShareFetch or ShareAcknowledge) may arrive after its leave
        heartbeat, and release what it still holds.  One whose session timed out is gone:
        what it held is released now."""
        del group.members[member_id]
        group.target.pop(member_id, None)
        group.epoch += 1
        if expired:
            session = self.sessions.close(group.group_id, member_id)
            self._release(group.group_id, member_id, None if session is None else session.partitions)

    def _release(
        self,
        group_id: str,
        member_id: str,
        partitions: Iterable[tuple[uuid.UUID, int]] | None,
        *,
        uncount: bool = False,
    ) -> None:
        keys = (
            [(group_id, t, p) for t, p in partitions]
            if partitions is not None
            else [k for k in self._locked if k[0] == group_id]
        )
        released = [
            k
            for k in keys
            if (part := self.partitions.get(k)) is not None and part.release_member(member_id, uncount=uncount)
        ]
        if released:
            self._append(group_id, [r for k in released for r in self._state_records(k)])
            self._wake()

    # --- share sessions and fetching ---------------------------------------------------

    def is_member(self, group_id: str, member_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and member_id in group.members

    def open_session(self, group_id: str, member_id: str, owner: object) -> ShareSession:
        """A new share session for a current member, on connection `owner`.  One it had there
        is replaced, its records kept: the member still holds them and may acknowledge them in
        the new session (Kafka's)."""
        if not self.is_member(group_id, member_id):
            raise unknown_member(group_id, member_id)
        session, _ = self.sessions.open(group_id, member_id, owner)
        return session

    def close_session(self, session: ShareSession | None) -> None:
        """The session ended (a final request, or its connection closed): what the member
        still holds is released, the deliveries uncounted."""
        if session is not None and self.sessions.sessions.get((session.group_id, session.member_id)) is session:
            self.sessions.close(session.group_id, session.member_id)
            self._release(session.group_id, session.member_id, session.partitions, uncount=True)

    def partition(
        self, group_id: str, topic_id: uuid.UUID, index: int, plog: PartitionLog
    ) -> tuple[SharePartition, bool]:
        """The group's state of a partition, started (True) where `share.auto.offset.reset`
        says on first use."""
        key = (group_id, topic_id, index)
        part = self.partitions.get(key)
        if part is not None:
            part.truncate_to(plog.log_start_offset)
            return part, False
        settings = self.settings(group_id)
        start = plog.high_watermark
        if settings.auto_offset_reset == "earliest":
            start = plog.log_start_offset
        elif settings.auto_offset_reset == "by_duration" and settings.reset_duration_ms is not None:
            found = plog.offset_for_timestamp(self.clock.now_ms() - settings.reset_duration_ms)
            start = found[0] if found is not None else plog.high_watermark
        part = self.partitions[key] = SharePartition(
            start, delivery_limit=self.config.delivery_limit, max_locks=self.config.max_locks
        )
        return part, True

    def acquire(
        self, member_id: str, key: Key, part: SharePartition, plog: PartitionLog, *, max_records: int, max_bytes: int
    ) -> Fetched:
        """Acquire for a member what it may have of the partition, reading the log a chunk at a
        time until `max_records` are acquired (not `max_bytes` at once: a fetch asks for 50 MB
        and takes 500 records).  Read committed, only below the last stable offset, and records
        of aborted transactions are archived like control records: never delivered."""
        settings = self.settings(key[0])
        upper = plog.last_stable_offset if settings.read_committed else None
        limit = plog.high_watermark if upper is None else upper
        now = self.clock.now_ms()
        acquired: list[Acquired] = []
        kept: list[bytes] = []
        while max_records > 0 and max_bytes > 0:
            offset = part.next_fetch_offset()
            if offset is None or offset >= limit:
                break
            data = plog.read(offset, min(max_bytes, READ_CHUNK), upper)
            if not data:
                break
            spans = self._spans(plog, offset, data, read_committed=settings.read_committed)
            got, used = part.acquire(member_id, (s for _, _, s in spans), max_records, now, settings.lock_duration_ms)
            keep = {id(b) for b in used}
            kept.extend(bytes(data[rel : rel + size]) for rel, size, span in spans if id(span) in keep)
            acquired.extend(got)
            max_records -= sum(a.last_offset - a.first_offset + 1 for a in got)
            max_bytes -= len(data)
            if part.next_fetch_offset() == offset:
                break  # nothing of this chunk could be taken (the window is full)
        if acquired:
            self._locked.add(key)
            self._next_expiry = min(self._next_expiry, now + settings.lock_duration_ms)
        return Fetched(b"".join(kept), acquired)

    @staticmethod
    def _spans(
        plog: PartitionLog, offset: int, data: bytes, *, read_committed: bool
    ) -> list[tuple[int, int, BatchSpan]]:
        """Each batch of `data`: its position, size and offsets, and whether it is never
        delivered (a control batch; read committed, an aborted transaction's)."""
        headers = list(iter_headers(data))
        aborted = []
        if read_committed and headers and plog.txn_index.entries:
            aborted = plog.aborted_transactions(offset, headers[-1][1].last_offset + 1)
        spans = []
        for rel, header in headers:
            skip = header.is_control or (
                header.is_transactional
                and any(
                    a.producer_id == header.producer_id and a.first_offset <= header.base_offset <= a.last_offset
                    for a in aborted
                )
            )
            spans.append((rel, header.size, BatchSpan(header.base_offset, header.last_offset, skip)))
        return spans

    def acknowledge(self, member_id: str, key: Key, batches: list[tuple[int, int, list[int]]]) -> None:
        part = self.partitions.get(key)
        if part is None:
            raise KafkaError(ErrorCode.invalid_record_state, "no record of this partition is acquired by the group")
        part.acknowledge(member_id, batches)
        self._wake()  # released records may be fetched again

    def persist(self, group_id: str, keys: Iterable[Key]) -> Awaitable[None] | None:
        """Write the state of `keys`; durable once the result has run.  When the disk refuses,
        the next write of each is a snapshot: an update holds only what changed since the
        previous one, which may never have reached the disk."""
        parts = [part for k in keys if (part := self.partitions.get(k)) is not None]
        records = [r for k in keys if k in self.partitions for r in self._state_records(k)]
        if not records:
            return None
        try:
            written = self._sync([self._append(group_id, records)])
        except OSError:
            _resnapshot(parts)
            raise

        async def durable() -> None:
            try:
                await written
            except OSError:
                _resnapshot(parts)
                raise

        return durable()

    # --- waiting for something to fetch --------------------------------------------------

    def changed(self) -> asyncio.Future[None]:
        """Completes when records may have become available (released, or their locks ran
        out): a waiting ShareFetch tries again."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.add(future)
        future.add_done_callback(self._waiters.discard)
        return future

    def _wake(self) -> None:
        for future in list(self._waiters):
            if not future.done():
                future.set_result(None)

    # --- expiry ------------------------------------------------------------------------

    def tick(self) -> None:
        now = self.clock.now_ms()
        for group in list(self.groups.values()):
            for member in list(group.members.values()):
                if now >= member.session_deadline_ms:
                    log.info("share group member expired", group=group.group_id, member=member.member_id)
                    self._remove(group, member.member_id, expired=True)
                    self._append(group.group_id, [self._group_record(group)])
        if now < self._next_expiry:
            return
        expired: dict[str, list[Key]] = {}
        upcoming = []
        for key in list(self._locked):
            part = self.partitions.get(key)
            deadline = part.next_deadline() if part is not None else None
            if part is None or deadline is None:
                self._locked.discard(key)
                continue
            if deadline <= now and part.expire_locks(now):
                expired.setdefault(key[0], []).append(key)
                deadline = part.next_deadline()
            if deadline is not None:
                upcoming.append(deadline)
        self._next_expiry = min(upcoming, default=now + LOCK_SCAN_IDLE_MS)
        for group_id, keys in expired.items():
            self._append(group_id, [r for k in keys for r in self._state_records(k)])
        if expired:
            self._wake()

    # --- administration ------------------------------------------------------------------

    def start_offsets(self, group_id: str) -> dict[tuple[uuid.UUID, int], int]:
        return {(t, p): part.start for (g, t, p), part in self.partitions.items() if g == group_id}

    def start_offset(self, group_id: str, topic_id: uuid.UUID, index: int) -> int | None:
        """One partition's start offset (None: no state), without a scan of every group's."""
        part = self.partitions.get((group_id, topic_id, index))
        return None if part is None else part.start

    def _require_empty(self, group_id: str) -> ShareGroup | None:
        group = self.groups.get(group_id)
        if group is not None and group.members:
            raise KafkaError(ErrorCode.non_empty_group, f"The share group {group_id} is not empty.")
        return group

    async def alter_start_offsets(self, group_id: str, offsets: dict[tuple[uuid.UUID, int], int]) -> None:
        self._require_empty(group_id)
        self.groups.setdefault(group_id, ShareGroup(group_id))
        for (topic, index), offset in offsets.items():
            key = (group_id, topic, index)
            part = self.partitions.get(key)
            if part is None:
                part = self.partitions[key] = SharePartition(
                    offset, delivery_limit=self.config.delivery_limit, max_locks=self.config.max_locks
                )
            part.reset(offset)
        plog = self._append(
            group_id,
            [
                self._group_record(self.groups[group_id]),
                *(r for t, p in offsets for r in self._state_records((group_id, t, p))),
            ],
        )
        await self._sync([plog])

    async def delete_start_offsets(self, group_id: str, partitions: Iterable[tuple[uuid.UUID, int]]) -> None:
        self._require_empty(group_id)
        keys = [(group_id, t, p) for t, p in partitions if (group_id, t, p) in self.partitions]
        records = [r for k in keys for r in self._drop(k)]
        if records:
            await self._sync([self._append(group_id, records)])

    async def delete_group(self, group_id: str) -> None:
        self._require_empty(group_id)
        keys = [k for k in self.partitions if k[0] == group_id]
        records: list[Rec] = [r for k in keys for r in self._drop(k)]
        self.groups.pop(group_id, None)
        records.append((["sg", group_id], None))
        await self._sync([self._append(group_id, records)])

    def forget_topic(self, topic: str) -> list[PartitionLog]:
        """A deleted topic's share-partition state goes with it, in every group, so a topic
        created again under its name starts each group where `share.auto.offset.reset` says:
        gone from memory at once, its tombstones durable once the returned logs are synced.
        Called once the store has dropped the topic (its id is no longer resolvable by name),
        so the state of every topic id the store no longer knows goes: this topic's, and any
        left by a deletion that did not get this far."""
        found = self.store.get(topic)
        gone = {found.topic_id} if found is not None else set()
        doomed: dict[str, list[Key]] = {}
        for key in self.partitions:
            if key[1] in gone or key[1] not in self.store.by_id:
                doomed.setdefault(key[0], []).append(key)
        logs: dict[int, PartitionLog] = {}
        for group_id, keys in doomed.items():
            plog = self._append(group_id, [r for k in keys for r in self._drop(k)])
            logs[id(plog)] = plog
        if doomed:
            log.info("deleted topic's share state removed", topic=topic, groups=len(doomed))
        return list(logs.values())

    def known(self, group_id: str) -> bool:
        return group_id in self.groups or any(k[0] == group_id for k in self.partitions)

    # --- persistence ---------------------------------------------------------------------

    def ensure_state_topic(self) -> None:
        if self.store.get(STATE_TOPIC) is None:
            self.store.create_topic(STATE_TOPIC, self.state_partitions, COORDINATOR_TOPIC_CONFIG, internal=True)

    def _append(self, group_id: str, records: list[Rec]) -> PartitionLog:
        self.ensure_state_topic()
        plog = self.store.partition_log(STATE_TOPIC, zlib.crc32(group_id.encode()) % self.state_partitions)
        assert plog is not None
        now = self.clock.now_ms()
        plog.append_internal(
            build_batch(
                [
                    Record(i, now, msgpack.packb(key), None if value is None else msgpack.packb(value))
                    for i, (key, value) in enumerate(records)
                ]
            )
        )
        return plog

    def _persist_group(self, group_id: str) -> Awaitable[None] | None:
        group = self.groups.get(group_id)
        if group is None:
            return None
        return self._sync([self._append(group_id, [self._group_record(group)])])

    @staticmethod
    def _group_record(group: ShareGroup) -> Rec:
        return ["sg", group.group_id], {"epoch": group.epoch}

    def _state_records(self, key: Key) -> list[Rec]:
        """What to write for a share partition that changed: an update holding what changed
        (ShareUpdate), or every SNAPSHOT_EVERY updates, and after a reset, its whole state
        (ShareSnapshot) with the tombstones of the updates it supersedes, so that a replay reads
        at most one snapshot and SNAPSHOT_EVERY updates per share partition, however long the
        topic is left uncompacted."""
        part = self.partitions[key]
        if part.needs_snapshot or part.updates >= SNAPSHOT_EVERY:
            records: list[Rec] = [(_update_key(key, n), None) for n in range(1, part.updates + 1)]
            records.append((_state_key(key), part.snapshot()))
            part.dirty.clear()
            part.needs_snapshot, part.updates = False, 0
            return records
        part.updates += 1
        return [(_update_key(key, part.updates), part.changes())]

    def _drop(self, key: Key) -> list[Rec]:
        """Forget a share partition: the tombstones of its snapshot and updates."""
        part = self.partitions.pop(key)
        self._locked.discard(key)
        return [(_state_key(key), None), *((_update_key(key, n), None) for n in range(1, part.updates + 1))]

    def _load(self) -> None:
        skipped = self.store.skipped
        for p in range(self.state_partitions):
            plog = self.store.partition_log(STATE_TOPIC, p)
            assert plog is not None
            for record in plog.records(lambda offset, why: skipped.skip(STATE_TOPIC, offset, why)):
                try:
                    self._replay(record)
                except Exception as e:
                    skipped.skip(STATE_TOPIC, record.offset, f"{type(e).__name__}: {e}")
        log.info("share coordinator loaded", groups=len(self.groups), partitions=len(self.partitions))

    def _replay(self, record: Record) -> None:
        key = msgpack.unpackb(record.key or b"\x90")
        need(isinstance(key, list) and len(key) >= 2 and isinstance(key[1], str), "key is not [kind, group, ...]")
        value = None if record.value is None else msgpack.unpackb(record.value)
        need(value is None or isinstance(value, dict), "value is not a map")
        group_id = key[1]
        if key[0] == "sg":
            if value is None:
                self.groups.pop(group_id, None)
                return
            epoch = value.get("epoch")
            need(is_int(epoch, 32) and epoch >= 0, "group epoch is malformed")
            group = self.groups.setdefault(group_id, ShareGroup(group_id))
            group.epoch = group.assignment_epoch = epoch
        elif key[0] == "sp":
            need(len(key) == 4, "share partition key is malformed")
            state_key = _replayed_key(group_id, key)
            if value is None:
                self.partitions.pop(state_key, None)
                return
            try:
                part = SharePartition.restore(
                    value, delivery_limit=self.config.delivery_limit, max_locks=self.config.max_locks
                )
            except ValueError as e:
                need(False, str(e))
                return
            self.partitions[state_key] = part
            self.groups.setdefault(group_id, ShareGroup(group_id))
        elif key[0] == "su":
            need(len(key) == 5, "share partition update key is malformed")
            state_key = _replayed_key(group_id, key)
            n = key[4]
            need(
                is_int(n) and isinstance(n, int) and 1 <= n <= SNAPSHOT_EVERY,
                "share partition update number is malformed",
            )
            if value is None:
                return  # superseded by a snapshot
            found = self.partitions.get(state_key)
            need(found is not None, "a share partition update without its snapshot")
            assert found is not None
            found.updates = max(found.updates, n)  # numbered on from here, skipped or not
            try:
                found.apply(value)
            except ValueError as e:
                need(False, str(e))
        else:
            need(False, f"unknown record kind {key[0]!r}")


def _resnapshot(parts: Iterable[SharePartition]) -> None:
    for part in parts:
        part.needs_snapshot = True


def _state_key(key: Key) -> list[object]:
    group_id, topic_id, partition = key
    return ["sp", group_id, topic_id.bytes, partition]


def _replayed_key(group_id: str, key: list[object]) -> Key:
    topic_id, partition = key[2], key[3]
    need(isinstance(topic_id, bytes) and len(topic_id) == 16, "share partition key is malformed")
    need(is_int(partition, 32) and isinstance(partition, int) and partition >= 0, "partition is malformed")
    assert isinstance(topic_id, bytes)
    assert isinstance(partition, int)
    return group_id, uuid.UUID(bytes=topic_id), partition


def _update_key(key: Key, n: int) -> list[object]:
    """The n-th update since the share partition's snapshot: a key of its own, so compaction
    keeps every update until the next snapshot's tombstones supersede them."""
    group_id, topic_id, partition = key
    return ["su", group_id, topic_id.bytes, partition, n]
