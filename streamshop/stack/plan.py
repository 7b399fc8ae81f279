"""What `streamshop up` runs, free of process handling: the children with their commands and
environments, the order they start in, the restart backoff, the secrets they share and the URL
table.  `supervisor` turns this into processes.

Layout of the data directory (``--data-dir``, default ``./data/stack``)::

    stack.json              what runs where (streamshop.stack.state)
    secrets.json            OTP hash key and seal key, mode 0600, made once
    output/<child>.log      everything the child printed (stdout and stderr), appended
    broker/                 the broker's log directory
    <service>/<service>.db  each service's SQLite database
    postgres/               with --postgres: the PostgreSQL server (a database per service)
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit

from kit.settings import parse_host_port
from services.common.config import DEFAULT_PORTS
from streamshop import postgres
from streamshop.broker_process import (
    broker_command,
    parse_ready_line,
    parse_registry_ready_line,
    parse_service_ready_line,
    registry_command,
)
from streamshop.clients import CommandError, table
from streamshop.stack.secure import SecureStack
from streamshop.stack.state import write_private

__all__ = [
    "CHILDREN",
    "Announced",
    "Backoff",
    "ChildDef",
    "Launch",
    "LaunchError",
    "Secrets",
    "StackContext",
    "database_name",
    "env_prefix",
    "external_broker",
    "external_postgres",
    "levels",
    "parse_scale",
    "scaled",
    "select",
    "url_table",
    "with_broker",
    "with_postgres",
]


@dataclass(frozen=True)
class Announced:
    """What a child's ready line said: its endpoints by role (``http``, ``bootstrap``,
    ``admin``, ``smtp``...) and the ports behind them, which later restarts reuse."""

    urls: dict[str, str]
    ports: dict[str, int]


@dataclass(frozen=True)
class Launch:
    """A command and the variables set for it on top of the supervisor's environment;
    `defaults` only where the user has not set the variable."""

    command: list[str]
    env: dict[str, str]
    defaults: dict[str, str] = field(default_factory=dict)

    def environment(self, base: Mapping[str, str]) -> dict[str, str]:
        return {**self.defaults, **base, **self.env}


@dataclass(frozen=True)
class Secrets:
    """Keys shared by otp and the senders, kept in the data directory so that a restarted otp
    still verifies the codes it sent and the senders still open them."""

    otp_hash_key: str
    seal_key: str  # base64 of 32 bytes (AES-256-GCM), OTP_SEAL_KEY and <SENDER>_SEAL_KEY
    seal_key_id: str = "k1"

    @classmethod
    def generate(cls) -> Secrets:
        return cls(secrets.token_urlsafe(32), base64.b64encode(secrets.token_bytes(32)).decode())

    @classmethod
    def load_or_create(cls, path: Path) -> Secrets:
        """Read `path`, or create it (mode 0600, written to a temporary file then renamed, so a
        crash never leaves half a key file)."""
        if path.exists():
            try:
                raw = json.loads(path.read_text())
                return cls(str(raw["otp_hash_key"]), str(raw["seal_key"]), str(raw.get("seal_key_id", "k1")))
            except (ValueError, KeyError, TypeError) as e:
                raise CommandError(f"{path} is not a secrets file ({e}); remove it to make new keys") from None
        made = cls.generate()
        keys = {"otp_hash_key": made.otp_hash_key, "seal_key": made.seal_key, "seal_key_id": made.seal_key_id}
        write_private(path, json.dumps(keys))
        return made


@dataclass(frozen=True)
class StackContext:
    """What a child's command and environment are built from."""

    data_dir: Path
    listen: str
    secrets: Secrets
    log_format: str  # default of <PREFIX>_LOG_FORMAT
    endpoints: Mapping[str, Mapping[str, str]]  # child name -> its announced urls
    secure: SecureStack | None = None  # `up --secure`: every child's logins, keys and certificates
    database_url: str | None = None  # `up --postgres URL`: that server (with its password)
    spark_master: str | None = None  # `up --spark-cluster`: the analytics job's master
    durability: str | None = None  # `up --durability`: the bundled broker's (None: its own default)

    def service_database_url(self, service: str) -> str | None:
        """The PostgreSQL database of `service` when the stack has a `postgres` child: the
        server's URL (the bundled one's password read from its directory) naming its database."""
        if "postgres" not in self.endpoints:
            return None
        base = self.database_url or postgres.with_password(
            self.url("postgres", "postgresql"), self.data_dir / "postgres"
        )
        return postgres.for_database(base, database_name(service))

    def url(self, child: str, role: str) -> str:
        """An endpoint another child announced; `LaunchError` when it did not."""
        try:
            return self.endpoints[child][role]
        except KeyError:
            raise LaunchError(f"needs the {role} address of {child}, which {child} did not announce") from None


