"""The classic consumer-group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups and
OffsetDelete.  The protocol glue lives here; the behaviour in broker/coordinator."""

from __future__ import annotations

from typing import Any

from broker.coordinator.coordinator import GroupCoordinator, JoinRequest
from broker.coordinator.group import GroupState
from broker.core import Broker
from broker.handlers.base import NOT_REQUESTED_OPERATIONS
from broker.protocol.codec import RequestHeader, build, nested, response_type, timedelta_ms
from broker.protocol.errors import ErrorCode, KafkaError
from broker.security.acls import Operation, ResourceType

FIND_COORDINATOR, JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP = 10, 11, 14, 12, 13
OFFSET_COMMIT, OFFSET_FETCH, LIST_GROUPS, DESCRIBE_GROUPS, DELETE_GROUPS, OFFSET_DELETE = 8, 9, 16, 15, 42, 47
GROUP_KEY, TRANSACTION_KEY = 0, 1
# GROUP resource operations: READ, DELETE, DESCRIBE.


def _may(broker: Broker, header: RequestHeader, op: Operation, group_id: str) -> bool:
    return broker.security.group(header.session, op, group_id)


def _coordinator(broker: Broker) -> GroupCoordinator:
    coordinator = broker.coordinator
    assert coordinator is not None
    return coordinator


# --- FindCoordinator ----------------------------------------------------------------


