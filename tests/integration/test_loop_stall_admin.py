"""The admin APIs answer requests of up to 100,000 entries (request.max.elements) without
holding the broker's event loop for everyone: while one client's DescribeConfigs,
AlterConfigs, IncrementalAlterConfigs, Describe/AlterUserScramCredentials, CreateAcls,
DeleteAcls or AlterClientQuotas is served, another client's ApiVersions round trips stay
within a bound taken from the same round trips on the idle broker (tests/support/loop_stall.py).
Every entry is answered, in order, with its error code; changes are applied and durable."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kio.schema.alter_client_quotas.v1.request import AlterClientQuotasRequest, EntityData, EntryData, OpData
from kio.schema.alter_user_scram_credentials.v0.request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialUpsertion,
)
from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest
from kio.schema.delete_acls.v3.request import DeleteAclsFilter, DeleteAclsRequest
from kio.schema.describe_client_quotas.v1.request import ComponentData, DescribeClientQuotasRequest
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.describe_user_scram_credentials.v0.request import DescribeUserScramCredentialsRequest, UserName
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.static.primitive import f64, i8, i32

from broker.handlers import BY_KEY
from loadtest.bench_loop_stall import MAX_ELEMENTS, generic_request
from tests.support import loop_stall
from tests.support.harness import BrokerProcess
from tests.support.kafka_wire import connect

pytestmark = pytest.mark.slow

TOPIC, GROUP = 2, 32
LITERAL, ANY_PATTERN = 3, 1
READ, ANY_OPERATION = 3, 1
ALLOW, ANY_PERMISSION = 3, 1
SCRAM_SHA_256 = 1
AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",  # the test's anonymous client may ALTER the cluster
}


def _assert_within_bound(stall: float, idle: float) -> None:
    assert stall < loop_stall.bound(idle), f"stalled {stall:.3f}s; idle round trips took at most {idle:.4f}s"


# --- the requests `python -m loadtest.bench_loop_stall` sends ------------------------------
# Each top-level array filled with distinct entries named w0, w1, ...; nested arrays of one
# entry of zeros.  The asked names, the answered (name, error code) pairs, and the code each
# entry gets: type 0 resources are not supported, there are no such users, mechanism 0 is not
# SCRAM, a broker without an authorizer refuses the ACL APIs, entity type w0 is not one.


def _asked(api_key: int, request: Any) -> list[str]:
    if api_key in (32, 33, 44):
        return [r.resource_name for r in request.resources]
    if api_key == 50:
        return [u.name for u in request.users]
    if api_key == 51:
        return list(dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions]))
    if api_key == 30:
        return [c.resource_name for c in request.creations]
    if api_key == 31:
        return [str(f.resource_name_filter) for f in request.filters]
    return [e.entity[0].entity_type for e in request.entries]  # 49


def _answered(api_key: int, response: Any, asked: list[str]) -> list[tuple[str, int]]:
    """(name, code) of each answer; CreateAcls and DeleteAcls answers carry no name, and are
    paired with the names asked."""
    if api_key == 32:
        return [(r.resource_name, r.error_code) for r in response.results]
    if api_key in (33, 44):
        return [(r.resource_name, r.error_code) for r in response.responses]
    if api_key in (50, 51):
        return [(r.user, r.error_code) for r in response.results]
    if api_key == 30:
        return list(zip(asked, [r.error_code for r in response.results], strict=True))
    if api_key == 31:
        return list(zip(asked, [r.error_code for r in response.filter_results], strict=True))
    return [(e.entity[0].entity_type, e.error_code) for e in response.entries]  # 49


GENERIC = [
    pytest.param(32, ErrorCode.invalid_request, id="DescribeConfigs"),
    pytest.param(33, ErrorCode.invalid_request, id="AlterConfigs"),
    pytest.param(44, ErrorCode.invalid_request, id="IncrementalAlterConfigs"),
    pytest.param(50, ErrorCode.resource_not_found, id="DescribeUserScramCredentials"),
    pytest.param(51, ErrorCode.unsupported_sasl_mechanism, id="AlterUserScramCredentials"),
    pytest.param(30, ErrorCode.security_disabled, id="CreateAcls"),
    pytest.param(31, ErrorCode.security_disabled, id="DeleteAcls"),
    pytest.param(49, ErrorCode.invalid_request, id="AlterClientQuotas"),
]


@pytest.mark.parametrize(("api_key", "code"), GENERIC)
def test_an_admin_request_of_100000_entries_does_not_stall_other_clients(
    broker_process_factory: Callable[..., BrokerProcess], api_key: int, code: ErrorCode
) -> None:
    broker = broker_process_factory()
    request, _ = generic_request(api_key, BY_KEY[api_key].max_version, MAX_ELEMENTS)
    asked = _asked(api_key, request)
    assert len(asked) >= 30_000
    response, stall, idle = loop_stall.within_bound(broker.bootstrap, lambda _: request)
    assert _answered(api_key, response, asked) == [(name, code) for name in asked]
    _assert_within_bound(stall, idle)


# --- requests whose entries all succeed: real work for each ----------------------------------

MANY = 20_000


def test_describe_configs_of_20000_groups_does_not_stall_other_clients(
    broker_process_factory: Callable[..., BrokerProcess],
) -> None:
    """Each group's every config described (a group need not exist), with synonyms and
    documentation; a repeated group answered as its first naming."""
    broker = broker_process_factory()
    names = [f"g{i}" for i in range(MANY)] + ["g0", "g7"]
    resources = tuple(
        DescribeConfigsResource(resource_type=i8(GROUP), resource_name=n, configuration_keys=None) for n in names
    )
    request = DescribeConfigsRequest(resources=resources, include_synonyms=True, include_documentation=True)
    response, stall, idle = loop_stall.within_bound(broker.bootstrap, lambda _: request)
    assert [(r.resource_name, r.error_code) for r in response.results] == [(n, ErrorCode.none) for n in names]
    config_names = [c.name for c in response.results[0].configs]
    assert "consumer.session.timeout.ms" in config_names
    assert all([c.name for c in r.configs] == config_names for r in response.results)
    assert response.results[-2] == response.results[0]
    _assert_within_bound(stall, idle)


def test_incremental_alter_configs_of_20000_groups_does_not_stall_other_clients(
    broker_process_factory: Callable[..., BrokerProcess],
) -> None:
    """Each group's session timeout set, and durable before the answer: then described as the
    group's own (GROUP_CONFIG)."""
    broker = broker_process_factory()

    def names(attempt: int) -> list[str]:
        return [f"g{attempt}-{i}" for i in range(MANY)]

    def request(attempt: int) -> IncrementalAlterConfigsRequest:
        change = (AlterableConfig(name="consumer.session.timeout.ms", config_operation=i8(0), value="50000"),)
        return IncrementalAlterConfigsRequest(
            resources=tuple(
                AlterConfigsResource(resource_type=i8(GROUP), resource_name=n, configs=change) for n in names(attempt)
            ),
            validate_only=False,
        )

    response, stall, idle = loop_stall.within_bound(broker.bootstrap, request)
    altered = [r.resource_name for r in response.responses]
    assert altered in [names(n) for n in range(3)]
    assert {r.error_code for r in response.responses} == {ErrorCode.none}
    last = DescribeConfigsResource(
        resource_type=i8(GROUP), resource_name=altered[-1], configuration_keys=("consumer.session.timeout.ms",)
    )
    with connect(broker.bootstrap) as conn:
        described = conn.request(
            DescribeConfigsRequest(resources=(last,), include_synonyms=False, include_documentation=False)
        )
    (config,) = described.results[0].configs
    assert (config.value, config.config_source) == ("50000", 8)  # GROUP_CONFIG
    _assert_within_bound(stall, idle)


