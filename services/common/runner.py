"""Running a service process: logging (shipped to the logs.* topics when enabled) and the
aiohttp server, the same way for every service."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from aiohttp import web

from services.common.config import ServiceConfig
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
