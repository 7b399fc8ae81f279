"""The committed-offset APIs: OffsetCommit, OffsetFetch and OffsetDelete.  From v10
OffsetCommit and OffsetFetch name topics by id (as Kafka 4.1 does): an id the broker does not
know is UNKNOWN_TOPIC_ID, a topic re-created under the same name is another topic."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from kio.static.protocol import Entity

from broker.cooperative import STEP
from broker.coordinator.coordinator import MANY_OFFSETS
from broker.handlers.base import Answer, Messages, RequestContext, Serial
from broker.handlers.services import HasGroupCoordinator, HasLogDir, HasSecurity, HasStore, HasTransactions
from broker.handlers.stepped import Steps, at_once, in_steps, stepped
from broker.handlers.topics_seen import TopicsSeen
from broker.protocol.codec import build, nested
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.fetch_codec import RawResponse
from broker.protocol.offsets_codec import encode_commit_topics, offset_commit_response
from broker.security.acls import Operation

if TYPE_CHECKING:
    from kio.schema.offset_commit import v6 as offset_commit_v6
    from kio.schema.offset_commit import v7 as offset_commit_v7
    from kio.schema.offset_commit import v8 as offset_commit_v8
    from kio.schema.offset_commit import v9 as offset_commit_v9
    from kio.schema.offset_commit import v10 as offset_commit_v10
    from kio.schema.offset_fetch import v7 as offset_fetch_v7
    from kio.schema.offset_fetch import v8 as offset_fetch_v8
    from kio.schema.offset_fetch import v9 as offset_fetch_v9
    from kio.schema.offset_fetch import v10 as offset_fetch_v10
    from kio.schema.offset_fetch.v9 import request as offset_fetch_v9_request
    from kio.schema.offset_fetch.v10 import request as offset_fetch_v10_request
    from typing_extensions import TypeIs

    from broker.handlers.kio_types import (
        OffsetCommitRequest,
        OffsetCommitResponse,
        OffsetDeleteRequest,
        OffsetDeleteResponse,
        OffsetFetchRequest,
        OffsetFetchResponse,
    )
    from broker.log.partition_log import PartitionLog

OFFSET_COMMIT: Messages[OffsetCommitRequest, OffsetCommitResponse] = Messages(8, 2, 10)
OFFSET_FETCH: Messages[OffsetFetchRequest, OffsetFetchResponse] = Messages(9, 1, 10)
OFFSET_DELETE: Messages[OffsetDeleteRequest, OffsetDeleteResponse] = Messages(47, 0, 0)

# Fields some versions lack: each guard narrows a request to the versions that have them.


class OffsetsBroker(HasSecurity, HasStore, HasLogDir, HasGroupCoordinator, HasTransactions, Protocol):
    """What the offset requests use of the broker."""

    def answers_wait(self) -> bool: ...


def _with_leader_epochs(
    request: OffsetCommitRequest,
) -> TypeIs[
    offset_commit_v6.OffsetCommitRequest
    | offset_commit_v7.OffsetCommitRequest
    | offset_commit_v8.OffsetCommitRequest
    | offset_commit_v9.OffsetCommitRequest
    | offset_commit_v10.OffsetCommitRequest
]:
    return request.__version__ >= 6  # KIP-320


def _commits_as_instance(
    request: OffsetCommitRequest,
) -> TypeIs[
    offset_commit_v7.OffsetCommitRequest
    | offset_commit_v8.OffsetCommitRequest
    | offset_commit_v9.OffsetCommitRequest
    | offset_commit_v10.OffsetCommitRequest
]:
    return request.__version__ >= 7  # KIP-345


def _commits_by_id(request: OffsetCommitRequest) -> TypeIs[offset_commit_v10.OffsetCommitRequest]:
    return request.__version__ >= 10


def _fetches_groups(
    request: OffsetFetchRequest,
) -> TypeIs[
    offset_fetch_v8.OffsetFetchRequest | offset_fetch_v9.OffsetFetchRequest | offset_fetch_v10.OffsetFetchRequest
]:
    return request.__version__ >= 8  # KIP-709: several groups at once


def _fetches_as_member(
    group: object,
) -> TypeIs[offset_fetch_v9_request.OffsetFetchRequestGroup | offset_fetch_v10_request.OffsetFetchRequestGroup]:
    return getattr(group, "__version__", 0) >= 9  # KIP-848: the member's id and epoch


def _fetches_by_id(group: object) -> TypeIs[offset_fetch_v10_request.OffsetFetchRequestGroup]:
    return getattr(group, "__version__", 0) >= 10


def _may_require_stable(
    request: OffsetFetchRequest,
) -> TypeIs[
    offset_fetch_v7.OffsetFetchRequest
    | offset_fetch_v8.OffsetFetchRequest
    | offset_fetch_v9.OffsetFetchRequest
    | offset_fetch_v10.OffsetFetchRequest
]:
    return request.__version__ >= 7  # KIP-447


class _CommitPartition(Protocol):
    """A partition's offset to commit, in any version's request."""

    @property
    def partition_index(self) -> int: ...
    @property
    def committed_offset(self) -> int: ...
    @property
    def committed_metadata(self) -> str | None: ...


class _CommitTopic(Protocol):
    @property
    def partitions(self) -> Sequence[_CommitPartition]: ...


@dataclass(frozen=True, slots=True)
class _Topic:
    """A requested topic by name and id; `name` is None for an id the broker does not know."""

    name: str | None
    topic_id: uuid.UUID | None
    partitions: Sequence[int]


def _by_name(broker: OffsetsBroker, name: str, partitions: Sequence[int]) -> _Topic:
    topic = broker.store.get(name)
    return _Topic(name, topic.topic_id if topic is not None else None, partitions)


def _by_id(broker: OffsetsBroker, topic_id: uuid.UUID | None, partitions: Sequence[int]) -> _Topic:
    topic = broker.store.by_id.get(topic_id) if topic_id is not None else None
    return _Topic(topic.name if topic is not None else None, topic_id, partitions)


# --- OffsetCommit ------------------------------------------------------------------------


def _topics(request: OffsetCommitRequest) -> Sequence[_CommitTopic]:
    return request.topics


def offset_commit(
    broker: OffsetsBroker, ctx: RequestContext, request: OffsetCommitRequest
) -> Answer[RawResponse] | Serial:
    """The partitions checked a step at a time (a request may name 100,000); the offsets
    accepted are then validated against the group again and stored in one step, one batch
    on `__consumer_offsets` as in Kafka.  A request of few is checked and stored at once."""
    coordinator = broker.coordinator
    generation = request.generation_id_or_member_epoch
    instance_id = request.group_instance_id if _commits_as_instance(request) else None
    # Each topic's id (v10+) or name: one cheap pass, the look-ups are the steps'.
    keys: Sequence[uuid.UUID | None] | Sequence[str] = (
        [t.topic_id for t in request.topics] if _commits_by_id(request) else [t.name for t in request.topics]
    )
    leader_epochs = _with_leader_epochs(request)
    entries = sum(1 + len(t.partitions) for t in request.topics)
    many = entries > STEP

    def validated() -> ErrorCode:
        try:
            if not broker.security.group(ctx.session, Operation.READ, request.group_id):
                raise KafkaError(ErrorCode.group_authorization_failed)
            coordinator.validate_commit(request.group_id, generation, request.member_id or "", instance_id)
        except KafkaError as e:
            if e.code == ErrorCode.group_id_not_found and ctx.api_version < 9:
                return ErrorCode.illegal_generation  # Kafka's answer before OffsetCommit v9
            return e.code
        return ErrorCode.none

    top_error = validated()
    accepted: dict[tuple[str, int], tuple[int, int, str]] = {}
    results: list[tuple[_Topic, list[tuple[int, ErrorCode]]]] = []
    seen = TopicsSeen(broker)

    def check() -> Steps[Answer[RawResponse]]:
        # Looked up once, not per partition: a commit's answer is paced by this loop.
        partition_log, max_metadata = broker.store.partition_log, coordinator.config.max_metadata_bytes
        for n, t in enumerate(_topics(request)):
            yield
            key = keys[n]
            indexes = [p.partition_index for p in t.partitions]
            topic = _by_name(broker, key, indexes) if isinstance(key, str) else _by_id(broker, key, indexes)
            parts: list[tuple[int, ErrorCode]] = []
            readable = topic.name is not None and broker.security.topic(ctx.session, Operation.READ, topic.name)
            if topic.name is not None:
                seen.see(topic.name)
            for p in t.partitions:
                if many:  # a request of few entries is checked in one step: no pause to offer
                    yield
                index, metadata = p.partition_index, p.committed_metadata
                error = top_error
                if error == ErrorCode.none:
                    if topic.name is None:
                        error = ErrorCode.unknown_topic_id
                    elif not readable:
                        error = ErrorCode.topic_authorization_failed
                    elif partition_log(topic.name, index) is None:
                        error = ErrorCode.unknown_topic_or_partition
                    elif (len(metadata.encode()) if metadata else 0) > max_metadata:
                        error = ErrorCode.offset_metadata_too_large
                    else:
                        # (offset, leader epoch the offset was read at, metadata)
                        epoch = int(getattr(p, "committed_leader_epoch", -1)) if leader_epochs else -1
                        accepted[(topic.name, index)] = (p.committed_offset, epoch, metadata or "")
                parts.append((index, error))
            results.append((topic, parts))
        return (durable() if many or len(accepted) > MANY_OFFSETS else committed_now()) if accepted else answered()

    def respond() -> Steps[RawResponse]:
        """The answer encoded a slice of about STEP entries at a time."""
        encoded: list[bytes] = []
        start = weight = 0
        for n, (_, parts) in enumerate(results, 1):
            yield
            weight += 1 + len(parts)
            if weight >= STEP or n == len(results):
                done = [(topic.name or "", topic.topic_id, parts) for topic, parts in results[start:n]]
                encoded.append(encode_commit_topics(ctx.api_version, done))
                start, weight = n, 0
        return offset_commit_response(ctx.api_version, len(results), encoded)

    def fail(error: ErrorCode, partitions: Collection[tuple[str, int]] | None = None) -> None:
        """`error` for the accepted partitions (those of `partitions` only, when given)."""
        for topic, parts in results:
            parts[:] = [
                (i, error if e == ErrorCode.none and (partitions is None or (topic.name, i) in partitions) else e)
                for i, e in parts
            ]

    async def durable() -> RawResponse:
        if many:  # the group and topics may have changed while the partitions were checked
            gone = seen.gone(accepted)
            for tp in gone:
                del accepted[tp]
            fail(ErrorCode.unknown_topic_or_partition, set(gone))
            error = validated()
            if error != ErrorCode.none:
                accepted.clear()
                fail(error)
        try:
            await coordinator.commit(request.group_id, accepted)
        except OSError:
            # The offsets log could not be written (its directory is offline): Kafka's answer,
            # NOT_COORDINATOR, sends the client to find the coordinator again.
            fail(ErrorCode.not_coordinator)
        return await in_steps(respond()) if many else at_once(respond())

    def committed_now() -> Answer[RawResponse]:
        """A commit of few partitions (checked in one step, so nothing changed since): stored
        at once; answered without a task when acknowledgements wait for nothing (page-cache),
        else once the broker's sync is done."""
        try:
            plog = coordinator.commit_now(request.group_id, accepted)
        except OSError:  # as in `durable`
            fail(ErrorCode.not_coordinator)
            return at_once(respond())
        return synced(plog) if broker.answers_wait() else at_once(respond())

    async def synced(plog: PartitionLog) -> RawResponse:
        try:
            await coordinator.sync([plog])
        except OSError:
            fail(ErrorCode.not_coordinator)
        return at_once(respond())

    def answered() -> Answer[RawResponse]:
        return in_steps(respond()) if many else at_once(respond())

    return stepped(check(), entries)


