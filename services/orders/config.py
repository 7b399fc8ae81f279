"""Settings of the orders service, from ``ORDERS_*`` environment variables."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from services.common.config import DEFAULT_PORTS, ServiceConfig, setting

__all__ = ["OrdersConfig"]


@dataclass(frozen=True, repr=False)
class OrdersConfig(ServiceConfig):
    """`OrdersConfig.from_env()` reads ORDERS_PORT, ORDERS_BOOTSTRAP_SERVERS, ORDERS_DATABASE_PATH..."""

    service_name: ClassVar[str] = "orders"

    port: int = setting(DEFAULT_PORTS["orders"], help="HTTP port")
    database_path: Path = setting(Path("data/orders.db"), help="SQLite database file")  # noqa: RUF009
    topic: str = setting("orders", help="topic of the order events")
    topic_partitions: int = setting(6, help="partitions of the topic when the service creates it")
    topic_replication_factor: int = setting(1, help="replication factor when the service creates the topic")
    relay_poll_interval: float = setting(1.0, help="seconds between outbox polls when not woken")
    list_limit_max: int = setting(500, help="largest page of GET /orders")
