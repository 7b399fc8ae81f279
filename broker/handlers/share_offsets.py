"""The share group offset APIs (KIP-932), v0 as Kafka 4.1 serves them:
DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets.

A share group's "offset" of a partition is its share-partition start offset (broker/share).
The ACLs and error placement follow Kafka 4.1's KafkaApis and GroupCoordinatorService:
describe needs DESCRIBE on the group and on each topic; alter READ on both; delete DELETE on
the group and READ on each topic.  Alter and delete need an empty share group."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from broker.cooperative import STEP
from broker.handlers.base import Answer, Messages, RequestContext, Serial
from broker.handlers.services import HasGroupCoordinator, HasSecurity, HasShareCoordinator, HasStore
from broker.handlers.stepped import Steps, at_once, in_steps, stepped
from broker.handlers.topics_seen import TopicsSeen
from broker.protocol.codec import build, nested
from broker.protocol.errors import ErrorCode, KafkaError
from broker.security.acls import Operation

if TYPE_CHECKING:
    from kio.schema.describe_share_group_offsets.v0.request import DescribeShareGroupOffsetsRequestTopic
    from kio.static.protocol import Entity

    from broker.handlers.kio_types_share import (
        AlterShareGroupOffsetsRequest,
        AlterShareGroupOffsetsResponse,
        DeleteShareGroupOffsetsRequest,
        DeleteShareGroupOffsetsResponse,
        DescribeShareGroupOffsetsRequest,
        DescribeShareGroupOffsetsResponse,
    )

DESCRIBE_OFFSETS: Messages[DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse] = Messages(90, 0, 0)
ALTER_OFFSETS: Messages[AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse] = Messages(91, 0, 0)
DELETE_OFFSETS: Messages[DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsResponse] = Messages(92, 0, 0)

NO_OFFSET = -1  # a partition without share state: the Admin client shows none
NO_EPOCH = -1  # leader epochs are not recorded with the state here
# Kafka's Errors messages, which its tools print as they are.
TOPIC_DENIED = "Topic authorization failed."
UNKNOWN_PARTITION = "This server does not host this topic-partition."
NOT_EMPTY = "The group is not empty."


class ShareOffsetsBroker(HasSecurity, HasStore, HasGroupCoordinator, HasShareCoordinator, Protocol):
    """What the share group offset requests use of the broker."""


def _share_group(broker: ShareOffsetsBroker, group_id: str) -> None:
    """Raise GROUP_ID_NOT_FOUND unless `group_id` is a share group (Kafka's wording)."""
    if broker.shares.known(group_id):
        return
    coordinator = broker.coordinator
    if group_id in coordinator.groups or group_id in coordinator.consumer.groups:
        raise KafkaError(ErrorCode.group_id_not_found, f"Group {group_id} is not a share group.")
    raise KafkaError(ErrorCode.group_id_not_found, f"Group {group_id} not found.")


def _empty_share_group(broker: ShareOffsetsBroker, group_id: str) -> None:
    _share_group(broker, group_id)
    group = broker.shares.groups.get(group_id)
    if group is not None and group.members:
        raise KafkaError(ErrorCode.non_empty_group, NOT_EMPTY)


# --- DescribeShareGroupOffsets -------------------------------------------------------------


def describe_offsets(
    broker: ShareOffsetsBroker, ctx: RequestContext, request: DescribeShareGroupOffsetsRequest
) -> Answer[DescribeShareGroupOffsetsResponse] | Serial:
    """Answered a step of entries at a time (a request may name 100,000): each group, topic
    and partition is looked up on its own, as in Kafka."""
    cls = DESCRIBE_OFFSETS.response(ctx.api_version)
    group_cls, topic_cls, part_cls = (
        nested(cls, "DescribeShareGroupOffsetsResponseGroup"),
        nested(cls, "DescribeShareGroupOffsetsResponseTopic"),
        nested(cls, "DescribeShareGroupOffsetsResponsePartition"),
    )

    def partition(index: int, start: int, error: ErrorCode = ErrorCode.none, message: str | None = None) -> Entity:
        return build(
            part_cls,
            partition_index=index,
            start_offset=start,
            leader_epoch=NO_EPOCH,
            error_code=error,
            error_message=message,
        )

    def topic(name: str, topic_id: uuid.UUID | None, partitions: Iterable[Entity]) -> Entity:
        return build(topic_cls, topic_name=name, topic_id=topic_id, partitions=tuple(partitions))

    def may(name: str) -> bool:
        return broker.security.topic(ctx.session, Operation.DESCRIBE, name)

    def every(group_id: str) -> Steps[list[Entity]]:
        """All the group's partitions with state, on topics it may describe."""
        starts = broker.shares.start_offsets(group_id)
        by_topic: dict[uuid.UUID, list[int]] = {}
        for topic_id, index in starts:
            by_topic.setdefault(topic_id, []).append(index)
        named = [(t.name, t.topic_id) for i in by_topic if (t := broker.store.by_id.get(i)) is not None]
        topics: list[Entity] = []
        for name, tid in sorted(named):
            yield
            if may(name):
                parts = []
                for p in sorted(by_topic[tid]):
                    parts.append(partition(p, starts[(tid, p)]))
                    yield
                topics.append(topic(name, tid, parts))
        return topics

    def asked(group_id: str, wanted: tuple[DescribeShareGroupOffsetsRequestTopic, ...]) -> Steps[list[Entity]]:
        topics: list[Entity] = []
        for t in wanted:
            yield
            name, indexes = t.topic_name, t.partitions
            parts = []
            if not may(name):
                for p in indexes:
                    parts.append(partition(p, NO_OFFSET, ErrorCode.topic_authorization_failed, TOPIC_DENIED))
                    yield
                topics.append(topic(name, None, parts))
                continue
            found = broker.store.get(name)
            # As Kafka: an unknown topic, or a partition without state, has no start offset.
            known = found.topic_id if found is not None else None
            for p in indexes:
                start = broker.shares.start_offset(group_id, known, p) if known else None
                parts.append(partition(p, NO_OFFSET if start is None else start))
                yield
            topics.append(topic(name, known, parts))
        return topics

    def described(group_id: str, wanted: tuple[DescribeShareGroupOffsetsRequestTopic, ...] | None) -> Steps[Entity]:
        if not group_id:
            raise KafkaError(ErrorCode.invalid_group_id, "GroupId can't be empty.")
        if not broker.security.group(ctx.session, Operation.DESCRIBE, group_id):
            raise KafkaError(ErrorCode.group_authorization_failed)
        # As Kafka 4.1: the group itself is not looked up; what has no share state has no offset.
        topics = yield from (every(group_id) if wanted is None else asked(group_id, wanted))
        return build(group_cls, group_id=group_id, topics=tuple(topics), error_code=ErrorCode.none)

    def work() -> Steps[DescribeShareGroupOffsetsResponse]:
        groups = []
        for wanted in request.groups:
            yield
            try:
                groups.append((yield from described(wanted.group_id, wanted.topics)))
            except KafkaError as e:
                groups.append(
                    build(group_cls, group_id=wanted.group_id, topics=(), error_code=e.code, error_message=e.message)
                )
        return build(cls, throttle_time=0, groups=tuple(groups))

    entries = sum(1 + sum(1 + len(t.partitions) for t in g.topics or ()) for g in request.groups)
    return stepped(work(), entries)


# --- AlterShareGroupOffsets ----------------------------------------------------------------


def alter_offsets(
    broker: ShareOffsetsBroker, ctx: RequestContext, request: AlterShareGroupOffsetsRequest
) -> Answer[AlterShareGroupOffsetsResponse] | Serial:
    """The partitions checked a step at a time (a request may name 100,000); then the group
    found empty and its offsets altered in one step; the answer built a step at a time."""
    cls = ALTER_OFFSETS.response(ctx.api_version)
    topic_cls, part_cls = (
        nested(cls, "AlterShareGroupOffsetsResponseTopic"),
        nested(cls, "AlterShareGroupOffsetsResponsePartition"),
    )
    group_id = request.group_id
    # Per topic name (Kafka's response keys topics by name): its id, and each partition's
    # error, or None while it is to be altered.
    results: dict[str, tuple[uuid.UUID | None, dict[int, tuple[ErrorCode, str | None] | None]]] = {}
    offsets: dict[tuple[uuid.UUID, int], int] = {}
    seen = TopicsSeen(broker)
    entries = sum(1 + len(t.partitions) for t in request.topics)
    many = entries > STEP

    def respond(error: ErrorCode = ErrorCode.none, message: str | None = None) -> Steps[AlterShareGroupOffsetsResponse]:
        """A top-level error also marks every partition not failed already: Kafka 4.1's Admin
        client reads the partitions' errors only."""
        topics = []
        for name, (topic_id, parts) in results.items():
            built = []
            for p, got in parts.items():
                e = got or (error, message)
                built.append(build(part_cls, partition_index=p, error_code=e[0], error_message=e[1]))
                yield
            topics.append(build(topic_cls, topic_name=name, topic_id=topic_id, partitions=tuple(built)))
        return build(cls, throttle_time=0, error_code=error, error_message=message, responses=tuple(topics))

    async def later(error: ErrorCode = ErrorCode.none, message: str | None = None) -> AlterShareGroupOffsetsResponse:
        return await in_steps(respond(error, message)) if many else at_once(respond(error, message))

    def answered(
        error: ErrorCode = ErrorCode.none, message: str | None = None
    ) -> Answer[AlterShareGroupOffsetsResponse]:
        return later(error, message) if many else at_once(respond(error, message))

    def check() -> Steps[Answer[AlterShareGroupOffsetsResponse]]:
        for wanted in request.topics:
            yield
            name = wanted.topic_name
            found = broker.store.get(name)
            seen.see(name)
            parts = results.setdefault(name, (found.topic_id if found is not None else None, {}))[1]
            readable = broker.security.topic(ctx.session, Operation.READ, name)
            for p in wanted.partitions:
                yield
                index, start = int(p.partition_index), int(p.start_offset)
                if found is not None:
                    offsets.pop((found.topic_id, index), None)  # a partition named twice: its last entry decides
                if not readable:
                    parts[index] = (ErrorCode.topic_authorization_failed, TOPIC_DENIED)
                elif found is None or not 0 <= index < found.partitions:
                    parts[index] = (ErrorCode.unknown_topic_or_partition, UNKNOWN_PARTITION)
                elif start < 0:
                    parts[index] = (ErrorCode.invalid_request, f"start offset {start} is negative")
                else:
                    parts[index] = None
                    offsets[(found.topic_id, index)] = start
        return alter()

    def alter() -> Answer[AlterShareGroupOffsetsResponse]:
        gone = {name for name, _ in seen.gone((name, 0) for name in results)}
        for name in gone:  # deleted while the request was checked: as if before it
            topic_id, parts = results[name]
            for index, got in parts.items():
                if got is None and topic_id is not None:
                    parts[index] = (ErrorCode.unknown_topic_or_partition, UNKNOWN_PARTITION)
                    offsets.pop((topic_id, index), None)
        if not offsets:
            return answered()
        try:
            _empty_share_group(broker, group_id)
        except KafkaError as e:
            return answered(e.code, e.message)
        altering = broker.shares.alter_start_offsets(group_id, offsets)

        async def answer() -> AlterShareGroupOffsetsResponse:
            try:
                await altering
            except KafkaError as e:
                return await later(e.code, e.message)
            except OSError as e:
                return await later(ErrorCode.kafka_storage_error, f"the share group's state could not be stored: {e}")
            return await later()

        return answer()

    if not broker.security.group(ctx.session, Operation.READ, group_id):
        return _alter_failed(cls, ErrorCode.group_authorization_failed, None)
    if not group_id:
        return _alter_failed(cls, ErrorCode.invalid_group_id, "GroupId can't be empty.")
    return stepped(check(), entries)


def _alter_failed(
    cls: type[AlterShareGroupOffsetsResponse], error: ErrorCode, message: str | None
) -> AlterShareGroupOffsetsResponse:
    return build(cls, throttle_time=0, error_code=error, error_message=message, responses=())


# --- DeleteShareGroupOffsets ---------------------------------------------------------------


def delete_offsets(
    broker: ShareOffsetsBroker, ctx: RequestContext, request: DeleteShareGroupOffsetsRequest
) -> Answer[DeleteShareGroupOffsetsResponse] | Serial:
    """A request naming more than STEP topics is checked and answered STEP topics at a time."""
    return stepped(_deletion(broker, ctx, request), len(request.topics))


def _deletion(
    broker: ShareOffsetsBroker, ctx: RequestContext, request: DeleteShareGroupOffsetsRequest
) -> Steps[Answer[DeleteShareGroupOffsetsResponse]]:
    cls = DELETE_OFFSETS.response(ctx.api_version)
    topic_cls = nested(cls, "DeleteShareGroupOffsetsResponseTopic")
    group_id = request.group_id

    def failed(error: ErrorCode, message: str | None) -> DeleteShareGroupOffsetsResponse:
        return build(cls, throttle_time=0, error_code=error, error_message=message, responses=())

    def entry(
        name: str, topic_id: uuid.UUID | None, error: ErrorCode = ErrorCode.none, message: str | None = None
    ) -> Entity:
        return build(topic_cls, topic_name=name, topic_id=topic_id, error_code=error, error_message=message)

    if not broker.security.group(ctx.session, Operation.DELETE, group_id):
        return failed(ErrorCode.group_authorization_failed, None)
    if not group_id:
        return failed(ErrorCode.invalid_group_id, "GroupId can't be empty.")
    names = list(dict.fromkeys(t.topic_name for t in request.topics))
    allowed: list[str] = []
    refused: list[Entity] = []
    for name in names:
        yield
        if broker.security.topic(ctx.session, Operation.READ, name):
            allowed.append(name)
        else:
            refused.append(entry(name, None, ErrorCode.topic_authorization_failed, TOPIC_DENIED))
    if not allowed:  # as Kafka: the group is not looked at
        return build(cls, throttle_time=0, error_code=ErrorCode.none, responses=tuple(refused))
    try:
        _empty_share_group(broker, group_id)
    except KafkaError as e:
        return failed(e.code, e.message)  # as Kafka: a group's error drops the topics' results
    by_topic: dict[uuid.UUID, list[tuple[uuid.UUID, int]]] = {}
    for key in broker.shares.start_offsets(group_id):
        by_topic.setdefault(key[0], []).append(key)
    results: list[Entity] = []
    doomed: list[tuple[uuid.UUID, int]] = []
    for topic_name in allowed:
        yield
        found = broker.store.get(topic_name)
        if found is None:
            results.append(entry(topic_name, None, ErrorCode.unknown_topic_or_partition, UNKNOWN_PARTITION))
            continue
        mine = by_topic.get(found.topic_id)
        if not mine:
            message = "There is no offset information to delete."
            results.append(entry(topic_name, found.topic_id, ErrorCode.unknown_topic_or_partition, message))
            continue
        doomed.extend(mine)
        results.append(entry(topic_name, found.topic_id))
    # What the steps saw may have changed meanwhile: the group is checked again, and the
    # deletion takes the partitions whose start offsets are still there.
    try:
        _empty_share_group(broker, group_id)
    except KafkaError as e:
        return failed(e.code, e.message)
    current = broker.shares.start_offsets(group_id)
    doomed = [key for key in doomed if key in current]
    response = build(cls, throttle_time=0, error_code=ErrorCode.none, responses=(*results, *refused))
    if not doomed:
        return response
    deleting = broker.shares.delete_start_offsets(group_id, doomed)

    async def answer() -> DeleteShareGroupOffsetsResponse:
        try:
            await deleting
        except KafkaError as e:
            return failed(e.code, e.message)
        except OSError as e:
            return failed(ErrorCode.kafka_storage_error, f"the share group's state could not be stored: {e}")
        return response

    return answer()
