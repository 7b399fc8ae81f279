"""DescribeClientQuotas and AlterClientQuotas (v0-v1), as `kafka-configs --entity-type
users|clients` uses them; what the quotas mean and how they are enforced is `broker.quotas`.

Describing needs DESCRIBE_CONFIGS on the cluster, altering ALTER_CONFIGS, as in Kafka.  A filter
component matches an entity's part exactly (match type 0), its default (1) or any named one
(2); `strict` keeps only entities with no other parts.  An alteration is checked whole before
anything is written: an entry with a bad entity, key or value fails with INVALID_REQUEST and
the others are applied (or, with `validate_only`, only checked).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from broker.cooperative import STEP, each
from broker.handlers.base import Messages, RequestContext
from broker.handlers.services import HasQuotas, HasSecurity
from broker.protocol.codec import build, nested
from broker.protocol.errors import ErrorCode
from broker.quotas import Entity, QuotaError, check_value, entity_of
from broker.security.acls import CLUSTER_NAME, Operation, ResourceType

if TYPE_CHECKING:
    from broker.handlers.kio_types import (
        AlterClientQuotasRequest,
        AlterClientQuotasResponse,
        DescribeClientQuotasRequest,
        DescribeClientQuotasResponse,
    )

DESCRIBE: Messages[DescribeClientQuotasRequest, DescribeClientQuotasResponse] = Messages(48, 0, 1)
ALTER: Messages[AlterClientQuotasRequest, AlterClientQuotasResponse] = Messages(49, 0, 1)

EXACT, DEFAULT, SPECIFIED = 0, 1, 2


class QuotasBroker(HasSecurity, HasQuotas, Protocol):
    """What the client quota requests use of the broker."""


class _Part(Protocol):
    """One component of an AlterClientQuotas entity."""

    @property
    def entity_type(self) -> str: ...

    @property
    def entity_name(self) -> str | None: ...


class _Op(Protocol):
    """One AlterClientQuotas key change."""

    @property
    def key(self) -> str: ...

    @property
    def value(self) -> float: ...

    @property
    def remove(self) -> bool: ...


class _Entry(Protocol):
    """One AlterClientQuotas entry."""

    @property
    def entity(self) -> Sequence[_Part]: ...

    @property
    def ops(self) -> Sequence[_Op]: ...


def _matches(entity: Entity, filters: list[tuple[str, int, str | None]], strict: bool) -> bool:
    parts = dict(entity)
    if strict and len(parts) != len(filters):
        return False
    for entity_type, match_type, match in filters:
        if entity_type not in parts:
            return False
        name = parts[entity_type]
        if match_type == EXACT and name != match:
            return False
        if match_type == DEFAULT and name is not None:
            return False
        if match_type == SPECIFIED and name is None:
            return False
    return True


def describe_client_quotas(
    broker: QuotasBroker, ctx: RequestContext, request: DescribeClientQuotasRequest
) -> DescribeClientQuotasResponse:
    cls = DESCRIBE.response(ctx.api_version)

    def failed(code: ErrorCode, message: str) -> DescribeClientQuotasResponse:
        return build(cls, throttle_time=0, error_code=code, error_message=message, entries=None)

    if not broker.security.allowed(ctx.session, Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        return failed(ErrorCode.cluster_authorization_failed, "DESCRIBE_CONFIGS on the cluster is required")
    filters = [(c.entity_type, int(c.match_type), c.match) for c in request.components]
    types = [t for t, _, _ in filters]
    if len(set(types)) != len(types):
        return failed(ErrorCode.invalid_request, f"an entity type is filtered twice: {types}")
    for entity_type, match_type, match in filters:
        if match_type not in (EXACT, DEFAULT, SPECIFIED):
            return failed(ErrorCode.invalid_request, f"unknown match type {match_type}")
        if match_type == EXACT and match is None:
            return failed(ErrorCode.invalid_request, f"an exact match of {entity_type} needs a name")
    entry_cls, entity_cls, value_cls = (nested(cls, n) for n in ("EntryData", "EntityData", "ValueData"))
    entries = [
        build(
            entry_cls,
            entity=tuple(build(entity_cls, entity_type=t, entity_name=n) for t, n in entity),
            values=tuple(build(value_cls, key=k, value=v) for k, v in sorted(values.items())),
        )
        for entity, values in sorted(broker.quotas.entities.items(), key=lambda item: repr(item[0]))
        if _matches(entity, filters, request.strict)
    ]
    return build(cls, throttle_time=0, error_code=ErrorCode.none, error_message=None, entries=tuple(entries))


async def alter_client_quotas(
    broker: QuotasBroker, ctx: RequestContext, request: AlterClientQuotasRequest
) -> AlterClientQuotasResponse:
    """Each entry is checked on its own (which reads nothing of the quotas set), a step at a
    time, the loop free between steps; the checked changes are then applied in one go."""
    cls = ALTER.response(ctx.api_version)
    entry_cls, entity_cls = nested(cls, "EntryData"), nested(cls, "EntityData")
    allowed = broker.security.allowed(ctx.session, Operation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME)
    results = []
    changes: list[tuple[Entity, dict[str, float | None]]] = []
    entries: Sequence[_Entry] = request.entries
    async for entry in each(entries, STEP // 2):  # an entry costs twice a typical one
        code, message = ErrorCode.none, None
        if not allowed:
            code, message = ErrorCode.cluster_authorization_failed, "ALTER_CONFIGS on the cluster is required"
        else:
            try:
                changes.append(_checked(entry))
            except QuotaError as e:
                code, message = ErrorCode.invalid_request, str(e)
        results.append(
            build(
                entry_cls,
                error_code=code,
                error_message=message,
                entity=tuple(
                    build(entity_cls, entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity
                ),
            )
        )
    if changes and not request.validate_only:
        broker.quotas.alter(changes)
    return build(cls, throttle_time=0, entries=tuple(results))


def _checked(entry: _Entry) -> tuple[Entity, dict[str, float | None]]:
    """An entry's entity and its keys' new values (None: removed), checked."""
    entity = entity_of((e.entity_type, e.entity_name) for e in entry.entity)
    ops: dict[str, float | None] = {}
    for op in entry.ops:
        if op.key in ops:
            raise QuotaError(f"configuration key {op.key} is altered twice")
        if not op.remove:
            check_value(entity, op.key, float(op.value))
        else:
            check_value(entity, op.key, 1.0)  # the key must exist
        ops[op.key] = None if op.remove else float(op.value)
    return entity, ops
