"""ACLs with the semantics of Kafka's StandardAuthorizer, sans-io.

A binding is (resource type, resource name, pattern type, principal, host, operation,
permission).  Deciding an action: super users may do anything; otherwise every binding on the
resource (literal name, literal `*`, or a prefix of the name) is considered; a matching DENY
wins; a matching ALLOW allows (READ, WRITE, DELETE and ALTER imply DESCRIBE, ALTER_CONFIGS
implies DESCRIBE_CONFIGS, ALL implies everything); with no binding on the resource at all
the answer is `allow.everyone.if.no.acl.found`; with bindings for others only, it is denied.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import IntEnum


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
ANONYMOUS = "User:ANONYMOUS"
_IMPLIES_DESCRIBE = frozenset({Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER})
_IMPLIES_DESCRIBE_CONFIGS = frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS})

# The operations each resource type has: Kafka reports authorized operations from these.
OPERATIONS_OF: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (
        Operation.READ,
        Operation.WRITE,
        Operation.CREATE,
        Operation.DELETE,
        Operation.ALTER,
        Operation.DESCRIBE,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE),
    ResourceType.CLUSTER: (
        Operation.CREATE,
        Operation.CLUSTER_ACTION,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
        Operation.IDEMPOTENT_WRITE,
        Operation.ALTER,
        Operation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE),
}


class InvalidAcl(ValueError):
    """A binding or filter Kafka would refuse with INVALID_REQUEST."""


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: ResourceType
    name: str
    pattern: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission
    # The enums' hashes are computed in Python: a set of 100,000 bindings hashed anew at each
    # lookup held the event loop for tenths of a second, so the hash is taken once.
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        fields = (int(self.resource_type), self.name, int(self.pattern), self.principal, self.host)
        object.__setattr__(self, "_hash", hash((*fields, int(self.operation), int(self.permission))))

    def __hash__(self) -> int:
        return self._hash

    def as_list(self) -> list[object]:
        return [
            int(self.resource_type),
            self.name,
            int(self.pattern),
            self.principal,
            self.host,
            int(self.operation),
            int(self.permission),
        ]

    @classmethod
    def from_list(cls, values: object) -> AclBinding:
        if not isinstance(values, list) or len(values) != 7:
            raise InvalidAcl("an ACL is a list of 7 values")
        rtype, name, pattern, principal, host, op, perm = values
        if not all(isinstance(v, int) for v in (rtype, pattern, op, perm)) or not all(
            isinstance(v, str) for v in (name, principal, host)
        ):
            raise InvalidAcl("ACL fields have the wrong types")
        try:
            binding = cls(
                ResourceType(rtype), name, PatternType(pattern), principal, host, Operation(op), Permission(perm)
            )
        except ValueError as e:
            raise InvalidAcl(str(e)) from None
        validate_binding(binding)
        return binding


def parse_principal(principal: str) -> tuple[str, str]:
    kind, sep, name = principal.partition(":")
    if not sep or not kind or not name:
        raise InvalidAcl(f"principal {principal!r} is not Type:name")
    return kind, name


def validate_binding(b: AclBinding) -> None:
    """Kafka's checks on a new ACL."""
    if b.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise InvalidAcl(f"invalid resource type {b.resource_type.name}")
    if b.pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidAcl(f"invalid pattern type {b.pattern.name}")
    if b.operation in (Operation.UNKNOWN, Operation.ANY):
        raise InvalidAcl(f"invalid operation {b.operation.name}")
    if b.permission not in (Permission.ALLOW, Permission.DENY):
        raise InvalidAcl(f"invalid permission type {b.permission.name}")
    if not b.name:
        raise InvalidAcl("resource name should not be empty")
    if b.resource_type == ResourceType.CLUSTER and b.name != CLUSTER_NAME:
        raise InvalidAcl(f"the only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    parse_principal(b.principal)
    if not b.host:
        raise InvalidAcl("host should not be empty (use * for any host)")


@dataclass(frozen=True, slots=True)
class AclFilter:
    """DescribeAcls / DeleteAcls filter: None fields and ANY values match anything; pattern
    MATCH matches every binding that would apply to the named resource."""

    resource_type: ResourceType
    name: str | None
    pattern: PatternType
    principal: str | None
    host: str | None
    operation: Operation
    permission: Permission

    def validate(self) -> None:
        if PatternType.UNKNOWN in (self.pattern,) or self.resource_type == ResourceType.UNKNOWN:
            raise InvalidAcl("unknown resource pattern filter")
        if self.operation == Operation.UNKNOWN or self.permission == Permission.UNKNOWN:
            raise InvalidAcl("unknown ACL entry filter")

    def matches(self, b: AclBinding) -> bool:
        return self._matches_pattern(b) and self._matches_entry(b)

    def _matches_pattern(self, b: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, b.resource_type):
            return False
        if self.pattern not in (PatternType.ANY, PatternType.MATCH) and self.pattern != b.pattern:
            return False
        if self.name is None:
            return True
        if self.pattern in (PatternType.ANY, b.pattern):
            return self.name == b.name
        if b.pattern == PatternType.LITERAL:
            return b.name in (self.name, WILDCARD)
        return self.name.startswith(b.name)

    def _matches_entry(self, b: AclBinding) -> bool:
        return (
            (self.principal is None or self.principal == b.principal)
            and (self.host is None or self.host == b.host)
            and (self.operation in (Operation.ANY, b.operation))
            and (self.permission in (Permission.ANY, b.permission))
        )


def _applies(b: AclBinding, principal: str, host: str, op: Operation) -> Permission | None:
    """ALLOW or DENY when `b` decides `op` for this principal and host, else None."""
    if b.principal not in (principal, WILDCARD_PRINCIPAL):
        return None
    if b.host not in (WILDCARD, host):
        return None
    if b.operation != Operation.ALL:
        if b.permission == Permission.ALLOW:
            if op == Operation.DESCRIBE:
                if b.operation not in _IMPLIES_DESCRIBE:
                    return None
            elif op == Operation.DESCRIBE_CONFIGS:
                if b.operation not in _IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif op != b.operation:
                return None
        elif op != b.operation:
            return None
    return b.permission


class AclIndex:
    """Bindings by resource type, for deciding actions; changed in place as ACLs come and go
    (rebuilding it for 100,000 ACLs at each change would cost the change's request tens of ms)."""

    def __init__(self, bindings: Iterable[AclBinding], super_users: frozenset[str], allow_if_no_acl: bool) -> None:
        self.by_type: dict[ResourceType, dict[AclBinding, None]] = {}
        self.add(bindings)
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl

    def add(self, bindings: Iterable[AclBinding]) -> None:
        for b in bindings:
            self.by_type.setdefault(b.resource_type, {})[b] = None

    def remove(self, bindings: Iterable[AclBinding]) -> None:
        for b in bindings:
            of_type = self.by_type.get(b.resource_type)
            if of_type is not None:
                of_type.pop(b, None)

    def authorize(self, principal: str, host: str, op: Operation, rtype: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        found = allowed = False
        for b in self.by_type.get(rtype, ()):
            if b.pattern == PatternType.LITERAL:
                if b.name not in (name, WILDCARD):
                    continue
            elif not name.startswith(b.name):
                continue
            found = True
            result = _applies(b, principal, host, op)
            if result == Permission.DENY:
                return False
            if result == Permission.ALLOW:
                allowed = True
        return allowed if found else self.allow_if_no_acl

    def authorize_any(self, principal: str, host: str, op: Operation, rtype: ResourceType) -> bool:
        """Kafka's authorizeByResourceType: may the principal do `op` on at least one
        resource of the type (an ALLOW not cancelled by a DENY)?"""
        if self.authorize(principal, host, op, rtype, "hardcode"):
            return True
        deny_literal: set[str] = set()
        deny_prefix: set[str] = set()
        allows: list[AclBinding] = []
        for b in self.by_type.get(rtype, ()):
            if b.principal not in (principal, WILDCARD_PRINCIPAL) or b.host not in (host, WILDCARD):
                continue
            if b.operation not in (op, Operation.ALL):
                continue
            if b.permission == Permission.DENY:
                if b.pattern == PatternType.LITERAL and b.name == WILDCARD:
                    return False
                (deny_literal if b.pattern == PatternType.LITERAL else deny_prefix).add(b.name)
            else:
                allows.append(b)
        for b in allows:
            if b.pattern == PatternType.LITERAL and b.name == WILDCARD:
                return True
            if any(b.name.startswith(p) for p in deny_prefix):
                continue
            if b.pattern == PatternType.LITERAL and b.name in deny_literal:
                continue
            return True
        return False
