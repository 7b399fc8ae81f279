"""CreateAcls, DescribeAcls and DeleteAcls (v1-3), with Kafka's checks and error codes.

Creating and deleting need ALTER on the cluster, describing needs DESCRIBE; without an
authorizer configured they answer SECURITY_DISABLED.  Changes are fsynced in the metadata
log before they are acknowledged and apply to the next request of every connection.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import IntEnum
from typing import TYPE_CHECKING, Protocol, TypeVar

from kio.static.protocol import Entity

from broker.cooperative import WorkSteps, each
from broker.handlers.base import Messages, RequestContext
from broker.handlers.services import HasSecurity, MetadataDurability
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


class AclsBroker(HasSecurity, MetadataDurability, Protocol):
    """What the ACL requests use of the broker."""


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


class _CreationFields(Protocol):
    """One CreateAcls entry (v1+)."""

    @property
    def resource_type(self) -> int: ...

    @property
    def resource_name(self) -> str: ...

    @property
    def resource_pattern_type(self) -> int: ...

    @property
    def principal(self) -> str: ...

    @property
    def host(self) -> str: ...

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


def _refusal(broker: AclsBroker, ctx: RequestContext, op: Operation) -> tuple[ErrorCode, str] | None:
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


async def create_acls(broker: AclsBroker, ctx: RequestContext, request: CreateAclsRequest) -> CreateAclsResponse:
    """As Kafka, the valid ACLs are added in one metadata batch, durable before the answer.
    Each entry is checked on its own, and against the ACLs there already, a step at a time,
    the loop free between steps; the batch of those still missing is then written in one go."""
    cls = CREATE_ACLS.response(ctx.api_version)
    refused = _refusal(broker, ctx, Operation.ALTER)
    if refused is not None:
        return await _created(cls, [refused] * len(request.creations))
    outcomes: list[tuple[ErrorCode, str | None]] = []
    missing: dict[AclBinding, None] = {}  # valid, not there yet, each once
    existing = broker.security.store.acls
    creations: Sequence[_CreationFields] = request.creations
    async for c in each(creations):
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
        if binding not in existing:
            missing[binding] = None
        outcomes.append((ErrorCode.none, None))
    if missing:  # `add_acls` skips any another request added meanwhile
        added = broker.security.store.add_acls(list(missing))
        broker.security.acls_changed(added=added)
        await broker.sync_metadata()
    return await _created(cls, outcomes)


async def _created(cls: type[CreateAclsResponse], outcomes: list[tuple[ErrorCode, str | None]]) -> CreateAclsResponse:
    """One result per entry; alike outcomes share one (immutable) result, which spares the
    allocator, and the collector after it, 100,000 alike objects."""
    result = nested(cls, "AclCreationResult")
    alike: dict[tuple[ErrorCode, str | None], Entity] = {}
    results = []
    async for outcome in each(outcomes):
        built = alike.get(outcome)
        if built is None:
            built = alike[outcome] = build(result, error_code=outcome[0], error_message=outcome[1])
        results.append(built)
    return build(cls, throttle_time=0, results=tuple(results))


def describe_acls(broker: AclsBroker, ctx: RequestContext, request: DescribeAclsRequest) -> DescribeAclsResponse:
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


async def delete_acls(broker: AclsBroker, ctx: RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse:
    """As Kafka, every filter is matched against the same ACLs (one filter does not hide from
    the next what it deletes), and what they match is removed in one metadata batch, durable
    before the answer.  The filters are read, then matched, a step at a time, the loop free
    between steps, against a copy of the ACLs taken once they are read; should the ACLs
    change meanwhile, they are matched again, in one go, against the ACLs as they are then,
    before anything is removed."""
    cls = DELETE_ACLS.response(ctx.api_version)
    refused = _refusal(broker, ctx, Operation.ALTER)
    if refused is not None:
        return await _deleted(cls, [refused] * len(request.filters))
    filters: list[AclFilter | InvalidAcl] = []
    asked: Sequence[_FilterFields] = request.filters
    async for f in each(asked):
        acl_filter = _filter(f)
        try:
            acl_filter.validate()
        except InvalidAcl as e:
            filters.append(e)
            continue
        filters.append(acl_filter)
    store = broker.security.store
    before = frozenset(store.acls)
    matched = await _matched(filters, _AclsByName(store.acls))
    if store.acls != before:  # changed by another request while this one was matching
        matched = _matched_now(filters, _AclsByName(store.acls))
    doomed = [b for found in matched if not isinstance(found, InvalidAcl) for b in found]
    if doomed:
        broker.security.acls_changed(removed=store.remove_acls(doomed))
        await broker.sync_metadata()
    return await _deleted(cls, matched)


_Matched = list[AclBinding] | InvalidAcl


class _AclsByName:
    """ACLs in the store's order, and those of each resource name, for filters naming one."""

    def __init__(self, acls: Iterable[AclBinding]) -> None:
        self.every = list(acls)
        self.by_name: dict[str, list[AclBinding]] = {}
        for b in self.every:
            self.by_name.setdefault(b.name, []).append(b)

    def matching(self, acl_filter: AclFilter) -> list[AclBinding]:
        """What `acl_filter` matches, in the store's order.  A filter that names a resource and
        is not MATCH only matches ACLs of that very name; others are tried on every ACL."""
        candidates = self.every
        if acl_filter.name is not None and acl_filter.pattern != PatternType.MATCH:
            candidates = self.by_name.get(acl_filter.name, [])
        return [b for b in candidates if acl_filter.matches(b)]


async def _matched(filters: list[AclFilter | InvalidAcl], acls: _AclsByName) -> list[_Matched]:
    steps = WorkSteps()
    matched: list[_Matched] = []
    for f in filters:
        found = f if isinstance(f, InvalidAcl) else acls.matching(f)
        matched.append(found)
        await steps.done(1 + (0 if isinstance(found, InvalidAcl) else len(found)))
    return matched


def _matched_now(filters: list[AclFilter | InvalidAcl], acls: _AclsByName) -> list[_Matched]:
    return [f if isinstance(f, InvalidAcl) else acls.matching(f) for f in filters]


async def _deleted(
    cls: type[DeleteAclsResponse], matched: Sequence[_Matched | tuple[ErrorCode, str]]
) -> DeleteAclsResponse:
    """Each filter's result: refused, invalid, or the ACLs it matched (weighed by how many)."""
    filter_result, matching = nested(cls, "DeleteAclsFilterResult"), nested(cls, "DeleteAclsMatchingAcl")
    steps = WorkSteps()
    results = []
    failed: dict[tuple[ErrorCode, str], Entity] = {}  # alike failures share one result
    for found in matched:
        if isinstance(found, tuple | InvalidAcl):
            error = found if isinstance(found, tuple) else (ErrorCode.invalid_request, str(found))
            built = failed.get(error)
            if built is None:
                built = failed[error] = build(
                    filter_result, error_code=error[0], error_message=error[1], matching_acls=()
                )
            results.append(built)
        else:
            results.append(
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
        await steps.done(1 + (len(found) if isinstance(found, list) else 0))
    return build(cls, throttle_time=0, filter_results=tuple(results))
