"""The consumer group protocol's APIs (KIP-848): ConsumerGroupHeartbeat and
ConsumerGroupDescribe.  The protocol glue lives here; the behaviour in
broker/coordinator/consumer_groups.py."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from broker.coordinator.assignors import Assignment
from broker.coordinator.consumer_group import ConsumerGroup
from broker.coordinator.consumer_groups import Heartbeat
from broker.handlers.base import NOT_REQUESTED_OPERATIONS, Answer, Messages, RequestContext
from broker.handlers.group_describe import assignment_describer, heartbeat_assignment, undescribed
from broker.handlers.services import HasGroupCoordinator, HasSecurity, HasStore
from broker.protocol.codec import build, nested, timedelta_ms
from broker.protocol.errors import ErrorCode, KafkaError
from broker.security.acls import Operation, ResourceType

if TYPE_CHECKING:
    from kio.schema.consumer_group_heartbeat import v1 as consumer_group_heartbeat_v1
    from kio.static.protocol import Entity
    from typing_extensions import TypeIs

    from broker.handlers.kio_types import (
        ConsumerGroupDescribeRequest,
        ConsumerGroupDescribeResponse,
        ConsumerGroupHeartbeatRequest,
        ConsumerGroupHeartbeatResponse,
    )

HEARTBEAT: Messages[ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse] = Messages(68, 0, 1)
DESCRIBE: Messages[ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse] = Messages(69, 0, 1)
CLASSIC_MEMBER, CONSUMER_MEMBER = 0, 1  # ConsumerGroupDescribe v1's member types


class ConsumerGroupsBroker(HasSecurity, HasStore, HasGroupCoordinator, Protocol):
    """What the consumer group (KIP-848) requests use of the broker."""


def heartbeat(
    broker: ConsumerGroupsBroker, ctx: RequestContext, request: ConsumerGroupHeartbeatRequest
) -> Answer[ConsumerGroupHeartbeatResponse]:
    cls = HEARTBEAT.response(ctx.api_version)
    coordinator = broker.coordinator

    def failed(error: ErrorCode, message: str | None = None) -> ConsumerGroupHeartbeatResponse:
        return build(
            cls, throttle_time=0, error_code=error, error_message=message, member_epoch=-1, heartbeat_interval=0
        )

    if not broker.security.group(ctx.session, Operation.READ, request.group_id):
        return failed(ErrorCode.group_authorization_failed)
    names = request.subscribed_topic_names
    if names is not None:
        denied = sorted(n for n in set(names) if not broker.security.topic(ctx.session, Operation.DESCRIBE, n))
        if denied:
            return failed(ErrorCode.topic_authorization_failed, f"Unauthorized topics: {', '.join(denied)}.")
    try:
        result, durable = coordinator.consumer_heartbeat(_heartbeat(broker, ctx, request))
    except KafkaError as e:
        return failed(e.code, e.message)
    assignment = heartbeat_assignment(cls, result.assignment)
    response = build(
        cls,
        throttle_time=0,
        error_code=ErrorCode.none,
        member_id=result.member_id,
        member_epoch=result.member_epoch,
        heartbeat_interval=coordinator.consumer.heartbeat_interval_ms(request.group_id),
        assignment=assignment,
    )
    if durable is None:
        return response

    async def answer() -> ConsumerGroupHeartbeatResponse:
        try:
            await durable
        except OSError as e:
            return failed(ErrorCode.coordinator_not_available, f"the group's state could not be stored: {e}")
        return response

    return answer()


def _with_regex(
    request: ConsumerGroupHeartbeatRequest,
) -> TypeIs[consumer_group_heartbeat_v1.ConsumerGroupHeartbeatRequest]:
    return request.__version__ >= 1  # v1 added SubscribedTopicRegex


def _heartbeat(broker: ConsumerGroupsBroker, ctx: RequestContext, request: ConsumerGroupHeartbeatRequest) -> Heartbeat:
    owned = None
    if request.topic_partitions is not None:
        owned = _assignment((tp.topic_id, tp.partitions) for tp in request.topic_partitions)
    names = request.subscribed_topic_names
    return Heartbeat(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=timedelta_ms(request.rebalance_timeout),
        topic_names=tuple(names) if names is not None else None,
        topic_regex=request.subscribed_topic_regex if _with_regex(request) else None,
        server_assignor=request.server_assignor,
        owned=owned,
        client_id=ctx.client_id or "",
        client_host=ctx.client_host,
        generated_member_id=ctx.api_version == 0,  # v1: the client names itself (KIP-1082)
        may_describe=lambda topic: broker.security.topic(ctx.session, Operation.DESCRIBE, topic),
    )


def _assignment(pairs: Iterable[tuple[uuid.UUID | None, Iterable[int]]]) -> Assignment:
    out: dict[uuid.UUID, frozenset[int]] = {}
    for topic, parts in pairs:
        if topic is None:
            raise KafkaError(ErrorCode.invalid_request, "a topic id in TopicPartitions is null")
        out[topic] = out.get(topic, frozenset()) | frozenset(parts)
    return out


def describe(
    broker: ConsumerGroupsBroker, ctx: RequestContext, request: ConsumerGroupDescribeRequest
) -> ConsumerGroupDescribeResponse:
    cls = DESCRIBE.response(ctx.api_version)
    group_cls = nested(cls, "DescribedGroup")
    coordinator = broker.coordinator
    out = []
    for group_id in request.group_ids:
        ops = (
            broker.security.operations(ctx.session, ResourceType.GROUP, group_id)
            if request.include_authorized_operations
            else NOT_REQUESTED_OPERATIONS
        )

        def failed(error: ErrorCode, message: str | None = None, group_id: str = group_id) -> Entity:
            return undescribed(cls, group_id, error, message)

        if not group_id:
            out.append(failed(ErrorCode.invalid_group_id))
            continue
        if not broker.security.group(ctx.session, Operation.DESCRIBE, group_id):
            out.append(failed(ErrorCode.group_authorization_failed))
            continue
        group = coordinator.consumer.groups.get(group_id)
        if group is None:
            # Admin clients then describe the group with DescribeGroups (a classic group).
            message = (
                f"Group {group_id} is not a consumer group."
                if group_id in coordinator.groups
                else f"Group {group_id} not found."
            )
            out.append(failed(ErrorCode.group_id_not_found, message))
            continue
        out.append(
            build(
                group_cls,
                error_code=ErrorCode.none,
                group_id=group_id,
                group_state=group.state.value,
                group_epoch=group.epoch,
                assignment_epoch=group.assignment_epoch,
                assignor_name=coordinator.consumer.assignor_of(group),
                members=tuple(_members(broker, cls, group)),
                authorized_operations=ops,
            )
        )
    return build(cls, throttle_time=0, groups=tuple(out))


def _members(broker: ConsumerGroupsBroker, cls: type[Entity], group: ConsumerGroup) -> Iterable[Entity]:
    member_cls = nested(cls, "Member")
    described = assignment_describer(broker, cls)

    for m in group.members.values():
        yield build(
            member_cls,
            member_id=m.member_id,
            instance_id=m.instance_id,
            rack_id=m.rack_id,
            member_epoch=m.epoch,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=m.topic_names,
            subscribed_topic_regex=m.topic_regex,
            assignment=described(m.assigned),
            target_assignment=described(group.target.get(m.member_id, {})),
            member_type=CLASSIC_MEMBER if m.classic is not None else CONSUMER_MEMBER,
        )
