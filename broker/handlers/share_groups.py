"""The share group APIs' membership half (KIP-932): ShareGroupHeartbeat and
ShareGroupDescribe.  The behaviour lives in broker/share/."""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Protocol

from broker.cooperative import STEP
from broker.handlers.base import NOT_REQUESTED_OPERATIONS, Answer, Messages, RequestContext, Serial
from broker.handlers.group_describe import assignment_describer, heartbeat_assignment, undescribed
from broker.handlers.services import HasGroupCoordinator, HasSecurity, HasShareCoordinator, HasStore
from broker.handlers.stepped import Steps, stepped
from broker.protocol.codec import build, nested
from broker.protocol.errors import ErrorCode, KafkaError
from broker.security.acls import Operation, ResourceType
from broker.share.group import ShareGroup, ShareHeartbeat

if TYPE_CHECKING:
    from kio.static.protocol import Entity

    from broker.handlers.kio_types_share import (
        ShareGroupDescribeRequest,
        ShareGroupDescribeResponse,
        ShareGroupHeartbeatRequest,
        ShareGroupHeartbeatResponse,
    )

HEARTBEAT: Messages[ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse] = Messages(76, 1, 1)
DESCRIBE: Messages[ShareGroupDescribeRequest, ShareGroupDescribeResponse] = Messages(77, 1, 1)
ASSIGNOR = "simple"


class ShareGroupsBroker(HasSecurity, HasStore, HasGroupCoordinator, HasShareCoordinator, Protocol):
    """What the share group requests use of the broker."""


def heartbeat(
    broker: ShareGroupsBroker, ctx: RequestContext, request: ShareGroupHeartbeatRequest
) -> Answer[ShareGroupHeartbeatResponse] | Serial:
    """A member may subscribe to 100,000 topic names: each distinct name is authorized and
    looked up a step at a time; the group then changes in one step, which finds the names
    looked up already."""
    cls = HEARTBEAT.response(ctx.api_version)
    shares = broker.shares

    def failed(error: ErrorCode, message: str | None = None) -> ShareGroupHeartbeatResponse:
        return build(
            cls, throttle_time=0, error_code=error, error_message=message, member_epoch=-1, heartbeat_interval=0
        )

    if not request.group_id:
        return failed(ErrorCode.invalid_group_id, "GroupId can't be empty.")
    if not broker.security.group(ctx.session, Operation.READ, request.group_id):
        return failed(ErrorCode.group_authorization_failed)
    names = request.subscribed_topic_names
    distinct = set(names) if names is not None else set()

    def describable(name: str) -> bool:
        return broker.security.topic(ctx.session, Operation.DESCRIBE, name)

    def lookup(name: str) -> tuple[uuid.UUID, int] | None:
        topic = broker.store.get(name)
        if topic is None or topic.internal or not describable(name):
            return None
        return topic.topic_id, topic.partitions

    looked_up: dict[str, tuple[uuid.UUID, int] | None] = {}

    def resolve(name: str) -> tuple[uuid.UUID, int] | None:
        # The request's names as looked up by its steps (a topic created or deleted meanwhile
        # is seen at the group's next heartbeat, as a change of the metadata is); others now.
        return looked_up[name] if name in looked_up else lookup(name)

    def work() -> Steps[Answer[ShareGroupHeartbeatResponse]]:
        denied = []
        for n in distinct:
            yield
            if not describable(n):
                denied.append(n)
        if denied:
            return failed(ErrorCode.topic_authorization_failed, f"Unauthorized topics: {', '.join(sorted(denied))}.")
        if len(distinct) > STEP:
            for n in distinct:
                yield
                looked_up[n] = lookup(n)
            ordered = yield from _sorted_in_steps(distinct)
            return beat(ordered)
        return beat(None)

    def beat(ordered: tuple[str, ...] | None) -> Answer[ShareGroupHeartbeatResponse]:
        heartbeat = ShareHeartbeat(
            group_id=request.group_id,
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            rack_id=request.rack_id,
            topic_names=ordered if ordered is not None else tuple(names) if names is not None else None,
            client_id=ctx.client_id or "",
            client_host=ctx.client_host,
            names_sorted=ordered is not None,
        )
        try:
            result, durable = shares.heartbeat(heartbeat, resolve)
        except KafkaError as e:
            return failed(e.code, e.message)
        assignment = heartbeat_assignment(cls, result.assignment)
        response = build(
            cls,
            throttle_time=0,
            error_code=ErrorCode.none,
            member_id=request.member_id,
            member_epoch=result.member_epoch,
            heartbeat_interval=shares.settings(request.group_id).heartbeat_interval_ms,
            assignment=assignment,
        )
        if durable is None:
            return response

        async def answer() -> ShareGroupHeartbeatResponse:
            try:
                await durable
            except OSError as e:
                return failed(ErrorCode.coordinator_not_available, f"the group's state could not be stored: {e}")
            return response

        return answer()

    return stepped(work(), 2 * len(distinct))


def _sorted_in_steps(names: Collection[str]) -> Steps[tuple[str, ...]]:
    """`names` sorted, a step at a time: runs of STEP sorted apart, then merged, one name a
    step (sorting 100,000 names at once held the loop 16 ms of the group's one step)."""
    items: list[str] = list(names)
    runs = []
    for start in range(0, len(items), STEP):
        yield
        runs.append(sorted(items[start : start + STEP]))
    ordered = []
    for name in heapq.merge(*runs):
        yield
        ordered.append(name)
    return tuple(ordered)


def describe(
    broker: ShareGroupsBroker, ctx: RequestContext, request: ShareGroupDescribeRequest
) -> ShareGroupDescribeResponse:
    cls = DESCRIBE.response(ctx.api_version)
    group_cls = nested(cls, "DescribedGroup")
    out = []
    for group_id in request.group_ids:

        def failed(error: ErrorCode, message: str | None = None, group_id: str = group_id) -> Entity:
            return undescribed(cls, group_id, error, message)

        if not group_id:
            out.append(failed(ErrorCode.invalid_group_id))
            continue
        if not broker.security.group(ctx.session, Operation.DESCRIBE, group_id):
            out.append(failed(ErrorCode.group_authorization_failed))
            continue
        group = broker.shares.groups.get(group_id)
        if group is None:
            known = group_id in broker.coordinator.groups or group_id in broker.coordinator.consumer.groups
            message = f"Group {group_id} is not a share group." if known else f"Group {group_id} not found."
            out.append(failed(ErrorCode.group_id_not_found, message))
            continue
        ops = (
            broker.security.operations(ctx.session, ResourceType.GROUP, group_id)
            if request.include_authorized_operations
            else NOT_REQUESTED_OPERATIONS
        )
        out.append(
            build(
                group_cls,
                error_code=ErrorCode.none,
                group_id=group_id,
                group_state=group.state.value,
                group_epoch=group.epoch,
                assignment_epoch=group.assignment_epoch,
                assignor_name=ASSIGNOR,
                members=tuple(_members(broker, cls, group)),
                authorized_operations=ops,
            )
        )
    return build(cls, throttle_time=0, groups=tuple(out))


def _members(broker: ShareGroupsBroker, cls: type[Entity], group: ShareGroup) -> Iterable[Entity]:
    member_cls = nested(cls, "Member")
    described = assignment_describer(broker, cls)

    for m in group.members.values():
        yield build(
            member_cls,
            member_id=m.member_id,
            rack_id=m.rack_id,
            member_epoch=m.epoch,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=m.topic_names,
            assignment=described(m.assigned),
        )
