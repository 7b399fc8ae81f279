"""CreateTopics, DeleteTopics, CreatePartitions.  Metadata changes are fsynced before
the response, so an acknowledged topic survives a crash."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Hashable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

import structlog
from kio.static.protocol import Entity

from broker.handlers.base import Answer, Messages, RequestContext, Serial, throttled
from broker.handlers.configs import ConfigSettings, topic_config_entries
from broker.handlers.services import (
    HasConfig,
    HasGroupCoordinator,
    HasNodeId,
    HasQuotas,
    HasSecurity,
    HasShareCoordinator,
    HasStore,
    HasTopicLifecycle,
    HasTransactions,
    LogDurability,
    MetadataDurability,
)
from broker.handlers.stepped import Steps, in_steps, stepped
from broker.metadata import Topic
from broker.protocol.codec import build, nested, nested_or_none
from broker.protocol.errors import ErrorCode, KafkaError
from broker.quotas import THROTTLED, MutationCharge
from broker.security.acls import Operation

if TYPE_CHECKING:
    from kio.schema.delete_topics import v6 as delete_topics_v6
    from typing_extensions import TypeIs

    from broker.handlers.kio_types import (
        CreatePartitionsRequest,
        CreatePartitionsResponse,
        CreateTopicsRequest,
        CreateTopicsResponse,
        DeleteTopicsRequest,
        DeleteTopicsResponse,
    )

CREATE_TOPICS: Messages[CreateTopicsRequest, CreateTopicsResponse] = Messages(19, 2, 7)
DELETE_TOPICS: Messages[DeleteTopicsRequest, DeleteTopicsResponse] = Messages(20, 1, 6)
CREATE_PARTITIONS: Messages[CreatePartitionsRequest, CreatePartitionsResponse] = Messages(37, 0, 3)
_ZERO_UUID = uuid.UUID(int=0)


_TOO_MANY = "Excessively large number of partitions per request."
_R = TypeVar("_R", bound=Entity)
log = structlog.get_logger(__name__)


class TopicsBroker(
    ConfigSettings,
    HasSecurity,
    HasStore,
    HasConfig,
    HasNodeId,
    HasQuotas,
    HasGroupCoordinator,
    HasShareCoordinator,
    HasTransactions,
    MetadataDurability,
    LogDurability,
    HasTopicLifecycle,
    Protocol,
):
    """What the topic requests use of the broker."""


class _Assignment(Protocol):
    @property
    def partition_index(self) -> int: ...

    @property
    def broker_ids(self) -> Sequence[int]: ...


class _Config(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def value(self) -> str | None: ...


class _NewTopic(Protocol):
    """A CreateTopics entry, in any version's request."""

    @property
    def name(self) -> str: ...

    @property
    def num_partitions(self) -> int: ...

    @property
    def replication_factor(self) -> int: ...

    @property
    def assignments(self) -> Sequence[_Assignment]: ...

    @property
    def configs(self) -> Sequence[_Config]: ...


def _by_topic_id(request: DeleteTopicsRequest) -> TypeIs[delete_topics_v6.DeleteTopicsRequest]:
    return request.__version__ >= 6  # KIP-516: topics by name or id


async def _durable(broker: TopicsBroker, response: _R) -> _R:
    try:
        await broker.sync_metadata()
    except OSError as e:  # the log directory went offline: no change may be reported done
        return _not_stored(response, str(e))
    return response


def _storage_error(entry: Entity, message: str) -> Entity:
    changes: dict[str, object] = {"error_code": ErrorCode.kafka_storage_error}
    if "error_message" in {f.name for f in dataclasses.fields(entry)}:  # not in the oldest versions
        changes["error_message"] = message
    return dataclasses.replace(entry, **changes)


def _not_stored(response: _R, message: str) -> _R:
    """`response` with each entry that succeeded answering KAFKA_STORAGE_ERROR instead."""
    for name in ("topics", "responses", "results"):  # CreateTopics, DeleteTopics, CreatePartitions
        entries = getattr(response, name, None)
        if entries is None:
            continue
        fixed = [_storage_error(entry, message) if entry.error_code == ErrorCode.none else entry for entry in entries]
        return dataclasses.replace(response, **{name: tuple(fixed)})
    return response


