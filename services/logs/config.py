"""Settings of the logs service, from ``LOGS_*`` environment variables."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from services.common.config import DEFAULT_PORTS, ServiceConfig, setting

__all__ = ["LOG_TOPICS", "LogsConfig"]

LOG_TOPICS: tuple[str, ...] = ("logs.app", "logs.ingress", "logs.db")


@dataclass(frozen=True, repr=False)
class LogsConfig(ServiceConfig):
    service_name: ClassVar[str] = "logs"

    port: int = setting(DEFAULT_PORTS["logs"], help="HTTP port")
    database_path: Path = setting(Path("data/logs.db"), help="SQLite database file (when no DATABASE_URL)")
    group_id: str = setting("log-indexer", help="consumer group of the indexer")
    topics: tuple[str, ...] = setting(LOG_TOPICS, help="topics indexed, comma list")
    topic_partitions: int = setting(3, help="partitions of each log topic when the service creates it")
    topic_replication_factor: int = setting(3, help="replicas of the topics it creates, or every broker when fewer")
    max_records: int = setting(1_000_000, help="retention: the oldest records beyond this many are deleted")
    dedupe_window_s: int = setting(7 * 24 * 3600, help="how long processed event ids are remembered")
    commit_every: int = setting(200, help="commit offsets every N records (or every commit_interval_ms)")
    commit_interval_ms: int = setting(1000, help="commit offsets at least this often, ms")
    max_tail_clients: int = setting(100, help="live tails (GET /logs/tail) open at once; more get 503")
    tail_keepalive_s: float = setting(15.0, help="seconds between keepalive comments on an idle live tail")