class LaunchError(Exception):
    """A child's command cannot be built (an endpoint it needs is unknown)."""


@dataclass(frozen=True)
class ChildDef:
    """One child of the stack.  `ports` are its defaults by role; `launch` builds the command
    from the ports to bind (0: any); `readyz`: after its ready line, wait for GET /readyz 200
    on its ``http`` URL.  A child that prints no ready line (a program not of the project) has
    `announce` instead, its URLs from its ports, and is ready once GET `health` there answers 200."""

    name: str
    needs: tuple[str, ...]
    ports: Mapping[str, int]
    launch: Callable[[StackContext, Mapping[str, int]], Launch]
    parse_ready: Callable[[str], Announced | None]
    readyz: bool = False
    external: Mapping[str, str] | None = None  # endpoints of something already running: not started
    # Nothing needs it: the stack is ready without it, and it is retried (not fatal) when its
    # first start fails.
    optional: bool = False
    jvm: bool = False  # starts a JVM: its start may take `StackOptions.jvm_start_timeout`
    stop_grace: float = 5.0  # seconds from SIGTERM to SIGKILL (`up --stop-timeout` overrides)
    announce: Callable[[Mapping[str, int]], Announced] | None = None
    health: str = "/readyz"


def external_broker(bootstrap: str) -> ChildDef:
    """The broker role played by a Kafka cluster the stack does not run (``up --bootstrap``)."""
    servers = ",".join(part.strip() for part in bootstrap.split(",") if part.strip())
    if not servers or any(_port_of(part) is None for part in servers.split(",")):
        raise CommandError(f"--bootstrap {bootstrap!r}: expected HOST:PORT[,HOST:PORT...]")
    return ChildDef("broker", (), {}, _no_launch, lambda _: None, external={"bootstrap": servers})


def _no_launch(ctx: StackContext, ports: Mapping[str, int]) -> Launch:
    raise LaunchError("the broker is external: nothing to launch")


def with_broker(children: Sequence[ChildDef], broker: ChildDef) -> list[ChildDef]:
    """`children` with `broker` in place of the bundled broker."""
    return [broker if c.name == "broker" else c for c in children]


def env_prefix(name: str) -> str:
    """The settings prefix of a service, as services.common.config derives it (sms-sender -> SMS_SENDER)."""
    return re.sub(r"[^A-Z0-9]+", "_", name.upper())


def _port_of(address: str) -> int | None:
    """The port of ``http://h:p/...`` or ``h:p``; None for anything else."""
    parsed = urlsplit(address if "://" in address else f"//{address}")
    try:
        return parsed.port
    except ValueError:
        return None


# -- the children ---------------------------------------------------------------------------------


def _broker_launch(ctx: StackContext, ports: Mapping[str, int]) -> Launch:
    listen, admin = f"{ctx.listen}:{ports['kafka']}", f"{ctx.listen}:{ports['admin']}"
    settings = ctx.secure.broker_settings(ctx.listen, ports["kafka"]) if ctx.secure else None
    command = broker_command(ctx.data_dir / "broker", listen, admin, settings, durability=ctx.durability)
    return Launch(command, {})


def _broker_ready(line: str) -> Announced | None:
    ready = parse_ready_line(line)
    if ready is None:
        return None
    urls, ports = {"bootstrap": ready.bootstrap}, {"kafka": ready.port}
    if ready.admin_url:
        urls["admin"] = ready.admin_url
        ports["admin"] = _port_of(ready.admin_url) or 0
    return Announced(urls, ports)


def _registry_launch(ctx: StackContext, ports: Mapping[str, int]) -> Launch:
    env = ctx.secure.registry_env() if ctx.secure else {}
    return Launch(registry_command(ctx.url("broker", "bootstrap"), f"{ctx.listen}:{ports['http']}"), env)


