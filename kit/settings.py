"""Settings of every streamshop process, from environment variables with one prefix per process.

A process declares its settings as a frozen dataclass deriving from `Settings` (or one of the
bases below), names its prefix, and gives each field a default and a help text::

    @dataclass(frozen=True, repr=False)
    class RegistrySettings(HttpSettings, KafkaClientSettings):
        env_prefix: ClassVar[str] = "REGISTRY"
        topic: str = setting("_schemas", help="compacted topic holding every schema")

    settings = RegistrySettings.from_env()   # REGISTRY_PORT, REGISTRY_TOPIC, ...

The scheme is the same everywhere: the process named ``orders`` reads ``ORDERS_<FIELD>``, the
broker ``BROKER_<FIELD>``, the registry ``REGISTRY_<FIELD>``, the ``streamshop`` command's own
defaults ``STREAMSHOP_<FIELD>``.  Each field is parsed by its type hint (str, int, float, bool,
Path, `HostPort`, an `enum.Enum`, tuple[str, ...] as a comma list, ``X | None``) or by its own
`parse`; every bad variable is reported at once, by name, in one `ConfigError`.  Fields made
with `secret()` never appear in repr() or in `as_log_dict()`.  Variables a process read before
(its class's `renamed`) keep working and are reported in `deprecations`, which the process logs
once it has a logger.  Command-line flags override variables through
`from_env(overrides=...)`, so a flag and its variable are checked by the same code.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import re
import socket
import ssl
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Self

from contracts.kafka_security import MECHANISMS, PROTOCOLS, KafkaSecurity
from contracts.ports import DEFAULT_PORTS

__all__ = [
    "ConfigError",
    "HostPort",
    "HttpSettings",
    "KafkaClientSettings",
    "ProcessSettings",
    "SettingInfo",
    "Settings",
    "parse_bootstrap",
    "parse_host_port",
    "parse_host_ports",
    "secret",
    "setting",
]

MASK = "***"
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
# user:password@ in a URL is a secret too, wherever it appears.
_URL_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:/@\s]*):[^@/\s]*@")
_WILDCARDS = ("", "0.0.0.0", "::")


class ConfigError(ValueError):
    """One or more settings are invalid; `problems` names each (by variable or flag)."""

    def __init__(self, problems: str | Iterable[str]) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("; ".join(self.problems))


# -- host:port ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HostPort:
    """A TCP address.  `parse_host_port` is the one parser of ``HOST:PORT`` in the project."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def connect_host(self) -> str:
        """The host a client on the same host dials: a wildcard listen address is loopback."""
        return "127.0.0.1" if self.host in _WILDCARDS else self.host

    def url(self, scheme: str = "http") -> str:
        host = self.connect_host
        return f"{scheme}://[{host}]:{self.port}" if ":" in host else f"{scheme}://{host}:{self.port}"


def parse_host_port(text: str, *, default_host: str = "0.0.0.0") -> HostPort:
    """``HOST:PORT``, ``[IPV6]:PORT`` or ``:PORT`` (`default_host`); the port is 0-65535 (0:
    any free port).  ValueError says what is wrong."""
    raw = text.strip()
    if "://" in raw:  # "PLAINTEXT://host:9092", as Kafka's listeners write it
        raw = raw.split("://", 1)[1]
    if raw.startswith("["):
        host, sep, port = raw[1:].partition("]:")
        if not sep:
            raise ValueError(f"{text!r} is not [IPV6]:PORT")
    else:
        host, sep, port = raw.rpartition(":")
        if not sep or ":" in host:
            raise ValueError(f"{text!r} is not HOST:PORT (an IPv6 host goes in brackets)")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r}: the port must be a number from 0 to 65535")
    if any(c.isspace() for c in host):
        raise ValueError(f"{text!r}: the host has whitespace")
    return HostPort(host or default_host, int(port))


def parse_host_ports(text: str) -> tuple[HostPort, ...]:
    """A comma list of ``HOST:PORT`` (Kafka's bootstrap servers); at least one."""
    items = tuple(parse_host_port(part, default_host="127.0.0.1") for part in text.split(",") if part.strip())
    if not items:
        raise ValueError("expected a comma list of HOST:PORT, got nothing")
    return items


def parse_bootstrap(raw: str) -> str:
    """Kafka bootstrap servers, checked (a comma list of HOST:PORT), as the text clients take."""
    parse_host_ports(raw)
    return ",".join(part.strip() for part in raw.split(",") if part.strip())


# -- fields ------------------------------------------------------------------------------------


