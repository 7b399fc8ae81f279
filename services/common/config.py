"""Service settings from environment variables with a per-service prefix.

A service declares its settings as a frozen dataclass deriving from `ServiceConfig`, sets its
name (which gives the prefix) and overrides the defaults that differ, e.g. its port::

    @dataclass(frozen=True)
    class OrdersConfig(ServiceConfig):
        service_name: ClassVar[str] = "orders"
        port: int = DEFAULT_PORTS["orders"]
        database_path: Path = Path("data/orders.db")

    config = OrdersConfig.from_env()   # reads ORDERS_PORT, ORDERS_BOOTSTRAP_SERVERS, ...

Each field `name` is read from ``<PREFIX>_<NAME>`` and parsed by its type hint (str, int, float,
bool, Path, tuple[str, ...] as a comma list, and ``X | None``); every bad variable is reported at
once, by name.  Fields made with `secret()` never appear in repr() or in `as_log_dict()`.

Moving to Apache Kafka is only a matter of env vars: `bootstrap_servers` plus, for a secured
cluster, the ``KAFKA_SECURITY_PROTOCOL`` / ``KAFKA_SASL_*`` / ``KAFKA_SSL_*`` settings, which
`kafka_client_kwargs()` passes through to aiokafka unchanged.
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import ssl
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Self

from schemas.kafka_security import MECHANISMS, PROTOCOLS, KafkaSecurity

__all__ = [
    "DEFAULT_PORTS",
    "ConfigError",
    "ServiceConfig",
    "secret",
    "setting",
]

# DESIGN.md "Ports (defaults)".
DEFAULT_PORTS: Mapping[str, int] = {
    "broker": 9092,
    "broker-admin": 9644,
    "registry": 8081,
    "orders": 8001,
    "otp": 8002,
    "logs": 8003,
    "sms-sender": 8004,
    "email-sender": 8005,
    "catcher": 8025,
    "dashboard": 8080,
    "smtp": 1025,
    "locust": 8089,
}

MASK = "***"
_DEFAULT_DATABASE = Path("data/service.db")  # subclasses override: data/<service>.db
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
# user:password@ in a URL is a secret too, wherever it appears.
_URL_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:/@\s]*):[^@/\s]*@")


class ConfigError(ValueError):
    """One or more environment variables are invalid; `problems` names each variable."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid configuration: " + "; ".join(problems))


def setting(default: Any, *, choices: tuple[str, ...] | None = None, help: str = "") -> Any:
    """A plain field with allowed values (`choices`, compared case-insensitively) and a help text."""
    return field(default=default, metadata={"choices": choices, "help": help})


def secret(default: str | None = None, *, help: str = "") -> Any:
    """A field whose value is never shown: repr=False keeps it out of the dataclass repr of
    subclasses too, and `as_log_dict()` masks it."""
    return field(default=default, repr=False, metadata={"secret": True, "help": help})


