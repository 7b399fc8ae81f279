"""docker-compose.yml read the way Docker Compose reads it, for the tests that check it without a
Docker engine: `${NAME}` / `${NAME:-default}` / `$$` interpolation, YAML merge keys, the active
profiles (the default ones from .env, replaced by any --profile), `depends_on` with
`required: false` ignored when its service is not in the run; and what each service runs,
publishes and mounts, and the settings its environment gives its process.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml  # type: ignore[import-untyped]

from broker.settings import BrokerSettings
from registry.config import RegistryConfig
from services.catcher.config import CatcherConfig
from services.common.config import ServiceConfig
from services.dashboard.config import DashboardConfig
from services.logs.config import LogsConfig
from services.notify.config import EmailSenderConfig, SmsSenderConfig
from services.orders.config import OrdersConfig
from services.otp.config import OtpConfig
from streamshop.cli import build_parser
from tests.support.harness import REPO

COMPOSE_FILE = REPO / "docker-compose.yml"
COMPOSE: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
DOCKERFILE = (REPO / "Dockerfile").read_text()

SERVICE_CONFIGS: dict[str, type[ServiceConfig]] = {
    "orders": OrdersConfig,
    "otp": OtpConfig,
    "logs": LogsConfig,
    "sms-sender": SmsSenderConfig,
    "email-sender": EmailSenderConfig,
    "catcher": CatcherConfig,
    "dashboard": DashboardConfig,
}
BOOTSTRAP_REF = "${BOOTSTRAP_SERVERS:-broker:9092}"  # the one switch between the bundled broker and Kafka
KAFKA_BOOTSTRAP = "kafka-1:9092,kafka-2:9092,kafka-3:9092"
STREAMSHOP_ENV_PREFIXES = (
    "STREAMSHOP_",
    "BROKER_",
    "REGISTRY_",
    "ANALYTICS_",
    "LOADTEST_",
    *(c.prefix() + "_" for c in SERVICE_CONFIGS.values()),
)


def _dotenv() -> dict[str, str]:
    pairs = (line.split("=", 1) for line in (REPO / ".env").read_text().splitlines() if "=" in line)
    return {k.strip(): v.strip() for k, v in pairs if not k.lstrip().startswith("#")}


DEFAULT_PROFILES = frozenset(_dotenv()["COMPOSE_PROFILES"].split(","))
# The runs the file documents: profiles, and the variables set for them.
RUNS: dict[str, tuple[frozenset[str], dict[str, str]]] = {
    "default": (DEFAULT_PROFILES, {}),
    "kafka": (frozenset({"kafka"}), {"BOOTSTRAP_SERVERS": KAFKA_BOOTSTRAP}),
    "bundled+load": (frozenset({"bundled", "load"}), {}),
    "kafka+load": (frozenset({"kafka", "load"}), {"BOOTSTRAP_SERVERS": KAFKA_BOOTSTRAP}),
    "secure": (frozenset({"bundled", "secure"}), {}),
    "secure+load": (frozenset({"bundled", "secure", "load"}), {}),
}


_VARIABLE = re.compile(r"\$\$|\$\{(?P<name>\w+)(?P<op>:-)?(?P<default>[^}]*)\}|\$(?P<bare>\w+)")


def interpolate(value: str, variables: Mapping[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        if match.group("bare"):
            return variables.get(match.group("bare"), "")
        assert match.group("op") or not match.group("default"), f"unsupported interpolation {match.group(0)}"
        return variables.get(match.group("name")) or match.group("default")

    result = _VARIABLE.sub(one, value)
    assert "${" not in result, f"unsupported interpolation in {value!r}"
    return result


def image(service: str, variables: Mapping[str, str] | None = None) -> str:
    """The service's image, as compose interpolates it (by default: without compose/local.env)."""
    return interpolate(str(SERVICES[service]["image"]), variables or {})


def environment(service: str, variables: Mapping[str, str] | None = None) -> dict[str, str]:
    raw = SERVICES[service].get("environment", {})
    assert isinstance(raw, dict), f"{service}: environment must be a mapping"
    return {name: interpolate(value, variables or {}) for name, value in raw.items()}


def active(profiles: frozenset[str]) -> set[str]:
    return {name for name, s in SERVICES.items() if not s.get("profiles") or profiles & set(s["profiles"])}


def dependencies(service: str) -> dict[str, dict[str, Any]]:
    depends = SERVICES[service].get("depends_on", {})
    assert isinstance(depends, dict), f"{service}: depends_on must use the long form with conditions"
    return depends


