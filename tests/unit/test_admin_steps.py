"""The admin handlers that answer a large request a step at a time (DescribeConfigs,
DescribeUserScramCredentials, AlterUserScramCredentials, DeleteAcls) answer as they would in
one go: repeats found over the whole request, each entry answered as it is alone, and the
event loop free to others between steps."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kio.schema.delete_acls.v3.request import DeleteAclsFilter, DeleteAclsRequest
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.describe_user_scram_credentials.v0.request import DescribeUserScramCredentialsRequest, UserName
from kio.static.primitive import i8

from broker.config import BrokerConfig
from broker.core import Broker
from broker.handlers import acls, configs, scram_users
from broker.handlers.base import RequestContext
from broker.protocol.errors import ErrorCode
from broker.security.acls import AclBinding, Operation, PatternType, Permission, ResourceType
from broker.security.scram import make_credential
from broker.security.session import Session

T = TypeVar("T")
TOPIC, BROKER, GROUP = 2, 4, 32
AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    b = Broker(BrokerConfig(data_dir=tmp_path / "b", settings=AUTHORIZER))
    await b.start()
    b.store.create_topic("orders", 1, {"retention.ms": "1000"})
    yield b
    await b.stop()


def _ctx(api_key: int, version: int) -> RequestContext:
    session = Session.open("PLAINTEXT", "PLAINTEXT", "127.0.0.1")
    return RequestContext(session, session.principal, "PLAINTEXT", "test", "127.0.0.1", api_key, version, 1)


async def _counting_turns(work: Awaitable[T], when: Callable[[], bool] = lambda: True) -> tuple[T, int]:
    """`work`'s result and how many times another task ran while it did (and `when()` held)."""
    turns = 0
    done = False

    async def other() -> None:
        nonlocal turns
        while not done:
            await asyncio.sleep(0)
            turns += when()

    task = asyncio.create_task(other())
    await asyncio.sleep(0)  # the other task starts
    started = turns
    try:
        result = await work
    finally:
        done = True
        await task
    return result, turns - started


def _describe_request(resources: list[tuple[int, str, tuple[str, ...] | None]]) -> DescribeConfigsRequest:
    return DescribeConfigsRequest(
        resources=tuple(
            DescribeConfigsResource(resource_type=i8(t), resource_name=n, configuration_keys=k) for t, n, k in resources
        ),
        include_synonyms=True,
        include_documentation=True,
    )


async def test_describe_configs_answers_each_resource_as_alone_repeats_included(broker: Broker) -> None:
    """Groups named twice, far apart (in different steps), a topic, a missing one, the
    broker, a type that is not supported, and keys asked for: the answer's results are,
    byte for byte, those of the same resources asked one by one."""
    resources: list[tuple[int, str, tuple[str, ...] | None]] = [(GROUP, f"g{i}", None) for i in range(150)]
    resources += [(TOPIC, "orders", None), (TOPIC, "missing", None), (BROKER, "1", None), (0, "w", None)]
    resources += [(TOPIC, "orders", ("retention.ms",)), (GROUP, "g3", None), (GROUP, "g140", ())]
    resources += [(GROUP, f"g{i}", None) for i in range(0, 150, 7)]
    ctx = _ctx(32, 4)
    answer, turns = await _counting_turns(configs.describe_configs(broker, ctx, _describe_request(resources)))
    alone = [await configs.describe_configs(broker, ctx, _describe_request([r])) for r in resources]
    assert answer.parts[2:-1] == [part for one in alone for part in one.parts[2:-1]]
    assert len(answer.parts[2:-1]) == len(resources)
    assert turns >= 2  # 150 groups of some 10 configs each: several steps


