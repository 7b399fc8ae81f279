"""The authorizer decides as Kafka's StandardAuthorizer: super users, deny beats allow,
implied DESCRIBE, literal/wildcard/prefixed patterns, allow.everyone.if.no.acl.found, and
authorizeByResourceType; filters match as Kafka's AclBindingFilter."""

from __future__ import annotations

import pytest

from broker.listeners import ListenerError, resolve
from broker.security.acls import (
    AclBinding,
    AclFilter,
    AclIndex,
    InvalidAcl,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    validate_binding,
)
from broker.security.tls import PrincipalRules, TlsConfigError, distinguished_name

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
Op = Operation


def acl(
    rtype: ResourceType,
    name: str,
    op: Operation,
    perm: Permission = ALLOW,
    *,
    principal: str = "User:alice",
    pattern: PatternType = LIT,
    host: str = "*",
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def index(*bindings: AclBinding, supers: frozenset[str] = frozenset(), allow_if_none: bool = False) -> AclIndex:
    return AclIndex(bindings, supers, allow_if_none)


def test_no_acl_on_a_resource_follows_allow_everyone_if_no_acl_found() -> None:
    assert not index().authorize("User:alice", "1.2.3.4", Op.READ, T, "orders")
    assert index(allow_if_none=True).authorize("User:alice", "1.2.3.4", Op.READ, T, "orders")


def test_acls_for_someone_else_deny_even_when_allow_everyone_is_set() -> None:
    idx = index(acl(T, "orders", Op.READ, principal="User:bob"), allow_if_none=True)
    assert not idx.authorize("User:alice", "h", Op.READ, T, "orders")
    assert idx.authorize("User:bob", "h", Op.READ, T, "orders")


def test_super_users_may_do_anything_despite_deny() -> None:
    idx = index(acl(T, "*", Op.ALL, DENY, principal="User:*"), supers=frozenset({"User:admin"}))
    assert idx.authorize("User:admin", "h", Op.DELETE, T, "orders")
    assert not idx.authorize("User:alice", "h", Op.DELETE, T, "orders")


def test_deny_beats_allow() -> None:
    idx = index(acl(T, "orders", Op.WRITE), acl(T, "orders", Op.WRITE, DENY))
    assert not idx.authorize("User:alice", "h", Op.WRITE, T, "orders")


def test_deny_from_a_prefix_beats_a_literal_allow() -> None:
    idx = index(acl(T, "orders", Op.WRITE), acl(T, "ord", Op.WRITE, DENY, pattern=PRE))
    assert not idx.authorize("User:alice", "h", Op.WRITE, T, "orders")


def test_deny_for_everyone_applies_to_each_principal() -> None:
    idx = index(acl(T, "orders", Op.READ), acl(T, "orders", Op.READ, DENY, principal="User:*"))
    assert not idx.authorize("User:alice", "h", Op.READ, T, "orders")


def test_implied_describe_from_read_write_delete_alter_but_not_from_deny() -> None:
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert index(acl(T, "t", op)).authorize("User:alice", "h", Op.DESCRIBE, T, "t")
    assert not index(acl(T, "t", Op.CREATE)).authorize("User:alice", "h", Op.DESCRIBE, T, "t")
    assert index(acl(T, "t", Op.ALTER_CONFIGS)).authorize("User:alice", "h", Op.DESCRIBE_CONFIGS, T, "t")
    # a DENY READ does not deny DESCRIBE
    idx = index(acl(T, "t", Op.DESCRIBE), acl(T, "t", Op.READ, DENY))
    assert idx.authorize("User:alice", "h", Op.DESCRIBE, T, "t")
    assert not idx.authorize("User:alice", "h", Op.READ, T, "t")


def test_all_allows_every_operation_and_deny_all_denies_every_one() -> None:
    assert index(acl(T, "t", Op.ALL)).authorize("User:alice", "h", Op.ALTER_CONFIGS, T, "t")
    assert not index(acl(T, "t", Op.ALL), acl(T, "t", Op.ALL, DENY)).authorize("User:alice", "h", Op.READ, T, "t")


def test_literal_wildcard_and_prefixed_patterns() -> None:
    idx = index(acl(T, "*", Op.READ), acl(T, "logs.", Op.WRITE, pattern=PRE), acl(T, "orders", Op.WRITE))
    assert idx.authorize("User:alice", "h", Op.READ, T, "anything")
    assert idx.authorize("User:alice", "h", Op.WRITE, T, "logs.app")
    assert not idx.authorize("User:alice", "h", Op.WRITE, T, "logs")  # the prefix is "logs."
    assert not idx.authorize("User:alice", "h", Op.WRITE, T, "orders-2")  # literal means exactly
    assert not idx.authorize("User:alice", "h", Op.WRITE, G, "logs.app")  # another resource type


def test_hosts() -> None:
    idx = index(acl(T, "t", Op.READ, host="10.0.0.1"))
    assert idx.authorize("User:alice", "10.0.0.1", Op.READ, T, "t")
    assert not idx.authorize("User:alice", "10.0.0.2", Op.READ, T, "t")


def test_authorize_any_resource_of_a_type() -> None:
    """authorizeByResourceType: an ALLOW somewhere that no DENY cancels."""
    assert index(acl(T, "orders", Op.WRITE)).authorize_any("User:alice", "h", Op.WRITE, T)
    assert not index(acl(T, "orders", Op.READ)).authorize_any("User:alice", "h", Op.WRITE, T)
    assert not index(acl(T, "orders", Op.WRITE), acl(T, "ord", Op.WRITE, DENY, pattern=PRE)).authorize_any(
        "User:alice", "h", Op.WRITE, T
    )
    assert not index(acl(T, "orders", Op.WRITE), acl(T, "*", Op.WRITE, DENY)).authorize_any(
        "User:alice", "h", Op.WRITE, T
    )
    assert index(acl(T, "a", Op.WRITE), acl(T, "b", Op.WRITE, DENY)).authorize_any("User:alice", "h", Op.WRITE, T)


def test_new_bindings_are_validated_as_kafka_does() -> None:
    validate_binding(acl(C, "kafka-cluster", Op.ALTER))
    for bad in (
        acl(C, "other", Op.ALTER),
        acl(T, "", Op.READ),
        acl(T, "t", Op.ANY),
        acl(T, "t", Op.READ, Permission.ANY),
        acl(T, "t", Op.READ, principal="alice"),
        acl(T, "t", Op.READ, pattern=PatternType.MATCH),
        acl(ResourceType.ANY, "t", Op.READ),
        acl(T, "t", Op.READ, host=""),
    ):
        with pytest.raises(InvalidAcl):
            validate_binding(bad)


def test_filters() -> None:
    literal, prefixed, wildcard = acl(T, "orders", Op.READ), acl(T, "ord", Op.READ, pattern=PRE), acl(T, "*", Op.READ)
    everything = [literal, prefixed, wildcard, acl(G, "g", Op.READ)]

    def matching(**kw: object) -> list[AclBinding]:
        base: dict[str, object] = {
            "resource_type": ResourceType.ANY,
            "name": None,
            "pattern": PatternType.ANY,
            "principal": None,
            "host": None,
            "operation": Op.ANY,
            "permission": Permission.ANY,
        }
        base.update(kw)
        f = AclFilter(**base)  # type: ignore[arg-type]
        return [b for b in everything if f.matches(b)]

    assert matching() == everything
    assert matching(resource_type=T) == [literal, prefixed, wildcard]
    assert matching(resource_type=T, name="orders") == [literal]
    assert matching(resource_type=T, name="orders", pattern=PatternType.MATCH) == [literal, prefixed, wildcard]
    assert matching(resource_type=T, name="ord", pattern=PRE) == [prefixed]
    assert matching(principal="User:bob") == []


def test_listeners_and_protocol_map() -> None:
    ls = resolve("PLAINTEXT://127.0.0.1:9092,SECURE://:9093", "PLAINTEXT:PLAINTEXT,SECURE:SASL_SSL")
    assert [(x.name, x.protocol, x.host, x.port) for x in ls] == [
        ("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092),
        ("SECURE", "SASL_SSL", "0.0.0.0", 9093),
    ]
    assert ls[1].tls
    assert ls[1].sasl
    assert not ls[0].tls
    for listeners, mapping in (
        ("X://h:1", "PLAINTEXT:PLAINTEXT"),  # unmapped
        ("PLAINTEXT://h:1,PLAINTEXT://h:2", "PLAINTEXT:PLAINTEXT"),
        ("PLAINTEXT://h", "PLAINTEXT:PLAINTEXT"),
        ("PLAINTEXT://h:99999", "PLAINTEXT:PLAINTEXT"),
        ("h:1", "PLAINTEXT:PLAINTEXT"),
        ("A://h:1", "A:KERBEROS"),
        ("", "PLAINTEXT:PLAINTEXT"),
    ):
        with pytest.raises(ListenerError):
            resolve(listeners, mapping)


def test_certificate_principals_and_mapping_rules() -> None:
    cert = {"subject": ((("organizationName", "streamshop"),), (("commonName", "orders, svc"),))}
    dn = distinguished_name(cert)
    assert dn == "CN=orders\\, svc,O=streamshop"
    assert PrincipalRules("DEFAULT").apply(dn) == dn
    rules = PrincipalRules("RULE:^CN=([a-z]+).*,O=streamshop$/$1/U, DEFAULT")
    assert rules.apply(dn) == "ORDERS"
    assert rules.apply("CN=x,O=other") == "CN=x,O=other"
    with pytest.raises(TlsConfigError):
        PrincipalRules("RULE:^CN=(.*)$/$1/").apply("O=nothing")
    with pytest.raises(TlsConfigError):
        PrincipalRules("NONSENSE")