def _registry_ready(line: str) -> Announced | None:
    url = parse_registry_ready_line(line)
    return None if url is None else Announced({"http": url}, {"http": _port_of(url) or 0})


def _service_ready(line: str) -> Announced | None:
    """`streamshop NAME ready on URL[ key=value]...`: every field that is an address has its
    port kept too (the catcher's ``smtp=127.0.0.1:1025``)."""
    ready = parse_service_ready_line(line)
    if ready is None:
        return None
    urls = {"http": ready.url, **ready.fields}
    ports = {role: port for role, value in urls.items() if (port := _port_of(value)) is not None}
    return Announced(urls, ports)


def _cli(name: str) -> list[str]:
    return [sys.executable, "-m", "streamshop.cli", name]


def service_env(name: str, ctx: StackContext, ports: Mapping[str, int], *, kafka: bool = True) -> Launch:
    """The settings every service reads (``<PREFIX>_LISTEN``, ``_PORT``, ``_DATABASE_PATH``,
    ``_BOOTSTRAP_SERVERS``, ``_REGISTRY_URL``); ``_LOG_FORMAT`` only unless the user set it."""
    prefix = env_prefix(name)
    env = {
        f"{prefix}_LISTEN": ctx.listen,
        f"{prefix}_PORT": str(ports["http"]),
        f"{prefix}_DATABASE_PATH": str(ctx.data_dir / name / f"{name}.db"),
    }
    if name in STATEFUL and (url := ctx.service_database_url(name)) is not None:
        env[f"{prefix}_DATABASE_URL"] = url
    if kafka:
        env[f"{prefix}_BOOTSTRAP_SERVERS"] = ctx.url("broker", "bootstrap")
        env[f"{prefix}_REGISTRY_URL"] = ctx.url("registry", "http")
    if ctx.secure is not None:
        env |= ctx.secure.service_env(name, prefix)
    return Launch(_cli(name), env, {f"{prefix}_LOG_FORMAT": ctx.log_format})


def _with(base: Launch, extra: Mapping[str, str]) -> Launch:
    return Launch(base.command, {**base.env, **extra}, base.defaults)


def _plain_service(name: str) -> Callable[[StackContext, Mapping[str, int]], Launch]:
    def launch(ctx: StackContext, ports: Mapping[str, int]) -> Launch:
        return service_env(name, ctx, ports)

    return launch


def _otp_launch(ctx: StackContext, ports: Mapping[str, int]) -> Launch:
    keys = ctx.secrets
    base = service_env("otp", ctx, ports)
    # The demo, Locust and the benchmarks run beside the stack and send every simulated user's
    # requests from loopback: exempt it from the per-client limit unless the user says otherwise.
    defaults = {**base.defaults, "OTP_RATE_LIMIT_CLIENT_EXEMPT": "127.0.0.0/8,::1/128"}
    keys_env = {"OTP_HASH_KEY": keys.otp_hash_key, "OTP_SEAL_KEY": keys.seal_key, "OTP_SEAL_KEY_ID": keys.seal_key_id}
    return Launch(base.command, {**base.env, **keys_env}, defaults)


def _sender(prefix: str, name: str, keys: Secrets) -> dict[str, str]:
    # One supervised instance per group: a static member id lets a restarted sender take its
    # partitions back at once, where a new member would wait out the dead one's session timeout.
    return {
        f"{prefix}_SEAL_KEY": keys.seal_key,
        f"{prefix}_SEAL_KEY_ID": keys.seal_key_id,
        f"{prefix}_GROUP_INSTANCE_ID": f"{name}-1",
    }


def _sms_launch(ctx: StackContext, ports: Mapping[str, int]) -> Launch:
    return _with(
        service_env("sms-sender", ctx, ports),
        {
            **_sender("SMS_SENDER", "sms-sender", ctx.secrets),
            "SMS_SENDER_PROVIDER": "webhook",
            "SMS_SENDER_WEBHOOK_URL": ctx.url("catcher", "http").rstrip("/") + "/sms",
        },
    )