# --- OffsetFetch -------------------------------------------------------------------------


def offset_fetch(broker: OffsetsBroker, ctx: RequestContext, request: OffsetFetchRequest) -> OffsetFetchResponse:
    cls = OFFSET_FETCH.response(ctx.api_version)
    coordinator = broker.coordinator
    # require_stable (v7+, KIP-447): a partition whose offset waits in an open transaction
    # answers UNSTABLE_OFFSET_COMMIT, and the client asks again once the transaction ended.
    stable_only = _may_require_stable(request) and request.require_stable
    described = broker.security.topic

    def group_result(
        group_id: str, topics: list[_Topic] | None, by_id: bool, topic_cls: type[Entity], part_cls: type[Entity]
    ) -> tuple[ErrorCode, tuple[Entity, ...]]:
        if not group_id:
            return ErrorCode.invalid_group_id, ()
        if not broker.security.group(ctx.session, Operation.DESCRIBE, group_id):
            return ErrorCode.group_authorization_failed, ()
        if broker.log_dir.offline:  # memory may hold a commit whose fsync failed: serve none
            return ErrorCode.not_coordinator, ()
        committed = coordinator.committed(group_id)
        unstable = broker.transactions.pending_offsets(group_id) if stable_only else set()
        if topics is None:
            wanted: dict[str, list[int]] = {}
            for t, p in sorted(committed):
                if described(ctx.session, Operation.DESCRIBE, t):  # the rest are left out, as in Kafka
                    wanted.setdefault(t, []).append(p)
            topics = [_by_name(broker, name, parts) for name, parts in wanted.items()]
            if by_id:  # offsets of a topic since deleted have no id to name them by
                topics = [t for t in topics if t.topic_id is not None]
        out: list[Entity] = []
        for topic in topics:
            parts: list[Entity] = []
            allowed = topic.name is not None and described(ctx.session, Operation.DESCRIBE, topic.name)
            for index in topic.partitions:
                key = (topic.name or "", index)
                entry = committed.get(key) if allowed else None
                if topic.name is None:
                    error = ErrorCode.unknown_topic_id
                else:
                    error = ErrorCode.none if allowed else ErrorCode.topic_authorization_failed
                if allowed and key in unstable:
                    entry, error = None, ErrorCode.unstable_offset_commit
                parts.append(
                    build(
                        part_cls,
                        partition_index=index,
                        committed_offset=entry.offset if entry else -1,
                        committed_leader_epoch=entry.leader_epoch if entry else -1,
                        metadata=entry.metadata if entry else "",
                        error_code=error,
                    )
                )
            out.append(build(topic_cls, name=topic.name or "", topic_id=topic.topic_id, partitions=tuple(parts)))
        return ErrorCode.none, tuple(out)

    if _fetches_groups(request):
        group_cls = nested(cls, "OffsetFetchResponseGroup")
        topic_cls = nested(cls, "OffsetFetchResponseTopics")
        part_cls = nested(cls, "OffsetFetchResponsePartitions")
        groups = []
        for g in request.groups:
            if _fetches_as_member(g):
                # KIP-848: a member's fetch carries its epoch, which must be current.
                try:
                    coordinator.validate_fetch(g.group_id, g.member_id, g.member_epoch)
                except KafkaError as e:
                    groups.append(build(group_cls, group_id=g.group_id, topics=(), error_code=e.code))
                    continue
            wanted: list[_Topic] | None = None
            if _fetches_by_id(g):
                if g.topics is not None:
                    wanted = [_by_id(broker, t.topic_id, t.partition_indexes) for t in g.topics]
            elif g.topics is not None:
                wanted = [_by_name(broker, t.name, t.partition_indexes) for t in g.topics]
            error, topics = group_result(g.group_id, wanted, _fetches_by_id(g), topic_cls, part_cls)
            groups.append(build(group_cls, group_id=g.group_id, topics=topics, error_code=error))
        return build(cls, throttle_time=0, groups=tuple(groups))
    topic_cls = nested(cls, "OffsetFetchResponseTopic")
    part_cls = nested(cls, "OffsetFetchResponsePartition")
    single = None
    if request.topics is not None:
        single = [_by_name(broker, t.name, t.partition_indexes) for t in request.topics]
    error, topics = group_result(request.group_id, single, False, topic_cls, part_cls)
    return build(cls, throttle_time=0, topics=topics, error_code=error)


