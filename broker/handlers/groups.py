"""The classic consumer-group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups and
OffsetDelete.  The protocol glue lives here; the behaviour in broker/coordinator."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from kio.static.protocol import Entity

from broker.coordinator.consumer_group import ConsumerGroup
from broker.coordinator.consumer_protocol import encode_assignment, encode_subscription
from broker.coordinator.coordinator import GroupCoordinator
from broker.coordinator.group import GroupState, JoinRequest
from broker.handlers.base import NOT_REQUESTED_OPERATIONS, Answer, Messages, RequestContext
from broker.handlers.services import (
    Endpoint,
    HasGroupCoordinator,
    HasLogDir,
    HasNodeId,
    HasSecurity,
    HasShareCoordinator,
    HasStore,
    HasTransactions,
)
from broker.protocol.codec import build, nested, timedelta_ms
from broker.protocol.errors import ErrorCode, KafkaError
from broker.security.acls import Operation, ResourceType
from broker.share.partition_key import SHARE_KEY_TYPE, parse_share_key

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
        SyncGroupRequest,
        SyncGroupResponse,
    )

FIND_COORDINATOR: Messages[FindCoordinatorRequest, FindCoordinatorResponse] = Messages(10, 0, 6)
JOIN_GROUP: Messages[JoinGroupRequest, JoinGroupResponse] = Messages(11, 0, 9)
HEARTBEAT: Messages[HeartbeatRequest, HeartbeatResponse] = Messages(12, 0, 4)
LEAVE_GROUP: Messages[LeaveGroupRequest, LeaveGroupResponse] = Messages(13, 0, 5)
SYNC_GROUP: Messages[SyncGroupRequest, SyncGroupResponse] = Messages(14, 0, 5)
DESCRIBE_GROUPS: Messages[DescribeGroupsRequest, DescribeGroupsResponse] = Messages(15, 0, 6)
LIST_GROUPS: Messages[ListGroupsRequest, ListGroupsResponse] = Messages(16, 0, 5)
DELETE_GROUPS: Messages[DeleteGroupsRequest, DeleteGroupsResponse] = Messages(42, 0, 2)
GROUP_KEY, TRANSACTION_KEY = 0, 1
# GROUP resource operations: READ, DELETE, DESCRIBE.

# Fields some versions lack: each guard narrows a request to the versions that have them,
# or to those that do not (kio's class of a version carries its number, `__version__`).


class GroupsBroker(
    HasSecurity,
    HasStore,
    HasNodeId,
    HasLogDir,
    HasGroupCoordinator,
    HasShareCoordinator,
    HasTransactions,
    Endpoint,
    Protocol,
):
    """What the classic group requests use of the broker."""


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


def _may(broker: GroupsBroker, ctx: RequestContext, op: Operation, group_id: str) -> bool:
    return broker.security.group(ctx.session, op, group_id)


def _coordinator(broker: GroupsBroker) -> GroupCoordinator:
    coordinator = broker.coordinator
    assert coordinator is not None
    return coordinator


# --- FindCoordinator ----------------------------------------------------------------


def find_coordinator(
    broker: GroupsBroker, ctx: RequestContext, request: FindCoordinatorRequest
) -> FindCoordinatorResponse:
    cls = FIND_COORDINATOR.response(ctx.api_version)
    host, port = broker.endpoint(ctx.listener)

    def answer(key: str, key_type: int) -> tuple[ErrorCode, str | None]:
        if key_type == TRANSACTION_KEY:
            if not key:
                return ErrorCode.invalid_request, "the transactional id is empty"
            if not broker.security.allowed(ctx.session, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
                return ErrorCode.transactional_id_authorization_failed, f"DESCRIBE on transactional id {key} denied"
            return ErrorCode.none, None
        if key_type == SHARE_KEY_TYPE:  # the share-group state persister's keys, for brokers only
            if ctx.api_version < 6:
                return ErrorCode.invalid_request, "share coordinator keys need FindCoordinator v6"
            if not broker.security.cluster(ctx.session, Operation.CLUSTER_ACTION):
                return ErrorCode.cluster_authorization_failed, "CLUSTER_ACTION on the cluster denied"
            try:
                parse_share_key(key)
            except ValueError as e:
                return ErrorCode.invalid_request, str(e)
            return ErrorCode.none, None
        if key_type != GROUP_KEY:
            return ErrorCode.invalid_request, f"unknown coordinator key type {key_type}"
        if not key:
            return ErrorCode.invalid_group_id, "the group id is empty"
        if not _may(broker, ctx, Operation.DESCRIBE, key):
            return ErrorCode.group_authorization_failed, f"DESCRIBE on group {key} denied"
        return ErrorCode.none, None

    def checked(key: str, key_type: int) -> tuple[ErrorCode, str | None]:
        error, message = answer(key, key_type)
        if error == ErrorCode.none and broker.log_dir.offline:  # every coordinator's log lives there
            return ErrorCode.coordinator_not_available, "the coordinator's log directory is offline"
        return error, message

    if _batched_keys(request):
        entry_cls = nested(cls, "Coordinator")
        entries = []
        for key in request.coordinator_keys:
            error, message = checked(key, request.key_type)
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
    error, message = checked(request.key, GROUP_KEY if _groups_only(request) else request.key_type)
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


def join_group(broker: GroupsBroker, ctx: RequestContext, request: JoinGroupRequest) -> Answer[JoinGroupResponse]:
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


def sync_group(broker: GroupsBroker, ctx: RequestContext, request: SyncGroupRequest) -> Answer[SyncGroupResponse]:
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


def heartbeat(broker: GroupsBroker, ctx: RequestContext, request: HeartbeatRequest) -> HeartbeatResponse:
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


def leave_group(broker: GroupsBroker, ctx: RequestContext, request: LeaveGroupRequest) -> LeaveGroupResponse:
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


# --- ListGroups / DescribeGroups / DeleteGroups ----------------------------------------


def list_groups(broker: GroupsBroker, ctx: RequestContext, request: ListGroupsRequest) -> ListGroupsResponse:
    cls = LIST_GROUPS.response(ctx.api_version)
    entry_cls = nested(cls, "ListedGroup")
    coordinator = _coordinator(broker)
    states = {s.lower() for s in request.states_filter} if _filters_states(request) else set()
    types = {t.lower() for t in request.types_filter} if _filters_types(request) else set()
    entries = []
    # DESCRIBE on the cluster lists every group; otherwise those the principal may describe.
    everything = broker.security.cluster(ctx.session, Operation.DESCRIBE)
    shares = broker.shares.groups
    for group_id in sorted({*coordinator.known_groups(), *shares}):
        if not everything and not _may(broker, ctx, Operation.DESCRIBE, group_id):
            continue
        group = coordinator.groups.get(group_id)
        consumer_group = coordinator.consumer.groups.get(group_id)
        if group_id in shares:
            state, kind, protocol_type = shares[group_id].state.value, "share", "share"
        elif consumer_group is not None:
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


def describe_groups(
    broker: GroupsBroker, ctx: RequestContext, request: DescribeGroupsRequest
) -> DescribeGroupsResponse:
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

        def memberless(
            error: ErrorCode, state: str, message: str | None = None, group_id: str = group_id, ops: int = ops
        ) -> Entity:
            return build(
                group_cls,
                error_code=error,
                error_message=message,  # v6+
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
        if group_id in broker.shares.groups:  # as Kafka: described by ShareGroupDescribe only
            out.append(memberless(ErrorCode.group_id_not_found, "Dead", f"Group {group_id} is not a classic group."))
            continue
        if group is None:
            known = group_id in coordinator.offsets
            # v6 reports a missing group as GROUP_ID_NOT_FOUND; earlier versions as Dead.
            if ctx.api_version >= 6 and not known:
                out.append(memberless(ErrorCode.group_id_not_found, "Dead", f"Group {group_id} not found."))
            else:
                out.append(memberless(ErrorCode.none, "Empty" if known else "Dead"))
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
    broker: GroupsBroker, group_cls: type[Entity], member_cls: type[Entity], group: ConsumerGroup, ops: int
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


def delete_groups(
    broker: GroupsBroker, ctx: RequestContext, request: DeleteGroupsRequest
) -> Answer[DeleteGroupsResponse]:
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
                if broker.shares.known(group_id):
                    await broker.shares.delete_group(group_id)
                else:
                    coordinator.check_deletable(group_id)
                    # Its offsets pending in open transactions first, so that none committing
                    # meanwhile brings the group back after its committed offsets are gone.
                    await broker.transactions.forget_group(group_id)
                    await coordinator.delete_group(group_id)
                error = ErrorCode.none
            except KafkaError as e:
                error = e.code
            results.append(build(result_cls, group_id=group_id, error_code=error))
        return build(cls, throttle_time=0, results=tuple(results))

    return run()
