"""The `streamshop` command's own settings: the defaults of its console tools, from
``STREAMSHOP_*`` variables (kit.settings), the same scheme as every process's."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from contracts.ports import DEFAULT_PORTS
from kit.settings import ProcessSettings, parse_bootstrap, secret, setting

__all__ = ["CliSettings"]


@dataclass(frozen=True, repr=False)
class CliSettings(ProcessSettings):
    """`CliSettings.from_env()` reads STREAMSHOP_BOOTSTRAP_SERVERS, STREAMSHOP_REGISTRY_URL..."""

    env_prefix: ClassVar[str] = "STREAMSHOP"

    bootstrap_servers: str = setting(
        f"127.0.0.1:{DEFAULT_PORTS['broker']}", parse=parse_bootstrap, help="the console tools' Kafka cluster"
    )
    registry_url: str = setting(f"http://127.0.0.1:{DEFAULT_PORTS['registry']}", help="the console tools' registry")
    api_key: str | None = secret(help="the key `streamshop demo` and Locust send to a secured stack")
    env_file: Path | None = setting(None, help="a file of NAME=VALUE lines applied over the environment first")
    kafka_cache: Path | None = setting(None, help="where Apache Kafka's jars are kept (default .cache/apache-kafka)")