def _email_launch(ctx: StackContext, ports: Mapping[str, int]) -> Launch:
    smtp = parse_host_port(ctx.url("catcher", "smtp"))
    return _with(
        service_env("email-sender", ctx, ports),
        {
            **_sender("EMAIL_SENDER", "email-sender", ctx.secrets),
            "EMAIL_SENDER_GROUP_TYPE": _email_group_type(ctx),
            "EMAIL_SENDER_SMTP_HOST": smtp.host,
            "EMAIL_SENDER_SMTP_PORT": str(smtp.port),
        },
    )


def _email_group_type(ctx: StackContext) -> str:
    """The e-mails are a work queue: however many instances run (`up --scale`), they drain
    otp.requests together as a share group, each request to whichever is free.  On the
    bundled broker only (it announces its admin API): Apache Kafka 4.1 serves share groups as
    a preview, and there librdkafka 2.16's share consumer fails for member ids holding '/' or
    '+' (Kafka parses them as URL-safe base64), so elsewhere the sender stays a consumer group."""
    return "share" if "admin" in ctx.endpoints.get("broker", {}) else "consumer"


def _catcher_launch(ctx: StackContext, ports: Mapping[str, int]) -> Launch:
    # The catcher needs no broker; it announces its SMTP port as `smtp=HOST:PORT` on its ready line.
    return _with(service_env("catcher", ctx, ports, kafka=False), {"CATCHER_SMTP_PORT": str(ports["smtp"])})


def _dashboard_launch(ctx: StackContext, ports: Mapping[str, int]) -> Launch:
    return _with(
        service_env("dashboard", ctx, ports),
        {"DASHBOARD_CATCHER_URL": ctx.url("catcher", "http"), "DASHBOARD_LOGS_URL": ctx.url("logs", "http")},
    )


def _analytics_launch(ctx: StackContext, ports: Mapping[str, int]) -> Launch:
    registry = ctx.url("registry", "http")
    env = {
        "ANALYTICS_BOOTSTRAP_SERVERS": ctx.url("broker", "bootstrap"),
        "ANALYTICS_DATA_DIR": str(ctx.data_dir / "analytics"),
    }
    if ctx.secure is not None:
        # One URL carries the registry login to Spark's workers; SSL_CERT_FILE trusts its CA.
        env |= ctx.secure.analytics_env()
        registry = registry.replace("://", f"://analytics:{ctx.secure.registry_passwords['analytics']}@", 1)
    env["ANALYTICS_REGISTRY_URL"] = registry
    if ctx.spark_master is not None:
        env["ANALYTICS_SPARK_MASTER"] = ctx.spark_master
    return Launch([*_cli("analytics"), "run"], env)


def _analytics_ready(line: str) -> Announced | None:
    """``streamshop analytics ready: jobs ..., master URL, ui URL``: the job serves nothing, but
    the table says where it runs (its Spark master, and the application's web UI)."""
    if not line.startswith("streamshop analytics ready"):
        return None
    # A local master has commas inside its brackets (local[2,4]).
    value = r"((?:\[[^\]]*\]|[^,\s\[])+)"
    urls = {role: m.group(1) for role in ("master", "ui") if (m := re.search(f", {role} {value}", line))}
    return Announced(urls, {})


def _service(
    name: str, needs: tuple[str, ...], launch: Callable[[StackContext, Mapping[str, int]], Launch] | None = None
) -> ChildDef:
    return ChildDef(
        name, needs, {"http": DEFAULT_PORTS[name]}, launch or _plain_service(name), _service_ready, readyz=True
    )


_KAFKA = ("broker", "registry")

