"""Subjects and their versions: register, look up, list, delete."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from registry import errors
from registry.http import (
    flag,
    json_body,
    optional_int,
    raw_reply,
    read_synced,
    reply,
    schema_from,
    store_of,
    version_of,
)
from registry.store import LATEST, SchemaStore


async def root(request: web.Request) -> web.Response:
    return reply(request, {})


async def list_subjects(request: web.Request) -> web.Response:
    state = store_of(request).state
    deleted_only = flag(request, "deletedOnly")
    names = state.subject_names(include_deleted=flag(request, "deleted") or deleted_only)
    if deleted_only:
        live = set(state.subject_names())
        names = [name for name in names if name not in live]
    prefix = request.query.get("subjectPrefix", "")
    return reply(request, [name for name in names if name.startswith(prefix)])


async def list_versions(request: web.Request) -> web.Response:
    store, subject = store_of(request), request.match_info["subject"]
    include_deleted = flag(request, "deleted") or flag(request, "deletedOnly")

    def lookup() -> list[int]:
        found = store.state.versions(subject, include_deleted)
        if not found:
            raise errors.subject_not_found(subject)
        if flag(request, "deletedOnly"):
            return [sv.version for sv in found if sv.deleted]
        return [sv.version for sv in found]

    return reply(request, await read_synced(store, lookup))


def _get_version(store: SchemaStore, subject: str, version: int, include_deleted: bool) -> dict[str, Any]:
    found = store.state.versions(subject, include_deleted)
    if not found:
        raise errors.subject_not_found(subject)
    if version == LATEST:
        return found[-1].describe()
    for sv in found:
        if sv.version == version:
            return sv.describe()
    raise errors.version_not_found(version)


async def get_version(request: web.Request) -> web.Response:
    store, subject = store_of(request), request.match_info["subject"]
    version = version_of(request.match_info["version"])
    include_deleted = flag(request, "deleted")
    return reply(request, await read_synced(store, lambda: _get_version(store, subject, version, include_deleted)))


async def get_version_schema(request: web.Request) -> web.Response:
    store, subject = store_of(request), request.match_info["subject"]
    version = version_of(request.match_info["version"])
    include_deleted = flag(request, "deleted")
    found = await read_synced(store, lambda: _get_version(store, subject, version, include_deleted))
    return raw_reply(request, found["schema"])


async def referenced_by(request: web.Request) -> web.Response:
    store, subject = store_of(request), request.match_info["subject"]
    version = version_of(request.match_info["version"])
    await read_synced(store, lambda: _get_version(store, subject, version, False))
    return reply(request, [])  # references are not supported, so nothing refers to a version


async def register(request: web.Request) -> web.Response:
    body = await json_body(request)
    schema = schema_from(body)
    schema_id, _version_number = await store_of(request).register(
        request.match_info["subject"], schema, optional_int(body, "id"), optional_int(body, "version")
    )
    return reply(request, {"id": schema_id})


async def lookup_schema(request: web.Request) -> web.Response:
    store, subject = store_of(request), request.match_info["subject"]
    body = await json_body(request)
    schema = schema_from(body)
    include_deleted = flag(request, "deleted")

    def lookup() -> dict[str, Any]:
        found = store.state.versions(subject, include_deleted)
        if not found:
            raise errors.subject_not_found(subject)
        for sv in reversed(found):
            if sv.schema.identity == schema.identity:
                return sv.describe()
        raise errors.schema_not_found()

    return reply(request, await read_synced(store, lookup))


async def delete_subject(request: web.Request) -> web.Response:
    deleted = await store_of(request).delete_subject(request.match_info["subject"], flag(request, "permanent"))
    return reply(request, deleted)


async def delete_version(request: web.Request) -> web.Response:
    version = version_of(request.match_info["version"])
    deleted = await store_of(request).delete_version(request.match_info["subject"], version, flag(request, "permanent"))
    return reply(request, deleted)