async def _forget_topics(broker: TopicsBroker, names: list[str], response: _R) -> _R:
    """What groups keep about deleted topics goes with them (offsets pending in transactions,
    committed offsets, share-group state), so a topic created again under a name inherits
    none of it; answered once the deletions and their tombstones are fsynced."""
    topics = frozenset(names)
    if not topics:
        return await _durable(broker, response)
    try:
        # Pending offsets first: a transaction committing meanwhile commits them before the
        # committed offsets are removed below.
        await broker.transactions.forget_topics(topics)
        logs = broker.coordinator.forget_topics(topics)
        for name in names:
            logs.extend(broker.shares.forget_topic(name))
        await broker.sync({id(plog): plog for plog in logs}.values())
    except (KafkaError, OSError) as e:  # the log directory is offline now
        log.error("cannot remove deleted topics' group state", topics=sorted(topics), error=str(e))  # noqa: TRY400 - a storage error, no traceback needed
        return _not_stored(response, str(e))
    return await _durable(broker, response)


class _Creation:
    """One CreateTopics entry as it goes: validated, reserved, created, or failed."""

    __slots__ = ("configs", "error", "item", "message", "partitions", "reserved", "topic")

    def __init__(self, item: _NewTopic) -> None:
        self.item = item
        self.partitions = -1
        self.configs: dict[str, str] = {}
        self.error = ErrorCode.none
        self.message: str | None = None
        self.reserved = False
        self.topic: Topic | None = None

    def fail(self, error: KafkaError) -> None:
        self.error, self.message = error.code, error.message


def _requested_partitions(broker: TopicsBroker, item: _NewTopic) -> int:
    """Partitions an entry asks for, counted as Kafka counts them against its per-request cap."""
    if item.assignments:
        return len(item.assignments)
    if item.num_partitions == -1:
        return broker.config.values.num_partitions
    return max(int(item.num_partitions), 0)


def _validate_creation(broker: TopicsBroker, c: _Creation, repeated: set[Hashable], budget_used: int) -> None:
    item = c.item
    if item.name in repeated:
        raise KafkaError(ErrorCode.invalid_request, f"topic {item.name!r} appears more than once")
    partitions = item.num_partitions
    if item.assignments:
        if partitions != -1 or item.replication_factor != -1:
            raise KafkaError(
                ErrorCode.invalid_request,
                "both a replica assignment and a partition count or replication factor were given",
            )
        for assignment in item.assignments:
            if list(assignment.broker_ids) != [broker.node_id]:
                raise KafkaError(
                    ErrorCode.invalid_replica_assignment,
                    f"partition {assignment.partition_index} assigned to brokers "
                    f"{list(assignment.broker_ids)}; the only broker is {broker.node_id}",
                )
        partitions = len(item.assignments)
    c.configs = broker.topics.check_new_topic(
        item.name, partitions, item.replication_factor, {cfg.name: cfg.value for cfg in item.configs}
    )
    c.partitions = broker.config.values.num_partitions if partitions == -1 else partitions
    broker.topics.check_partition_budget(budget_used + c.partitions)


def create_topics(
    broker: TopicsBroker, ctx: RequestContext, request: CreateTopicsRequest
) -> Answer[CreateTopicsResponse] | Serial:
    return stepped(_creations(broker, ctx, request), len(request.topics))


