"""Which versions of which APIs an in-process broker is sent: the proof that a real client
speaks a given version to it, not only that the broker would accept one.

    seen = record_versions(monkeypatch)
    ... a client talks to a `ThreadBroker` ...
    assert seen["Produce"] == {13}

Each entry of the API table is wrapped for the test (monkeypatch restores it); the broker's
dispatcher reads the same table, so every request decoded afterwards is counted."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from broker.handlers import BY_KEY


def record_versions(monkeypatch: pytest.MonkeyPatch) -> dict[str, set[int]]:
    """API name -> the versions of the requests the broker has handled since the call."""
    seen: dict[str, set[int]] = {}
    for key, api in list(BY_KEY.items()):

        def handler(broker: Any, ctx: Any, request: Any, _inner: Any = api.handler, _name: str = api.name) -> Any:
            seen.setdefault(_name, set()).add(ctx.api_version)
            return _inner(broker, ctx, request)

        monkeypatch.setitem(BY_KEY, key, dataclasses.replace(api, handler=handler))
    return seen
