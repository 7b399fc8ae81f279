"""The classic consumer-group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups and
OffsetDelete.  The protocol glue lives here; the behaviour in broker/coordinator."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from kio.static.protocol import Entity

from broker.coordinator.consumer_group import ConsumerGroup
from broker.coordinator.consumer_protocol import encode_assignment, encode_subscription
from broker.coordinator.coordinator import GroupCoordinator
from broker.coordinator.group import GroupState, JoinRequest
from broker.core import Broker
from broker.handlers.base import NOT_REQUESTED_OPERATIONS, Answer, Messages, RequestContext
from broker.protocol.codec import build, nested, timedelta_ms
from broker.protocol.errors import ErrorCode, KafkaError
from broker.security.acls import Operation, ResourceType

if TYPE_CHECKING:
    from kio.schema.describe_groups import v0 as describe_groups_v0
    from kio.schema.describe_groups import v1 as describe_groups_v1
    from kio.schema.describe_groups import v2 as describe_groups_v2
    from kio.schema.find_coordinator import v0 as find_coordinator_v0
    from kio.schema.find_coordinator import v4 as find_coordinator_v4
    from kio.schema.find_coordinator import v5 as find_coordinator_v5
    from kio.schema.find_coordinator import v6 as find_coordinator_v6
    from kio.schema.heartbeat import v0 as heartbeat_v0
    from kio.schema.heartbeat import v1 as heartbeat_v1
    from kio.schema.heartbeat import v2 as heartbeat_v2
    from kio.schema.join_group import v0 as join_group_v0
    from kio.schema.join_group import v1 as join_group_v1
    from kio.schema.join_group import v2 as join_group_v2
    from kio.schema.join_group import v3 as join_group_v3
    from kio.schema.join_group import v4 as join_group_v4
    from kio.schema.leave_group import v0 as leave_group_v0
    from kio.schema.leave_group import v1 as leave_group_v1
    from kio.schema.leave_group import v2 as leave_group_v2
    from kio.schema.list_groups import v4 as list_groups_v4
    from kio.schema.list_groups import v5 as list_groups_v5
    from kio.schema.offset_commit import v6 as offset_commit_v6
    from kio.schema.offset_commit import v7 as offset_commit_v7
    from kio.schema.offset_commit import v8 as offset_commit_v8
    from kio.schema.offset_commit import v9 as offset_commit_v9
    from kio.schema.offset_fetch import v7 as offset_fetch_v7
    from kio.schema.offset_fetch import v8 as offset_fetch_v8
    from kio.schema.offset_fetch import v9 as offset_fetch_v9
    from kio.schema.offset_fetch.v9 import request as offset_fetch_v9_request
    from kio.schema.sync_group import v0 as sync_group_v0
    from kio.schema.sync_group import v1 as sync_group_v1
    from kio.schema.sync_group import v2 as sync_group_v2
    from kio.schema.sync_group import v5 as sync_group_v5
    from typing_extensions import TypeIs

    from broker.handlers.kio_types import (
        DeleteGroupsRequest,
        DeleteGroupsResponse,
        DescribeGroupsRequest,
        DescribeGroupsResponse,
        FindCoordinatorRequest,
        FindCoordinatorResponse,
        HeartbeatRequest,
        HeartbeatResponse,
        JoinGroupRequest,
        JoinGroupResponse,
        LeaveGroupRequest,
        LeaveGroupResponse,
        ListGroupsRequest,
        ListGroupsResponse,
        OffsetCommitRequest,
        OffsetCommitResponse,
        OffsetDeleteRequest,
        OffsetDeleteResponse,
        OffsetFetchRequest,
        OffsetFetchResponse,
        SyncGroupRequest,
        SyncGroupResponse,
    )

OFFSET_COMMIT: Messages[OffsetCommitRequest, OffsetCommitResponse] = Messages(8, 2, 9)
OFFSET_FETCH: Messages[OffsetFetchRequest, OffsetFetchResponse] = Messages(9, 1, 9)
FIND_COORDINATOR: Messages[FindCoordinatorRequest, FindCoordinatorResponse] = Messages(10, 0, 6)
JOIN_GROUP: Messages[JoinGroupRequest, JoinGroupResponse] = Messages(11, 0, 9)
HEARTBEAT: Messages[HeartbeatRequest, HeartbeatResponse] = Messages(12, 0, 4)
LEAVE_GROUP: Messages[LeaveGroupRequest, LeaveGroupResponse] = Messages(13, 0, 5)
SYNC_GROUP: Messages[SyncGroupRequest, SyncGroupResponse] = Messages(14, 0, 5)
DESCRIBE_GROUPS: Messages[DescribeGroupsRequest, DescribeGroupsResponse] = Messages(15, 0, 5)
LIST_GROUPS: Messages[ListGroupsRequest, ListGroupsResponse] = Messages(16, 0, 5)
DELETE_GROUPS: Messages[DeleteGroupsRequest, DeleteGroupsResponse] = Messages(42, 0, 2)
OFFSET_DELETE: Messages[OffsetDeleteRequest, OffsetDeleteResponse] = Messages(47, 0, 0)
GROUP_KEY, TRANSACTION_KEY = 0, 1
# GROUP resource operations: READ, DELETE, DESCRIBE.

# Fields some versions lack: each guard narrows a request to the versions that have them,
# or to those that do not (kio's class of a version carries its number, `__version__`).


def _batched_keys(
    request: FindCoordinatorRequest,
) -> TypeIs[
    find_coordinator_v4.FindCoordinatorRequest
    | find_coordinator_v5.FindCoordinatorRequest
    | find_coordinator_v6.FindCoordinatorRequest
]:
    return request.__version__ >= 4  # KIP-699: several keys at once


def _groups_only(request: FindCoordinatorRequest) -> TypeIs[find_coordinator_v0.FindCoordinatorRequest]:
    return request.__version__ == 0  # v1 added the key type (transaction coordinators)


def _before_static_membership(
    request: JoinGroupRequest,
) -> TypeIs[
    join_group_v0.JoinGroupRequest
    | join_group_v1.JoinGroupRequest
    | join_group_v2.JoinGroupRequest
    | join_group_v3.JoinGroupRequest
    | join_group_v4.JoinGroupRequest
]:
    return request.__version__ < 5  # KIP-345: group.instance.id


def _without_rebalance_timeout(request: JoinGroupRequest) -> TypeIs[join_group_v0.JoinGroupRequest]:
    return request.__version__ == 0


def _syncs_without_instance(
    request: SyncGroupRequest,
) -> TypeIs[sync_group_v0.SyncGroupRequest | sync_group_v1.SyncGroupRequest | sync_group_v2.SyncGroupRequest]:
    return request.__version__ < 3  # KIP-345


def _names_protocol(request: SyncGroupRequest) -> TypeIs[sync_group_v5.SyncGroupRequest]:
    return request.__version__ >= 5  # KIP-559


def _beats_without_instance(
    request: HeartbeatRequest,
) -> TypeIs[heartbeat_v0.HeartbeatRequest | heartbeat_v1.HeartbeatRequest | heartbeat_v2.HeartbeatRequest]:
    return request.__version__ < 3  # KIP-345


def _one_member_leaves(
    request: LeaveGroupRequest,
) -> TypeIs[leave_group_v0.LeaveGroupRequest | leave_group_v1.LeaveGroupRequest | leave_group_v2.LeaveGroupRequest]:
    return request.__version__ < 3  # KIP-345: v3 lets members leave in a batch


def _with_leader_epochs(
    request: OffsetCommitRequest,
) -> TypeIs[
    offset_commit_v6.OffsetCommitRequest
    | offset_commit_v7.OffsetCommitRequest
    | offset_commit_v8.OffsetCommitRequest
    | offset_commit_v9.OffsetCommitRequest
]:
    return request.__version__ >= 6  # KIP-320


def _commits_as_instance(
    request: OffsetCommitRequest,
) -> TypeIs[
    offset_commit_v7.OffsetCommitRequest | offset_commit_v8.OffsetCommitRequest | offset_commit_v9.OffsetCommitRequest
]:
    return request.__version__ >= 7  # KIP-345


def _fetches_groups(
    request: OffsetFetchRequest,
) -> TypeIs[offset_fetch_v8.OffsetFetchRequest | offset_fetch_v9.OffsetFetchRequest]:
    return request.__version__ >= 8  # KIP-709: several groups at once


def _fetches_as_member(group: object) -> TypeIs[offset_fetch_v9_request.OffsetFetchRequestGroup]:
    return getattr(group, "__version__", 0) >= 9  # KIP-848: the member's id and epoch


def _may_require_stable(
    request: OffsetFetchRequest,
) -> TypeIs[
    offset_fetch_v7.OffsetFetchRequest | offset_fetch_v8.OffsetFetchRequest | offset_fetch_v9.OffsetFetchRequest
]:
    return request.__version__ >= 7  # KIP-447


def _filters_states(
    request: ListGroupsRequest,
) -> TypeIs[list_groups_v4.ListGroupsRequest | list_groups_v5.ListGroupsRequest]:
    return request.__version__ >= 4  # KIP-518


def _filters_types(request: ListGroupsRequest) -> TypeIs[list_groups_v5.ListGroupsRequest]:
    return request.__version__ >= 5  # KIP-848


def _before_operations(
    request: DescribeGroupsRequest,
) -> TypeIs[
    describe_groups_v0.DescribeGroupsRequest
    | describe_groups_v1.DescribeGroupsRequest
    | describe_groups_v2.DescribeGroupsRequest
]:
    return request.__version__ < 3  # KIP-430


class _FetchTopic(Protocol):
    """An OffsetFetch topic, in any version's request."""

    @property
    def name(self) -> str: ...

    @property
    def partition_indexes(self) -> Sequence[int]: ...


