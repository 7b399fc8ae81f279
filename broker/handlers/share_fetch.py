"""The share group APIs' records half (KIP-932): ShareFetch and ShareAcknowledge.

A ShareFetch first applies the acknowledgements it carries, then acquires records for its
member from every partition of its share session, long-polling up to MaxWaitMs when there
is nothing to acquire (new records appended, or records released or unlocked, end the
wait).  The answer holds whole stored batches; AcquiredRecords says which of their records
are this member's.  Acknowledgements (and a share partition's first start offset) are
fsynced before the answer is sent.

Every request is checked against the group: a member id it does not have is UNKNOWN_MEMBER_ID
(no session, nothing acquired or acknowledged), and a session is continued only by the
connection that opened it (`broker.share.sessions`).
"""

from __future__ import annotations

import asyncio
import struct
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar

from broker.cooperative import STEP, each, pause
from broker.handlers.base import Answer, Messages, RequestContext, Serial
from broker.handlers.services import AppendWatches, HasConfig, HasMetrics, HasSecurity, HasShareCoordinator, HasStore
from broker.log.partition_log import PartitionLog
from broker.protocol.codec import build, encode_body, nested, timedelta_ms, uvarint
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.fetch_codec import Part, RawResponse
from broker.security.acls import Operation
from broker.share.coordinator import Key, ShareCoordinator
from broker.share.group import unknown_member
from broker.share.partition import Acquired
from broker.share.sessions import FINAL_EPOCH, INITIAL_EPOCH, ShareSession

if TYPE_CHECKING:
    from kio.static.protocol import Entity

    from broker.handlers.kio_types_share import (
        ShareAcknowledgeRequest,
        ShareAcknowledgeResponse,
        ShareFetchRequest,
        ShareFetchResponse,
    )

R = TypeVar("R")

FETCH: Messages[ShareFetchRequest, ShareFetchResponse] = Messages(78, 1, 1)
ACKNOWLEDGE: Messages[ShareAcknowledgeRequest, ShareAcknowledgeResponse] = Messages(79, 1, 1)
_I32 = struct.Struct(">i")


class ShareFetchBroker(HasSecurity, HasStore, HasConfig, HasMetrics, HasShareCoordinator, AppendWatches, Protocol):
    """What ShareFetch and ShareAcknowledge use of the broker."""


class _Batch(Protocol):
    @property
    def first_offset(self) -> int: ...

    @property
    def last_offset(self) -> int: ...

    @property
    def acknowledge_types(self) -> Sequence[int]: ...


class _FetchPartition(Protocol):
    @property
    def partition_index(self) -> int: ...

    @property
    def acknowledgement_batches(self) -> Sequence[_Batch]: ...


@dataclass(slots=True)
class _Slot:
    """One partition of the answer."""

    topic_id: uuid.UUID
    partition: int
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    ack_error: ErrorCode = ErrorCode.none
    ack_message: str | None = None
    acked: bool = False
    records: bytes = b""
    acquired: list[Acquired] = field(default_factory=list)