def _creations(
    broker: TopicsBroker, ctx: RequestContext, request: CreateTopicsRequest
) -> Steps[Answer[CreateTopicsResponse] | Serial]:
    """Each entry validated and its name reserved on its own (the loop may serve others
    between entries: a name reserved here is refused to them); what concerns the whole
    request, the partition cap and repeated names, is judged first."""
    validate_only = request.validate_only
    creations = [_Creation(item) for item in request.topics]
    requested = 0
    for c in creations:
        yield
        requested += _requested_partitions(broker, c.item)
    # As Kafka's controller: more partitions than the cap in one request fails every entry.
    if requested > broker.config.values.max_partitions_per_request:
        for c in creations:
            c.fail(KafkaError(ErrorCode.policy_violation, _TOO_MANY))
        return (yield from _creation_response(broker, ctx, creations))
    repeated = yield from _repeats(c.item.name for c in creations)
    planned = 0
    security, session = broker.security, ctx.session
    charge = MutationCharge(broker.quotas, ctx.principal, ctx.client_id, strict=ctx.api_version >= 6)
    cluster_create = security.cluster(session, Operation.CREATE)
    try:
        for c in creations:
            yield
            try:
                if not (cluster_create or security.topic(session, Operation.CREATE, c.item.name)):
                    raise KafkaError(ErrorCode.topic_authorization_failed, f"CREATE on topic {c.item.name} denied")
                # Reserved entries count against max.partitions already; validate_only reserves none.
                _validate_creation(broker, c, repeated, planned if validate_only else 0)
                if charge.exceeded():
                    raise KafkaError(ErrorCode.throttling_quota_exceeded, THROTTLED)
            except KafkaError as e:
                c.fail(e)
                continue
            if not validate_only:
                charge.take(c.partitions)
            planned += c.partitions
            if not validate_only:
                broker.topics.reserve_topic(c.item.name, c.partitions)
                c.reserved = True
    except BaseException:  # the connection went away between entries: nothing is created
        for c in creations:
            if c.reserved:
                broker.topics.release_topic(c.item.name, c.partitions)
        raise
    throttle_ms = throttled(ctx, charge.throttle_ms())
    if validate_only:
        return (yield from _creation_response(broker, ctx, creations))
    todo = [c for c in creations if c.reserved]
    if planned <= broker.topics.INLINE_PARTITIONS:
        for c in todo:
            try:
                c.topic = broker.topics.create_topic(c.item.name, c.partitions, c.configs)
            except KafkaError as e:
                c.fail(e)
            finally:
                broker.topics.release_topic(c.item.name, c.partitions)
        return _durable(broker, (yield from _creation_response(broker, ctx, creations, throttle_ms)))

    async def create_off_loop() -> CreateTopicsResponse:
        try:
            for c in todo:
                try:
                    c.topic = await broker.topics.create_topic_off_loop(c.item.name, c.partitions, c.configs)
                except KafkaError as e:
                    c.fail(e)
                finally:
                    broker.topics.release_topic(c.item.name, c.partitions)
                    c.reserved = False
        finally:
            for c in todo:
                if c.reserved:  # cancelled before its turn
                    broker.topics.release_topic(c.item.name, c.partitions)
        return await _durable(broker, await in_steps(_creation_response(broker, ctx, creations, throttle_ms)))

    # Later requests of this connection (a produce to the new topic, say) wait for it.
    return Serial(create_off_loop())


def _creation_response(
    broker: TopicsBroker, ctx: RequestContext, creations: list[_Creation], throttle_ms: int = 0
) -> Steps[CreateTopicsResponse]:
    cls = CREATE_TOPICS.response(ctx.api_version)
    result_cls = nested(cls, "CreatableTopicResult")
    config_cls = nested_or_none(cls, "CreatableTopicConfigs")
    results = []
    for c in creations:
        yield
        ok = c.error == ErrorCode.none
        configs_out: tuple[Entity, ...] = ()
        # The created topic's configs are shown only to who may describe them.
        config_error = ErrorCode.none
        if ok and not broker.security.topic(ctx.session, Operation.DESCRIBE_CONFIGS, c.item.name):
            config_error = ErrorCode.topic_authorization_failed
        if ok and config_cls is not None and config_error == ErrorCode.none:
            values = {**broker.config.topic_defaults(), **c.configs}
            described = []
            for e in topic_config_entries(broker, values, set(c.configs)):
                yield  # a topic's configs are dozens of entries of the answer
                described.append(
                    build(
                        config_cls,
                        name=e.name,
                        value=e.value,
                        read_only=False,
                        config_source=e.source,
                        is_sensitive=False,
                    )
                )
            configs_out = tuple(described)
        results.append(
            build(
                result_cls,
                name=c.item.name,
                topic_id=c.topic.topic_id if c.topic is not None else _ZERO_UUID,
                error_code=c.error,
                error_message=c.message,
                topic_config_error_code=config_error,
                num_partitions=c.partitions if ok else -1,
                replication_factor=1 if ok else -1,
                configs=configs_out,
            )
        )
    return build(cls, throttle_time=throttle_ms, topics=tuple(results))


def _repeats(keys: Iterable[Hashable]) -> Steps[set[Hashable]]:
    """The keys that come more than once (a pass over the request only: the loop may serve
    others meanwhile)."""
    seen: set[Hashable] = set()
    repeated: set[Hashable] = set()
    for key in keys:
        yield
        if key in seen:
            repeated.add(key)
        else:
            seen.add(key)
    return repeated


def _deleted_key(name: str | None, topic_id: uuid.UUID | None) -> Hashable:
    """What makes two DeleteTopics entries the same topic, as Kafka's controller tells them
    apart: the name, else the id (None when neither is given, never a repeat)."""
    if name is not None:
        return name
    return topic_id if topic_id not in (None, _ZERO_UUID) else None


