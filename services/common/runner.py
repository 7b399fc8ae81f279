"""Running a service process on the kit's `main` (kit.process): its settings from ``<PREFIX>_*``
variables with the command's flags over them, its own logs shipped to the ``logs.*`` topics when
enabled, and the aiohttp server until SIGINT/SIGTERM.

    def run(args: argparse.Namespace) -> int:
        return run_service(OrdersConfig, create_app, args, {"port": "port", "database": "database_path"})
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from aiohttp import web

from kit import process
from kit.api_keys import ApiKeys
from kit.settings import ConfigError
from services.common.config import ServiceConfig
from services.common.log_shipper import LogShipper

__all__ = ["PORT_DATABASE", "add_port_database_arguments", "build_shipper", "run_service"]

C = TypeVar("C", bound=ServiceConfig)

# The flags most services take: argparse dest -> setting.
PORT_DATABASE = {"port": "port", "database": "database_path"}


def build_shipper(config: ServiceConfig) -> LogShipper | None:
    """The service's own log shipper, or None when `<PREFIX>_LOG_SHIPPING` is off."""
    if not config.log_shipping:
        return None
    return LogShipper(
        service=config.service_name,
        instance=config.instance_id,
        capacity=config.log_buffer_size,
        level=config.log_level,
    )


def load_service_config(
    config_cls: type[C],
    args: argparse.Namespace | None = None,
    options: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> C:
    """The settings, flags of `args` named by `options` (dest -> setting) over the variables;
    `ConfigError` for anything that cannot work, API keys file and Kafka security included."""
    overrides = {name: getattr(args, dest, None) for dest, name in (options or {}).items()} if args else {}
    config = config_cls.from_env(environ, overrides=overrides)
    problems = config.check_kafka_security()
    if config.api_keys_file is not None:
        try:
            ApiKeys.load(config.api_keys_file)
        except ValueError as e:
            problems.append(f"{config.env_name('api_keys_file')}: {e}")
    if problems:
        raise ConfigError(problems)
    return config


def run_service(
    config_cls: type[C],
    create_app: Callable[[C, LogShipper | None], web.Application],
    args: argparse.Namespace | None = None,
    options: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    """Settings checked (2 when one is invalid), logging (shipped when enabled), serve until
    SIGINT/SIGTERM."""

    def body() -> int:
        config = load_service_config(config_cls, args, options, environ)
        shipper = build_shipper(config)
        return process.serve_app(config, lambda: create_app(config, shipper), tap=shipper)

    return process.main(f"streamshop {config_cls.service_name}", body)


def _default(config_cls: type[ServiceConfig], name: str) -> object:
    return next(f.default for f in dataclasses.fields(config_cls) if f.name == name)


def add_port_database_arguments(parser: argparse.ArgumentParser, config_cls: type[ServiceConfig]) -> None:
    """``--port`` and ``--database``, the overrides `PORT_DATABASE` names."""
    port, database = _default(config_cls, "port"), _default(config_cls, "database_path")
    parser.add_argument(
        "--port", type=int, default=None, help=f"HTTP port (env {config_cls.env_name('port')}; default {port})"
    )
    parser.add_argument(
        "--database",
        type=Path,
        default=None,
        help=f"SQLite file (env {config_cls.env_name('database_path')}; default {database})",
    )