# --- OffsetDelete ------------------------------------------------------------------------


def offset_delete(
    broker: OffsetsBroker, ctx: RequestContext, request: OffsetDeleteRequest
) -> Answer[OffsetDeleteResponse]:
    cls = OFFSET_DELETE.response(ctx.api_version)
    topic_cls = nested(cls, "OffsetDeleteResponseTopic")
    part_cls = nested(cls, "OffsetDeleteResponsePartition")
    coordinator = broker.coordinator
    group_id = request.group_id
    group = coordinator.groups.get(group_id)
    consumer_group = coordinator.consumer.groups.get(group_id)
    if not group_id:
        return build(cls, error_code=ErrorCode.invalid_group_id, throttle_time=0, topics=())
    if not broker.security.group(ctx.session, Operation.DELETE, group_id):
        return build(cls, error_code=ErrorCode.group_authorization_failed, throttle_time=0, topics=())
    if group is None and consumer_group is None and group_id not in coordinator.offsets:
        return build(cls, error_code=ErrorCode.group_id_not_found, throttle_time=0, topics=())
    # Offsets of a topic the group's members subscribe to stay (GROUP_SUBSCRIBED_TO_TOPIC).
    subscribed: set[str] | None = set()
    if consumer_group is not None:
        subscribed = {n for m in consumer_group.members.values() for n in (*m.topic_names, *m.regex_topics)}
    elif group is not None and group.members:
        subscribed = group.subscribed_topics()
    deletable: list[tuple[str, int]] = []
    topics = []
    for topic in request.topics:
        parts = []
        readable = broker.security.topic(ctx.session, Operation.READ, topic.name)
        for p in topic.partitions:
            if not readable:
                error = ErrorCode.topic_authorization_failed
            elif broker.store.partition_log(topic.name, p.partition_index) is None:
                error = ErrorCode.unknown_topic_or_partition
            elif subscribed is None or topic.name in subscribed:
                error = ErrorCode.group_subscribed_to_topic
            else:
                error = ErrorCode.none
                deletable.append((topic.name, p.partition_index))
            parts.append(build(part_cls, partition_index=p.partition_index, error_code=error))
        topics.append(build(topic_cls, name=topic.name, partitions=tuple(parts)))
    response = build(cls, error_code=ErrorCode.none, throttle_time=0, topics=tuple(topics))

    async def durable() -> OffsetDeleteResponse:
        try:
            # Offsets pending in open transactions first, so that none committing meanwhile
            # brings a deleted offset back.
            await broker.transactions.forget_offsets(group_id, deletable)
        except KafkaError as e:
            return build(cls, error_code=e.code, throttle_time=0, topics=())
        await coordinator.delete_offsets(group_id, deletable)
        return response

    return durable()
