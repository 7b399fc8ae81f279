"""Where the Locust users send their load, from ``LOADTEST_*`` environment variables.

Kept apart from the locustfile because importing locust monkey-patches the process with
gevent: `loadtest.load`, the compose file's test and anything else outside a Locust run read the
settings from here without that side effect.

Each field ``name`` is read from ``LOADTEST_<NAME>``.  The URLs nobody set come from a running
`streamshop up`: the one whose data directory ``LOADTEST_STACK`` names, else ``./data/stack``
when a stack runs there, else the default ports of DESIGN.md.  Locust's own ``--host`` sets the
orders URL (it overrides the host of every user class, so the other users use absolute URLs).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contracts.kafka_security import KafkaSecurity
from services.common.config import DEFAULT_PORTS
from streamshop.stack.state import running_stack

__all__ = ["ENV_PREFIX", "FINAL_STATS_SUFFIX", "STACK_ENV", "LoadTargets"]

ENV_PREFIX = "LOADTEST_"
STACK_ENV = ENV_PREFIX + "STACK"
DEFAULT_STACK_DIR = Path("data/stack")
# The locustfile writes PREFIX + this at the end of a run given --csv PREFIX: the final numbers.
FINAL_STATS_SUFFIX = "_stats_final.csv"


def _local(name: str) -> str:
    return f"http://127.0.0.1:{DEFAULT_PORTS[name]}"


@dataclass(frozen=True)
class LoadTargets:
    orders_url: str = _local("orders")
    otp_url: str = _local("otp")
    catcher_url: str = _local("catcher")  # the SMS sink the OTP users read their codes from
    bootstrap_servers: str = f"127.0.0.1:{DEFAULT_PORTS['broker']}"
    kafka_topic: str = "loadtest.e2e"  # the Kafka users' own topic, auto-created on first use
    otp_timeout: float = 30.0  # seconds an OTP user waits for its SMS before counting a failure
    e2e_timeout: float = 10.0  # seconds a produced record may take to be consumed before it counts as lost

    @classmethod
    def settings(cls) -> frozenset[str]:
        """Every variable `from_env` and `kafka_config` read."""
        fields = {ENV_PREFIX + f.name.upper() for f in dataclasses.fields(cls)}
        return frozenset({STACK_ENV} | fields | KafkaSecurity.settings(ENV_PREFIX))

    @staticmethod
    def kafka_config(environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """The Kafka users' login (``LOADTEST_KAFKA_*``, as the services' ``<PREFIX>_KAFKA_*``)
        as librdkafka properties; none for a PLAINTEXT broker."""
        return KafkaSecurity.from_env(os.environ if environ is None else environ, ENV_PREFIX).librdkafka_config()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> LoadTargets:
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        stack_dir = env.get(STACK_ENV)
        document = running_stack(Path(stack_dir) if stack_dir else DEFAULT_STACK_DIR)
        if stack_dir and document is None:
            raise RuntimeError(f"{STACK_ENV}={stack_dir}: no `streamshop up` runs from there")
        if document is not None:
            values.update(cls.from_stack(document))
        for f in dataclasses.fields(cls):
            raw = env.get(ENV_PREFIX + f.name.upper())
            if raw:
                try:
                    values[f.name] = float(raw) if isinstance(f.default, float) else raw
                except ValueError:
                    raise ValueError(f"{ENV_PREFIX}{f.name.upper()}: expected a number, got {raw!r}") from None
        return cls(**values)

    @staticmethod
    def from_stack(document: Mapping[str, Any]) -> dict[str, str]:
        """The URLs a stack.json announces (only those of children that run)."""
        children = document.get("children", {})

        def url(child: str, role: str) -> str | None:
            value = children.get(child, {}).get("urls", {}).get(role)
            return str(value) if value else None

        found = {
            "orders_url": url("orders", "http"),
            "otp_url": url("otp", "http"),
            "catcher_url": url("catcher", "http"),
            "bootstrap_servers": url("broker", "bootstrap"),
        }
        return {name: value for name, value in found.items() if value is not None}

    def environment(self) -> dict[str, str]:
        """These targets as ``LOADTEST_*`` variables, for a Locust child process."""
        return {ENV_PREFIX + f.name.upper(): str(getattr(self, f.name)) for f in dataclasses.fields(self)}
