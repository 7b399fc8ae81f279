"""Fetch: serve stored batches as they are, long-polling until min_bytes or max_wait.

Limits follow Kafka (KIP-74): `max_bytes` bounds the response and `partition_max_bytes`
each partition, except that the first batch of the first non-empty partition is always
returned whole so a consumer can make progress past a batch larger than its limits.
Fetch sessions (KIP-227) are declined: we answer with session id 0, which clients treat
as "full fetch every time".  v18's per-partition high watermark is a follower's, for its
leader to answer sooner when it moves; consumers never send it, and with no followers here
it is ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Protocol, TypeAlias

from broker.cooperative import STEP, each, pause
from broker.handlers.base import Answer, Messages, RequestContext, throttled
from broker.handlers.services import AppendWatches, HasConfig, HasMetrics, HasQuotas, HasSecurity, HasStore
from broker.log.partition_log import PartitionLog
from broker.log.region import NOTHING, FetchRead, SegmentRegion
from broker.metadata import Topic
from broker.protocol.codec import timedelta_ms
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.fetch_codec import FetchPartition, FetchTopic, RawResponse, encode_fetch_response
from broker.quotas import CONSUMER_BYTE_RATE, quota_user
from broker.security.acls import Operation

if TYPE_CHECKING:
    from kio.schema.fetch import v4 as fetch_v4
    from kio.schema.fetch import v5 as fetch_v5
    from kio.schema.fetch import v6 as fetch_v6
    from kio.schema.fetch import v13 as fetch_v13
    from kio.schema.fetch import v14 as fetch_v14
    from kio.schema.fetch import v15 as fetch_v15
    from kio.schema.fetch import v16 as fetch_v16
    from kio.schema.fetch import v17 as fetch_v17
    from kio.schema.fetch import v18 as fetch_v18
    from typing_extensions import TypeIs

    from broker.handlers.kio_types import FetchRequest, FetchResponse

    FetchByTopicId: TypeAlias = (
        fetch_v13.FetchRequest
        | fetch_v14.FetchRequest
        | fetch_v15.FetchRequest
        | fetch_v16.FetchRequest
        | fetch_v17.FetchRequest
        | fetch_v18.FetchRequest
    )

API_KEY = 1
MIN_VERSION, MAX_VERSION = 4, 18
MESSAGES: Messages[FetchRequest, FetchResponse] = Messages(API_KEY, MIN_VERSION, MAX_VERSION)


READ_COMMITTED = 1


class FetchBroker(HasSecurity, HasStore, HasConfig, HasMetrics, HasQuotas, AppendWatches, Protocol):
    """What Fetch uses of the broker."""

    @property
    def workers(self) -> Executor: ...


def _by_topic_id(request: FetchRequest) -> TypeIs[FetchByTopicId]:
    return request.__version__ >= 13  # KIP-516: topics are named by id


def _without_sessions(
    request: FetchRequest,
) -> TypeIs[fetch_v4.FetchRequest | fetch_v5.FetchRequest | fetch_v6.FetchRequest]:
    return request.__version__ < 7  # v7 added fetch sessions (KIP-227)


class _Partition(Protocol):
    """A partition to fetch, in any version's request."""

    @property
    def partition(self) -> int: ...

    @property
    def fetch_offset(self) -> int: ...

    @property
    def partition_max_bytes(self) -> int: ...


class _Slot:
    __slots__ = (
        "aborted",
        "count",
        "error",
        "max_bytes",
        "name",
        "offset",
        "partition",
        "plog",
        "records",
        "topic_id",
    )

    def __init__(
        self, name: str | None, topic_id: uuid.UUID | None, partition: int, offset: int, max_bytes: int
    ) -> None:
        self.name = name
        self.topic_id = topic_id
        self.partition = partition
        self.offset = offset
        self.max_bytes = max_bytes
        self.plog: PartitionLog | None = None
        self.error = ErrorCode.none
        self.records: bytes | SegmentRegion = b""
        self.count = 0  # records in `records`
        self.aborted: list[tuple[int, int]] | None = None


