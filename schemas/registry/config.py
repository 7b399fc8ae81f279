"""Settings of the schema registry: one frozen object, built from arguments or from
environment variables prefixed `STREAMSHOP_REGISTRY_` (compose sets only those)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from schemas.kafka_security import KafkaSecurity
from schemas.registry.compatibility import Level

ENV_PREFIX = "STREAMSHOP_REGISTRY_"
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_TOPIC = "_schemas"


class ConfigError(ValueError):
    """A setting that cannot be used."""


def parse_host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.strip().rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"{value!r} is not HOST:PORT")
    return host or "0.0.0.0", int(port)


@dataclass(frozen=True)
class RegistryConfig:
    """`bootstrap`: the broker (Kafka bootstrap servers, comma-separated); `listen`: the HTTP
    address; `topic`: the compacted topic holding every schema, config and mode record."""

    bootstrap: str = DEFAULT_BOOTSTRAP
    listen: tuple[str, int] = ("127.0.0.1", 8081)
    topic: str = DEFAULT_TOPIC
    # As Confluent's kafkastore.topic.replication.factor: the topic gets this many replicas, or
    # as many as there are live brokers when fewer (one on the bundled broker).
    topic_replication_factor: int = 3
    default_compatibility: Level = Level.BACKWARD
    # How long start-up may wait for the broker (topic creation and replay of the topic).
    startup_timeout: float = 60.0
    # How long one write may take: produce, then read our own record back.
    write_timeout: float = 15.0
    # Attempts of one write that loses id/version races against other registry instances.
    write_attempts: int = 20
    client_id: str = "streamshop-registry"
    # How its Kafka clients authenticate (STREAMSHOP_REGISTRY_KAFKA_*, as the services').
    kafka: KafkaSecurity = field(default_factory=KafkaSecurity)
    # HTTP basic auth: a users file (schemas.registry.auth) turns it on; None serves everyone.
    users_file: Path | None = None
    # HTTPS: the server's certificate chain and key (PEM); both or neither.
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None

    def __post_init__(self) -> None:
        if not self.bootstrap.strip():
            raise ConfigError("bootstrap servers must not be empty")
        if not self.topic:
            raise ConfigError("topic must not be empty")
        if self.topic_replication_factor < 1:
            raise ConfigError("topic replication factor must be at least 1")
        if self.startup_timeout <= 0 or self.write_timeout <= 0 or self.write_attempts < 1:
            raise ConfigError("timeouts and attempts must be positive")
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ConfigError("HTTPS needs both a certificate file and a key file")

    @property
    def url(self) -> str:
        host, port = self.listen
        return f"{self.scheme}://{host}:{port}"

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_certfile is not None else "http"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> RegistryConfig:
        """Settings from `STREAMSHOP_REGISTRY_*` variables (BOOTSTRAP, LISTEN, TOPIC,
        TOPIC_REPLICATION_FACTOR, DEFAULT_COMPATIBILITY, STARTUP_TIMEOUT, WRITE_TIMEOUT,
        USERS_FILE, SSL_CERTFILE, SSL_KEYFILE and the KAFKA_* client security settings);
        `overrides` win."""
        env = os.environ if env is None else env

        def get(name: str) -> str | None:
            value = env.get(ENV_PREFIX + name)
            return value if value not in (None, "") else None

        values: dict[str, object] = {}
        if (bootstrap := get("BOOTSTRAP")) is not None:
            values["bootstrap"] = bootstrap
        if (listen := get("LISTEN")) is not None:
            values["listen"] = parse_host_port(listen)
        if (topic := get("TOPIC")) is not None:
            values["topic"] = topic
        if (rf := get("TOPIC_REPLICATION_FACTOR")) is not None:
            try:
                values["topic_replication_factor"] = int(rf)
            except ValueError as e:
                raise ConfigError(f"{ENV_PREFIX}TOPIC_REPLICATION_FACTOR: {rf!r} is not a number") from e
        if (level := get("DEFAULT_COMPATIBILITY")) is not None:
            try:
                values["default_compatibility"] = Level(level.upper())
            except ValueError as e:
                raise ConfigError(f"{ENV_PREFIX}DEFAULT_COMPATIBILITY: {level!r} is not a compatibility level") from e
        for name in ("STARTUP_TIMEOUT", "WRITE_TIMEOUT"):
            if (raw := get(name)) is not None:
                try:
                    values[name.lower()] = float(raw)
                except ValueError as e:
                    raise ConfigError(f"{ENV_PREFIX}{name}: {raw!r} is not a number") from e
        for name in ("USERS_FILE", "SSL_CERTFILE", "SSL_KEYFILE"):
            if (raw := get(name)) is not None:
                values[name.lower()] = Path(raw)
        try:
            values["kafka"] = KafkaSecurity.from_env(env, ENV_PREFIX)
        except ValueError as e:
            raise ConfigError(f"{ENV_PREFIX}KAFKA_*: {e}") from e
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]