def command(service: str, variables: Mapping[str, str] | None = None) -> list[str]:
    cmd = SERVICES[service].get("command")
    assert isinstance(cmd, list), f"{service}: command must be a list"
    return [interpolate(str(a), variables or {}) for a in cmd]


def streamshop_services() -> dict[str, list[str]]:
    """Service -> its `streamshop` arguments, for the processes of the stack running the CLI."""
    return {name: command(name)[1:] for name in SERVICES if runs_streamshop(name) and is_long_running(name)}


def command_of(service: str) -> list[str]:
    """entrypoint + command; empty for an image's own (the Kafka nodes)."""
    return [*SERVICES[service].get("entrypoint", []), *SERVICES[service].get("command", [])]


def runs_streamshop(service: str) -> bool:
    return command_of(service)[:1] == ["streamshop"]


def runs_locust(service: str) -> bool:
    return command_of(service)[:3] == ["python", "-m", "locust"]


def subcommand(service: str) -> str:
    return streamshop_services()[service][0]


def services_running(sub: str) -> list[str]:
    return [name for name, argv in streamshop_services().items() if argv[0] == sub]


def one_service(sub: str) -> str:
    (name,) = services_running(sub)
    return name


def is_long_running(service: str) -> bool:
    return str(SERVICES[service].get("restart", "no")) != "no"


def clean_environ(monkeypatch: pytest.MonkeyPatch, env: Mapping[str, str]) -> None:
    """Only `env` among the variables the project reads (the CLI takes defaults from them)."""
    for name in list(os.environ):
        if name.startswith(STREAMSHOP_ENV_PREFIXES):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def parse(argv: list[str], env: Mapping[str, str], monkeypatch: pytest.MonkeyPatch) -> argparse.Namespace:
    """`argv` through the real CLI parser, with `env` as the environment; fails instead of exiting."""
    with monkeypatch.context() as m:
        clean_environ(m, env)
        try:
            return build_parser().parse_args(argv)
        except SystemExit:
            pytest.fail(f"`streamshop {' '.join(argv)}` is refused by the CLI parser")


def config_of(service: str, variables: Mapping[str, str] | None = None) -> ServiceConfig:
    return SERVICE_CONFIGS[subcommand(service)].from_env(environment(service, variables))


def http_port(service: str) -> int:
    """The port the service's HTTP server listens on, from its own settings."""
    argv = command_of(service)
    if argv[:1] == ["streamshop"] and argv[1] in SERVICE_CONFIGS:
        return config_of(service).port
    if argv[:2] == ["streamshop", "registry"]:
        return RegistryConfig.from_env(environment(service)).port
    if argv[:2] == ["streamshop", "broker"]:
        admin = BrokerSettings.from_env(environment(service)).admin_listen
        assert admin is not None, f"{service}: the admin API is off"
        return admin.port
    if runs_locust(service):
        return int(argv[argv.index("--web-port") + 1])
    if service in OTHER_HTTP_PORTS:
        return OTHER_HTTP_PORTS[service]
    raise AssertionError(f"{service} serves no HTTP")


def url_target(url: str) -> tuple[str, int]:
    parts = urlsplit(url if "://" in url else f"//{url}")
    assert parts.hostname, f"{url} names no host"
    assert parts.port, f"{url} names no port"
    return parts.hostname, parts.port


# Others' images serving HTTP, on their own default ports: Zipkin's QUERY_PORT, Prometheus's
# --web.listen-address.
OTHER_HTTP_PORTS = {"traces": 9411, "prometheus": 9090}
BASE_ARG = "STREAMSHOP_BASE_IMAGE"  # the Dockerfile's base, taken from the environment when set


def _effective(sub: str, argv: list[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    def broker(env: Mapping[str, str]) -> Any:
        args = parse(argv, env, monkeypatch)  # as broker.app.main builds its config
        overrides = {name: getattr(args, name) for name in ("data_dir", "listen", "advertise", "admin_listen")}
        return BrokerSettings.from_env(env, overrides=overrides).to_config()

    def registry(env: Mapping[str, str]) -> Any:
        args = parse(argv, env, monkeypatch)  # as registry.app.main builds its config
        return RegistryConfig.from_env(env, overrides={"bootstrap_servers": args.bootstrap_servers})

    return {"broker": broker, "registry": registry}[sub]


SECURE_VOLUME, SECURE_DIR = "secure", "/var/lib/streamshop/secure"
