"""The broker process's settings, from ``BROKER_*`` variables (kit.settings) with the command's
flags over them: where it keeps its data, where it listens, and the broker settings and topic
defaults by Kafka's names (``BROKER_SET=num.partitions=6,log.retention.ms=3600000``, or
``--set KEY=VALUE``), checked by `broker.config`.

The names it read before (``STREAMSHOP_BROKER_*``) still work and are logged as deprecated.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from broker.config import BROKER_SETTINGS, DURABILITY_MODES, BrokerConfig
from contracts.ports import DEFAULT_PORTS
from kit.settings import ConfigError, HostPort, ProcessSettings, parse_host_port, setting

__all__ = ["BrokerSettings", "parse_admin_listen", "parse_sets"]


def parse_sets(raw: str) -> dict[str, str]:
    """``KEY=VALUE`` pairs separated by commas; a value may hold commas itself
    (``listeners=A://h:1,B://h:2``): a comma starts a new pair only before ``key=``."""
    out: dict[str, str] = {}
    for item in re.split(r",(?=[a-z0-9_.]+=)", raw):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{item!r}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def parse_admin_listen(raw: str) -> HostPort | None:
    """``HOST:PORT`` of the admin API, or ``off``."""
    return None if raw.strip().lower() == "off" else parse_host_port(raw)


@dataclass(frozen=True, repr=False)
class BrokerSettings(ProcessSettings):
    """`BrokerSettings.from_env()` reads BROKER_DATA_DIR, BROKER_LISTEN, BROKER_SET..."""

    env_prefix: ClassVar[str] = "BROKER"
    renamed: ClassVar[Mapping[str, tuple[str, ...]]] = {
        name: (f"STREAMSHOP_BROKER_{name.upper()}",)
        for name in ("data_dir", "listen", "advertise", "admin_listen", "set")
    }

    data_dir: Path = setting(Path("./data/broker"), help="log directory")
    listen: HostPort = setting(
        HostPort("127.0.0.1", DEFAULT_PORTS["broker"]), help="Kafka listener HOST:PORT (port 0: any free port)"
    )
    advertise: HostPort | None = setting(None, help="address given to clients in metadata (default: the listener's)")
    admin_listen: HostPort | None = setting(
        HostPort("127.0.0.1", DEFAULT_PORTS["broker-admin"]),
        parse=parse_admin_listen,
        help="admin HTTP HOST:PORT, or off",
    )
    set: Mapping[str, str] = setting(
        default_factory=dict,
        parse=parse_sets,
        help="broker settings and topic defaults by Kafka's names, KEY=VALUE,...",
    )
    durability: str = setting(
        "fsync",
        choices=DURABILITY_MODES,
        help="when acks=all produce, commits, transactions and share state are answered: after fsync, or once "
        "in the page cache (a machine crash may lose them; a process crash loses nothing): log.durability",
    )

    def to_config(self, extra: Mapping[str, str] | None = None) -> BrokerConfig:
        """The broker's configuration; `extra` settings (``--set``) over ``BROKER_SET``, and the
        durability other than the default as log.durability (a --set of it must agree).
        `kit.settings.ConfigError` for an unknown or invalid Kafka setting."""
        settings = {**self.set, **(extra or {})}
        if self.durability != BROKER_SETTINGS["log.durability"].default:
            given = settings.setdefault("log.durability", self.durability)
            if given != self.durability:
                raise ConfigError(f"log.durability={given} contradicts durability {self.durability}")
        return BrokerConfig(
            data_dir=self.data_dir,
            listen=(self.listen.host, self.listen.port),
            advertise=(self.advertise.host, self.advertise.port) if self.advertise else None,
            admin_listen=(self.admin_listen.host, self.admin_listen.port) if self.admin_listen else None,
            settings=settings,
        )