async def test_describe_scram_credentials_refuses_repeats_across_steps(broker: Broker) -> None:
    """The first naming of a user is answered as it would be alone, each later one with
    DUPLICATE_RESOURCE, however far apart they are."""
    store = broker.security.store
    store.change_credentials([(f"u{i}", "SCRAM-SHA-256", make_credential("SCRAM-SHA-256", "pw")) for i in range(3)], [])
    names = [f"u{i % 5}" for i in range(5)] + [f"x{i}" for i in range(1200)] + ["u0", "x7", "u4"]
    ctx = _ctx(50, 0)

    def request(asked: list[str]) -> DescribeUserScramCredentialsRequest:
        return DescribeUserScramCredentialsRequest(users=tuple(UserName(name=n) for n in asked))

    answer, turns = await _counting_turns(scram_users.describe(broker, ctx, request(names)))
    assert [r.user for r in answer.results] == names
    for index, (name, result) in enumerate(zip(names, answer.results, strict=True)):
        if name in names[:index]:
            assert result.error_code == ErrorCode.duplicate_resource
        else:
            alone = await scram_users.describe(broker, ctx, request([name]))
            assert result == alone.results[0]
    assert [r.error_code for r in answer.results[:5]] == [ErrorCode.none] * 3 + [ErrorCode.resource_not_found] * 2
    assert turns >= 2


def _binding(name: str, op: Operation = Operation.READ) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, name, PatternType.LITERAL, "User:alice", "*", op, Permission.ALLOW)


def _filter(name: str | None, pattern: int = int(PatternType.LITERAL)) -> DeleteAclsFilter:
    return DeleteAclsFilter(
        resource_type_filter=i8(int(ResourceType.TOPIC)),
        resource_name_filter=name,
        pattern_type_filter=i8(pattern),
        principal_filter=None,
        host_filter=None,
        operation=i8(int(Operation.ANY)),
        permission_type=i8(int(Permission.ANY)),
    )


def _matched(answer: Any) -> list[list[tuple[str, int]]]:
    return [[(m.resource_name, m.operation) for m in r.matching_acls] for r in answer.filter_results]


async def test_delete_acls_matches_every_filter_against_the_same_acls(broker: Broker) -> None:
    """Two filters matching one ACL both report it (as Kafka: each filter sees the ACLs as
    they were before the request), filters of a name match only it, a MATCH filter matches
    the wildcard and prefixes too, an invalid filter is refused; the ACLs matched are gone."""
    store = broker.security.store
    store.add_acls([_binding(f"t{i}") for i in range(1500)] + [_binding("t1", Operation.WRITE), _binding("*")])
    filters = [_filter(f"t{i}") for i in range(1500)] + [_filter("t1"), _filter("t10", int(PatternType.MATCH))]
    filters.append(_filter("t2", 0))  # UNKNOWN pattern type: INVALID_REQUEST
    expected = [
        [(b.name, int(b.operation)) for b in store.acls if n is not None and b.name == n]
        for n in [f"t{i}" for i in range(1500)] + ["t1"]
    ]
    expected.append([(b.name, int(b.operation)) for b in store.acls if b.name in ("t10", "*")])
    expected.append([])
    every = len(store.acls)
    answer, turns = await _counting_turns(
        acls.delete_acls(broker, _ctx(31, 3), DeleteAclsRequest(filters=tuple(filters))),
        when=lambda: len(store.acls) == every,  # others are served while the filters are matched
    )
    assert _matched(answer) == expected
    assert [r.error_code for r in answer.filter_results[-2:]] == [ErrorCode.none, ErrorCode.invalid_request]
    assert len(expected[1]) == 2  # t1: READ and WRITE
    assert store.acls == set()
    assert turns >= 2


async def test_delete_acls_matches_again_the_acls_changed_while_it_ran(broker: Broker) -> None:
    """An ACL added by another request while the filters are matched a step at a time is
    matched and removed as if added before the request; one removed meanwhile is not
    reported."""
    store = broker.security.store
    store.add_acls([_binding(f"t{i}") for i in range(1500)])
    filters = tuple(_filter(f"t{i}") for i in range(1500))

    async def meanwhile() -> None:
        await asyncio.sleep(0)
        store.add_acls([_binding("t0", Operation.WRITE)])
        store.remove_acls([_binding("t1499")])

    other = asyncio.create_task(meanwhile())
    answer = await acls.delete_acls(broker, _ctx(31, 3), DeleteAclsRequest(filters=filters))
    await other
    matched = _matched(answer)
    assert sorted(matched[0]) == sorted([("t0", int(Operation.READ)), ("t0", int(Operation.WRITE))])
    assert matched[1:1499] == [[(f"t{i}", int(Operation.READ))] for i in range(1, 1499)]
    assert matched[1499] == []
    assert store.acls == set()
