"""Where the Locust users send their load, from ``LOADTEST_*`` environment variables.

Kept apart from the locustfile because importing locust monkey-patches the process with
gevent: `loadtest.load`, the compose file's test and anything else outside a Locust run read the
settings from here without that side effect.

Each field ``name`` is read from ``LOADTEST_<NAME>``.  The URLs nobody set come from a running
`streamshop up`: the one whose data directory ``LOADTEST_STACK`` names, else ``./data/stack``
when a stack runs there, else the default ports (contracts.ports).  Locust's own ``--host`` sets the
orders URL (it overrides the host of every user class, so the other users use absolute URLs).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Self

from contracts.ports import DEFAULT_PORTS
from kit.settings import ConfigError, KafkaClientSettings, setting
from streamshop.stack.state import running_stack

__all__ = ["ENV_PREFIX", "FINAL_STATS_SUFFIX", "STACK_ENV", "LoadTargets"]

ENV_PREFIX = "LOADTEST_"
STACK_ENV = ENV_PREFIX + "STACK"
DEFAULT_STACK_DIR = Path("data/stack")
# The locustfile writes PREFIX + this at the end of a run given --csv PREFIX: the final numbers.
FINAL_STATS_SUFFIX = "_stats_final.csv"


def _local(name: str) -> str:
    return f"http://127.0.0.1:{DEFAULT_PORTS[name]}"


@dataclass(frozen=True, repr=False)
class LoadTargets(KafkaClientSettings):
    """`LoadTargets.from_env()` reads LOADTEST_ORDERS_URL, LOADTEST_BOOTSTRAP_SERVERS, the
    ``LOADTEST_KAFKA_*`` login of the Kafka users (as the services' ``<PREFIX>_KAFKA_*``)..."""

    env_prefix: ClassVar[str] = "LOADTEST"

    stack: Path | None = setting(None, help="data directory of the `streamshop up` to load (default ./data/stack)")
    orders_url: str = setting(_local("orders"), help="orders service (Locust's --host overrides it)")
    otp_url: str = setting(_local("otp"), help="otp service")
    catcher_url: str = setting(_local("catcher"), help="the SMS sink the OTP users read their codes from")
    kafka_topic: str = setting("loadtest.e2e", help="the Kafka users' own topic, auto-created on first use")
    otp_timeout: float = setting(30.0, minimum=0.001, help="seconds an OTP user waits for its SMS")
    e2e_timeout: float = setting(10.0, minimum=0.001, help="seconds a produced record may take to be consumed")

    @classmethod
    def settings(cls) -> frozenset[str]:
        """Every variable `from_env` reads."""
        return frozenset(info.variable for info in cls.describe())

    @classmethod
    def kafka_config(cls, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """The Kafka users' login as librdkafka properties; none for a PLAINTEXT broker."""
        return cls.from_env(environ, stack_urls=False).kafka_security.librdkafka_config()

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        prefix: str | None = None,
        overrides: Mapping[str, Any] | None = None,
        stack_urls: bool = True,
    ) -> Self:
        """The variables; the URLs nobody set from the running stack (`stack_urls`)."""
        env = os.environ if environ is None else environ
        stack_dir = env.get(STACK_ENV)
        document = running_stack(Path(stack_dir) if stack_dir else DEFAULT_STACK_DIR) if stack_urls else None
        if stack_urls and stack_dir and document is None:
            raise ConfigError(f"{STACK_ENV}={stack_dir}: no `streamshop up` runs from there")
        found = cls.from_stack(document) if document is not None else {}
        own = {name: value for name, value in (overrides or {}).items() if value is not None}
        defaults = {name: value for name, value in found.items() if not env.get(cls.env_name(name, prefix))}
        return super().from_env(env, prefix=prefix, overrides=defaults | own)

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
        names = ("orders_url", "otp_url", "catcher_url", "bootstrap_servers", "kafka_topic", "otp_timeout")
        return {self.env_name(name): str(getattr(self, name)) for name in (*names, "e2e_timeout")}