def setting(
    default: Any = dataclasses.MISSING,
    *,
    help: str = "",
    choices: tuple[str, ...] | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    parse: Callable[[str], Any] | None = None,
    fallbacks: tuple[str, ...] = (),
    default_factory: Callable[[], Any] | None = None,
) -> Any:
    """A field with its help text and checks: `choices` (compared case-insensitively, given back
    in their own spelling), `minimum`/`maximum` for numbers, a `parse` of its own for a type the
    loader does not know.  `fallbacks` are variables read when its own is unset (another
    process's setting of the same meaning, e.g. ``STREAMSHOP_BOOTSTRAP_SERVERS``)."""
    metadata = {
        "help": help,
        "choices": choices,
        "minimum": minimum,
        "maximum": maximum,
        "parse": parse,
        "fallbacks": fallbacks,
    }
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def secret(default: str | None = None, *, help: str = "") -> Any:
    """A field whose value is never shown: repr=False keeps it out of the dataclass repr of
    subclasses too, and `as_log_dict()` masks it."""
    return field(default=default, repr=False, metadata={"secret": True, "help": help})


@dataclass(frozen=True, slots=True)
class SettingInfo:
    """One variable as `streamshop settings` and docs/settings.md show it."""

    variable: str
    field: str
    type: str
    default: str
    help: str
    secret: bool
    deprecated: tuple[str, ...]
    fallbacks: tuple[str, ...] = ()


# -- the base ----------------------------------------------------------------------------------


@dataclass(frozen=True, repr=False)
class Settings:
    """A process's settings; subclasses add fields and set `env_prefix`."""

    env_prefix: ClassVar[str] = ""
    # Variables a field was read from before the one scheme (``STREAMSHOP_BROKER_LISTEN``), by
    # field: still read when the field's own is unset, and reported.
    renamed: ClassVar[Mapping[str, tuple[str, ...]]] = {}

    # What the loader noticed: deprecated names in use.  Not a setting (init=False).
    deprecations: tuple[str, ...] = field(default=(), init=False, compare=False, metadata={"internal": True})

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # @dataclass only adds methods a class does not define itself: defining the masking
        # repr on each subclass keeps a plain @dataclass subclass from printing passwords.
        cls.__repr__ = Settings.__repr__  # type: ignore[method-assign]
        cls.__str__ = Settings.__repr__  # type: ignore[method-assign,assignment]

    @classmethod
    def prefix(cls) -> str:
        return cls.env_prefix

    @classmethod
    def env_name(cls, field_name: str, prefix: str | None = None) -> str:
        return f"{prefix or cls.prefix()}_{field_name.upper()}"

    @classmethod
    def setting_fields(cls) -> list[dataclasses.Field[Any]]:
        return [f for f in dataclasses.fields(cls) if f.init and not f.metadata.get("internal")]

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        prefix: str | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> Self:
        """Every field from ``<PREFIX>_<FIELD>`` (unset: the default), then `overrides` (parsed
        flags, by field name; None means not given).  `ConfigError` lists every problem; a
        string override is parsed as its variable would be."""
        env = os.environ if environ is None else environ
        own = prefix or cls.prefix()
        hints = typing.get_type_hints(cls)
        values: dict[str, Any] = {}
        problems: list[str] = []
        deprecations: list[str] = []
        for f in cls.setting_fields():
            name = cls.env_name(f.name, own)
            found = cls._lookup(env, f, name, deprecations)
            if found is None:
                continue
            variable, raw = found
            try:
                values[f.name] = _check(_parse(raw, hints[f.name], f.metadata), f.metadata)
            except ValueError as e:
                problems.append(f"{variable}: {e}")
        fields = {f.name: f for f in cls.setting_fields()}
        for key, value in (overrides or {}).items():
            if value is None:
                continue
            if key not in fields:
                raise TypeError(f"{cls.__name__} has no setting {key!r}")
            f = fields[key]
            try:
                values[key] = _check(
                    _parse(value, hints[key], f.metadata) if isinstance(value, str) else value, f.metadata
                )
            except ValueError as e:
                problems.append(f"--{key.replace('_', '-')}: {e}")
        if problems:
            raise ConfigError(problems)
        try:
            settings = cls(**values)
        except ValueError as e:  # a __post_init__ check
            raise ConfigError([str(e)]) from None
        object.__setattr__(settings, "deprecations", tuple(deprecations))
        settings.check()
        return settings

    @classmethod
    def _lookup(
        cls, env: Mapping[str, str], f: dataclasses.Field[Any], name: str, deprecations: list[str]
    ) -> tuple[str, str] | None:
        if (raw := env.get(name)) is not None:
            return name, raw
        for old in cls.renamed.get(f.name, ()):
            if (raw := env.get(old)) is not None:
                deprecations.append(f"{old} is deprecated: set {name}")
                return old, raw
        for other in f.metadata.get("fallbacks", ()):
            if (raw := env.get(other)) is not None and raw.strip():
                return other, raw
        return None

    @classmethod
    def parse_value(cls, field_name: str, raw: str) -> Any:
        """`raw` parsed and checked as the variable of `field_name` would be (for a flag's
        argparse `type`); ValueError says what is wrong."""
        f = next(x for x in cls.setting_fields() if x.name == field_name)
        return _check(_parse(raw, typing.get_type_hints(cls)[field_name], f.metadata), f.metadata)

    def check(self) -> None:
        """`ConfigError` for settings that parse but cannot work together; none by default."""

    # -- showing ---------------------------------------------------------------------------------

    def as_log_dict(self) -> dict[str, Any]:
        """Every setting, secrets masked (set ones as ``***``), for `log.info("config", **...)`."""
        out: dict[str, Any] = {}
        for f in self.setting_fields():
            out[f.name] = _shown(getattr(self, f.name), bool(f.metadata.get("secret")))
        return out

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.as_log_dict().items())
        return f"{type(self).__name__}({inner})"

    __str__ = __repr__

    @classmethod
    def describe(cls, prefix: str | None = None) -> list[SettingInfo]:
        """Every variable this class reads, with its type, default and help."""
        hints = typing.get_type_hints(cls)
        out = []
        for f in cls.setting_fields():
            if f.default is not dataclasses.MISSING:
                default = _shown(f.default, bool(f.metadata.get("secret")))
            elif f.default_factory in (dict, tuple, list):
                default = None
            else:
                default = "(computed)"
            deprecated = tuple(cls.renamed.get(f.name, ()))
            out.append(
                SettingInfo(
                    variable=cls.env_name(f.name, prefix),
                    field=f.name,
                    type=_type_name(hints[f.name], f.metadata.get("choices")),
                    default=""
                    if default is None
                    else str(default)
                    if not isinstance(default, tuple)
                    else ",".join(default),
                    help=f.metadata.get("help", ""),
                    secret=bool(f.metadata.get("secret")),
                    deprecated=deprecated,
                    fallbacks=tuple(f.metadata.get("fallbacks", ())),
                )
            )
        return out


