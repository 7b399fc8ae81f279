"""The compatibility level (``/config``) and mode (``/mode``), global and per subject."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from aiohttp import web

from registry import errors
from registry.errors import RegistryError
from registry.http import flag, json_body, read_synced, reply, store_of
from registry.levels import Level
from registry.state import Mode, RegistryState

Setting = TypeVar("Setting", Level, Mode)


def _level(body: dict[str, Any]) -> Level:
    """The level of a PUT /config body: `compatibility` or `compatibilityLevel` (each given
    one must be a level, case-insensitive; `compatibility` wins when both are)."""
    given = [body[name] for name in ("compatibility", "compatibilityLevel") if name in body] or [None]
    levels = []
    for raw in given:
        try:
            levels.append(Level(raw.upper() if isinstance(raw, str) else ""))
        except ValueError:
            raise errors.invalid_compatibility_level(raw) from None
    return levels[0]


def _subject(request: web.Request) -> str | None:
    return request.match_info.get("subject")


async def _setting(
    request: web.Request,
    configured: Callable[[RegistryState], Mapping[str | None, Setting]],
    in_force: Callable[[RegistryState, str | None], Setting],
    not_configured: Callable[[str], RegistryError],
) -> Setting:
    """A GET of /config or /mode: a subject's own setting (`not_configured` when it has none),
    or, for the global path or with `defaultToGlobal`, the setting in force."""
    store, subject = store_of(request), _subject(request)
    if subject is None or flag(request, "defaultToGlobal"):
        return in_force(store.state, subject)

    def lookup() -> Setting:
        own = configured(store.state)
        if subject not in own:
            raise not_configured(subject)
        return own[subject]

    return await read_synced(store, lookup)


async def get_config(request: web.Request) -> web.Response:
    level = await _setting(
        request, lambda state: state.configs, RegistryState.compatibility, errors.subject_compatibility_not_configured
    )
    return reply(request, {"compatibilityLevel": level.value})


async def put_config(request: web.Request) -> web.Response:
    level = _level(await json_body(request))
    await store_of(request).set_compatibility(_subject(request), level)
    return reply(request, {"compatibility": level.value})


async def delete_config(request: web.Request) -> web.Response:
    before = await store_of(request).delete_compatibility(_subject(request))
    return reply(request, {"compatibilityLevel": before.value})


async def get_mode(request: web.Request) -> web.Response:
    mode = await _setting(request, lambda state: state.modes, RegistryState.mode, errors.subject_mode_not_configured)
    return reply(request, {"mode": mode.value})


async def put_mode(request: web.Request) -> web.Response:
    body = await json_body(request)
    raw = body.get("mode")
    try:
        mode = Mode(raw.upper() if isinstance(raw, str) else "")
    except ValueError:
        raise errors.invalid_mode(raw) from None
    await store_of(request).set_mode(_subject(request), mode, flag(request, "force"))
    return reply(request, {"mode": mode.value})


async def delete_mode(request: web.Request) -> web.Response:
    subject = request.match_info["subject"]
    before = await store_of(request).delete_mode(subject)
    return reply(request, {"mode": before.value})