def _may(broker: Broker, ctx: RequestContext, op: Operation, group_id: str) -> bool:
    return broker.security.group(ctx.session, op, group_id)


def _coordinator(broker: Broker) -> GroupCoordinator:
    coordinator = broker.coordinator
    assert coordinator is not None
    return coordinator


# --- FindCoordinator ----------------------------------------------------------------


def find_coordinator(broker: Broker, ctx: RequestContext, request: FindCoordinatorRequest) -> FindCoordinatorResponse:
    cls = FIND_COORDINATOR.response(ctx.api_version)
    host, port = broker.endpoint(ctx.listener)

    def answer(key: str, key_type: int) -> tuple[ErrorCode, str | None]:
        if key_type == TRANSACTION_KEY:
            if not key:
                return ErrorCode.invalid_request, "the transactional id is empty"
            if not broker.security.allowed(ctx.session, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
                return ErrorCode.transactional_id_authorization_failed, f"DESCRIBE on transactional id {key} denied"
            return ErrorCode.none, None
        if key_type != GROUP_KEY:
            return ErrorCode.invalid_request, f"unknown coordinator key type {key_type}"
        if not key:
            return ErrorCode.invalid_group_id, "the group id is empty"
        if not _may(broker, ctx, Operation.DESCRIBE, key):
            return ErrorCode.group_authorization_failed, f"DESCRIBE on group {key} denied"
        return ErrorCode.none, None

    if _batched_keys(request):
        entry_cls = nested(cls, "Coordinator")
        entries = []
        for key in request.coordinator_keys:
            error, message = answer(key, request.key_type)
            ok = error == ErrorCode.none
            entries.append(
                build(
                    entry_cls,
                    key=key,
                    node_id=broker.node_id if ok else -1,
                    host=host if ok else "",
                    port=port if ok else -1,
                    error_code=error,
                    error_message=message,
                )
            )
        return build(cls, throttle_time=0, coordinators=tuple(entries))
    error, message = answer(request.key, GROUP_KEY if _groups_only(request) else request.key_type)
    ok = error == ErrorCode.none
    return build(
        cls,
        throttle_time=0,
        error_code=error,
        error_message=message,
        node_id=broker.node_id if ok else -1,
        host=host if ok else "",
        port=port if ok else -1,
    )


# --- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ---------------------------------


def join_group(broker: Broker, ctx: RequestContext, request: JoinGroupRequest) -> Answer[JoinGroupResponse]:
    cls = JOIN_GROUP.response(ctx.api_version)
    member_cls = nested(cls, "JoinGroupResponseMember")
    coordinator = _coordinator(broker)

    def fail(code: ErrorCode, member_id: str = "") -> JoinGroupResponse:
        return build(
            cls,
            throttle_time=0,
            error_code=code,
            generation_id=-1,
            protocol_type=None,
            protocol_name="" if ctx.api_version < 7 else None,
            leader="",
            skip_assignment=False,
            member_id=member_id,
            members=(),
        )

    if not _may(broker, ctx, Operation.READ, request.group_id):
        return fail(ErrorCode.group_authorization_failed, request.member_id or "")
    join = JoinRequest(
        group_id=request.group_id,
        member_id=request.member_id or "",
        group_instance_id=None if _before_static_membership(request) else request.group_instance_id,
        client_id=ctx.client_id or "",
        client_host=ctx.client_host,
        session_timeout_ms=timedelta_ms(request.session_timeout),
        rebalance_timeout_ms=-1 if _without_rebalance_timeout(request) else timedelta_ms(request.rebalance_timeout),
        protocol_type=request.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
        require_known_member_id=ctx.api_version >= 4,
    )

    async def run() -> JoinGroupResponse:
        try:
            result = await coordinator.join(join)
        except KafkaError as e:
            return fail(e.code, request.member_id or "")
        if result.error != ErrorCode.none:
            return fail(result.error, result.member_id)
        return build(
            cls,
            throttle_time=0,
            error_code=ErrorCode.none,
            generation_id=result.generation,
            protocol_type=result.protocol_type,
            protocol_name=result.protocol_name,
            leader=result.leader,
            skip_assignment=False,
            member_id=result.member_id,
            members=tuple(
                build(member_cls, member_id=mid, group_instance_id=iid, metadata=meta)
                for mid, iid, meta in result.members
            ),
        )

    return run()


def sync_group(broker: Broker, ctx: RequestContext, request: SyncGroupRequest) -> Answer[SyncGroupResponse]:
    cls = SYNC_GROUP.response(ctx.api_version)
    coordinator = _coordinator(broker)
    instance_id = None if _syncs_without_instance(request) else request.group_instance_id
    protocol = (request.protocol_type, request.protocol_name) if _names_protocol(request) else (None, None)

    async def run() -> SyncGroupResponse:
        try:
            if not _may(broker, ctx, Operation.READ, request.group_id):
                raise KafkaError(ErrorCode.group_authorization_failed)
            protocol_type, protocol_name, assignment = await coordinator.sync_group(
                group_id=request.group_id,
                generation=request.generation_id,
                member_id=request.member_id,
                group_instance_id=instance_id,
                protocol_type=protocol[0],
                protocol_name=protocol[1],
                assignments={a.member_id: bytes(a.assignment) for a in request.assignments},
            )
        except KafkaError as e:
            return build(
                cls, throttle_time=0, error_code=e.code, protocol_type=None, protocol_name=None, assignment=b""
            )
        return build(
            cls,
            throttle_time=0,
            error_code=ErrorCode.none,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            assignment=assignment,
        )

    return run()


def heartbeat(broker: Broker, ctx: RequestContext, request: HeartbeatRequest) -> HeartbeatResponse:
    cls = HEARTBEAT.response(ctx.api_version)
    instance_id = None if _beats_without_instance(request) else request.group_instance_id
    try:
        if not _may(broker, ctx, Operation.READ, request.group_id):
            raise KafkaError(ErrorCode.group_authorization_failed)
        _coordinator(broker).heartbeat(request.group_id, request.generation_id, request.member_id, instance_id)
        error = ErrorCode.none
    except KafkaError as e:
        error = e.code
    return build(cls, throttle_time=0, error_code=error)


def leave_group(broker: Broker, ctx: RequestContext, request: LeaveGroupRequest) -> LeaveGroupResponse:
    cls = LEAVE_GROUP.response(ctx.api_version)
    coordinator = _coordinator(broker)
    if not _may(broker, ctx, Operation.READ, request.group_id):
        return build(cls, throttle_time=0, error_code=ErrorCode.group_authorization_failed, members=())
    if _one_member_leaves(request):
        try:
            coordinator.leave(request.group_id, request.member_id, None)
            error = ErrorCode.none
        except KafkaError as e:
            error = e.code
        return build(cls, throttle_time=0, error_code=error)
    member_cls = nested(cls, "MemberResponse")
    results = []
    top = ErrorCode.none
    for identity in request.members:
        try:
            coordinator.leave(request.group_id, identity.member_id, identity.group_instance_id)
            error = ErrorCode.none
        except KafkaError as e:
            error = e.code
            if error == ErrorCode.invalid_group_id:
                top = error
        results.append(
            build(
                member_cls, member_id=identity.member_id, group_instance_id=identity.group_instance_id, error_code=error
            )
        )
    return build(cls, throttle_time=0, error_code=top, members=tuple(results) if top == ErrorCode.none else ())


# --- offsets ---------------------------------------------------------------------------


def offset_commit(broker: Broker, ctx: RequestContext, request: OffsetCommitRequest) -> Answer[OffsetCommitResponse]:
    cls = OFFSET_COMMIT.response(ctx.api_version)
    topic_cls = nested(cls, "OffsetCommitResponseTopic")
    part_cls = nested(cls, "OffsetCommitResponsePartition")
    coordinator = _coordinator(broker)
    generation = request.generation_id_or_member_epoch
    instance_id = request.group_instance_id if _commits_as_instance(request) else None
    # the leader epoch each offset was read at
    epochs = (
        {(t.name, p.partition_index): p.committed_leader_epoch for t in request.topics for p in t.partitions}
        if _with_leader_epochs(request)
        else {}
    )
    top_error = ErrorCode.none
    try:
        if not _may(broker, ctx, Operation.READ, request.group_id):
            raise KafkaError(ErrorCode.group_authorization_failed)
        coordinator.validate_commit(request.group_id, generation, request.member_id or "", instance_id)
    except KafkaError as e:
        top_error = e.code
        if top_error == ErrorCode.group_id_not_found and ctx.api_version < 9:
            top_error = ErrorCode.illegal_generation  # Kafka's answer before OffsetCommit v9
    accepted: dict[tuple[str, int], tuple[int, int, str]] = {}
    results: list[tuple[str, list[tuple[int, ErrorCode]]]] = []
    for topic in request.topics:
        parts: list[tuple[int, ErrorCode]] = []
        readable = broker.security.topic(ctx.session, Operation.READ, topic.name)
        for p in topic.partitions:
            error = top_error
            metadata = p.committed_metadata or ""
            if error == ErrorCode.none:
                if not readable:
                    error = ErrorCode.topic_authorization_failed
                elif broker.store.partition_log(topic.name, p.partition_index) is None:
                    error = ErrorCode.unknown_topic_or_partition
                elif len(metadata.encode()) > coordinator.config.max_metadata_bytes:
                    error = ErrorCode.offset_metadata_too_large
                else:
                    epoch = epochs.get((topic.name, p.partition_index), -1)
                    accepted[(topic.name, p.partition_index)] = (p.committed_offset, epoch, metadata)
            parts.append((p.partition_index, error))
        results.append((topic.name, parts))

    def respond() -> OffsetCommitResponse:
        return build(
            cls,
            throttle_time=0,
            topics=tuple(
                build(
                    topic_cls,
                    name=name,
                    partitions=tuple(
                        build(part_cls, partition_index=index, error_code=error) for index, error in parts
                    ),
                )
                for name, parts in results
            ),
        )

    async def durable() -> OffsetCommitResponse:
        await coordinator.commit(request.group_id, accepted)
        return respond()

    return durable() if accepted else respond()


def offset_fetch(broker: Broker, ctx: RequestContext, request: OffsetFetchRequest) -> OffsetFetchResponse:
    cls = OFFSET_FETCH.response(ctx.api_version)
    coordinator = _coordinator(broker)
    # require_stable (v7+, KIP-447): a partition whose offset waits in an open transaction
    # answers UNSTABLE_OFFSET_COMMIT, and the client asks again once the transaction ended.
    stable_only = _may_require_stable(request) and request.require_stable

    def group_result(
        group_id: str, topics: Sequence[_FetchTopic] | None, topic_cls: type[Entity], part_cls: type[Entity]
    ) -> tuple[ErrorCode, tuple[Entity, ...]]:
        if not group_id:
            return ErrorCode.invalid_group_id, ()
        if not _may(broker, ctx, Operation.DESCRIBE, group_id):
            return ErrorCode.group_authorization_failed, ()
        committed = coordinator.committed(group_id)
        unstable = broker.transactions.pending_offsets(group_id) if stable_only else set()
        described = broker.security.topic
        if topics is None:
            wanted: dict[str, list[int]] = {}
            for t, p in sorted(committed):
                if described(ctx.session, Operation.DESCRIBE, t):  # the rest are left out, as in Kafka
                    wanted.setdefault(t, []).append(p)
        else:
            wanted = {t.name: list(t.partition_indexes) for t in topics}
        out: list[Entity] = []
        for name, partitions in wanted.items():
            parts: list[Entity] = []
            allowed = described(ctx.session, Operation.DESCRIBE, name)
            for index in partitions:
                entry = committed.get((name, index)) if allowed else None
                error = ErrorCode.none if allowed else ErrorCode.topic_authorization_failed
                if allowed and (name, index) in unstable:
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
            out.append(build(topic_cls, name=name, partitions=tuple(parts)))
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
            error, topics = group_result(g.group_id, g.topics, topic_cls, part_cls)
            groups.append(build(group_cls, group_id=g.group_id, topics=topics, error_code=error))
        return build(cls, throttle_time=0, groups=tuple(groups))
    topic_cls = nested(cls, "OffsetFetchResponseTopic")
    part_cls = nested(cls, "OffsetFetchResponsePartition")
    error, topics = group_result(request.group_id, request.topics, topic_cls, part_cls)
    return build(cls, throttle_time=0, topics=topics, error_code=error)


def offset_delete(broker: Broker, ctx: RequestContext, request: OffsetDeleteRequest) -> Answer[OffsetDeleteResponse]:
    cls = OFFSET_DELETE.response(ctx.api_version)
    topic_cls = nested(cls, "OffsetDeleteResponseTopic")
    part_cls = nested(cls, "OffsetDeleteResponsePartition")
    coordinator = _coordinator(broker)
    group_id = request.group_id
    group = coordinator.groups.get(group_id)
    if not group_id:
        return build(cls, error_code=ErrorCode.invalid_group_id, throttle_time=0, topics=())
    if not _may(broker, ctx, Operation.DELETE, group_id):
        return build(cls, error_code=ErrorCode.group_authorization_failed, throttle_time=0, topics=())
    if group is None and group_id not in coordinator.offsets:
        return build(cls, error_code=ErrorCode.group_id_not_found, throttle_time=0, topics=())
    subscribed = group.subscribed_topics() if group is not None and group.members else set()
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
        await coordinator.delete_offsets(group_id, deletable)
        return response

    return durable()


# --- ListGroups / DescribeGroups / DeleteGroups ----------------------------------------


def list_groups(broker: Broker, ctx: RequestContext, request: ListGroupsRequest) -> ListGroupsResponse:
    cls = LIST_GROUPS.response(ctx.api_version)
    entry_cls = nested(cls, "ListedGroup")
    coordinator = _coordinator(broker)
    states = {s.lower() for s in request.states_filter} if _filters_states(request) else set()
    types = {t.lower() for t in request.types_filter} if _filters_types(request) else set()
    entries = []
    # DESCRIBE on the cluster lists every group; otherwise those the principal may describe.
    everything = broker.security.cluster(ctx.session, Operation.DESCRIBE)
    for group_id in coordinator.known_groups():
        if not everything and not _may(broker, ctx, Operation.DESCRIBE, group_id):
            continue
        group = coordinator.groups.get(group_id)
        consumer_group = coordinator.consumer.groups.get(group_id)
        if consumer_group is not None:
            state, kind, protocol_type = consumer_group.state.value, "consumer", "consumer"
        else:
            state = group.state.value if group else GroupState.EMPTY.value
            kind, protocol_type = "classic", (group.protocol_type if group else None) or ""
        if (states and state.lower() not in states) or (types and kind not in types):
            continue
        entries.append(
            build(entry_cls, group_id=group_id, protocol_type=protocol_type, group_state=state, group_type=kind)
        )
    return build(cls, throttle_time=0, error_code=ErrorCode.none, groups=tuple(entries))


def describe_groups(broker: Broker, ctx: RequestContext, request: DescribeGroupsRequest) -> DescribeGroupsResponse:
    cls = DESCRIBE_GROUPS.response(ctx.api_version)
    group_cls = nested(cls, "DescribedGroup")
    member_cls = nested(cls, "DescribedGroupMember")
    coordinator = _coordinator(broker)
    requested = not _before_operations(request) and request.include_authorized_operations
    out = []
    for group_id in request.groups:
        group = coordinator.groups.get(group_id)
        ops = (
            broker.security.operations(ctx.session, ResourceType.GROUP, group_id)
            if requested
            else NOT_REQUESTED_OPERATIONS
        )

        def memberless(error: ErrorCode, state: str, group_id: str = group_id, ops: int = ops) -> Entity:
            return build(
                group_cls,
                error_code=error,
                group_id=group_id,
                group_state=state,
                protocol_type="",
                protocol_data="",
                members=(),
                authorized_operations=ops,
            )

        if not group_id:
            out.append(memberless(ErrorCode.invalid_group_id, ""))
            continue
        if not _may(broker, ctx, Operation.DESCRIBE, group_id):
            out.append(memberless(ErrorCode.group_authorization_failed, ""))
            continue
        consumer_group = coordinator.consumer.groups.get(group_id)
        if consumer_group is not None:
            out.append(_consumer_group_as_classic(broker, group_cls, member_cls, consumer_group, ops))
            continue
        if group is None:
            known = group_id in coordinator.offsets
            # v6 reports a missing group as GROUP_ID_NOT_FOUND; earlier versions as Dead.
            error = ErrorCode.group_id_not_found if ctx.api_version >= 6 and not known else ErrorCode.none
            out.append(memberless(error, "Empty" if known else "Dead"))
            continue
        stable = group.state == GroupState.STABLE
        members = tuple(
            build(
                member_cls,
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.metadata_for(group.protocol_name or "") if stable else b"",
                member_assignment=m.assignment if stable else b"",
            )
            for m in group.members.values()
        )
        out.append(
            build(
                group_cls,
                error_code=ErrorCode.none,
                group_id=group_id,
                group_state=group.state.value,
                protocol_type=group.protocol_type or "",
                protocol_data=group.protocol_name or "",
                members=members,
                authorized_operations=ops,
            )
        )
    return build(cls, throttle_time=0, groups=tuple(out))


def _consumer_group_as_classic(
    broker: Broker, group_cls: type[Entity], member_cls: type[Entity], group: ConsumerGroup, ops: int
) -> Entity:
    """A consumer-protocol group as DescribeGroups shows it (as Kafka does): protocol type
    "consumer", its assignor as the protocol, each member's subscription and assignment in
    the consumer protocol's encoding."""
    consumer = _coordinator(broker).consumer
    names = {topic.topic_id: name for name, topic in broker.store.topics.items()}
    members = tuple(
        build(
            member_cls,
            member_id=m.member_id,
            group_instance_id=m.instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            member_metadata=encode_subscription(sorted(consumer.member_topics(group, m))),
            member_assignment=encode_assignment({names[t]: sorted(ps) for t, ps in m.assigned.items() if t in names}),
        )
        for m in group.members.values()
    )
    return build(
        group_cls,
        error_code=ErrorCode.none,
        group_id=group.group_id,
        group_state=group.state.value,
        protocol_type="consumer",
        protocol_data=consumer.assignor_of(group),
        members=members,
        authorized_operations=ops,
    )


def delete_groups(broker: Broker, ctx: RequestContext, request: DeleteGroupsRequest) -> Answer[DeleteGroupsResponse]:
    cls = DELETE_GROUPS.response(ctx.api_version)
    result_cls = nested(cls, "DeletableGroupResult")
    coordinator = _coordinator(broker)

    async def run() -> DeleteGroupsResponse:
        results = []
        for group_id in request.groups_names:
            try:
                if not group_id:
                    raise KafkaError(ErrorCode.invalid_group_id)
                if not _may(broker, ctx, Operation.DELETE, group_id):
                    raise KafkaError(ErrorCode.group_authorization_failed)
                await coordinator.delete_group(group_id)
                error = ErrorCode.none
            except KafkaError as e:
                error = e.code
            results.append(build(result_cls, group_id=group_id, error_code=error))
        return build(cls, throttle_time=0, results=tuple(results))

    return run()