# In start order within each level (see `levels`); the supervisor stops them in reverse.
CHILDREN: tuple[ChildDef, ...] = (
    ChildDef(
        "broker",
        (),
        {"kafka": DEFAULT_PORTS["broker"], "admin": DEFAULT_PORTS["broker-admin"]},
        _broker_launch,
        _broker_ready,
        stop_grace=10.0,  # it closes (and syncs) its logs
    ),
    ChildDef("registry", ("broker",), {"http": DEFAULT_PORTS["registry"]}, _registry_launch, _registry_ready),
    ChildDef(
        "catcher",
        (),
        {"http": DEFAULT_PORTS["catcher"], "smtp": DEFAULT_PORTS["smtp"]},
        _catcher_launch,
        _service_ready,
        readyz=True,
    ),
    _service("orders", _KAFKA),
    _service("otp", _KAFKA, _otp_launch),
    _service("logs", _KAFKA),
    _service("sms-sender", (*_KAFKA, "catcher"), _sms_launch),
    _service("email-sender", (*_KAFKA, "catcher"), _email_launch),
    # Its stop finishes the batch in progress (up to 5 s), then stops each query and Spark: about
    # 2 s on an idle host, past 15 s on a saturated one, where SIGKILL would cut a clean stop short.
    ChildDef("analytics", _KAFKA, {}, _analytics_launch, _analytics_ready, optional=True, jvm=True, stop_grace=30.0),
    _service("dashboard", (*_KAFKA, "catcher", "logs"), _dashboard_launch),
)


# -- PostgreSQL and several instances ------------------------------------------------------------

# The services with a database of their own, each a database on the stack's PostgreSQL server
# (`up --postgres`); they are also the ones `up --scale` runs several instances of.
STATEFUL = ("orders", "otp", "logs", "sms-sender", "email-sender")


def database_name(service: str) -> str:
    return service.replace("-", "_")


def _postgres_launch(ctx: StackContext, ports: Mapping[str, int]) -> Launch:
    command = [*_cli("postgres"), "run", "--dir", str(ctx.data_dir / "postgres")]
    command += ["--databases", ",".join(database_name(n) for n in STATEFUL)]
    if ports.get("postgresql"):
        command += ["--port", str(ports["postgresql"])]
    return Launch(command, {})


def _postgres_ready(line: str) -> Announced | None:
    url = postgres.parse_ready_line(line)
    return None if url is None else Announced({"postgresql": url}, {"postgresql": _port_of(url) or 0})


POSTGRES = ChildDef(
    "postgres",
    (),
    {"postgresql": 0},
    _postgres_launch,
    _postgres_ready,
    stop_grace=30.0,  # a checkpoint at shutdown
)


