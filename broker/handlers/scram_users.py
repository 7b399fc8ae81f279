"""DescribeUserScramCredentials and AlterUserScramCredentials (v0), as `kafka-configs
--entity-type users` and the admin clients use them.

The client sends the salted password (never the password); the broker keeps StoredKey and
ServerKey derived from it.  Describing needs DESCRIBE on the cluster, altering needs ALTER.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from broker.cooperative import each
from broker.handlers.base import Messages, RequestContext
from broker.handlers.services import HasSecurity, MetadataDurability
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


class ScramUsersBroker(HasSecurity, MetadataDurability, Protocol):
    """What the SCRAM credential requests use of the broker."""


class _Named(Protocol):
    """A deletion or an upsertion: which user, which mechanism."""

    @property
    def name(self) -> str: ...

    @property
    def mechanism(self) -> int: ...


DESCRIBE: Messages[DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse] = Messages(50, 0, 0)
ALTER: Messages[AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse] = Messages(51, 0, 0)


async def describe(
    broker: ScramUsersBroker, ctx: RequestContext, request: DescribeUserScramCredentialsRequest
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
    # The repeats are found first, over the whole request (which reads nothing of the store,
    # so it too frees the loop between steps); then each user is looked up and answered a
    # step at a time.
    seen: set[str] = set()
    repeated: list[bool] = []
    async for name in each(names):
        repeated.append(name in seen)
        seen.add(name)
    results = []
    async for name, again in each(zip(names, repeated, strict=True)):
        if again:
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
    broker: ScramUsersBroker, ctx: RequestContext, request: AlterUserScramCredentialsRequest
) -> AlterUserScramCredentialsResponse:
    """As Kafka: one answer per user, in the order first named; a user with any failing entry
    has none of its entries applied; the others are applied in one metadata batch, durable
    before the answer.  Checking the entries (users named twice among them) and deriving the
    new credentials (hashing) read the request alone and are done a step at a time, the loop
    free between steps; whether a credential to delete exists is read from the store just
    before the batch is written, with no step between."""
    cls = ALTER.response(ctx.api_version)
    store = broker.security.store
    allowed = broker.security.allowed(ctx.session, Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
    users: list[str] = []  # in the order first named
    errors: dict[str, tuple[ErrorCode, str]] = {}
    touched: set[str] = set()
    named: Iterable[_Named] = itertools.chain(request.deletions, request.upsertions)
    async for entry in each(named):
        name, code = entry.name, entry.mechanism
        # As Kafka: one entry per user and request, whatever the mechanisms.
        if name in touched:
            errors.setdefault(
                name, (ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request")
            )
        else:
            users.append(name)
        touched.add(name)
        if not name:
            errors.setdefault(name, (ErrorCode.unacceptable_credential, "user name is empty"))
        elif code not in MECHANISM_CODES:
            errors.setdefault(name, (ErrorCode.unsupported_sasl_mechanism, f"unknown SCRAM mechanism {code}"))
    if not allowed:
        refused = (ErrorCode.cluster_authorization_failed, "ALTER on the cluster is required")
        return await _answer(cls, users, dict.fromkeys(users, refused))
    # Each user left is named once in the request: its entry's checks decide for it alone.
    upserts: list[tuple[str, str, ScramCredential]] = []
    async for u in each(request.upsertions):
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
    deletions: list[tuple[str, str]] = []
    for d in request.deletions:
        if d.name in errors:
            continue
        mechanism = MECHANISM_CODES[d.mechanism]
        if store.credential(d.name, mechanism) is None:
            errors[d.name] = (ErrorCode.resource_not_found, f"no {mechanism} credential for user {d.name}")
            continue
        deletions.append((d.name, mechanism))
    if deletions or upserts:
        store.change_credentials(upserts, deletions)
        await broker.sync_metadata()
    return await _answer(cls, users, errors)


async def _answer(
    cls: type[AlterUserScramCredentialsResponse], users: list[str], errors: dict[str, tuple[ErrorCode, str]]
) -> AlterUserScramCredentialsResponse:
    """One result per user, the loop free between steps of them."""
    result = nested(cls, "AlterUserScramCredentialsResult")
    results = []
    async for u in each(users):
        code, message = errors.get(u, (ErrorCode.none, None))
        results.append(build(result, user=u, error_code=code, error_message=message))
    return build(cls, throttle_time=0, results=tuple(results))