def _shown(value: Any, is_secret: bool) -> Any:
    if is_secret:
        return None if value is None else MASK
    if isinstance(value, str):
        return _URL_USERINFO.sub(rf"\g<scheme>\g<user>:{MASK}@", value)
    if isinstance(value, Path | HostPort):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {k: MASK if "password" in k or "secret" in k else v for k, v in value.items()}
    return value


def _type_name(hint: Any, choices: tuple[str, ...] | None = None) -> str:
    if choices:
        return "one of " + ", ".join(choices)
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        return _type_name(inner[0]) + " (optional)"
    if typing.get_origin(hint) is tuple:
        return "comma list"
    if typing.get_origin(hint) in (Mapping, dict):
        return "KEY=VALUE list"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "one of " + ", ".join(str(m.value) for m in hint)
    names = {str: "text", int: "integer", float: "number", bool: "boolean", Path: "path", HostPort: "HOST:PORT"}
    return names.get(hint, getattr(hint, "__name__", str(hint)))


def _check(value: Any, metadata: Mapping[str, Any]) -> Any:
    """`value` in the allowed spelling of its choices and within its bounds; ValueError if not."""
    choices = metadata.get("choices")
    if choices and isinstance(value, str):
        for choice in choices:
            if choice.upper() == value.strip().upper():
                return choice
        raise ValueError(f"expected one of {', '.join(choices)}, got {value!r}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        low, high = metadata.get("minimum"), metadata.get("maximum")
        if low is not None and value < low:
            raise ValueError(f"must be at least {low:g}, got {value!r}")
        if high is not None and value > high:
            raise ValueError(f"must be at most {high:g}, got {value!r}")
    return value


def parse_bool(raw: str) -> bool:
    text = raw.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"expected a boolean (true/false, 1/0, yes/no, on/off), got {raw!r}")


def _parse(raw: str, hint: Any, metadata: Mapping[str, Any]) -> Any:
    """Parse one variable by the field's own parser or its type hint; ValueError says what was
    expected."""
    own = metadata.get("parse")
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        if raw.strip() == "":
            return None  # an empty variable unsets an optional setting
        if own is None:
            (hint,) = [a for a in typing.get_args(hint) if a is not type(None)]
    if own is not None:
        return own(raw)
    if hint is bool:
        return parse_bool(raw)
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
    if hint is HostPort:
        return parse_host_port(raw)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        for member in hint:
            if str(member.value).upper() == raw.strip().upper():
                return member
        raise ValueError(f"expected one of {', '.join(str(m.value) for m in hint)}, got {raw!r}")
    if typing.get_origin(hint) is tuple:
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    if hint is str:
        return raw
    raise TypeError(f"unsupported setting type {hint!r}")


# -- bases every process builds on ---------------------------------------------------------------