def test_alter_user_scram_credentials_of_50000_users_does_not_stall_other_clients(
    broker_process_factory: Callable[..., BrokerProcess],
) -> None:
    """Each entry checked, the valid ones' credentials derived and stored in one batch (kept
    to 2,000: the batch is written in one go, as Kafka writes it), the others refused."""
    broker = broker_process_factory()
    valid = 2_000

    def names(attempt: int) -> list[str]:
        return [f"u{attempt}-{i}" for i in range(50_000)]

    def request(attempt: int) -> AlterUserScramCredentialsRequest:
        return AlterUserScramCredentialsRequest(
            deletions=(),
            upsertions=tuple(
                ScramCredentialUpsertion(
                    name=n,
                    mechanism=i8(SCRAM_SHA_256),
                    iterations=i32(4096 if i < valid else 10),  # too few: UNACCEPTABLE_CREDENTIAL
                    salt=b"s" * 16,
                    salted_password=b"p" * 32,
                )
                for i, n in enumerate(names(attempt))
            ),
        )

    response, stall, idle = loop_stall.within_bound(broker.bootstrap, request)
    users = [r.user for r in response.results]
    assert users in [names(n) for n in range(3)]
    codes = [ErrorCode.none] * valid + [ErrorCode.unacceptable_credential] * (len(users) - valid)
    assert [r.error_code for r in response.results] == codes
    with connect(broker.bootstrap) as conn:
        asked = (users[0], users[valid - 1], users[valid])
        described = conn.request(DescribeUserScramCredentialsRequest(users=tuple(UserName(name=u) for u in asked)))
    assert [(r.user, r.error_code) for r in described.results] == list(
        zip(asked, [ErrorCode.none, ErrorCode.none, ErrorCode.resource_not_found], strict=True)
    )
    assert [(i.mechanism, i.iterations) for i in described.results[1].credential_infos] == [(SCRAM_SHA_256, 4096)]
    _assert_within_bound(stall, idle)


def _creations(names: list[str]) -> CreateAclsRequest:
    return CreateAclsRequest(
        creations=tuple(
            AclCreation(
                resource_type=i8(TOPIC),
                resource_name=name,
                resource_pattern_type=i8(LITERAL),
                principal="User:alice",
                host="*",
                operation=i8(READ),
                permission_type=i8(ALLOW),
            )
            for name in names
        )
    )


