"""How a Kafka client of streamshop authenticates: Kafka's `security.protocol`, the SASL
mechanism and credentials, and the TLS files, with one mapping to each client library.

    security = KafkaSecurity.from_env(os.environ, "STREAMSHOP_REGISTRY_")
    AIOKafkaProducer(bootstrap_servers=..., **security.aiokafka_kwargs())
    Producer({"bootstrap.servers": ..., **security.librdkafka_config()})

The variables are ``<PREFIX>KAFKA_SECURITY_PROTOCOL``, ``KAFKA_SASL_MECHANISM``,
``KAFKA_SASL_USERNAME``, ``KAFKA_SASL_PASSWORD``, ``KAFKA_SSL_CAFILE``, ``KAFKA_SSL_CERTFILE``,
``KAFKA_SSL_KEYFILE`` and ``KAFKA_SSL_KEY_PASSWORD``: the same names the services read, so one
set of settings serves the bundled broker and a secured Apache Kafka cluster alike.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["MECHANISMS", "PROTOCOLS", "KafkaSecurity"]

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


# ``<prefix>KAFKA_<NAME>`` -> the field it sets.
_VARIABLES = {
    "SECURITY_PROTOCOL": "protocol",
    "SASL_MECHANISM": "mechanism",
    "SASL_USERNAME": "username",
    "SASL_PASSWORD": "password",
    "SSL_CAFILE": "cafile",
    "SSL_CERTFILE": "certfile",
    "SSL_KEYFILE": "keyfile",
    "SSL_KEY_PASSWORD": "key_password",
}


@dataclass(frozen=True)
class KafkaSecurity:
    protocol: str = "PLAINTEXT"
    mechanism: str = "PLAIN"
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    cafile: Path | None = None
    certfile: Path | None = None
    keyfile: Path | None = None
    key_password: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"security protocol {self.protocol!r}: expected one of {', '.join(PROTOCOLS)}")
        if self.sasl and self.mechanism not in MECHANISMS:
            raise ValueError(f"SASL mechanism {self.mechanism!r}: expected one of {', '.join(MECHANISMS)}")
        if self.sasl and not self.username:
            raise ValueError(f"{self.protocol} needs a SASL username and password")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.protocol.endswith("SSL")

    @staticmethod
    def settings(prefix: str) -> frozenset[str]:
        """Every variable `from_env(…, prefix)` reads."""
        return frozenset(f"{prefix}KAFKA_{name}" for name in _VARIABLES)

    @classmethod
    def from_env(cls, env: Mapping[str, str], prefix: str) -> KafkaSecurity:
        """The settings under ``<prefix>KAFKA_*``; unset or empty variables keep the defaults."""

        def get(name: str) -> str | None:
            value = env.get(f"{prefix}KAFKA_{name}", "").strip()
            return value or None

        def path(name: str) -> Path | None:
            value = get(name)
            return Path(value) if value else None

        return cls(
            protocol=(get("SECURITY_PROTOCOL") or "PLAINTEXT").upper(),
            mechanism=(get("SASL_MECHANISM") or "PLAIN").upper(),
            username=get("SASL_USERNAME"),
            password=env.get(f"{prefix}KAFKA_SASL_PASSWORD"),
            cafile=path("SSL_CAFILE"),
            certfile=path("SSL_CERTFILE"),
            keyfile=path("SSL_KEYFILE"),
            key_password=env.get(f"{prefix}KAFKA_SSL_KEY_PASSWORD") or None,
        )

    def ssl_context(self) -> ssl.SSLContext:
        """A verifying context (system CAs unless `cafile`), with the client certificate when
        one is configured (mTLS)."""
        context = ssl.create_default_context(cafile=str(self.cafile) if self.cafile else None)
        if self.certfile is not None:
            context.load_cert_chain(str(self.certfile), str(self.keyfile) if self.keyfile else None, self.key_password)
        return context

    def aiokafka_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for any aiokafka client (producer, consumer, admin)."""
        kwargs: dict[str, Any] = {"security_protocol": self.protocol}
        if self.sasl:
            kwargs["sasl_mechanism"] = self.mechanism
            kwargs["sasl_plain_username"] = self.username
            kwargs["sasl_plain_password"] = self.password or ""
        if self.tls:
            kwargs["ssl_context"] = self.ssl_context()
        return kwargs

    def librdkafka_config(self) -> dict[str, str]:
        """The same settings as librdkafka properties (confluent-kafka, the analytics job)."""
        conf = {"security.protocol": self.protocol.lower()}
        if self.sasl:
            conf |= {
                "sasl.mechanism": self.mechanism,
                "sasl.username": self.username or "",
                "sasl.password": self.password or "",
            }
        if self.tls:
            files = {"ssl.ca.location": self.cafile, "ssl.certificate.location": self.certfile}
            files["ssl.key.location"] = self.keyfile
            conf |= {name: str(value) for name, value in files.items() if value is not None}
            if self.key_password:
                conf["ssl.key.password"] = self.key_password
        return conf

    def env(self, prefix: str) -> dict[str, str]:
        """The variables `from_env(…, prefix)` reads back into these settings."""
        values = {name: getattr(self, attribute) for name, attribute in _VARIABLES.items()}
        return {f"{prefix}KAFKA_{name}": str(value) for name, value in values.items() if value is not None}