class _Request:
    """What both APIs share: the member, its group, its session, and the partitions whose
    state the request changed (to be made durable before the answer)."""

    def __init__(self, broker: ShareFetchBroker, ctx: RequestContext, group_id: str, member_id: str) -> None:
        self.broker, self.ctx = broker, ctx
        self.shares: ShareCoordinator = broker.shares
        self.group_id, self.member_id = group_id, member_id
        self.slots: dict[tuple[uuid.UUID, int], _Slot] = {}
        self.changed: set[Key] = set()

    def slot(self, topic_id: uuid.UUID, partition: int) -> _Slot:
        key = (topic_id, partition)
        found = self.slots.get(key)
        if found is None:
            found = self.slots[key] = _Slot(topic_id, partition)
        return found

    def log_of(self, topic_id: uuid.UUID, partition: int) -> PartitionLog:
        topic = self.broker.store.by_id.get(topic_id)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_id, f"no topic has id {topic_id}")
        if not self.broker.security.topic(self.ctx.session, Operation.READ, topic.name):
            raise KafkaError(ErrorCode.topic_authorization_failed, f"READ on topic {topic.name} denied")
        plog = self.broker.store.partition_log(topic.name, partition)
        if plog is None:
            # Kafka's own words, alike for every partition: their answers share one encoding.
            raise KafkaError(ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition.")
        return plog

    def acknowledge(self, topic_id: uuid.UUID, partition: int, batches: Sequence[_Batch]) -> None:
        slot = self.slot(topic_id, partition)
        slot.acked = True
        try:
            self.log_of(topic_id, partition)
            key = (self.group_id, topic_id, partition)
            self.shares.acknowledge(
                self.member_id, key, [(b.first_offset, b.last_offset, list(b.acknowledge_types)) for b in batches]
            )
            self.changed.add(key)
        except KafkaError as e:
            slot.ack_error, slot.ack_message = e.code, e.message

    def durable(self) -> Awaitable[None] | None:
        return self.shares.persist(self.group_id, self.changed)


def _check(
    broker: ShareFetchBroker, ctx: RequestContext, group_id: str | None, member_id: str | None
) -> tuple[str, str]:
    if not group_id:
        raise KafkaError(ErrorCode.invalid_group_id, "GroupId can't be empty.")
    if not member_id:
        raise KafkaError(ErrorCode.invalid_request, "MemberId can't be empty.")
    if not broker.security.group(ctx.session, Operation.READ, group_id):
        raise KafkaError(ErrorCode.group_authorization_failed, f"READ on group {group_id} denied")
    return group_id, member_id


def _session(shares: ShareCoordinator, ctx: RequestContext, group_id: str, member_id: str, epoch: int) -> ShareSession:
    """The session a request after the opening one continues (or, final, closes): that of a
    current member of the group, opened on this connection.  A member that left keeps its
    session for its last acknowledgements, which may follow its leave heartbeat; a member id
    the group does not have, with no session here, is UNKNOWN_MEMBER_ID."""
    if not shares.is_member(group_id, member_id) and shares.sessions.find(group_id, member_id, ctx.session) is None:
        raise unknown_member(group_id, member_id)
    return shares.sessions.next(group_id, member_id, epoch, ctx.session)


# --- ShareFetch ------------------------------------------------------------------------


def _fetch_session(
    broker: ShareFetchBroker, ctx: RequestContext, request: ShareFetchRequest
) -> tuple[str, str, ShareSession]:
    """The group, member and session a ShareFetch acts in (opened by one of the initial
    epoch); raises KafkaError when the request is refused whole."""
    epoch = request.share_session_epoch
    group_id, member_id = _check(broker, ctx, request.group_id, request.member_id)
    acks = any(p.acknowledgement_batches for t in request.topics for p in t.partitions)
    if epoch == INITIAL_EPOCH and acks:
        raise KafkaError(ErrorCode.invalid_request, "Acknowledge data present on initial fetch request.")
    if any(t.topic_id is None for t in request.topics) or any(
        t.topic_id is None for t in request.forgotten_topics_data
    ):
        raise KafkaError(ErrorCode.invalid_request, "a topic id is null")
    shares: ShareCoordinator = broker.shares
    if epoch == INITIAL_EPOCH:
        session = shares.open_session(group_id, member_id, ctx.session)
        opened = session
        ctx.session.on_close[("share", group_id, member_id)] = lambda: shares.close_session(opened)
    else:
        session = _session(shares, ctx, group_id, member_id, epoch)
    return group_id, member_id, session


def _take(req: _Request, session: ShareSession, epoch: int, topic_id: uuid.UUID, part: _FetchPartition) -> None:
    """One partition of the request: its acknowledgements applied, and its place in the session."""
    if part.acknowledgement_batches:
        req.acknowledge(topic_id, part.partition_index, part.acknowledgement_batches)
    if epoch == INITIAL_EPOCH:
        req.slot(topic_id, part.partition_index)  # a full session is answered in full
    if epoch != FINAL_EPOCH:
        session.partitions[(topic_id, part.partition_index)] = None


def _entries(request: ShareFetchRequest) -> int:
    return sum(len(t.partitions) for t in request.topics) + sum(
        len(t.partitions) for t in request.forgotten_topics_data
    )


def share_fetch(
    broker: ShareFetchBroker, ctx: RequestContext, request: ShareFetchRequest
) -> Answer[RawResponse] | Serial:
    """A request of more than STEP partitions is served STEP partitions at a time (`_in_steps`)."""
    if _entries(request) > STEP:
        return Serial(_in_steps(broker, ctx, request))
    epoch = request.share_session_epoch
    try:
        group_id, member_id, session = _fetch_session(broker, ctx, request)
    except KafkaError as e:
        return _fetch_response(broker, ctx, [], e.code, e.message)
    shares = broker.shares
    req = _Request(broker, ctx, group_id, member_id)
    for forgotten in request.forgotten_topics_data:
        for p in forgotten.partitions:
            assert forgotten.topic_id is not None
            session.partitions.pop((forgotten.topic_id, p), None)
    for topic in request.topics:
        assert topic.topic_id is not None
        for part in topic.partitions:
            _take(req, session, epoch, topic.topic_id, part)
    lock_ms = shares.settings(group_id).lock_duration_ms

    def respond() -> RawResponse:
        return _fetch_response(broker, ctx, list(req.slots.values()), lock_ms=lock_ms)

    def failed(e: OSError) -> RawResponse:
        return _fetch_response(broker, ctx, [], ErrorCode.coordinator_not_available, f"not stored: {e}")

    if epoch == FINAL_EPOCH:
        shares.close_session(session)
        ctx.session.on_close.pop(("share", group_id, member_id), None)
        return _answer(req, respond, failed)
    if not shares.is_member(group_id, member_id):
        return _answer(req, respond, failed)  # it left: it may acknowledge on its way out, not acquire
    limits = _Limits(broker, request)
    got = _acquire(req, session, limits.budget())
    if got or limits.max_wait <= 0 or any(s.error for s in req.slots.values()):
        return _answer(req, respond, failed)
    durable = req.durable()
    logs = [plog for tp in session.partitions if (plog := _quiet_log(req, tp)) is not None]
    watch = broker.watch_appends(logs, 1)
    changed = shares.changed()

    async def long_poll(session: ShareSession) -> RawResponse:
        try:
            if durable is not None:
                await durable
            await asyncio.wait({watch.future, changed}, timeout=limits.max_wait, return_when=asyncio.FIRST_COMPLETED)
        except OSError as e:
            return failed(e)
        finally:
            broker.unwatch(watch)
            changed.cancel()
        if _current(req, session):
            req.changed.clear()
            _acquire(req, session, limits.budget())
        again = req.durable()
        if again is not None:
            try:
                await again
            except OSError as e:
                return failed(e)
        return respond()

    return long_poll(session)


async def _in_steps(broker: ShareFetchBroker, ctx: RequestContext, request: ShareFetchRequest) -> RawResponse:
    """`share_fetch` for a request of many partitions: its partitions taken, acquired from and
    answered STEP at a time, the loop free between steps; the connection reads no further
    request until it is answered (`Serial`), as Kafka serves one request of a connection at
    a time.  Acquiring stops at a step where the member left or its session ended (records
    acquired then would be held by no one until their locks ran out)."""
    epoch = request.share_session_epoch
    try:
        group_id, member_id, session = _fetch_session(broker, ctx, request)
    except KafkaError as e:
        return _fetch_response(broker, ctx, [], e.code, e.message)
    shares = broker.shares
    req = _Request(broker, ctx, group_id, member_id)
    count = 0
    for forgotten in request.forgotten_topics_data:
        assert forgotten.topic_id is not None
        for p in forgotten.partitions:
            session.partitions.pop((forgotten.topic_id, p), None)
            count += 1
            await pause(count)
    for topic in request.topics:
        assert topic.topic_id is not None
        for part in topic.partitions:
            _take(req, session, epoch, topic.topic_id, part)
            count += 1
            await pause(count)
    lock_ms = shares.settings(group_id).lock_duration_ms

    async def respond() -> RawResponse:
        answer = _FetchAnswer(broker, ctx)
        async for slot in each(list(req.slots.values())):
            answer.add(slot)
        return answer.response(lock_ms=lock_ms)

    async def answered() -> RawResponse:
        durable = req.durable()
        try:
            if durable is not None:
                await durable
        except OSError as e:
            return _fetch_response(broker, ctx, [], ErrorCode.coordinator_not_available, f"not stored: {e}")
        return await respond()

    if epoch == FINAL_EPOCH:
        shares.close_session(session)
        ctx.session.on_close.pop(("share", group_id, member_id), None)
        return await answered()
    if not shares.is_member(group_id, member_id):
        return await answered()
    limits = _Limits(broker, request)
    got = await _acquire_in_steps(req, session, limits.budget())
    if got or limits.max_wait <= 0 or any(s.error for s in req.slots.values()):
        return await answered()
    durable = req.durable()
    logs = [plog async for tp in each(list(session.partitions)) if (plog := _quiet_log(req, tp)) is not None]
    watch = broker.watch_appends(logs, 1)
    changed = shares.changed()
    try:
        if durable is not None:
            await durable
        await asyncio.wait({watch.future, changed}, timeout=limits.max_wait, return_when=asyncio.FIRST_COMPLETED)
    except OSError as e:
        return _fetch_response(broker, ctx, [], ErrorCode.coordinator_not_available, f"not stored: {e}")
    finally:
        broker.unwatch(watch)
        changed.cancel()
    if _current(req, session):
        req.changed.clear()
        await _acquire_in_steps(req, session, limits.budget())
    return await answered()


class _Limits:
    """A ShareFetch's bounds: records and bytes acquired, and its wait in seconds."""

    def __init__(self, broker: ShareFetchBroker, request: ShareFetchRequest) -> None:
        self.max_records = max(request.max_records, 1)
        self.max_bytes = min(request.max_bytes, broker.config.values.fetch_max_bytes)
        self.max_wait = min(timedelta_ms(request.max_wait), broker.config.values.fetch_max_wait_ms) / 1000

    def budget(self) -> _Budget:
        return _Budget(self.max_records, self.max_bytes)


@dataclass(slots=True)
class _Budget:
    """What is left to acquire, and whether anything was."""

    records: int
    bytes: int
    got: bool = False

    @property
    def spent(self) -> bool:
        return self.records <= 0 or self.bytes <= 0


def _current(req: _Request, session: ShareSession) -> bool:
    """Whether the member is still in its group, in this session."""
    shares = req.shares
    key = (req.group_id, req.member_id)
    return shares.sessions.sessions.get(key) is session and shares.is_member(*key)


def _quiet_log(req: _Request, tp: tuple[uuid.UUID, int]) -> PartitionLog | None:
    try:
        return req.log_of(*tp)
    except KafkaError:
        return None


def _acquire_from(req: _Request, budget: _Budget, topic_id: uuid.UUID, partition: int) -> None:
    slot = req.slot(topic_id, partition)
    try:
        plog = req.log_of(topic_id, partition)
        key = (req.group_id, topic_id, partition)
        part, new = req.shares.partition(req.group_id, topic_id, partition, plog)
        if new:
            req.changed.add(key)
        fetched = req.shares.acquire(req.member_id, key, part, plog, max_records=budget.records, max_bytes=budget.bytes)
    except KafkaError as e:
        slot.error, slot.message = e.code, e.message
        return
    if fetched.acquired:
        budget.got = True
        slot.records += fetched.records
        slot.acquired.extend(fetched.acquired)
        budget.records -= sum(a.last_offset - a.first_offset + 1 for a in fetched.acquired)
        budget.bytes -= len(fetched.records)


def _acquire(req: _Request, session: ShareSession, budget: _Budget) -> bool:
    """Acquire from each partition of the session in turn, within the request's limits;
    True when anything was acquired."""
    for topic_id, partition in list(session.partitions):
        if budget.spent:
            break
        _acquire_from(req, budget, topic_id, partition)
    return budget.got


async def _acquire_in_steps(req: _Request, session: ShareSession, budget: _Budget) -> bool:
    """`_acquire` STEP partitions at a time, while the member holds this session."""
    for count, (topic_id, partition) in enumerate(list(session.partitions)):
        if budget.spent:
            break
        if count and count % STEP == 0:
            await asyncio.sleep(0)
            if not _current(req, session):
                break
        _acquire_from(req, budget, topic_id, partition)
    return budget.got


def _answer(req: _Request, respond: Callable[[], R], failed: Callable[[OSError], R]) -> Answer[R]:
    """`respond()` once what the request changed is durable."""
    durable = req.durable()
    if durable is None:
        return respond()

    async def answer() -> R:
        try:
            await durable
        except OSError as e:
            return failed(e)
        return respond()

    return answer()


class _FetchAnswer:
    """Encoded as kio encodes it, but a partition with nothing acquired is its answer's bytes
    with the partition index written over: a request naming 50,000 partitions costs one
    encoding per distinct error, not 50,000 (partition_index is the entry's first field)."""

    def __init__(self, broker: ShareFetchBroker, ctx: RequestContext) -> None:
        self.broker = broker
        self.cls = FETCH.response(ctx.api_version)
        self.part_cls, self.acq_cls = nested(self.cls, "PartitionData"), nested(self.cls, "AcquiredRecords")
        self.no_leader = build(nested(self.cls, "LeaderIdAndEpoch"), leader_id=-1, leader_epoch=-1)
        self.templates: dict[tuple[ErrorCode, str | None, ErrorCode, str | None], bytes] = {}
        self.errors: Counter[ErrorCode] = Counter()
        self.by_topic: dict[uuid.UUID, list[bytes]] = {}

    def _encoded(self, s: _Slot, index: int) -> bytes:
        acq_cls = self.acq_cls
        return encode_body(
            build(
                self.part_cls,
                partition_index=index,
                error_code=s.error,
                error_message=s.message,
                acknowledge_error_code=s.ack_error,
                acknowledge_error_message=s.ack_message,
                current_leader=self.no_leader,
                records=s.records,
                acquired_records=tuple(
                    build(
                        acq_cls, first_offset=a.first_offset, last_offset=a.last_offset, delivery_count=a.delivery_count
                    )
                    for a in s.acquired
                ),
            )
        )

    def add(self, s: _Slot) -> None:
        if s.error:
            self.errors[s.error] += 1
        if s.records or s.acquired:
            part = self._encoded(s, s.partition)
        else:
            key = (s.error, s.message, s.ack_error, s.ack_message)
            template = self.templates.get(key)
            if template is None:
                template = self.templates[key] = self._encoded(s, 0)
            part = _I32.pack(s.partition) + template[4:]
        self.by_topic.setdefault(s.topic_id, []).append(part)

    def response(self, error: ErrorCode = ErrorCode.none, message: str | None = None, lock_ms: int = 0) -> RawResponse:
        for code, count in self.errors.items():
            self.broker.metrics.errors.labels("ShareFetch", code.name).inc(count)
        # The envelope is the response without topics; they go where its empty array is,
        # before the (empty) node endpoints and the tagged fields.
        envelope = encode_body(
            build(
                self.cls,
                throttle_time=0,
                error_code=error,
                error_message=message,
                acquisition_lock_timeout=lock_ms,
                responses=(),
                node_endpoints=(),
            )
        )
        assert envelope[-3:] == b"\x01\x01\x00"
        parts: list[Part] = [envelope[:-3], uvarint(len(self.by_topic) + 1)]
        for topic_id, partitions in self.by_topic.items():
            parts += [topic_id.bytes, uvarint(len(partitions) + 1), *partitions, b"\x00"]  # id, partitions, tags
        parts.append(envelope[-2:])
        return RawResponse(parts, flexible=True, throttled=True)


def _fetch_response(
    broker: ShareFetchBroker,
    ctx: RequestContext,
    slots: list[_Slot],
    error: ErrorCode = ErrorCode.none,
    message: str | None = None,
    *,
    lock_ms: int = 0,
) -> RawResponse:
    answer = _FetchAnswer(broker, ctx)
    for s in slots:
        answer.add(s)
    return answer.response(error, message, lock_ms)


# --- ShareAcknowledge ------------------------------------------------------------------


def share_acknowledge(
    broker: ShareFetchBroker, ctx: RequestContext, request: ShareAcknowledgeRequest
) -> Answer[ShareAcknowledgeResponse]:
    epoch = request.share_session_epoch
    try:
        group_id, member_id = _check(broker, ctx, request.group_id, request.member_id)
        if epoch == INITIAL_EPOCH:
            raise KafkaError(ErrorCode.invalid_share_session_epoch, "ShareAcknowledge cannot open a share session.")
        if any(t.topic_id is None for t in request.topics):
            raise KafkaError(ErrorCode.invalid_request, "a topic id is null")
        session = _session(broker.shares, ctx, group_id, member_id, epoch)
    except KafkaError as e:
        return _ack_response(ctx, [], e.code, e.message)
    req = _Request(broker, ctx, group_id, member_id)
    for topic in request.topics:
        assert topic.topic_id is not None
        for part in topic.partitions:
            req.acknowledge(topic.topic_id, part.partition_index, part.acknowledgement_batches)
    if epoch == FINAL_EPOCH:
        broker.shares.close_session(session)
        ctx.session.on_close.pop(("share", group_id, member_id), None)
    return _answer(
        req,
        lambda: _ack_response(ctx, list(req.slots.values())),
        lambda e: _ack_response(ctx, [], ErrorCode.coordinator_not_available, f"not stored: {e}"),
    )


def _ack_response(
    ctx: RequestContext, slots: list[_Slot], error: ErrorCode = ErrorCode.none, message: str | None = None
) -> ShareAcknowledgeResponse:
    cls = ACKNOWLEDGE.response(ctx.api_version)
    topic_cls, part_cls, leader_cls = (
        nested(cls, "ShareAcknowledgeTopicResponse"),
        nested(cls, "PartitionData"),
        nested(cls, "LeaderIdAndEpoch"),
    )
    by_topic: dict[uuid.UUID, list[Entity]] = {}
    for s in slots:
        by_topic.setdefault(s.topic_id, []).append(
            build(
                part_cls,
                partition_index=s.partition,
                error_code=s.ack_error,
                error_message=s.ack_message,
                current_leader=build(leader_cls, leader_id=-1, leader_epoch=-1),
            )
        )
    return build(
        cls,
        throttle_time=0,
        error_code=error,
        error_message=message,
        responses=tuple(build(topic_cls, topic_id=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        node_endpoints=(),
    )
