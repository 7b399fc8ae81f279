"""Settings of the orders service, from ``ORDERS_*`` environment variables."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from services.common.config import DEFAULT_PORTS, OutboxServiceConfig, setting

__all__ = ["OrdersConfig"]


@dataclass(frozen=True, repr=False)
class OrdersConfig(OutboxServiceConfig):
    """`OrdersConfig.from_env()` reads ORDERS_PORT, ORDERS_BOOTSTRAP_SERVERS, ORDERS_DATABASE_PATH..."""

    service_name: ClassVar[str] = "orders"

    port: int = setting(DEFAULT_PORTS["orders"], help="HTTP port")
    database_path: Path = setting(Path("data/orders.db"), help="SQLite database file (when no DATABASE_URL)")
    topic: str = setting("orders", help="topic of the order events")
    list_limit_max: int = setting(500, help="largest page of GET /orders")