def delete_topics(
    broker: TopicsBroker, ctx: RequestContext, request: DeleteTopicsRequest
) -> Answer[DeleteTopicsResponse] | Serial:
    entries = len(request.topics) if _by_topic_id(request) else len(request.topic_names)
    return stepped(_deletions(broker, ctx, request), entries)


def _wanted(request: DeleteTopicsRequest) -> Iterator[tuple[str | None, uuid.UUID | None]]:
    if _by_topic_id(request):
        return ((t.name, t.topic_id) for t in request.topics)
    return ((name, None) for name in request.topic_names)


def _deletions(
    broker: TopicsBroker, ctx: RequestContext, request: DeleteTopicsRequest
) -> Steps[Answer[DeleteTopicsResponse]]:
    """Names (and ids) given more than once are refused first, once each, as Kafka's
    controller does; then each entry is looked up, checked and deleted on its own, as Kafka
    gives no atomicity across a request's topics either, the loop free between steps."""
    repeated = yield from _repeats(key for key in (_deleted_key(*w) for w in _wanted(request)) if key is not None)
    cls = DELETE_TOPICS.response(ctx.api_version)
    result_cls = nested(cls, "DeletableTopicResult")
    results = []
    deleted: list[str] = []
    security, session = broker.security, ctx.session
    charge = MutationCharge(broker.quotas, ctx.principal, ctx.client_id, strict=ctx.api_version >= 5)

    def refuse(name: str | None, topic_id: uuid.UUID | None, code: ErrorCode, message: str) -> None:
        results.append(
            build(result_cls, name=name, topic_id=topic_id or _ZERO_UUID, error_code=code, error_message=message)
        )

    answered: set[Hashable] = set()
    for name, topic_id in _wanted(request):
        yield
        if repeated and (key := _deleted_key(name, topic_id)) in repeated:
            if key not in answered:  # once, where the name (or id) first appears
                answered.add(key)
                if name is not None:
                    refuse(name, None, ErrorCode.invalid_request, "Duplicate topic name.")
                else:
                    refuse(None, topic_id, ErrorCode.invalid_request, "Duplicate topic id.")
            continue
        if name is None and topic_id not in (None, _ZERO_UUID):
            topic = broker.store.by_id.get(topic_id)
            missing = ErrorCode.unknown_topic_id
        else:
            topic = broker.store.get(name) if name else None
            missing = ErrorCode.unknown_topic_or_partition
        label = topic.name if topic is not None else name
        if label and not security.topic(session, Operation.DESCRIBE, label):
            # as Kafka: a topic given by id is not named to who may not describe it
            refuse(name, topic_id, ErrorCode.topic_authorization_failed, "DESCRIBE on the topic denied")
            continue
        if label and not security.topic(session, Operation.DELETE, label):
            refuse(label, topic_id, ErrorCode.topic_authorization_failed, f"DELETE on topic {label} denied")
            continue
        if topic is not None and topic.internal:
            refuse(label, topic.topic_id, ErrorCode.invalid_request, f"{label} is an internal topic of the broker")
            continue
        if topic is None:
            results.append(
                build(
                    result_cls,
                    name=name,
                    topic_id=topic_id or _ZERO_UUID,
                    error_code=missing,
                    error_message=f"topic {name or topic_id} does not exist",
                )
            )
            continue
        if charge.exceeded():
            refuse(topic.name, topic.topic_id, ErrorCode.throttling_quota_exceeded, THROTTLED)
            continue
        charge.take(topic.partitions)
        try:
            broker.topics.delete_topic(topic.name)
        except OSError as e:
            results.append(
                build(
                    result_cls,
                    name=topic.name,
                    topic_id=topic.topic_id,
                    error_code=ErrorCode.kafka_storage_error,
                    error_message=str(e),
                )
            )
            continue
        deleted.append(topic.name)
        results.append(
            build(result_cls, name=topic.name, topic_id=topic.topic_id, error_code=ErrorCode.none, error_message=None)
        )
    response = build(cls, throttle_time=throttled(ctx, charge.throttle_ms()), responses=tuple(results))
    return _forget_topics(broker, deleted, response)


def create_partitions(
    broker: TopicsBroker, ctx: RequestContext, request: CreatePartitionsRequest
) -> Answer[CreatePartitionsResponse] | Serial:
    return stepped(_growths(broker, ctx, request), len(request.topics))


def _grow_now(broker: TopicsBroker, name: str, count: int) -> None:
    if broker.store.get(name) is None:  # deleted while the request's other entries were checked
        raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} was deleted meanwhile")
    broker.topics.add_partitions(name, count)


