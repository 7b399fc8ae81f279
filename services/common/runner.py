"""Running a service process: logging (shipped to the logs.* topics when enabled) and the
aiohttp server, the same way for every service."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from aiohttp import web

from services.common.config import ConfigError, ServiceConfig
from services.common.log_shipper import LogShipper
from services.common.logging import configure_logging, get_logger

C = TypeVar("C", bound=ServiceConfig)


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


def serve_app(config: C, create_app: Callable[[C, LogShipper | None], web.Application]) -> int:
    """Configure logging, log the (masked) config, and serve until SIGINT/SIGTERM."""
    shipper = build_shipper(config)
    configure_logging(level=config.log_level, fmt=config.log_format, shipper=shipper)
    get_logger(f"services.{config.service_name}").info("config", **config.as_log_dict())
    web.run_app(create_app(config, shipper), host=config.listen, port=config.port, print=None, access_log=None)
    return 0


def _default(config_cls: type[ServiceConfig], name: str) -> object:
    return next(f.default for f in dataclasses.fields(config_cls) if f.name == name)


def add_port_database_arguments(parser: argparse.ArgumentParser, config_cls: type[ServiceConfig]) -> None:
    """``--port`` and ``--database``, the overrides `run_from_args` applies."""
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


def run_from_args(
    args: argparse.Namespace,
    config_cls: type[C],
    create_app: Callable[[C, LogShipper | None], web.Application],
) -> int:
    """Settings from the environment (checked), ``--port`` and ``--database`` of `args` over
    them; serve until SIGINT/SIGTERM.  2 on invalid configuration."""
    try:
        config = config_cls.from_env()
        config.check()
    except ConfigError as e:
        sys.stderr.write(f"{config_cls.service_name}: {e}\n")
        return 2
    overrides: dict[str, object] = {}
    if getattr(args, "port", None) is not None:
        overrides["port"] = args.port
    if getattr(args, "database", None) is not None:
        overrides["database_path"] = Path(args.database)
    config = dataclasses.replace(config, **overrides)  # type: ignore[arg-type]
    return serve_app(config, create_app)
