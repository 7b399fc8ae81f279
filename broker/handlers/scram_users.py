"""DescribeUserScramCredentials and AlterUserScramCredentials (v0), as `kafka-configs
--entity-type users` and the admin clients use them.

The client sends the salted password (never the password); the broker keeps StoredKey and
ServerKey derived from it.  Describing needs DESCRIBE on the cluster, altering needs ALTER.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.core import Broker
from broker.handlers.base import Messages, RequestContext
from broker.protocol.codec import build, nested
from broker.protocol.errors import ErrorCode
from broker.security.acls import CLUSTER_NAME, Operation, ResourceType
from broker.security.scram import (
    CODES_BY_MECHANISM,
    MAX_ITERATIONS,
    MECHANISM_CODES,
    MIN_ITERATIONS,
    ScramCredential,
    credential_from_salted,
)

if TYPE_CHECKING:
    from broker.handlers.kio_types import (
        AlterUserScramCredentialsRequest,
        AlterUserScramCredentialsResponse,
        DescribeUserScramCredentialsRequest,
        DescribeUserScramCredentialsResponse,
    )

DESCRIBE: Messages[DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse] = Messages(50, 0, 0)
ALTER: Messages[AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse] = Messages(51, 0, 0)


def describe(
    broker: Broker, ctx: RequestContext, request: DescribeUserScramCredentialsRequest
) -> DescribeUserScramCredentialsResponse:
    cls = DESCRIBE.response(ctx.api_version)
    result, info = nested(cls, "DescribeUserScramCredentialsResult"), nested(cls, "CredentialInfo")
    if not broker.security.allowed(ctx.session, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return build(
            cls,
            throttle_time=0,
            error_code=ErrorCode.cluster_authorization_failed,
            error_message="DESCRIBE on the cluster is required",
            results=(),
        )
    users = broker.security.store.users
    # As Kafka: no list (null) and an empty list both ask for every user.
    names = [u.name for u in request.users or ()] or sorted(users)
    seen: set[str] = set()
    results = []
    for name in names:
        if name in seen:
            results.append(
                build(
                    result,
                    user=name,
                    error_code=ErrorCode.duplicate_resource,
                    error_message="user named twice",
                    credential_infos=(),
                )
            )
            continue
        seen.add(name)
        creds = users.get(name)
        if not creds:
            results.append(
                build(
                    result,
                    user=name,
                    error_code=ErrorCode.resource_not_found,
                    error_message=f"attempt to describe a user credential that does not exist: {name}",
                    credential_infos=(),
                )
            )
            continue
        infos = tuple(
            build(info, mechanism=CODES_BY_MECHANISM[m], iterations=c.iterations) for m, c in sorted(creds.items())
        )
        results.append(build(result, user=name, error_code=ErrorCode.none, error_message=None, credential_infos=infos))
    return build(cls, throttle_time=0, error_code=ErrorCode.none, error_message=None, results=tuple(results))


async def alter(
    broker: Broker, ctx: RequestContext, request: AlterUserScramCredentialsRequest
) -> AlterUserScramCredentialsResponse:
    cls = ALTER.response(ctx.api_version)
    result = nested(cls, "AlterUserScramCredentialsResult")
    store = broker.security.store
    users = [d.name for d in request.deletions] + [u.name for u in request.upsertions]
    if not broker.security.allowed(ctx.session, Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        results = [
            build(
                result,
                user=u,
                error_code=ErrorCode.cluster_authorization_failed,
                error_message="ALTER on the cluster is required",
            )
            for u in dict.fromkeys(users)
        ]
        return build(cls, throttle_time=0, results=tuple(results))
    errors: dict[str, tuple[ErrorCode, str]] = {}
    touched: set[str] = set()
    for name, code in [(d.name, d.mechanism) for d in request.deletions] + [
        (u.name, u.mechanism) for u in request.upsertions
    ]:
        # As Kafka: one entry per user and request, whatever the mechanisms.
        if name in touched:
            errors.setdefault(
                name, (ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request")
            )
        touched.add(name)
        if not name:
            errors.setdefault(name, (ErrorCode.unacceptable_credential, "user name is empty"))
        elif code not in MECHANISM_CODES:
            errors.setdefault(name, (ErrorCode.unsupported_sasl_mechanism, f"unknown SCRAM mechanism {code}"))
    deletions: list[tuple[str, str]] = []
    for d in request.deletions:
        if d.name in errors:
            continue
        mechanism = MECHANISM_CODES[d.mechanism]
        if store.credential(d.name, mechanism) is None:
            errors[d.name] = (ErrorCode.resource_not_found, f"no {mechanism} credential for user {d.name}")
            continue
        deletions.append((d.name, mechanism))
    upserts: list[tuple[str, str, ScramCredential]] = []
    for u in request.upsertions:
        if u.name in errors:
            continue
        mechanism = MECHANISM_CODES[u.mechanism]
        if not MIN_ITERATIONS <= u.iterations <= MAX_ITERATIONS:
            errors[u.name] = (
                ErrorCode.unacceptable_credential,
                f"iterations must be in [{MIN_ITERATIONS}, {MAX_ITERATIONS}] for {mechanism}",
            )
            continue
        if not u.salt or not u.salted_password or len(u.salt) > 1024 or len(u.salted_password) > 1024:
            errors[u.name] = (ErrorCode.unacceptable_credential, "salt and salted password must be 1 to 1024 bytes")
            continue
        upserts.append((u.name, mechanism, credential_from_salted(mechanism, u.salted_password, u.salt, u.iterations)))
    # A user with any failing entry has none of its entries applied.
    deletions = [(n, m) for n, m in deletions if n not in errors]
    upserts = [(n, m, c) for n, m, c in upserts if n not in errors]
    if deletions or upserts:
        store.change_credentials(upserts, deletions)
        await broker.sync_metadata()
    results = [
        build(
            result,
            user=u,
            error_code=errors.get(u, (ErrorCode.none, None))[0],
            error_message=errors.get(u, (ErrorCode.none, None))[1],
        )
        for u in dict.fromkeys(users)
    ]
    return build(cls, throttle_time=0, results=tuple(results))