def _deletions(names: list[str]) -> DeleteAclsRequest:
    return DeleteAclsRequest(
        filters=tuple(
            DeleteAclsFilter(
                resource_type_filter=i8(TOPIC),
                resource_name_filter=name,
                pattern_type_filter=i8(ANY_PATTERN),
                principal_filter=None,
                host_filter=None,
                operation=i8(ANY_OPERATION),
                permission_type=i8(ANY_PERMISSION),
            )
            for name in names
        )
    )


ACLS, NEW = 50_000, 1_000  # filters of DeleteAcls; ACLs a request creates or deletes (one batch)


def test_create_acls_of_100000_entries_does_not_stall_other_clients(
    broker_process_factory: Callable[..., BrokerProcess],
) -> None:
    """Every entry answered; the ACLs that exist already are kept as they are, the others
    created (in one batch, as Kafka writes them, so few of them here)."""
    broker = broker_process_factory(AUTHORIZER)
    names = [f"c{i}" for i in range(MAX_ELEMENTS)]
    with connect(broker.bootstrap, timeout=300) as conn:
        made = conn.request(_creations(names[:-NEW]))
    assert {r.error_code for r in made.results} == {ErrorCode.none}
    created, stall, idle = loop_stall.within_bound(broker.bootstrap, lambda _: _creations(names))
    assert [r.error_code for r in created.results] == [ErrorCode.none] * MAX_ELEMENTS
    with connect(broker.bootstrap, timeout=300) as conn:  # the new ones exist
        deleted = conn.request(_deletions(names[-2:]))
    assert [[m.resource_name for m in r.matching_acls] for r in deleted.filter_results] == [[n] for n in names[-2:]]
    _assert_within_bound(stall, idle)


def test_delete_acls_of_50000_filters_does_not_stall_other_clients(
    broker_process_factory: Callable[..., BrokerProcess],
) -> None:
    """Each filter names one topic and is answered with the ACL it matched, if any: the
    first 1,000 match, and are gone."""
    broker = broker_process_factory(AUTHORIZER)

    def names(attempt: int) -> list[str]:
        return [f"d{attempt}-{i}" for i in range(ACLS)]

    def deletion(attempt: int) -> DeleteAclsRequest:
        with connect(broker.bootstrap, timeout=300) as conn:  # each try deletes ACLs of its own
            made = conn.request(_creations(names(attempt)[:NEW]))
        assert {r.error_code for r in made.results} == {ErrorCode.none}
        return _deletions(names(attempt))

    deleted, stall, idle = loop_stall.within_bound(broker.bootstrap, deletion)
    matched = [[m.resource_name for m in r.matching_acls] for r in deleted.filter_results]
    assert matched in [[[n] for n in names(a)[:NEW]] + [[]] * (ACLS - NEW) for a in range(3)]
    assert {r.error_code for r in deleted.filter_results} == {ErrorCode.none}
    with connect(broker.bootstrap, timeout=300) as conn:  # gone: deleting again finds nothing
        again = conn.request(_deletions([matched[0][0], matched[NEW - 1][0]]))
    assert [r.matching_acls for r in again.filter_results] == [(), ()]
    _assert_within_bound(stall, idle)


def test_alter_client_quotas_of_30000_users_does_not_stall_other_clients(
    broker_process_factory: Callable[..., BrokerProcess],
) -> None:
    """Each entry checked; the valid ones (kept to 1,000: they are applied in one batch, as
    Kafka writes them) applied, the others refused."""
    broker = broker_process_factory()
    count, valid = 30_000, 1_000

    def names(attempt: int) -> list[str]:
        return [f"q{attempt}-{i}" for i in range(count)]

    def request(attempt: int) -> AlterClientQuotasRequest:
        return AlterClientQuotasRequest(
            entries=tuple(
                EntryData(
                    entity=(EntityData(entity_type="user", entity_name=n),),
                    ops=(OpData(key="producer_byte_rate", value=f64(1024.0 if i < valid else -1.0), remove=False),),
                )
                for i, n in enumerate(names(attempt))
            ),
            validate_only=False,
        )

    response, stall, idle = loop_stall.within_bound(broker.bootstrap, request)
    users = [e.entity[0].entity_name for e in response.entries]
    assert users in [names(n) for n in range(3)]
    codes = [ErrorCode.none] * valid + [ErrorCode.invalid_request] * (count - valid)
    assert [e.error_code for e in response.entries] == codes
    with connect(broker.bootstrap, timeout=300) as conn:
        described = [
            conn.request(
                DescribeClientQuotasRequest(
                    components=(ComponentData(entity_type="user", match_type=i8(0), match=user),), strict=True
                )
            )
            for user in (users[valid - 1], users[valid])
        ]
    assert [[[(v.key, v.value) for v in e.values] for e in d.entries] for d in described] == [
        [[("producer_byte_rate", 1024.0)]],
        [],
    ]
    _assert_within_bound(stall, idle)
