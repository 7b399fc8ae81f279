"""CreateAcls, DescribeAcls and DeleteAcls (v1-3), with Kafka's checks and error codes.

Creating and deleting need ALTER on the cluster, describing needs DESCRIBE; without an
authorizer configured they answer SECURITY_DISABLED.  Changes are fsynced in the metadata
log before they are acknowledged and apply to the next request of every connection.
"""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING, Protocol, TypeVar

from broker.core import Broker
from broker.handlers.base import Messages, RequestContext
from broker.protocol.codec import build, nested
from broker.protocol.errors import ErrorCode
from broker.security.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    InvalidAcl,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    validate_binding,
)

if TYPE_CHECKING:
    from broker.handlers.kio_types import (
        CreateAclsRequest,
        CreateAclsResponse,
        DeleteAclsRequest,
        DeleteAclsResponse,
        DescribeAclsRequest,
        DescribeAclsResponse,
    )

DESCRIBE_ACLS: Messages[DescribeAclsRequest, DescribeAclsResponse] = Messages(29, 1, 3)
CREATE_ACLS: Messages[CreateAclsRequest, CreateAclsResponse] = Messages(30, 1, 3)
DELETE_ACLS: Messages[DeleteAclsRequest, DeleteAclsResponse] = Messages(31, 1, 3)
_E = TypeVar("_E", bound=IntEnum)


class _FilterFields(Protocol):
    """An ACL filter as DescribeAcls and each DeleteAcls filter carry it (v1+)."""

    @property
    def resource_type_filter(self) -> int: ...

    @property
    def resource_name_filter(self) -> str | None: ...

    @property
    def pattern_type_filter(self) -> int: ...

    @property
    def principal_filter(self) -> str | None: ...

    @property
    def host_filter(self) -> str | None: ...

    @property
    def operation(self) -> int: ...

    @property
    def permission_type(self) -> int: ...


def _enum(kind: type[_E], value: int) -> _E:
    try:
        return kind(value)
    except ValueError:
        return kind(0)  # UNKNOWN


def _order(b: AclBinding) -> tuple[int, str, int, str, str, int, int]:
    return (b.resource_type, b.name, b.pattern, b.principal, b.host, b.operation, b.permission)


def _refusal(broker: Broker, ctx: RequestContext, op: Operation) -> tuple[ErrorCode, str] | None:
    security = broker.security
    if not security.enabled:
        return ErrorCode.security_disabled, "no authorizer is configured on the broker (authorizer.class.name)"
    if not security.allowed(ctx.session, op, ResourceType.CLUSTER, CLUSTER_NAME):
        return ErrorCode.cluster_authorization_failed, f"{op.name} on the cluster is required"
    return None


def _filter(f: _FilterFields) -> AclFilter:
    return AclFilter(
        _enum(ResourceType, f.resource_type_filter),
        f.resource_name_filter,
        _enum(PatternType, f.pattern_type_filter),
        f.principal_filter,
        f.host_filter,
        _enum(Operation, f.operation),
        _enum(Permission, f.permission_type),
    )


async def create_acls(broker: Broker, ctx: RequestContext, request: CreateAclsRequest) -> CreateAclsResponse:
    cls = CREATE_ACLS.response(ctx.api_version)
    result = nested(cls, "AclCreationResult")
    refused = _refusal(broker, ctx, Operation.ALTER)
    if refused is not None:
        results = [build(result, error_code=refused[0], error_message=refused[1]) for _ in request.creations]
        return build(cls, throttle_time=0, results=tuple(results))
    outcomes: list[tuple[ErrorCode, str | None]] = []
    valid: list[AclBinding] = []
    for c in request.creations:
        binding = AclBinding(
            _enum(ResourceType, c.resource_type),
            c.resource_name,
            _enum(PatternType, c.resource_pattern_type),
            c.principal,
            c.host,
            _enum(Operation, c.operation),
            _enum(Permission, c.permission_type),
        )
        try:
            validate_binding(binding)
        except InvalidAcl as e:
            outcomes.append((ErrorCode.invalid_request, str(e)))
            continue
        valid.append(binding)
        outcomes.append((ErrorCode.none, None))
    if valid:
        broker.security.store.add_acls(valid)
        broker.security.acls_changed()
        await broker.sync_metadata()
    results = [build(result, error_code=code, error_message=message) for code, message in outcomes]
    return build(cls, throttle_time=0, results=tuple(results))


def describe_acls(broker: Broker, ctx: RequestContext, request: DescribeAclsRequest) -> DescribeAclsResponse:
    cls = DESCRIBE_ACLS.response(ctx.api_version)
    refused = _refusal(broker, ctx, Operation.DESCRIBE)
    if refused is not None:
        return build(cls, throttle_time=0, error_code=refused[0], error_message=refused[1], resources=())
    acl_filter = _filter(request)
    try:
        acl_filter.validate()
    except InvalidAcl as e:
        return build(cls, throttle_time=0, error_code=ErrorCode.invalid_request, error_message=str(e), resources=())
    resource, description = nested(cls, "DescribeAclsResource"), nested(cls, "AclDescription")
    grouped: dict[tuple[int, str, int], list[AclBinding]] = {}
    for b in sorted(broker.security.store.acls, key=_order):
        if acl_filter.matches(b):
            grouped.setdefault((b.resource_type, b.name, b.pattern), []).append(b)
    resources = tuple(
        build(
            resource,
            resource_type=rtype,
            resource_name=name,
            pattern_type=pattern,
            acls=tuple(
                build(
                    description, principal=b.principal, host=b.host, operation=b.operation, permission_type=b.permission
                )
                for b in bindings
            ),
        )
        for (rtype, name, pattern), bindings in grouped.items()
    )
    return build(cls, throttle_time=0, error_code=ErrorCode.none, error_message=None, resources=resources)


async def delete_acls(broker: Broker, ctx: RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse:
    cls = DELETE_ACLS.response(ctx.api_version)
    filter_result, matching = nested(cls, "DeleteAclsFilterResult"), nested(cls, "DeleteAclsMatchingAcl")
    refused = _refusal(broker, ctx, Operation.ALTER)
    if refused is not None:
        results = [
            build(filter_result, error_code=refused[0], error_message=refused[1], matching_acls=())
            for _ in request.filters
        ]
        return build(cls, throttle_time=0, filter_results=tuple(results))
    store = broker.security.store
    out = []
    doomed: list[AclBinding] = []
    for f in request.filters:
        acl_filter = _filter(f)
        try:
            acl_filter.validate()
        except InvalidAcl as e:
            out.append(
                build(filter_result, error_code=ErrorCode.invalid_request, error_message=str(e), matching_acls=())
            )
            continue
        found = [b for b in store.acls if acl_filter.matches(b)]
        doomed.extend(found)
        out.append(
            build(
                filter_result,
                error_code=ErrorCode.none,
                error_message=None,
                matching_acls=tuple(
                    build(
                        matching,
                        error_code=ErrorCode.none,
                        error_message=None,
                        resource_type=b.resource_type,
                        resource_name=b.name,
                        pattern_type=b.pattern,
                        principal=b.principal,
                        host=b.host,
                        operation=b.operation,
                        permission_type=b.permission,
                    )
                    for b in found
                ),
            )
        )
    if doomed:
        store.remove_acls(doomed)
        broker.security.acls_changed()
        await broker.sync_metadata()
    return build(cls, throttle_time=0, filter_results=tuple(out))
