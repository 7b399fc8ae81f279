"""Settings of the schema registry, from ``REGISTRY_*`` variables (kit.settings), the same scheme
as every other process: ``REGISTRY_LISTEN`` and ``REGISTRY_PORT``, ``REGISTRY_BOOTSTRAP_SERVERS``,
the ``REGISTRY_KAFKA_*`` client security settings, ``REGISTRY_SSL_CERTFILE``/``KEYFILE`` for HTTPS.

The names it read before (``STREAMSHOP_REGISTRY_*``, ``STREAMSHOP_REGISTRY_BOOTSTRAP``, and
``STREAMSHOP_REGISTRY_LISTEN`` as ``HOST:PORT``) still work and are logged as deprecated.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Self

from contracts.ports import DEFAULT_PORTS
from kit.settings import ConfigError, HttpSettings, KafkaClientSettings, parse_bootstrap, parse_host_port, setting
from registry.levels import Level

__all__ = ["DEFAULT_TOPIC", "ConfigError", "RegistryConfig"]

DEFAULT_TOPIC = "_schemas"
_OLD_LISTEN = "STREAMSHOP_REGISTRY_LISTEN"


@dataclass(frozen=True, repr=False)
class RegistryConfig(HttpSettings, KafkaClientSettings):
    """`RegistryConfig.from_env()` reads REGISTRY_PORT, REGISTRY_BOOTSTRAP_SERVERS, REGISTRY_TOPIC..."""

    service_name: ClassVar[str] = "registry"
    env_prefix: ClassVar[str] = "REGISTRY"
    renamed: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "bootstrap_servers": ("STREAMSHOP_REGISTRY_BOOTSTRAP",),
        # HOST:PORT in one variable before: read apart (from_env), listed here for the docs.
        "listen": (_OLD_LISTEN,),
        "port": (_OLD_LISTEN,),
        **{
            name: (f"STREAMSHOP_REGISTRY_{name.upper()}",)
            for name in (
                *("topic", "topic_replication_factor", "default_compatibility", "startup_timeout", "write_timeout"),
                *("users_file", "ssl_certfile", "ssl_keyfile"),
                *(f.name for f in dataclasses.fields(KafkaClientSettings) if f.name.startswith("kafka_")),
            )
        },
    }

    port: int = setting(DEFAULT_PORTS["registry"], minimum=0, maximum=65535, help="HTTP port (0: any free port)")
    bootstrap_servers: str = setting(
        f"127.0.0.1:{DEFAULT_PORTS['broker']}",
        parse=parse_bootstrap,
        help="Kafka bootstrap servers, comma list",
    )
    topic: str = setting(DEFAULT_TOPIC, help="the compacted topic holding every schema, config and mode record")
    # As Confluent's kafkastore.topic.replication.factor: the topic gets this many replicas, or
    # as many as there are live brokers when fewer (one on the bundled broker).
    topic_replication_factor: int = setting(3, minimum=1, help="replicas of the schemas topic (at most the brokers)")
    default_compatibility: Level = setting(Level.BACKWARD, help="compatibility level of subjects without their own")
    startup_timeout: float = setting(60.0, minimum=0.001, help="seconds start-up may wait for the broker")
    write_timeout: float = setting(15.0, minimum=0.001, help="seconds one write may take (produce, read back)")
    client_id: str = setting("streamshop-registry", help="the Kafka clients' client.id")
    # The primary election (registry.election), as Confluent's schema.registry.group.id and
    # leader.eligibility: instances of one group elect one writer; the others forward writes to it.
    group_id: str = setting("schema-registry", help="the group whose members elect the primary (one writer)")
    primary_eligible: bool = setting(True, help="whether this instance may be elected primary")
    advertised_url: str | None = setting(
        None, help="the URL other instances forward writes to (default: the listen address and bound port)"
    )
    peer_ssl_cafile: Path | None = setting(None, help="CA certificates that sign other instances' HTTPS (PEM)")
    session_timeout_ms: int = setting(
        10_000, minimum=1, help="an instance that sends no heartbeat this long leaves the group (and its role)"
    )
    heartbeat_interval_ms: int = setting(1_000, minimum=1, help="how often an instance heartbeats to the group")
    # HTTP basic auth: a users file (kit.users) turns it on; None serves everyone.
    users_file: Path | None = setting(None, help="users file for HTTP basic auth (none: open)")
    login_throttle_max_s: float = setting(
        30.0,
        minimum=0,
        help="failed logins: the longest a login is then refused unchecked, per user and address, per address"
        " and per user (docs/security.md; 0: no throttle)",
    )

    def check(self) -> None:
        problems = []
        if not self.topic:
            problems.append(f"{self.env_name('topic')}: must not be empty")
        if not self.group_id:
            problems.append(f"{self.env_name('group_id')}: must not be empty")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            problems.append(f"{self.env_name('heartbeat_interval_ms')}: must be below the session timeout")
        if problems:
            raise ConfigError(problems)

    @property
    def url(self) -> str:
        return self.http_url

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        prefix: str | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> Self:
        """As `Settings.from_env`; the old ``STREAMSHOP_REGISTRY_LISTEN=HOST:PORT`` fills
        ``LISTEN`` and ``PORT`` where these are unset."""
        env = os.environ if environ is None else environ
        old = env.get(_OLD_LISTEN, "").strip()
        notes: list[str] = []
        if old:
            try:
                address = parse_host_port(old)
            except ValueError as e:
                raise ConfigError([f"{_OLD_LISTEN}: {e}"]) from None
            env = {**env}
            env.setdefault(cls.env_name("listen", prefix), address.host)
            env.setdefault(cls.env_name("port", prefix), str(address.port))
            notes.append(f"{_OLD_LISTEN} is deprecated: set {cls.env_name('listen')} and {cls.env_name('port')}")
        settings = super().from_env(env, prefix=prefix, overrides=overrides)
        if notes:
            object.__setattr__(settings, "deprecations", (*settings.deprecations, *notes))
        return settings
