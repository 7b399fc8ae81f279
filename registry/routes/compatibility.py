"""Compatibility checks of a schema against a subject's versions."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from registry import errors
from registry.http import (
    flag,
    json_body,
    read_synced,
    reply,
    schema_from,
    store_of,
    version_of,
)
from registry.schema_text import checked
from registry.state import SchemaVersion
from registry.store import LATEST


async def check(request: web.Request) -> web.Response:
    store, subject = store_of(request), request.match_info["subject"]
    version_text = request.match_info.get("version")
    version = version_of(version_text) if version_text is not None else None
    schema = schema_from(await json_body(request))

    def against() -> list[SchemaVersion]:
        live = store.state.versions(subject)
        if version is None:
            return live  # every version (the level says which count)
        if version == LATEST:
            return live[-1:]
        if not store.state.subjects.get(subject):
            raise errors.subject_not_found(subject)
        for sv in live:
            if sv.version == version:
                return [sv]
        raise errors.version_not_found(version)

    existing = await read_synced(store, against)
    reasons = checked(schema, [sv.schema for sv in existing], store.state.compatibility(subject))
    result: dict[str, Any] = {"is_compatible": not reasons}
    if flag(request, "verbose"):
        result["messages"] = reasons
    return reply(request, result)