def _growths(
    broker: TopicsBroker, ctx: RequestContext, request: CreatePartitionsRequest
) -> Steps[Answer[CreatePartitionsResponse] | Serial]:
    """Each entry checked and its topic reserved on its own, the loop free between entries;
    the per-request partition cap is judged first, on the whole request."""
    cls = CREATE_PARTITIONS.response(ctx.api_version)
    result_cls = nested(cls, "CreatePartitionsTopicResult")
    outcomes: list[tuple[str, ErrorCode, str | None]] = []
    growths: list[tuple[int, str, int, int]] = []  # (outcome index, topic, new count, added)
    added_total = 0
    new_partitions = 0
    for item in request.topics:
        yield
        if (t := broker.store.get(item.name)) is not None:
            new_partitions += max(0, item.count - t.partitions)
    too_many = new_partitions > broker.config.values.max_partitions_per_request
    charge = MutationCharge(broker.quotas, ctx.principal, ctx.client_id, strict=ctx.api_version >= 3)
    try:
        for item in request.topics:
            yield
            try:
                if too_many:
                    raise KafkaError(ErrorCode.policy_violation, _TOO_MANY)
                if not broker.security.topic(ctx.session, Operation.ALTER, item.name):
                    raise KafkaError(ErrorCode.topic_authorization_failed, f"ALTER on topic {item.name} denied")
                topic = broker.store.get(item.name)
                if topic is None:
                    raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic {item.name!r} does not exist")
                if item.count <= topic.partitions:
                    raise KafkaError(
                        ErrorCode.invalid_partitions,
                        f"topic currently has {topic.partitions} partitions, which is higher than or "
                        f"equal to the requested {item.count}",
                    )
                if item.assignments is not None:
                    if len(item.assignments) != item.count - topic.partitions:
                        raise KafkaError(
                            ErrorCode.invalid_replica_assignment, "one assignment is needed per new partition"
                        )
                    for assignment in item.assignments:
                        if list(assignment.broker_ids) != [broker.node_id]:
                            raise KafkaError(
                                ErrorCode.invalid_replica_assignment, f"the only broker is {broker.node_id}"
                            )
                if item.name in broker.topics.pending_topics:
                    raise KafkaError(ErrorCode.invalid_request, f"topic {item.name!r} is being changed; retry")
                added = item.count - topic.partitions
                # Reserved growths count against max.partitions already; validate_only reserves none.
                broker.topics.check_partition_budget((added_total if request.validate_only else 0) + added)
                if charge.exceeded():
                    raise KafkaError(ErrorCode.throttling_quota_exceeded, THROTTLED)
                if not request.validate_only:
                    charge.take(added)
                added_total += added
                if not request.validate_only:
                    broker.topics.reserve_topic(item.name, added)
                    growths.append((len(outcomes), item.name, item.count, added))
                outcomes.append((item.name, ErrorCode.none, None))
            except KafkaError as e:
                outcomes.append((item.name, e.code, e.message))
    except BaseException:  # the connection went away between entries: nothing grows
        for _, name, _, added in growths:
            broker.topics.release_topic(name, added)
        raise

    throttle_ms = throttled(ctx, charge.throttle_ms())

    def respond() -> Steps[CreatePartitionsResponse]:
        results = []
        for n, code, m in outcomes:
            yield
            results.append(build(result_cls, name=n, error_code=code, error_message=m))
        return build(cls, throttle_time=throttle_ms, results=tuple(results))

    if request.validate_only:
        return (yield from respond())

    if added_total <= broker.topics.INLINE_PARTITIONS:
        for i, name, count, added in growths:
            try:
                _grow_now(broker, name, count)
            except KafkaError as e:
                outcomes[i] = (name, e.code, e.message)
            finally:
                broker.topics.release_topic(name, added)
        return _durable(broker, (yield from respond()))

    async def grow_off_loop() -> CreatePartitionsResponse:
        todo = list(growths)
        try:
            while todo:
                i, name, count, added = todo.pop(0)
                try:
                    await broker.topics.add_partitions_off_loop(name, count)
                except KafkaError as e:
                    outcomes[i] = (name, e.code, e.message)
                finally:
                    broker.topics.release_topic(name, added)
        finally:
            for _, name, _, added in todo:  # cancelled before their turn
                broker.topics.release_topic(name, added)
        return await _durable(broker, await in_steps(respond()))

    return Serial(grow_off_loop())