def _default_instance_id() -> str:
    # Unique among running instances of a process (the key of its shipped logs).
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True, repr=False)
class ProcessSettings(Settings):
    """What every process has: how it logs."""

    log_level: str = setting(
        "info", choices=("debug", "info", "warning", "error", "critical"), help="lowest level logged"
    )
    log_format: str = setting(
        "auto", choices=("auto", "json", "console"), help="auto: console on a TTY, else JSON lines"
    )


@dataclass(frozen=True, repr=False)
class HttpSettings(ProcessSettings):
    """An HTTP server: where it listens, what it accepts, HTTPS when given a certificate."""

    # The process's name: its ready line, its logs, `/healthz`.  The prefix derives from it
    # (``sms-sender`` -> ``SMS_SENDER``) unless `env_prefix` says otherwise.
    service_name: ClassVar[str] = "service"

    listen: str = setting("127.0.0.1", help="interface the HTTP server binds")
    port: int = setting(8000, minimum=0, maximum=65535, help="HTTP port (0: any free port)")
    instance_id: str = setting(default_factory=_default_instance_id, help="this instance's name (default host-pid)")
    client_max_size: int = setting(1024 * 1024, minimum=1, help="largest accepted request body, bytes")
    # Off by default: with it, a second process started on the same port by mistake would
    # silently take half the connections instead of failing with "address in use".
    reuse_port: bool = setting(False, help="SO_REUSEPORT: instances of one service share the port (Linux)")
    ssl_certfile: Path | None = setting(None, help="HTTPS: the server's certificate chain (PEM)")
    ssl_keyfile: Path | None = setting(None, help="HTTPS: the server's private key (PEM)")

    def __post_init__(self) -> None:
        # Checked here, not by the field: a process that redeclares `port` with its own default
        # keeps the bound.
        if not 0 <= self.port <= 65535:
            raise ValueError(f"{self.env_name('port')}: must be from 0 to 65535, got {self.port}")
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ValueError(f"{self.env_name('ssl_certfile')}: HTTPS needs both a certificate file and a key file")

    @classmethod
    def prefix(cls) -> str:
        return cls.env_prefix or re.sub(r"[^A-Z0-9]+", "_", cls.service_name.upper())

    @property
    def address(self) -> HostPort:
        return HostPort(self.listen, self.port)

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_certfile is not None else "http"

    @property
    def http_url(self) -> str:
        return self.address.url(self.scheme)

    def server_ssl_context(self) -> ssl.SSLContext | None:
        """The HTTPS context when a certificate is configured; None serves plain HTTP."""
        from kit.tls import server_context

        if self.ssl_certfile is None or self.ssl_keyfile is None:
            return None
        return server_context(self.ssl_certfile, self.ssl_keyfile)


@dataclass(frozen=True, repr=False)
class KafkaClientSettings(Settings):
    """A Kafka client's bootstrap servers and security, by Kafka's names: moving to a secured
    Apache Kafka cluster is a matter of variables.  `kafka_security` gives the one value each
    client library's options come from."""

    bootstrap_servers: str = setting(
        f"127.0.0.1:{DEFAULT_PORTS['broker']}",
        parse=parse_bootstrap,
        help="Kafka bootstrap servers, comma list",
    )
    kafka_security_protocol: str = setting("PLAINTEXT", choices=PROTOCOLS, help="as Kafka's security.protocol")
    kafka_sasl_mechanism: str = setting("PLAIN", choices=MECHANISMS, help="as Kafka's sasl.mechanism")
    kafka_sasl_username: str | None = setting(None, help="SASL user")
    kafka_sasl_password: str | None = secret(help="SASL password")
    kafka_ssl_cafile: Path | None = setting(None, help="CA certificates that sign the brokers' (PEM)")
    kafka_ssl_certfile: Path | None = setting(None, help="client certificate for mutual TLS (PEM)")
    kafka_ssl_keyfile: Path | None = setting(None, help="client key for mutual TLS (PEM)")
    kafka_ssl_key_password: str | None = secret(help="password of the client key")

    @property
    def kafka_security(self) -> KafkaSecurity:
        """ValueError for SASL without credentials (`check_kafka_security` reports it at start)."""
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

    def check_kafka_security(self) -> list[str]:
        try:
            self.kafka_security  # noqa: B018 - builds and validates
        except ValueError as e:
            return [f"{self.env_name('kafka_security_protocol')}: {e}"]
        return []

    def kafka_client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for any aiokafka client (producer, consumer, admin)."""
        return {"bootstrap_servers": self.bootstrap_servers, **self.kafka_security.aiokafka_kwargs()}

    def librdkafka_config(self) -> dict[str, str]:
        """The same as librdkafka properties (confluent-kafka)."""
        return {"bootstrap.servers": self.bootstrap_servers, **self.kafka_security.librdkafka_config()}

    def kafka_ssl_context(self) -> ssl.SSLContext:
        return self.kafka_security.ssl_context()