def _default_instance_id() -> str:
    # Unique among running instances of a service (DESIGN: the key of its shipped logs).
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True, repr=False)
class ServiceConfig:
    """Settings every service shares; subclasses add their own fields and defaults."""

    service_name: ClassVar[str] = "service"
    # Empty: derived from service_name (``sms-sender`` -> ``SMS_SENDER``).
    env_prefix: ClassVar[str] = ""

    listen: str = setting("127.0.0.1", help="interface the HTTP server binds")
    port: int = setting(8000, help="HTTP port")
    bootstrap_servers: str = setting(f"127.0.0.1:{DEFAULT_PORTS['broker']}", help="Kafka bootstrap servers, comma list")
    registry_url: str = setting(f"http://127.0.0.1:{DEFAULT_PORTS['registry']}", help="schema registry URL")
    registry_username: str | None = None
    registry_password: str | None = secret()
    registry_ssl_cafile: Path | None = None  # a private CA for an https registry URL
    database_path: Path = setting(_DEFAULT_DATABASE, help="SQLite database file")  # noqa: RUF009 - Path is immutable
    instance_id: str = field(default_factory=_default_instance_id)
    log_level: str = setting("info", choices=("debug", "info", "warning", "error", "critical"))
    log_format: str = setting("auto", choices=("auto", "json", "console"), help="auto: console on a TTY")
    log_shipping: bool = setting(True, help="ship own logs to the logs.* topics")
    log_buffer_size: int = setting(10_000, help="log records buffered for shipping before drops")
    client_max_size: int = setting(1024 * 1024, help="largest accepted request body, bytes")
    # Callers admitted by API key (services.common.auth); None: the service is open.
    api_keys_file: Path | None = None
    kafka_security_protocol: str = setting("PLAINTEXT", choices=PROTOCOLS, help="as Kafka's security.protocol")
    kafka_sasl_mechanism: str = setting("PLAIN", choices=MECHANISMS)
    kafka_sasl_username: str | None = None
    kafka_sasl_password: str | None = secret()
    kafka_ssl_cafile: Path | None = None
    kafka_ssl_certfile: Path | None = None
    kafka_ssl_keyfile: Path | None = None
    kafka_ssl_key_password: str | None = secret()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # @dataclass only adds methods a class does not define itself: defining the masking
        # repr on each subclass keeps a plain @dataclass subclass from printing URL passwords.
        cls.__repr__ = ServiceConfig.__repr__  # type: ignore[method-assign]
        cls.__str__ = ServiceConfig.__repr__  # type: ignore[method-assign,assignment]

    # -- loading ---------------------------------------------------------------------------------

    @classmethod
    def prefix(cls) -> str:
        return cls.env_prefix or re.sub(r"[^A-Z0-9]+", "_", cls.service_name.upper())

    @classmethod
    def env_name(cls, field_name: str, prefix: str | None = None) -> str:
        return f"{prefix or cls.prefix()}_{field_name.upper()}"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, prefix: str | None = None) -> Self:
        """Read every field from ``<PREFIX>_<FIELD>``; unset variables keep the default."""
        env = os.environ if environ is None else environ
        hints = typing.get_type_hints(cls)
        values: dict[str, Any] = {}
        problems: list[str] = []
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            name = cls.env_name(f.name, prefix)
            raw = env.get(name)
            if raw is None:
                continue
            try:
                values[f.name] = _canonical(_parse(raw, hints[f.name]), f.metadata.get("choices"))
            except ValueError as e:
                problems.append(f"{name}: {e}")
        if problems:
            raise ConfigError(problems)
        return cls(**values)

    # -- use -------------------------------------------------------------------------------------

    def check(self) -> None:
        """`ConfigError` for settings that parse but cannot work together; none by default."""

    @property
    def http_url(self) -> str:
        host = "127.0.0.1" if self.listen in ("0.0.0.0", "::", "") else self.listen
        return f"http://{host}:{self.port}"

    @property
    def kafka_security(self) -> KafkaSecurity:
        return KafkaSecurity(
            protocol=self.kafka_security_protocol,
            mechanism=self.kafka_sasl_mechanism,
            username=self.kafka_sasl_username,
            password=self.kafka_sasl_password,
            cafile=self.kafka_ssl_cafile,
            certfile=self.kafka_ssl_certfile,
            keyfile=self.kafka_ssl_keyfile,
            key_password=self.kafka_ssl_key_password,
        )

    def kafka_client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for any aiokafka client (producer, consumer, admin): bootstrap
        servers and security settings, so a secured Apache Kafka needs env vars only."""
        return {"bootstrap_servers": self.bootstrap_servers, **self.kafka_security.aiokafka_kwargs()}

    def registry_options(self) -> dict[str, Any]:
        """`auth` and `ssl_context` for a `RegistryClient` (basic auth, a private CA)."""
        auth = (self.registry_username, self.registry_password or "") if self.registry_username else None
        context = ssl.create_default_context(cafile=str(self.registry_ssl_cafile)) if self.registry_ssl_cafile else None
        return {"auth": auth, "ssl_context": context}

    def kafka_ssl_context(self) -> ssl.SSLContext:
        return self.kafka_security.ssl_context()

    def as_log_dict(self) -> dict[str, Any]:
        """Every setting, secrets masked (set ones as ``***``), for `log.info("config", **...)`."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.metadata.get("secret"):
                value = None if value is None else MASK
            elif isinstance(value, str):
                value = _URL_USERINFO.sub(rf"\g<scheme>\g<user>:{MASK}@", value)
            elif isinstance(value, Path):
                value = str(value)
            out[f.name] = value
        return out

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.as_log_dict().items())
        return f"{type(self).__name__}({inner})"

    __str__ = __repr__


def _canonical(value: Any, choices: tuple[str, ...] | None) -> Any:
    """The allowed spelling of `value` (``sasl_ssl`` -> ``SASL_SSL``); ValueError if not allowed."""
    if not choices or not isinstance(value, str):
        return value
    for choice in choices:
        if choice.upper() == value.strip().upper():
            return choice
    raise ValueError(f"expected one of {', '.join(choices)}, got {value!r}")


def _parse(raw: str, hint: Any) -> Any:
    """Parse one variable by the field's type hint; ValueError says what was expected."""
    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        if raw.strip() == "":
            return None  # an empty variable unsets an optional setting
        (inner,) = [a for a in args if a is not type(None)]
        return _parse(raw, inner)
    if hint is bool:
        text = raw.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ValueError(f"expected a boolean (true/false, 1/0, yes/no, on/off), got {raw!r}")
    if hint is int:
        try:
            return int(raw.strip().replace("_", ""))
        except ValueError:
            raise ValueError(f"expected an integer, got {raw!r}") from None
    if hint is float:
        try:
            return float(raw.strip())
        except ValueError:
            raise ValueError(f"expected a number, got {raw!r}") from None
    if hint is Path:
        if not raw.strip():
            raise ValueError("expected a path, got an empty value")
        return Path(raw.strip())
    if typing.get_origin(hint) is tuple:
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    if hint is str:
        return raw
    raise TypeError(f"unsupported setting type {hint!r}")
