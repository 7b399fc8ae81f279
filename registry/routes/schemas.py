"""Schemas by id: the text, the subjects and versions that use it, the types."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from registry import errors
from registry.http import (
    SCHEMA_TYPES,
    flag,
    raw_reply,
    read_synced,
    reply,
    schema_id_of,
    store_of,
)
from registry.store import SchemaStore


async def schema_types(request: web.Request) -> web.Response:
    return reply(request, SCHEMA_TYPES)


async def list_schemas(request: web.Request) -> web.Response:
    state = store_of(request).state
    prefix = request.query.get("subjectPrefix", "")
    include_deleted, latest_only = flag(request, "deleted"), flag(request, "latestOnly")
    out: list[dict[str, Any]] = []
    for subject in state.subject_names(include_deleted):
        if subject.startswith(prefix):
            found = state.versions(subject, include_deleted)
            out += [sv.describe() for sv in (found[-1:] if latest_only else found)]
    return reply(request, out)


async def get_schema(request: web.Request) -> web.Response:
    store, schema_id = store_of(request), schema_id_of(request)
    return reply(request, {"schema": (await read_synced(store, lambda: _schema_text(store, schema_id)))})


async def get_schema_text(request: web.Request) -> web.Response:
    store, schema_id = store_of(request), schema_id_of(request)
    return raw_reply(request, await read_synced(store, lambda: _schema_text(store, schema_id)))


def _schema_text(store: SchemaStore, schema_id: int) -> str:
    schema = store.state.schemas.get(schema_id)
    if schema is None:
        raise errors.schema_not_found(schema_id)
    return schema.text


async def schema_versions(request: web.Request) -> web.Response:
    store, schema_id = store_of(request), schema_id_of(request)
    include_deleted = flag(request, "deleted")
    subject = request.query.get("subject")

    def lookup() -> list[dict[str, Any]]:
        _schema_text(store, schema_id)
        found = store.state.versions_of_id(schema_id, include_deleted)
        return [{"subject": sv.subject, "version": sv.version} for sv in found if subject in (None, sv.subject)]

    return reply(request, await read_synced(store, lookup))


async def schema_subjects(request: web.Request) -> web.Response:
    store, schema_id = store_of(request), schema_id_of(request)
    include_deleted = flag(request, "deleted")
    subject = request.query.get("subject")

    def lookup() -> list[str]:
        _schema_text(store, schema_id)
        found = store.state.versions_of_id(schema_id, include_deleted)
        return sorted({sv.subject for sv in found if subject in (None, sv.subject)})

    return reply(request, await read_synced(store, lookup))