# A topic as the request names it: its name, id, the topic found, its error when missing,
# and the partitions asked.
_Named: TypeAlias = tuple[str | None, uuid.UUID | None, Topic | None, ErrorCode, Sequence[_Partition]]


def _named(broker: FetchBroker, request: FetchRequest) -> Iterator[_Named]:
    """Each topic of the request, in order, looked up when its turn comes."""
    if _by_topic_id(request):
        for by_id in request.topics:
            found = broker.store.by_id.get(by_id.topic_id) if by_id.topic_id is not None else None
            yield found.name if found else None, by_id.topic_id, found, ErrorCode.unknown_topic_id, by_id.partitions
    else:
        for t in request.topics:
            yield t.topic, None, broker.store.get(t.topic), ErrorCode.unknown_topic_or_partition, t.partitions


class _Slots:
    """One slot per partition named; a partition named twice is fetched once, as Kafka's
    map of fetch data does (the later entry wins, in the first one's place)."""

    def __init__(self, broker: FetchBroker, ctx: RequestContext) -> None:
        self.broker, self.session = broker, ctx.session
        self.slots: dict[tuple[object, int], _Slot] = {}

    def readable(self, name: str | None) -> bool:
        return name is not None and self.broker.security.topic(self.session, Operation.READ, name)

    def add(self, named: _Named, readable: bool, part: _Partition) -> None:
        name, topic_id, found, missing, _ = named
        slot = _Slot(name, topic_id, part.partition, part.fetch_offset, part.partition_max_bytes)
        slot.plog = self.broker.store.partition_log(name, part.partition) if readable and name else None
        if slot.plog is None:
            slot.error = missing if found is None else ErrorCode.unknown_topic_or_partition
            if name is not None and not readable:
                slot.error = ErrorCode.topic_authorization_failed
        self.slots[(name if topic_id is None else topic_id, part.partition)] = slot


def _resolve(broker: FetchBroker, ctx: RequestContext, request: FetchRequest) -> list[_Slot]:
    resolved = _Slots(broker, ctx)
    for named in _named(broker, request):
        readable = resolved.readable(named[0])
        for part in named[4]:
            resolved.add(named, readable, part)
    return list(resolved.slots.values())


class _Reader:
    """Reads the partitions of one fetch in turn within its byte budget (only below the
    last stable offset when `committed`, with the aborted transactions the data spans)."""

    def __init__(self, broker: FetchBroker, max_bytes: int, committed: bool) -> None:
        self.store, self.committed = broker.store, committed
        self.budget = max_bytes
        self.total = 0
        self.error = False

    def read(self, slot: _Slot) -> None:
        slot.records, slot.count = b"", 0
        plog = slot.plog
        if plog is not None and self.store.partition_log(plog.topic, plog.partition) is not plog:
            # Deleted while the fetch waited (long poll, or its turn on the loop): its log is closed.
            slot.plog, slot.error = None, ErrorCode.unknown_topic_or_partition
        if slot.plog is None:
            self.error = True
            return
        try:
            limit = min(slot.max_bytes, self.budget)
            upper = slot.plog.last_stable_offset if self.committed else None
            read = slot.plog.read_for_fetch(slot.offset, limit, upper) if (limit > 0 or self.total == 0) else NOTHING
            if self.total > 0 and read.size > limit:
                read = NOTHING  # only the very first batch may exceed the limits
            if self.committed:
                slot.aborted = _aborted(slot.plog, slot.offset, read)
        except KafkaError as e:
            slot.error = e.code
            self.error = True
            return
        slot.error = ErrorCode.none
        slot.records, slot.count = read.data, read.records
        self.total += read.size
        self.budget -= read.size


