"""The settings every service shares, on the kit's loader (kit.settings).

A service declares its settings as a frozen dataclass deriving from `ServiceConfig`, sets its
name (which gives the prefix) and overrides the defaults that differ, e.g. its port::

    @dataclass(frozen=True, repr=False)
    class OrdersConfig(ServiceConfig):
        service_name: ClassVar[str] = "orders"
        port: int = setting(DEFAULT_PORTS["orders"], help="HTTP port")
        database_path: Path = setting(Path("data/orders.db"), help="SQLite database file (when no DATABASE_URL)")

    config = OrdersConfig.from_env()   # reads ORDERS_PORT, ORDERS_BOOTSTRAP_SERVERS, ...

Moving to Apache Kafka is only a matter of variables: `bootstrap_servers` plus, for a secured
cluster, the ``KAFKA_SECURITY_PROTOCOL`` / ``KAFKA_SASL_*`` / ``KAFKA_SSL_*`` settings of
`KafkaClientSettings`, which `kafka_client_kwargs()` passes through to aiokafka unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from contracts.ports import DEFAULT_PORTS
from kit.settings import ConfigError, HttpSettings, KafkaClientSettings, secret, setting
from kit.tls import client_context

if TYPE_CHECKING:
    from services.common.db import Database

__all__ = ["DEFAULT_PORTS", "ConfigError", "OutboxServiceConfig", "ServiceConfig", "secret", "setting"]

_DEFAULT_DATABASE = Path("data/service.db")  # subclasses override: data/<service>.db


@dataclass(frozen=True, repr=False)
class ServiceConfig(HttpSettings, KafkaClientSettings):
    """Settings every service shares; subclasses add their own fields and defaults."""

    registry_url: str = setting(f"http://127.0.0.1:{DEFAULT_PORTS['registry']}", help="schema registry URL")
    registry_username: str | None = setting(None, help="schema registry user (HTTP basic auth)")
    registry_password: str | None = secret(help="schema registry password")
    registry_ssl_cafile: Path | None = setting(None, help="a private CA for an https registry URL")
    database_path: Path = setting(_DEFAULT_DATABASE, help="SQLite database file (when no DATABASE_URL)")
    database_url: str | None = secret(
        help="PostgreSQL instead of SQLite: postgresql://USER:PASSWORD@HOST:PORT/NAME (instances of a service share it)"
    )
    database_pool_size: int = setting(10, minimum=1, maximum=1000, help="PostgreSQL connections at most")
    database_statement_timeout_ms: int = setting(5000, minimum=1, help="PostgreSQL statement_timeout, ms")
    database_write_queue: int = setting(
        1000, minimum=1, maximum=1_000_000, help="PostgreSQL writes waiting for a transaction at most; more answer 503"
    )
    log_shipping: bool = setting(True, help="ship own logs to the logs.* topics")
    log_buffer_size: int = setting(10_000, minimum=1, help="log records buffered for shipping before drops")
    # Callers admitted by API key (kit.api_keys); None: the service is open.
    api_keys_file: Path | None = setting(None, help="file of the API keys admitted (none: open)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.database_url is not None and urlsplit(self.database_url).scheme not in ("postgresql", "postgres"):
            raise ValueError(
                f"{self.env_name('database_url')}: must be a postgresql://USER:PASSWORD@HOST:PORT/NAME URL"
            )

    def open_database(self) -> Database:
        """The service's database, not yet opened: PostgreSQL when `database_url` is set."""
        # Imported here: reading a service's settings (the broker's image lists them) needs neither.
        if self.database_url is None:
            from services.common.db_sqlite import SqliteDatabase

            return SqliteDatabase(self.database_path)
        from services.common.db_postgres import PostgresDatabase

        return PostgresDatabase(
            self.database_url,
            pool_max=self.database_pool_size,
            statement_timeout_ms=self.database_statement_timeout_ms,
            max_queued_writes=self.database_write_queue,
            application_name=f"{self.service_name}-{self.instance_id}",
        )

    def registry_options(self) -> dict[str, Any]:
        """`auth` and `ssl_context` for a `RegistryClient` (basic auth, a private CA)."""
        auth = (self.registry_username, self.registry_password or "") if self.registry_username else None
        context = client_context(self.registry_ssl_cafile) if self.registry_ssl_cafile else None
        return {"auth": auth, "ssl_context": context}


@dataclass(frozen=True, repr=False)
class OutboxServiceConfig(ServiceConfig):
    """Settings of a service publishing its events to one topic through an outbox; subclasses
    set the defaults of `port`, `database_path` and `topic`."""

    topic: str = setting("events", help="topic of the service's events")
    topic_partitions: int = setting(6, help="partitions of the topic when the service creates it")
    topic_replication_factor: int = setting(3, help="replicas of the topics it creates, or every broker when fewer")
    relay_poll_interval: float = setting(1.0, help="seconds between outbox polls when not woken")