def external_postgres(url: str) -> ChildDef:
    """The PostgreSQL server of ``up --postgres URL``: not started; its URL shown without the password."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres") or not parts.hostname:
        raise CommandError(f"--postgres {url!r}: expected postgresql://USER:PASSWORD@HOST:PORT/NAME")
    shown = postgres.for_database(url.replace(f":{parts.password}@", "@", 1) if parts.password else url, "")
    return ChildDef("postgres", (), {}, _no_launch, lambda _: None, external={"postgresql": shown.rstrip("/")})


def with_postgres(children: Sequence[ChildDef], server: ChildDef = POSTGRES) -> list[ChildDef]:
    """`children` with `server` first and every stateful service needing it."""
    return [server, *(replace(c, needs=(*c.needs, "postgres")) if c.name in STATEFUL else c for c in children)]


def parse_scale(text: str) -> dict[str, int]:
    """``orders=3,otp=2`` -> {"orders": 3, "otp": 2}; `CommandError` for anything else."""
    counts: dict[str, int] = {}
    for item in (part.strip() for part in text.split(",") if part.strip()):
        name, sep, count = item.partition("=")
        if not sep or not count.strip().isdigit() or not 1 <= int(count) <= 16:
            raise CommandError(f"--scale {item!r}: expected SERVICE=N with N from 1 to 16")
        if name.strip() not in STATEFUL:
            raise CommandError(f"--scale {name.strip()!r}: only {', '.join(STATEFUL)} run as several instances")
        counts[name.strip()] = int(count)
    return counts


def scaled(children: Sequence[ChildDef], counts: Mapping[str, int]) -> list[ChildDef]:
    """`children` with instances 2..N of each service in `counts`, after the first (``orders-2``
    needs ``orders``): each binds the first one's port (SO_REUSEPORT: the kernel spreads the
    connections) and has an instance id (and a static consumer-group member id) of its own."""
    out: list[ChildDef] = []
    for c in children:
        n = counts.get(c.name, 1)
        if n == 1:
            out.append(c)
            continue
        out.append(replace(c, launch=_instance_launch(c, 1)))
        out.extend(
            replace(c, name=f"{c.name}-{i}", needs=(*c.needs, c.name), launch=_instance_launch(c, i))
            for i in range(2, n + 1)
        )
    return out


def _instance_launch(base: ChildDef, number: int) -> Callable[[StackContext, Mapping[str, int]], Launch]:
    prefix = env_prefix(base.name)
    instance = base.name if number == 1 else f"{base.name}-{number}"

    def launch(ctx: StackContext, ports: Mapping[str, int]) -> Launch:
        if number > 1:  # the first instance's port, which it may have been given by the OS
            ports = {**ports, "http": _port_of(ctx.url(base.name, "http")) or ports["http"]}
        made = base.launch(ctx, ports)
        extra = {f"{prefix}_REUSE_PORT": "true", f"{prefix}_INSTANCE_ID": instance}
        if f"{prefix}_GROUP_INSTANCE_ID" in made.env:
            extra[f"{prefix}_GROUP_INSTANCE_ID"] = f"{base.name}-{number}"
        return _with(made, extra)

    return launch


def select(children: Sequence[ChildDef], without: Iterable[str]) -> list[ChildDef]:
    """`children` minus `without` and whatever needs them (directly or not)."""
    names = {c.name for c in children}
    dropped = set(without)
    if unknown := dropped - names:
        raise CommandError(f"no child named {', '.join(sorted(unknown))} (children: {', '.join(sorted(names))})")
    changed = True
    while changed:
        changed = False
        for c in children:
            if c.name not in dropped and dropped.intersection(c.needs):
                dropped.add(c.name)
                changed = True
    return [c for c in children if c.name not in dropped]


def levels(children: Sequence[ChildDef]) -> list[list[ChildDef]]:
    """Start levels: a child starts once everything it needs is ready, with the other children
    of its level in parallel (broker and catcher, then registry, then the services)."""
    by_name = {c.name: c for c in children}
    depth: dict[str, int] = {}

    def level(name: str, seen: tuple[str, ...] = ()) -> int:
        if name in seen:
            raise ValueError(f"dependency cycle: {' -> '.join((*seen, name))}")
        if name not in depth:
            depth[name] = 1 + max((level(n, (*seen, name)) for n in by_name[name].needs), default=-1)
        return depth[name]

    out: list[list[ChildDef]] = []
    for c in children:
        missing = [n for n in c.needs if n not in by_name]
        if missing:
            raise ValueError(f"{c.name} needs {', '.join(missing)}, which is not in the stack")
        if optional := [n for n in c.needs if by_name[n].optional]:
            raise ValueError(f"{c.name} needs {', '.join(optional)}, which is optional")
        d = level(c.name)
        out.extend([] for _ in range(d + 1 - len(out)))
        out[d].append(c)
    return out


# -- restarts -------------------------------------------------------------------------------------


@dataclass
class Backoff:
    """Delay before restarting a child that exited: `initial`, doubling up to `maximum`; back to
    `initial` when the child had stayed up `reset_after` seconds (it was healthy, this is news)."""

    initial: float = 0.5
    factor: float = 2.0
    maximum: float = 30.0
    reset_after: float = 60.0
    failures: int = 0

    def next_delay(self, uptime: float) -> float:
        if uptime >= self.reset_after:
            self.failures = 0
        delay = min(self.maximum, self.initial * self.factor ** min(self.failures, 64))
        self.failures += 1
        return delay


# -- the URL table --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    name: str
    urls: Mapping[str, str]
    pid: int | None
    log: Path


_MAIN_ROLES = ("http", "bootstrap")


def url_table(rows: Sequence[Row], cwd: Path | None = None) -> str:
    """One line per child: its main URL (``http``, else ``bootstrap``), the other endpoints as
    ``role url``, its pid and log file (relative to `cwd` when inside it)."""

    def shown(path: Path) -> str:
        if cwd is not None and path.is_relative_to(cwd):
            return str(path.relative_to(cwd))
        return str(path)

    lines = []
    for row in rows:
        main = next((row.urls[r] for r in _MAIN_ROLES if r in row.urls), "")
        others = "  ".join(f"{role} {url}" for role, url in row.urls.items() if role not in _MAIN_ROLES)
        lines.append((row.name, main, others, "-" if row.pid is None else row.pid, shown(row.log)))
    return table(("CHILD", "URL", "ALSO", "PID", "LOG"), lines)