def _gather(broker: FetchBroker, slots: list[_Slot], max_bytes: int, committed: bool) -> tuple[int, bool]:
    """Read every partition; returns (bytes gathered, any error)."""
    reader = _Reader(broker, max_bytes, committed)
    for slot in slots:
        reader.read(slot)
    return reader.total, reader.error


def _aborted(plog: PartitionLog, offset: int, read: FetchRead) -> list[tuple[int, int]]:
    if not read.size or not plog.txn_index.entries:
        return []
    return [(t.producer_id, t.first_offset) for t in plog.aborted_transactions(offset, read.end_offset)]


@dataclass(frozen=True, slots=True)
class _Limits:
    max_bytes: int
    committed: bool
    max_wait: float  # seconds
    min_bytes: int


def _limits(broker: FetchBroker, ctx: RequestContext, request: FetchRequest) -> _Limits:
    # fetch.max.bytes bounds the whole response whatever the client asks for.
    max_bytes = min(request.max_bytes, broker.config.values.fetch_max_bytes)
    if broker.quotas.active:
        allowed = broker.quotas.window_bytes(CONSUMER_BYTE_RATE, quota_user(ctx.principal), ctx.client_id or "")
        max_bytes = max_bytes if allowed is None else min(max_bytes, allowed)
    return _Limits(
        max_bytes,
        request.isolation_level == READ_COMMITTED,
        min(timedelta_ms(request.max_wait), broker.config.values.fetch_max_wait_ms) / 1000,
        max(request.min_bytes, 1),
    )


def handle(broker: FetchBroker, ctx: RequestContext, request: FetchRequest) -> Answer[RawResponse]:
    """A fetch of more than STEP partitions is served STEP partitions at a time (`_in_steps`)."""
    version = ctx.api_version
    if not _without_sessions(request) and request.session_id != 0:
        return _response(broker, version, [], ErrorCode.fetch_session_id_not_found)
    if sum(len(t.partitions) for t in request.topics) > STEP:
        return _in_steps(broker, ctx, request)
    slots = _resolve(broker, ctx, request)
    limits = _limits(broker, ctx, request)
    max_bytes, committed, max_wait, min_bytes = limits.max_bytes, limits.committed, limits.max_wait, limits.min_bytes
    total, error = _gather(broker, slots, max_bytes, committed)
    if error or total >= min_bytes or max_wait <= 0 or not slots:
        return _response(broker, version, slots, throttle_ms=_consumer_quota(broker, ctx, slots))

    logs = [s.plog for s in slots if s.plog is not None]
    # Registered now, not when the task first runs, so an append in between is counted.
    watch = broker.watch_appends(logs, min_bytes - total)

    async def long_poll() -> RawResponse:
        # The partitions are read again only once enough bytes arrived (or at the
        # deadline), not on every append.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(watch.future), max_wait)
        _gather(broker, slots, max_bytes, committed)
        return _response(broker, version, slots, throttle_ms=_consumer_quota(broker, ctx, slots))

    task = asyncio.ensure_future(long_poll())
    # Unregister however it ends: answered, timed out, or cancelled with its connection.
    task.add_done_callback(lambda _: broker.unwatch(watch))
    return task


