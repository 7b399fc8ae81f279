"""The processes a test starts see the project's runtime dependencies, not its development tools.

Two libraries the product runs on import a development tool whenever it is installed: structlog
imports rich (for its console tracebacks) and kio imports hypothesis (for its types' strategies).
On a user's install neither is there; in the test environment both are, and they cost every
broker, service or command a test starts about a third of a CPU-second of imports (a broker:
1.1 CPU-s of imports with them, 0.7 without), several hundred times a run.  So each test
process puts `runtime_only/` first on the PYTHONPATH its children inherit: there, importing
either fails as it does where they are not installed.  A child that is itself a development tool
is started with `with_dev_tools` (schemathesis) or with a PYTHONPATH of its own (pytest,
lint-imports).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from pathlib import Path

RUNTIME_ONLY = str(Path(__file__).with_name("runtime_only"))


def hide_dev_tools(env: MutableMapping[str, str]) -> None:
    """Put the hiding directory first on `env`'s PYTHONPATH (once)."""
    env["PYTHONPATH"] = os.pathsep.join([RUNTIME_ONLY, *_other_entries(env)])


def with_dev_tools(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of `env` whose PYTHONPATH no longer hides the development tools."""
    copy = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    if entries := _other_entries(env):
        copy["PYTHONPATH"] = os.pathsep.join(entries)
    return copy


def _other_entries(env: Mapping[str, str]) -> list[str]:
    return [e for e in env.get("PYTHONPATH", "").split(os.pathsep) if e and e != RUNTIME_ONLY]