def find_coordinator(broker: Broker, header: RequestHeader, request: Any) -> Any:
    cls = response_type(FIND_COORDINATOR, header.api_version)
    host, port = broker.endpoint(header)

    def answer(key: str, key_type: int) -> tuple[ErrorCode, str | None]:
        if key_type == TRANSACTION_KEY:
            if not key:
                return ErrorCode.invalid_request, "the transactional id is empty"
            if not broker.security.allowed(header.session, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
                return ErrorCode.transactional_id_authorization_failed, f"DESCRIBE on transactional id {key} denied"
            return ErrorCode.none, None
        if key_type != GROUP_KEY:
            return ErrorCode.invalid_request, f"unknown coordinator key type {key_type}"
        if not key:
            return ErrorCode.invalid_group_id, "the group id is empty"
        if not _may(broker, header, Operation.DESCRIBE, key):
            return ErrorCode.group_authorization_failed, f"DESCRIBE on group {key} denied"
        return ErrorCode.none, None

    if header.api_version >= 4:
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
    error, message = answer(request.key, getattr(request, "key_type", GROUP_KEY))
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


def join_group(broker: Broker, header: RequestHeader, request: Any) -> Any:
    cls = response_type(JOIN_GROUP, header.api_version)
    member_cls = nested(cls, "JoinGroupResponseMember")
    coordinator = _coordinator(broker)

    def fail(code: ErrorCode, member_id: str = "") -> Any:
        return build(
            cls,
            throttle_time=0,
            error_code=code,
            generation_id=-1,
            protocol_type=None,
            protocol_name="" if header.api_version < 7 else None,
            leader="",
            skip_assignment=False,
            member_id=member_id,
            members=(),
        )

    if not _may(broker, header, Operation.READ, request.group_id):
        return fail(ErrorCode.group_authorization_failed, request.member_id or "")

    async def run() -> Any:
        try:
            result = await coordinator.join(
                JoinRequest(
                    group_id=request.group_id,
                    member_id=request.member_id or "",
                    group_instance_id=getattr(request, "group_instance_id", None),
                    client_id=header.client_id or "",
                    client_host=header.client_host,
                    session_timeout_ms=timedelta_ms(request.session_timeout),
                    rebalance_timeout_ms=timedelta_ms(getattr(request, "rebalance_timeout", -1)),
                    protocol_type=request.protocol_type,
                    protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
                    require_known_member_id=header.api_version >= 4,
                )
            )
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


def sync_group(broker: Broker, header: RequestHeader, request: Any) -> Any:
    cls = response_type(SYNC_GROUP, header.api_version)
    coordinator = _coordinator(broker)

    async def run() -> Any:
        try:
            if not _may(broker, header, Operation.READ, request.group_id):
                raise KafkaError(ErrorCode.group_authorization_failed)
            protocol_type, protocol_name, assignment = await coordinator.sync_group(
                group_id=request.group_id,
                generation=request.generation_id,
                member_id=request.member_id,
                group_instance_id=getattr(request, "group_instance_id", None),
                protocol_type=getattr(request, "protocol_type", None),
                protocol_name=getattr(request, "protocol_name", None),
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


def heartbeat(broker: Broker, header: RequestHeader, request: Any) -> Any:
    cls = response_type(HEARTBEAT, header.api_version)
    try:
        if not _may(broker, header, Operation.READ, request.group_id):
            raise KafkaError(ErrorCode.group_authorization_failed)
        _coordinator(broker).heartbeat(
            request.group_id, request.generation_id, request.member_id, getattr(request, "group_instance_id", None)
        )
        error = ErrorCode.none
    except KafkaError as e:
        error = e.code
    return build(cls, throttle_time=0, error_code=error)


def leave_group(broker: Broker, header: RequestHeader, request: Any) -> Any:
    cls = response_type(LEAVE_GROUP, header.api_version)
    coordinator = _coordinator(broker)
    if not _may(broker, header, Operation.READ, request.group_id):
        return build(cls, throttle_time=0, error_code=ErrorCode.group_authorization_failed, members=())
    if header.api_version < 3:
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


def offset_commit(broker: Broker, header: RequestHeader, request: Any) -> Any:
    cls = response_type(OFFSET_COMMIT, header.api_version)
    topic_cls = nested(cls, "OffsetCommitResponseTopic")
    part_cls = nested(cls, "OffsetCommitResponsePartition")
    coordinator = _coordinator(broker)
    generation = getattr(request, "generation_id_or_member_epoch", getattr(request, "generation_id", -1))
    top_error = ErrorCode.none
    try:
        if not _may(broker, header, Operation.READ, request.group_id):
            raise KafkaError(ErrorCode.group_authorization_failed)
        coordinator.validate_commit(
            request.group_id, generation, request.member_id or "", getattr(request, "group_instance_id", None)
        )
    except KafkaError as e:
        top_error = e.code
        if top_error == ErrorCode.group_id_not_found and header.api_version < 9:
            top_error = ErrorCode.illegal_generation  # Kafka's answer before OffsetCommit v9
    accepted: dict[tuple[str, int], tuple[int, int, str]] = {}
    results: list[tuple[str, list[tuple[int, ErrorCode]]]] = []
    for topic in request.topics:
        parts = []
        readable = broker.security.topic(header.session, Operation.READ, topic.name)
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
                    epoch = getattr(p, "committed_leader_epoch", -1)
                    accepted[(topic.name, p.partition_index)] = (p.committed_offset, epoch, metadata)
            parts.append((p.partition_index, error))
        results.append((topic.name, parts))

    def respond() -> Any:
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

    async def durable() -> Any:
        await coordinator.commit(request.group_id, accepted)
        return respond()

    return durable() if accepted else respond()


def offset_fetch(broker: Broker, header: RequestHeader, request: Any) -> Any:
    version = header.api_version
    cls = response_type(OFFSET_FETCH, version)
    coordinator = _coordinator(broker)

    def group_result(group_id: str, topics: Any, topic_cls: type, part_cls: type) -> tuple[ErrorCode, tuple[Any, ...]]:
        if not group_id:
            return ErrorCode.invalid_group_id, ()
        if not _may(broker, header, Operation.DESCRIBE, group_id):
            return ErrorCode.group_authorization_failed, ()
        committed = coordinator.committed(group_id)
        # require_stable (v7+, KIP-447): a partition whose offset waits in an open transaction
        # answers UNSTABLE_OFFSET_COMMIT, and the client asks again once the transaction ended.
        unstable = broker.transactions.pending_offsets(group_id) if getattr(request, "require_stable", False) else set()
        described = broker.security.topic
        if topics is None:
            wanted: dict[str, list[int]] = {}
            for t, p in sorted(committed):
                if described(header.session, Operation.DESCRIBE, t):  # the rest are left out, as in Kafka
                    wanted.setdefault(t, []).append(p)
        else:
            wanted = {t.name: list(t.partition_indexes) for t in topics}
        out = []
        for name, partitions in wanted.items():
            parts = []
            allowed = described(header.session, Operation.DESCRIBE, name)
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

    if version >= 8:
        group_cls = nested(cls, "OffsetFetchResponseGroup")
        topic_cls = nested(cls, "OffsetFetchResponseTopics")
        part_cls = nested(cls, "OffsetFetchResponsePartitions")
        groups = []
        for g in request.groups:
            error, topics = group_result(g.group_id, g.topics, topic_cls, part_cls)
            groups.append(build(group_cls, group_id=g.group_id, topics=topics, error_code=error))
        return build(cls, throttle_time=0, groups=tuple(groups))
    topic_cls = nested(cls, "OffsetFetchResponseTopic")
    part_cls = nested(cls, "OffsetFetchResponsePartition")
    error, topics = group_result(request.group_id, request.topics, topic_cls, part_cls)
    return build(cls, throttle_time=0, topics=topics, error_code=error)


def offset_delete(broker: Broker, header: RequestHeader, request: Any) -> Any:
    cls = response_type(OFFSET_DELETE, header.api_version)
    topic_cls = nested(cls, "OffsetDeleteResponseTopic")
    part_cls = nested(cls, "OffsetDeleteResponsePartition")
    coordinator = _coordinator(broker)
    group_id = request.group_id
    group = coordinator.groups.get(group_id)
    if not group_id:
        return build(cls, error_code=ErrorCode.invalid_group_id, throttle_time=0, topics=())
    if not _may(broker, header, Operation.DELETE, group_id):
        return build(cls, error_code=ErrorCode.group_authorization_failed, throttle_time=0, topics=())
    if group is None and group_id not in coordinator.offsets:
        return build(cls, error_code=ErrorCode.group_id_not_found, throttle_time=0, topics=())
    subscribed = group.subscribed_topics() if group is not None and group.members else set()
    deletable: list[tuple[str, int]] = []
    topics = []
    for topic in request.topics:
        parts = []
        readable = broker.security.topic(header.session, Operation.READ, topic.name)
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

    async def durable() -> Any:
        await coordinator.delete_offsets(group_id, deletable)
        return response

    return durable()


# --- ListGroups / DescribeGroups / DeleteGroups ----------------------------------------


def list_groups(broker: Broker, header: RequestHeader, request: Any) -> Any:
    cls = response_type(LIST_GROUPS, header.api_version)
    entry_cls = nested(cls, "ListedGroup")
    coordinator = _coordinator(broker)
    states = {s.lower() for s in (getattr(request, "states_filter", None) or ())}
    types = {t.lower() for t in (getattr(request, "types_filter", None) or ())}
    entries = []
    # DESCRIBE on the cluster lists every group; otherwise those the principal may describe.
    everything = broker.security.cluster(header.session, Operation.DESCRIBE)
    for group_id in coordinator.known_groups():
        if not everything and not _may(broker, header, Operation.DESCRIBE, group_id):
            continue
        group = coordinator.groups.get(group_id)
        state = group.state.value if group else GroupState.EMPTY.value
        if states and state.lower() not in states:
            continue
        if types and "classic" not in types:
            continue
        entries.append(
            build(
                entry_cls,
                group_id=group_id,
                protocol_type=(group.protocol_type if group else None) or "",
                group_state=state,
                group_type="classic",
            )
        )
    return build(cls, throttle_time=0, error_code=ErrorCode.none, groups=tuple(entries))


def describe_groups(broker: Broker, header: RequestHeader, request: Any) -> Any:
    cls = response_type(DESCRIBE_GROUPS, header.api_version)
    group_cls = nested(cls, "DescribedGroup")
    member_cls = nested(cls, "DescribedGroupMember")
    coordinator = _coordinator(broker)
    requested = getattr(request, "include_authorized_operations", False)
    out = []
    for group_id in request.groups:
        group = coordinator.groups.get(group_id)
        ops = (
            broker.security.operations(header.session, ResourceType.GROUP, group_id)
            if requested
            else NOT_REQUESTED_OPERATIONS
        )

        def memberless(error: ErrorCode, state: str, group_id: str = group_id, ops: int = ops) -> Any:
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
        if not _may(broker, header, Operation.DESCRIBE, group_id):
            out.append(memberless(ErrorCode.group_authorization_failed, ""))
            continue
        if group is None:
            known = group_id in coordinator.offsets
            # v6 reports a missing group as GROUP_ID_NOT_FOUND; earlier versions as Dead.
            error = ErrorCode.group_id_not_found if header.api_version >= 6 and not known else ErrorCode.none
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


def delete_groups(broker: Broker, header: RequestHeader, request: Any) -> Any:
    cls = response_type(DELETE_GROUPS, header.api_version)
    result_cls = nested(cls, "DeletableGroupResult")
    coordinator = _coordinator(broker)

    async def run() -> Any:
        results = []
        for group_id in request.groups_names:
            try:
                if not group_id:
                    raise KafkaError(ErrorCode.invalid_group_id)
                if not _may(broker, header, Operation.DELETE, group_id):
                    raise KafkaError(ErrorCode.group_authorization_failed)
                await coordinator.delete_group(group_id)
                error = ErrorCode.none
            except KafkaError as e:
                error = e.code
            results.append(build(result_cls, group_id=group_id, error_code=error))
        return build(cls, throttle_time=0, results=tuple(results))

    return run()