async def _in_steps(broker: FetchBroker, ctx: RequestContext, request: FetchRequest) -> RawResponse:
    """`handle` for a fetch of many partitions: named, read and answered STEP partitions at
    a time, the loop free between steps, and the answer encoded in a worker thread.  A fetch
    changes nothing, so the connection's next request need not wait for it (as a long poll)."""
    resolved = _Slots(broker, ctx)
    count = 0
    for named in _named(broker, request):
        readable = resolved.readable(named[0])
        for part in named[4]:
            resolved.add(named, readable, part)
            count += 1
            await pause(count)
    slots = list(resolved.slots.values())
    limits = _limits(broker, ctx, request)
    may_wait = limits.max_wait > 0 and bool(slots) and all(s.plog is not None for s in slots)
    # Registered before the partitions are read, so an append while they are is counted (an
    # append to a partition read after it is counted twice, and may end the wait early).
    watch = broker.watch_appends([s.plog for s in slots if s.plog], limits.min_bytes) if may_wait else None
    try:
        total, error = await _gather_in_steps(broker, slots, limits)
        if watch is not None and not error and total < limits.min_bytes:
            watch.needed -= total
            if watch.needed > 0 and not watch.future.done():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(watch.future), limits.max_wait)
            await _gather_in_steps(broker, slots, limits)
    finally:
        if watch is not None:
            broker.unwatch(watch)
    answer = _Answer(broker)
    throttle_ms = _consumer_quota(broker, ctx, slots)
    async for slot in each(slots):
        answer.add(slot)
    answer.count_errors()
    encode = partial(answer.encoded, ctx.api_version, ErrorCode.none, throttle_ms)
    return await asyncio.get_running_loop().run_in_executor(broker.workers, encode)


async def _gather_in_steps(broker: FetchBroker, slots: list[_Slot], limits: _Limits) -> tuple[int, bool]:
    reader = _Reader(broker, limits.max_bytes, limits.committed)
    async for slot in each(slots):
        reader.read(slot)
    return reader.total, reader.error


def _consumer_quota(broker: FetchBroker, ctx: RequestContext, slots: list[_Slot]) -> int:
    """Hold the answer to the client's `consumer_byte_rate`: over it, as Kafka, the answer is
    sent without records (they are not counted) and the client is throttled."""
    if not broker.quotas.active:
        return 0
    size = sum(len(s.records) for s in slots)
    user, client = quota_user(ctx.principal), ctx.client_id or ""
    throttle_ms = broker.quotas.throttle_ms(CONSUMER_BYTE_RATE, user, client, size, keep=False) if size else 0
    if throttle_ms:
        for slot in slots:
            slot.records, slot.count = b"", 0
            if slot.aborted is not None:
                slot.aborted = []
    return throttled(ctx, throttle_ms)


class _Answer:
    """The answer's topics, each where its first partition is, and the errors it counts."""

    def __init__(self, broker: FetchBroker) -> None:
        self.broker = broker
        self.topics: dict[tuple[str | None, uuid.UUID | None], FetchTopic] = {}
        self.errors: Counter[ErrorCode] = Counter()

    def add(self, slot: _Slot) -> None:
        plog = slot.plog
        hw = plog.high_watermark if plog else -1
        if slot.records and plog is not None:
            self.broker.metrics.served(plog.topic, len(slot.records), slot.count)
        if slot.error != ErrorCode.none:
            self.errors[slot.error] += 1
        key = (slot.name, slot.topic_id)
        topic = self.topics.get(key)
        if topic is None:
            topic = self.topics[key] = FetchTopic(slot.name or "", slot.topic_id)
        topic.partitions.append(
            FetchPartition(
                index=slot.partition,
                error=int(slot.error),
                high_watermark=hw,
                last_stable_offset=plog.last_stable_offset if plog else -1,
                log_start_offset=plog.log_start_offset if plog else -1,
                records=slot.records,
                aborted=slot.aborted,
            )
        )

    def count_errors(self) -> None:
        """One metric update per error code answered."""
        for code, n in self.errors.items():
            self.broker.metrics.errors.labels("Fetch", code.name).inc(n)

    def encoded(self, version: int, top_error: ErrorCode, throttle_ms: int) -> RawResponse:
        return encode_fetch_response(version, list(self.topics.values()), error=int(top_error), throttle_ms=throttle_ms)


def _response(
    broker: FetchBroker, version: int, slots: list[_Slot], top_error: ErrorCode = ErrorCode.none, throttle_ms: int = 0
) -> RawResponse:
    answer = _Answer(broker)
    for slot in slots:
        answer.add(slot)
    answer.count_errors()
    return answer.encoded(version, top_error, throttle_ms)
