"""docker-compose.yml, Dockerfile and .dockerignore, checked statically against the code, in the
fast tier (no Docker engine): each claim the file makes is checked against what the processes
really read and listen on.  tests/compose/ builds the images and runs the profiles for real.

Compose semantics modelled: `${NAME}` / `${NAME:-default}` / `$$` interpolation, YAML merge keys
(PyYAML resolves them as Compose does), profiles (the default set from .env's COMPOSE_PROFILES,
replaced by any --profile), and `depends_on` with `required: false` ignored when its service is
not in the run.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import ipaddress
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator, Mapping
from fnmatch import fnmatch
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from analytics.settings import ENV as ANALYTICS_ENV
from analytics.settings import AnalyticsConfig
from broker.settings import BrokerSettings
from contracts.otp import SEAL_KEY_BYTES
from kit.settings import Settings
from loadtest.targets import LoadTargets
from registry.config import RegistryConfig
from registry.id_mark import ids_topic
from services.catcher.config import CatcherConfig
from services.common.config import ServiceConfig
from services.dashboard.config import DashboardConfig
from services.logs.config import LogsConfig
from services.notify.config import EmailSenderConfig, SenderConfig, SmsSenderConfig
from services.orders.config import OrdersConfig
from services.otp.config import OtpConfig
from streamshop.cli import build_parser
from streamshop.env_file import ENV_FILE
from streamshop.stack.plan import CHILDREN
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
PROCESS_SETTINGS: dict[str, type[Settings]] = {"broker": BrokerSettings, "registry": RegistryConfig}
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

# -- compose semantics ------------------------------------------------------------------------

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


def closure(service: str, run: set[str]) -> set[str]:
    """Every service `service` waits for in a run, directly or not."""
    seen: set[str] = set()
    todo = [service]
    while todo:
        for name in dependencies(todo.pop()):
            if name in run and name not in seen:
                seen.add(name)
                todo.append(name)
    return seen


def command(service: str, variables: Mapping[str, str] | None = None) -> list[str]:
    cmd = SERVICES[service].get("command")
    assert isinstance(cmd, list), f"{service}: command must be a list"
    return [interpolate(str(a), variables or {}) for a in cmd]


def streamshop_services() -> dict[str, list[str]]:
    """Service -> its `streamshop` arguments, for the processes of the stack running the CLI."""
    return {name: command(name)[1:] for name in SERVICES if runs_streamshop(name) and is_long_running(name)}


def streamshop_one_shots() -> dict[str, list[str]]:
    """The same for the one-shots running the CLI (the secure profile's set-up)."""
    return {name: command(name)[1:] for name in SERVICES if runs_streamshop(name) and not is_long_running(name)}


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


def published(service: str) -> list[tuple[str, int, int]]:
    """(host ip or "", host port, container port) of each ``[IP:]HOST:CONTAINER`` entry."""
    out = []
    for entry in SERVICES[service].get("ports", []):
        *ip, host, container = str(entry).split(":")
        out.append(("".join(ip), int(host), int(container)))
    return out


def mounts(service: str) -> list[tuple[str, str]]:
    """(volume, target) of each ``VOLUME:TARGET[:MODE]`` entry."""
    return [(v.split(":")[0], v.split(":")[1]) for v in map(str, SERVICES[service].get("volumes", []))]


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
    raise AssertionError(f"{service} serves no HTTP")


def url_target(url: str) -> tuple[str, int]:
    parts = urlsplit(url if "://" in url else f"//{url}")
    assert parts.hostname, f"{url} names no host"
    assert parts.port, f"{url} names no port"
    return parts.hostname, parts.port


# -- the file ---------------------------------------------------------------------------------


def test_the_compose_file_has_services_volumes_one_network_and_extension_fields_only() -> None:
    top = {"name", "services", "volumes", "networks", "configs"}
    assert set(COMPOSE) - top <= {k for k in COMPOSE if k.startswith("x-")}
    # The one config: the postgres profile's databases, made by the official image on first start.
    assert set(COMPOSE.get("configs", {})) == {"postgres-databases"}
    assert set(COMPOSE["networks"]) == {"default"}


def test_locust_has_the_one_address_otp_exempts_from_its_per_client_limit() -> None:
    subnet = ipaddress.ip_network(COMPOSE["networks"]["default"]["ipam"]["config"][0]["subnet"])
    address = ipaddress.ip_address(SERVICES["locust"]["networks"]["default"]["ipv4_address"])
    assert address in subnet
    exempt = SERVICES["otp"]["environment"]["OTP_RATE_LIMIT_CLIENT_EXEMPT"]
    assert [ipaddress.ip_network(n) for n in exempt.split(",")] == [ipaddress.ip_network(f"{address}/32")]
    assert "--scale" not in COMPOSE_FILE.read_text()  # sender replicas would share one outbox
    assert "version" not in COMPOSE, "the version field is obsolete in the Compose specification"


def test_every_environment_value_is_a_string() -> None:
    """YAML turns yes/no/on/off/8001 into booleans and numbers; Compose wants what the process reads."""
    for name, service in SERVICES.items():
        for key, value in service.get("environment", {}).items():
            assert isinstance(value, str), f"{name}: {key} is {value!r}, not a string"


# -- commands ---------------------------------------------------------------------------------


def test_every_streamshop_service_runs_a_subcommand_the_cli_accepts(monkeypatch: pytest.MonkeyPatch) -> None:
    assert streamshop_services(), "no service runs streamshop"
    for name, argv in {**streamshop_services(), **streamshop_one_shots()}.items():
        args = parse(argv, environment(name), monkeypatch)
        assert callable(getattr(args, "func", None)), f"{name}: `streamshop {' '.join(argv)}` runs nothing"


def test_the_stack_runs_every_process_of_streamshop_up() -> None:
    expected = {child.name for child in CHILDREN}
    assert {argv[0] for argv in streamshop_services().values()} == expected
    for sub in expected:
        assert len(services_running(sub)) == 1, f"{sub} must run in exactly one service"


BASE_ARG = "STREAMSHOP_BASE_IMAGE"  # the Dockerfile's base, taken from the environment when set


def test_every_service_runs_the_project_image_or_apache_kafka() -> None:
    """The broker its own image (the Dockerfile's broker target: no Spark), every other process
    of the project the app image, both on the base the environment names if it does; Kafka and
    PostgreSQL the official images unless compose/local.env names local ones."""
    for name, service in SERVICES.items():
        if runs_streamshop(name) and command_of(name)[1] == "broker":
            assert service.get("build") == {"context": ".", "target": "broker", "args": [BASE_ARG]}, name
            assert image(name) == "streamshop-broker:local", name
        elif runs_streamshop(name) or runs_locust(name):
            assert service.get("build") == {"context": ".", "target": "app", "args": [BASE_ARG]}, name
            assert image(name) == "streamshop:local", name
        elif name == "postgres":
            assert image(name).startswith("postgres:"), name  # the official image
        else:
            assert image(name).startswith("apache/kafka:"), name


def test_locust_service_command_is_accepted_by_locust_and_loads_all_three_user_classes() -> None:
    """`--list` parses every option, imports the locustfile and exits without running a test."""
    (name,) = [n for n in SERVICES if runs_locust(n)]
    assert f"WORKDIR {SERVICES[name]['working_dir']}" in DOCKERFILE.splitlines()
    env = {k: v for k, v in os.environ.items() if not k.startswith(STREAMSHOP_ENV_PREFIXES)}
    done = subprocess.run(
        [sys.executable, *command_of(name)[1:], "--list"],
        cwd=REPO,  # the image's working_dir /app holds what the repository root does
        env={**env, **environment(name)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert {"OrdersUser", "OtpUser", "KafkaUser"} <= set(done.stdout.split()), done.stdout


# -- settings ---------------------------------------------------------------------------------


def test_every_variable_a_service_sets_is_a_setting_of_that_service(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, argv in streamshop_services().items():
        env = environment(name)
        # Read by the CLI itself (and the locustfile) before any component: streamshop.env_file
        assert env.pop(ENV_FILE, None), f"{name} names no settings file"
        sub = argv[0]
        if sub in SERVICE_CONFIGS:
            cls = SERVICE_CONFIGS[sub]
            settings = {cls.env_name(f.name) for f in dataclasses.fields(cls) if f.init}
            assert set(env) <= settings, f"{name}: {sorted(set(env) - settings)} are not {cls.__name__} settings"
        elif sub == "analytics":
            settings = {
                ANALYTICS_ENV + f.name.upper() for f in dataclasses.fields(AnalyticsConfig) if f.name != "kafka"
            }
            unknown = {k for k in env if k not in settings and not k.startswith(ANALYTICS_ENV + "KAFKA_")}
            assert not unknown, f"{name}: {sorted(unknown)} are not analytics settings"
        else:
            # broker and registry: each variable is a setting of the process's own, by its current
            # name, and leaving it out changes what runs
            declared = {info.variable for info in PROCESS_SETTINGS[sub].describe()}
            assert set(env) <= declared, f"{name}: {sorted(set(env) - declared)} are not {sub} settings"
            effective = _effective(sub, argv, monkeypatch)
            for key in env:
                without = {k: v for k, v in env.items() if k != key}
                assert effective(env) != effective(without), f"{name}: {key} changes nothing"
    (locust,) = [n for n in SERVICES if runs_locust(n)]
    assert set(environment(locust)) <= LoadTargets.settings() | {ENV_FILE}


def _effective(sub: str, argv: list[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    def broker(env: Mapping[str, str]) -> Any:
        args = parse(argv, env, monkeypatch)  # as broker.app.main builds its config
        overrides = {name: getattr(args, name) for name in ("data_dir", "listen", "advertise", "admin_listen")}
        return BrokerSettings.from_env(env, overrides=overrides).to_config()

    def registry(env: Mapping[str, str]) -> Any:
        args = parse(argv, env, monkeypatch)  # as registry.app.main builds its config
        return RegistryConfig.from_env(env, overrides={"bootstrap_servers": args.bootstrap_servers})

    return {"broker": broker, "registry": registry}[sub]


def test_every_service_setting_loads_and_passes_the_service_checks() -> None:
    for name in streamshop_services():
        if subcommand(name) in SERVICE_CONFIGS:
            config = config_of(name)
            config.check()  # seal keys decode to 32 bytes, providers are consistent, ...
            assert config.listen == "0.0.0.0", f"{name} must listen on every interface of its container"
    (analytics,) = services_running("analytics")
    AnalyticsConfig.from_args(argparse.Namespace(), environment(analytics))


def test_the_broker_listens_everywhere_and_advertises_its_service_name(monkeypatch: pytest.MonkeyPatch) -> None:
    name = one_service("broker")
    settings = _effective("broker", streamshop_services()[name], monkeypatch)(environment(name))
    assert settings.listen == ("0.0.0.0", 9092)
    assert settings.advertise == (name, settings.listen[1])
    assert settings.admin_listen is not None
    assert settings.admin_listen[0] == "0.0.0.0"
    assert interpolate(BOOTSTRAP_REF, {}) == f"{name}:{settings.listen[1]}", "the default bootstrap is the broker"


def test_every_kafka_client_takes_its_bootstrap_servers_from_one_variable() -> None:
    """Services that `streamshop up` starts after the broker, and Locust."""
    needs_broker = {c.name for c in CHILDREN if "broker" in c.needs}
    for name, service in SERVICES.items():
        argv = command_of(name)
        raw = service.get("environment", {})
        bootstrap = {k: v for k, v in raw.items() if k.endswith(("_BOOTSTRAP_SERVERS", "_REGISTRY_BOOTSTRAP"))}
        if runs_locust(name) or (runs_streamshop(name) and argv[1] in needs_broker):
            assert len(bootstrap) == 1, f"{name} sets no (or several) bootstrap servers"
        if runs_streamshop(name) or runs_locust(name):
            assert set(bootstrap.values()) <= {BOOTSTRAP_REF}, f"{name}: {bootstrap}"


def test_switching_to_kafka_changes_only_the_bootstrap_servers_of_the_services() -> None:
    for name in active(RUNS["default"][0]) & active(RUNS["kafka"][0]):
        if not runs_streamshop(name):
            continue
        before, after = environment(name), environment(name, RUNS["kafka"][1])
        changed = {k for k in before if before[k] != after[k]}
        assert all(k.endswith(("BOOTSTRAP_SERVERS", "REGISTRY_BOOTSTRAP")) for k in changed), f"{name}: {changed}"
        assert not changed or {after[k] for k in changed} == {KAFKA_BOOTSTRAP}


def test_every_service_finds_the_registry_at_its_service_and_port() -> None:
    registry = one_service("registry")
    port = http_port(registry)
    needs_registry = {c.name for c in CHILDREN if "registry" in c.needs}
    for name in streamshop_services():
        if subcommand(name) in needs_registry:
            (url,) = [v for k, v in environment(name).items() if k.endswith("_REGISTRY_URL")]
            assert url_target(url) == (registry, port), f"{name}: {url}"


def test_otp_and_the_senders_share_the_seal_key_and_its_id() -> None:
    """The demo keys, and the ones STREAMSHOP_SEAL_KEY sets instead: one variable for the three."""
    own_key = bytes(range(32))
    for variables, expected in (({}, None), ({"STREAMSHOP_SEAL_KEY": base64.b64encode(own_key).decode()}, own_key)):
        otp = OtpConfig.from_env(environment(one_service("otp"), variables))
        key = otp.seal_key_bytes()
        assert key is not None
        assert len(key) == SEAL_KEY_BYTES
        assert expected is None or key == expected
        assert otp.hash_key, "a fixed hash key: a restarted otp still verifies the codes it sent"
        for sub in ("sms-sender", "email-sender"):
            sender = config_of(one_service(sub), variables)
            assert isinstance(sender, SenderConfig)
            assert sender.seal_keys() == {otp.seal_key_id: key}, sub


def test_the_senders_deliver_to_the_catcher() -> None:
    catcher_name = one_service("catcher")
    catcher = config_of(catcher_name)
    assert isinstance(catcher, CatcherConfig)
    sms = config_of(one_service("sms-sender"))
    email = config_of(one_service("email-sender"))
    assert isinstance(sms, SmsSenderConfig)
    assert isinstance(email, EmailSenderConfig)
    assert sms.provider == "webhook"
    assert url_target(sms.webhook_url) == (catcher_name, catcher.port)
    assert urlsplit(sms.webhook_url).path == "/sms"
    assert (email.smtp_host, email.smtp_port) == (catcher_name, catcher.smtp_port)


def test_locust_targets_are_the_services_and_their_ports() -> None:
    (name,) = [n for n in SERVICES if runs_locust(n)]
    argv = command_of(name)
    targets = LoadTargets.from_env(environment(name))
    host = argv[argv.index("--host") + 1]
    for url, service in ((host, "orders"), (targets.otp_url, "otp"), (targets.catcher_url, "catcher")):
        target = one_service(service)
        assert url_target(url) == (target, http_port(target)), url
    assert SERVICES[name]["environment"]["LOADTEST_BOOTSTRAP_SERVERS"] == BOOTSTRAP_REF


# -- health and start order ---------------------------------------------------------------------


def _probe(service: str) -> tuple[int, str] | None:
    test = " ".join(str(part) for part in SERVICES[service].get("healthcheck", {}).get("test", []))
    match = re.search(r"http://127\.0\.0\.1:(\d+)(/[^'\" ]*)", test)
    return (int(match.group(1)), match.group(2)) if match else None


def test_every_http_service_is_healthy_when_its_readiness_endpoint_answers() -> None:
    for name, service in SERVICES.items():
        argv = command_of(name)
        if argv[:2] == ["streamshop", "analytics"] or name in streamshop_one_shots():
            continue  # no HTTP server: nothing to probe, see test_only_healthchecked_services_are_waited_for
        if runs_streamshop(name):
            # the broker's admin API has /healthz only; every other process serves /readyz
            path = "/healthz" if argv[1] == "broker" else "/readyz"
            assert _probe(name) == (http_port(name), path), f"{name}: healthcheck {_probe(name)}"
        elif runs_locust(name):
            assert _probe(name) == (http_port(name), "/")
        elif name == "postgres":
            assert service["healthcheck"]["test"][:2] == ["CMD", "pg_isready"], name
        elif is_long_running(name):
            test = service["healthcheck"]["test"]
            assert test[:2] == ["CMD", "/opt/kafka/bin/kafka-broker-api-versions.sh"], name
            assert test[-1] == "localhost:9092", name
        assert service.get("healthcheck") or not is_long_running(name), f"{name} has no healthcheck"


def test_only_healthchecked_services_are_waited_for_and_one_shots_waited_for_completion() -> None:
    for name in SERVICES:
        for dependency, spec in dependencies(name).items():
            assert dependency in SERVICES, f"{name} depends on unknown {dependency}"
            if spec["condition"] == "service_healthy":
                assert "healthcheck" in SERVICES[dependency], f"{name} waits for {dependency}, which has none"
            else:
                assert spec["condition"] == "service_completed_successfully", f"{name} -> {dependency}"
                assert not is_long_running(dependency), f"{dependency} never completes"


@pytest.mark.parametrize("run", sorted(RUNS))
def test_every_run_has_its_required_dependencies_and_no_cycle(run: str) -> None:
    services = active(RUNS[run][0])
    for name in services:
        for dependency, spec in dependencies(name).items():
            if spec.get("required", True):
                assert dependency in services, f"{run}: {name} needs {dependency}, which is not in the run"
        assert name not in closure(name, services), f"{run}: {name} waits for itself"


@pytest.mark.parametrize("run", sorted(RUNS))
def test_every_process_starts_after_what_streamshop_up_starts_it_after(run: str) -> None:
    profiles, variables = RUNS[run]
    services = active(profiles)
    kafka = "kafka" in profiles
    bootstrap_hosts = {url_target(a)[0] for a in interpolate(BOOTSTRAP_REF, variables).split(",")}
    assert bootstrap_hosts <= services, f"{run}: bootstrap servers {bootstrap_hosts} are not in the run"
    assert ("broker" in services) != kafka, f"{run}: exactly one of the bundled broker and Kafka runs"
    for child in CHILDREN:
        waits = closure(one_service(child.name), services)
        for need in child.needs:
            # on Kafka the broker is the cluster, ready once its topics are set up
            expected = "kafka-setup" if need == "broker" and kafka else one_service(need)
            assert expected in waits, f"{run}: {child.name} does not wait for {expected}"
        if kafka and "broker" in child.needs:
            assert bootstrap_hosts <= waits, f"{run}: {child.name} does not wait for {bootstrap_hosts}"


# -- ports and volumes ----------------------------------------------------------------------------


def test_host_ports_are_unique_local_and_the_ports_the_processes_listen_on() -> None:
    seen: dict[int, str] = {}
    for name in SERVICES:
        for ip, host, container in published(name):
            assert host not in seen, f"host port {host}: {seen.get(host)} and {name}"
            seen[host] = name
            assert ip == "127.0.0.1", f"{name}: port {host} is open beyond the host"
            assert host == container, f"{name}: {host}:{container}, the URLs of the README would not hold"
            listening = {http_port(name)}
            if command_of(name)[:2] == ["streamshop", "catcher"]:
                catcher = config_of(name)
                assert isinstance(catcher, CatcherConfig)
                listening.add(catcher.smtp_port)
            assert container in listening, f"{name} publishes {container}, listens on {listening}"


SECURE_VOLUME, SECURE_DIR = "secure", "/var/lib/streamshop/secure"


def test_named_volumes_are_declared_used_and_each_holds_one_process_state(monkeypatch: pytest.MonkeyPatch) -> None:
    declared = set(COMPOSE.get("volumes") or {})
    used = [(name, volume, target) for name in SERVICES for volume, target in mounts(name)]
    assert all(not v.startswith((".", "/")) for _, v, _ in used), "bind mounts: the stack uses named volumes"
    assert {v for _, v, _ in used} == declared, "every volume declared is used, and vice versa"
    image_dirs = set(re.findall(r"(/var/lib/streamshop/[\w.-]+)", DOCKERFILE))
    for volume in declared - {SECURE_VOLUME}:
        # One process keeps its state there; a one-shot may prepare it only before that process starts.
        (owner,) = [name for name, v, _ in used if v == volume and is_long_running(name)]
        for name, _, _ in ((n, v, t) for n, v, t in used if v == volume and n != owner):
            assert name in dependencies(owner), f"{volume}: {name} writes it while {owner} may run"
    for name, volume, target in used:
        if volume == SECURE_VOLUME or not is_long_running(name):
            continue
        argv = command_of(name)
        env = environment(name)
        if name == "postgres":
            assert target == "/var/lib/postgresql/data", name  # the official image's PGDATA
            continue
        if not runs_streamshop(name):
            assert env["KAFKA_LOG_DIRS"] == target, name
            continue
        assert target in image_dirs, f"{name}: {target} is not made (and owned) in the Dockerfile"
        if argv[1] in SERVICE_CONFIGS:
            state = config_of(name).database_path.parent
        elif argv[1] == "analytics":
            state = AnalyticsConfig.from_args(argparse.Namespace(), env).data_dir
        else:
            state = _effective(argv[1], argv[1:], monkeypatch)(env).data_dir
        assert state == Path(target), f"{name} keeps its state in {state}, the volume is at {target}"


def test_every_process_reads_its_secure_settings_file_from_the_secure_volume_read_only() -> None:
    assert SECURE_DIR in re.findall(r"(/var/lib/streamshop/[\w.-]+)", DOCKERFILE), "not made and owned in the image"
    for name, service in SERVICES.items():
        if not (runs_locust(name) or runs_streamshop(name)):
            continue
        entries = [str(e) for e in service.get("volumes", []) if str(e).startswith(SECURE_VOLUME + ":")]
        if is_long_running(name):
            assert entries == [f"{SECURE_VOLUME}:{SECURE_DIR}:ro"], f"{name}: {entries}"
            assert environment(name)[ENV_FILE] == f"{SECURE_DIR}/env/{name}.env", name
    writers = [n for n in SERVICES for e in SERVICES[n].get("volumes", []) if str(e) == f"{SECURE_VOLUME}:{SECURE_DIR}"]
    assert writers == ["secure-setup"], writers


def test_every_process_that_keeps_state_has_a_volume_for_it() -> None:
    for name in SERVICES:
        argv = command_of(name)
        if runs_streamshop(name) and argv[1] in ("broker", "analytics", *SERVICE_CONFIGS):
            if argv[1] in ("catcher", "dashboard"):
                continue  # in memory by design: the catcher's mailbox, the dashboard's history
            assert mounts(name), f"{name} would lose its state with its container"


# -- the kafka profile ---------------------------------------------------------------------------


def kafka_nodes() -> list[str]:
    return [n for n in SERVICES if image(n).startswith("apache/kafka:") and is_long_running(n)]


def test_the_kafka_profile_is_three_kraft_brokers_with_replication_3_and_min_isr_2() -> None:
    nodes = kafka_nodes()
    assert len(nodes) == 3
    envs = {n: environment(n) for n in nodes}
    assert sorted(int(e["KAFKA_NODE_ID"]) for e in envs.values()) == [1, 2, 3]
    voters = {f"{e['KAFKA_NODE_ID']}@{n}:9093" for n, e in envs.items()}
    for name, env in envs.items():
        assert SERVICES[name]["profiles"] == ["kafka"]
        assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}, "combined mode"
        assert set(env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")) == voters
        assert env["KAFKA_ADVERTISED_LISTENERS"] == f"PLAINTEXT://{name}:9092"
        assert "CONTROLLER://:9093" in env["KAFKA_LISTENERS"].split(",")
        assert env["KAFKA_DEFAULT_REPLICATION_FACTOR"] == "3"
        assert env["KAFKA_MIN_INSYNC_REPLICAS"] == "2"
        assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "3"
        assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "3"
        assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "2"
    (cluster_id,) = {e["CLUSTER_ID"] for e in envs.values()}
    assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16, "a Kafka cluster id is 16 bytes"
    assert {url_target(a)[0] for a in KAFKA_BOOTSTRAP.split(",")} == set(nodes)


def test_the_kafka_profile_runs_the_release_and_settings_of_streamshop_kafka_cluster() -> None:
    """The tests' Apache Kafka (`streamshop kafka-cluster`) and the compose profile are one
    release with one set of cluster settings."""
    from streamshop.kafka_cluster import Cluster, Node
    from streamshop.kafka_jars import KAFKA_VERSION, POM

    pom_version = re.search(r"<kafka.version>([^<]+)</kafka.version>", POM.read_text())
    assert pom_version is not None
    assert pom_version.group(1) == KAFKA_VERSION
    nodes = [Node(i, 9092 + 2 * i, 9093 + 2 * i, voter=True) for i in (1, 2, 3)]
    properties = dict(
        line.split("=", 1) for line in Cluster(REPO, "id", nodes, 256).properties(nodes[0]).splitlines() if line
    )
    node_specific = {"NODE_ID", "LISTENERS", "ADVERTISED_LISTENERS", "CONTROLLER_QUORUM_VOTERS", "LOG_DIRS"}
    for name in kafka_nodes():
        assert image(name) == f"apache/kafka:{KAFKA_VERSION}"
        env = environment(name)
        shared = {
            key.removeprefix("KAFKA_").lower().replace("_", "."): value
            for key, value in env.items()
            if key.startswith("KAFKA_") and key.removeprefix("KAFKA_") not in node_specific
        }
        shared = {key: value for key, value in shared.items() if key in properties}
        assert set(shared) >= {
            "default.replication.factor",
            "min.insync.replicas",
            "unclean.leader.election.enable",
            "broker.session.timeout.ms",
            "num.partitions",
        }
        assert shared == {key: properties[key] for key in shared}, name


def _created_topics() -> dict[str, tuple[int, dict[str, str]]]:
    (setup,) = [n for n in SERVICES if image(n).startswith("apache/kafka:") and n not in kafka_nodes()]
    script = "\n".join(command_of(setup))
    (create,) = re.findall(r"^create\(\) \{(.*)\}$", script, re.M)
    assert "--replication-factor 3" in create
    assert '--bootstrap-server "$$BOOTSTRAP_SERVERS"' in create
    assert SERVICES[setup]["environment"]["BOOTSTRAP_SERVERS"] == BOOTSTRAP_REF
    topics = {}
    for line in re.findall(r"^create (.+)$", script, re.M):
        name, *options = line.split()
        flags = dict(zip(options[::2], options[1::2], strict=True))
        configs = dict(c.split("=", 1) for c in re.findall(r"--config (\S+)", line))
        topics[name] = (int(flags["--partitions"]), configs)
    return topics


def test_kafka_setup_creates_every_topic_the_registry_and_services_would_create_with_one_replica() -> None:
    """They create topics with replication factor 1; on Kafka with min.insync.replicas=2 their
    acks=all writes would be refused, so these exist first with replication factor 3."""
    expected: dict[str, tuple[int, dict[str, str]]] = {}
    registry = RegistryConfig.from_env(environment(one_service("registry")))
    expected[registry.topic] = (1, {"cleanup.policy": "compact"})  # registry.store creates it so
    expected[ids_topic(registry.topic)] = (1, {"cleanup.policy": "compact"})  # and its id mark
    for sub in ("orders", "otp"):
        config = config_of(one_service(sub))
        assert isinstance(config, (OrdersConfig, OtpConfig))
        expected[config.topic] = (config.topic_partitions, {})
    for sub in ("sms-sender", "email-sender"):
        sender = config_of(one_service(sub))
        assert isinstance(sender, SenderConfig)
        expected.update({topic: (n, {}) for topic, n in sender.topics_to_create().items()})
    assert _created_topics() == expected


# -- the image -------------------------------------------------------------------------------------


def _dockerfile_lines() -> Iterator[str]:
    """Instructions, continuation lines joined, comments left out."""
    lines = (line for line in DOCKERFILE.splitlines() if not line.lstrip().startswith("#"))
    yield from "\n".join(lines).replace("\\\n", " ").splitlines()


def _stages() -> dict[str, list[str]]:
    """The Dockerfile's lines by stage (`FROM ... AS name`), the ARGs before the first under ""."""
    stages: dict[str, list[str]] = {"": []}
    current = ""
    for line in _dockerfile_lines():
        if line.startswith("FROM "):
            current = line.split()[-1]
            stages[current] = []
        stages[current].append(line)
    return stages


def test_the_images_are_python_3_11_slim_the_app_with_java_17_and_the_project_installed() -> None:
    stages = _stages()
    (arg,) = [line for line in stages[""] if line.startswith("ARG STREAMSHOP_BASE_IMAGE=")]
    assert re.fullmatch(r"ARG STREAMSHOP_BASE_IMAGE=python:3\.11\.\d+-slim-bookworm@sha256:[0-9a-f]{64}", arg), (
        "pin the base image by digest"
    )
    assert stages["base"][0] == "FROM ${STREAMSHOP_BASE_IMAGE} AS base"
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    package_data = pyproject["tool"]["setuptools"].get("package-data", {})
    packages = {p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert "streamshop" in pyproject["project"]["scripts"], "services run the `streamshop` console script"
    for target, lock in (("broker", "requirements-broker.lock"), ("app", "requirements-image.lock")):
        lines = stages[target]
        assert lines[0] == f"FROM base AS {target}"
        (deps,) = [line for line in lines if lock in line and line.startswith("RUN ")]
        assert "--require-hashes" in deps.split()
        java = any("apt-get install" in line and "openjdk-17-jre-headless" in line.split() for line in lines)
        assert java == (target == "app"), f"{target}: Java is for Spark, in the app image only"
        (install,) = [line for line in lines if re.search(r"pip install .*\.$", line.strip())]
        # the services load schemas/*.avsc at start: an installed copy of the packages must have them
        assert " -e ." in install or "*.avsc" in package_data.get("schemas", []), "schemas/*.avsc missing"
        (user,) = [line.split()[1] for line in lines if line.startswith("USER ")]
        assert user not in ("root", "0")
        copied = {source for line in lines if line.startswith("COPY ") for source in line.split()[1:-1]}
        assert packages | {lock, "pyproject.toml", "README.md"} <= copied, target
    assert "loadtest" in {s for line in stages["app"] if line.startswith("COPY ") for s in line.split()[1:-1]}


def test_the_image_lock_pins_with_hashes_what_the_full_lock_pins() -> None:
    """Both locks come from one `make lock`: every runtime package at the version the suite ran
    with, each with the sha256 of its files."""

    def pins(name: str) -> dict[str, str]:
        text = (REPO / name).read_text()
        found = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", text, re.MULTILINE))
        blocks = re.split(r"\n(?=[A-Za-z0-9_.-]+==)", text)
        assert all("--hash=sha256:" in block for block in blocks[1:]), f"{name}: a package without hashes"
        return {k.lower().replace("_", "-"): v for k, v in found.items()}

    full = pins("requirements.lock")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    for lock, runtime in (
        (
            "requirements-image.lock",
            [*project["dependencies"], *(r for e in extras if e not in ("dev", "all") for r in extras[e])],
        ),
        ("requirements-broker.lock", [*project["dependencies"], *extras["broker"]]),
    ):
        image = pins(lock)
        assert image
        assert {name: full.get(name) for name in image} == image, lock
        for requirement in runtime:
            name = re.split(r"[<>=\[;! ]", requirement, maxsplit=1)[0].lower()
            assert name in image, f"{name} missing from {lock}"
    broker = pins("requirements-broker.lock")
    assert not {"pyspark", "pyarrow", "confluent-kafka", "aiokafka", "kafka-python", "locust"} & set(broker)


def test_the_build_context_keeps_the_sources_and_leaves_out_environments_and_data() -> None:
    patterns = [
        line.strip() for line in (REPO / ".dockerignore").read_text().splitlines() if line.strip() and line[0] != "#"
    ]

    def ignored(path: str) -> bool:
        return any(fnmatch(path, p) or fnmatch(path, p.removeprefix("**/")) for p in patterns)

    # (a COPY --from=STAGE copies out of an earlier stage, not from the context)
    copied = {
        source
        for line in _dockerfile_lines()
        if line.startswith("COPY ") and not line.startswith("COPY --from=")
        for source in line.split()[1:-1]
    }
    assert {"broker/protocol/_recordwalk.c", "analytics/_avrovm.c"} <= copied
    for path in copied:
        assert (REPO / path).exists(), path
        assert not ignored(path), path
    # a module compiled for the host's Python is not the image's: the image compiles its own
    host_built = "broker/protocol/_recordwalk.cpython-311-x86_64-linux-gnu.so"
    for path in (".git", ".venv", "data", "tests", ".env", "loadtest/results", "services/__pycache__", host_built):
        assert ignored(path), path


def test_the_postgres_profile_gives_each_service_with_state_a_database_the_server_makes() -> None:
    """`--env-file compose/postgres.env --profile postgres`: each stateful service's URL names the
    profile's server and a database its first start creates; without the file the URL is empty
    (an unset setting: SQLite)."""
    lines = (REPO / "compose" / "postgres.env").read_text().splitlines()
    urls = dict(line.split("=", 1) for line in lines if line.strip() and not line.startswith("#"))
    made = set(re.findall(r"CREATE DATABASE (\w+);", COMPOSE["configs"]["postgres-databases"]["content"]))
    server = SERVICES["postgres"]
    password = re.fullmatch(r"\$\{STREAMSHOP_POSTGRES_PASSWORD:-(.+)\}", server["environment"]["POSTGRES_PASSWORD"])
    assert password is not None
    stateful = {
        "orders": "ORDERS",
        "otp": "OTP",
        "logs": "LOGS",
        "sms-sender": "SMS_SENDER",
        "email-sender": "EMAIL_SENDER",
    }
    assert set(urls) == {f"{prefix}_DATABASE_URL" for prefix in stateful.values()}
    for name, prefix in stateful.items():
        variable = f"{prefix}_DATABASE_URL"
        assert SERVICES[name]["environment"][variable] == f"${{{variable}:-}}", name
        url = urlsplit(urls[variable])
        assert (url.scheme, url.hostname, url.port) == ("postgresql", "postgres", 5432), name
        assert url.username == server["environment"]["POSTGRES_USER"]
        assert url.password == password.group(1)
        assert url.path.lstrip("/") in made, name
        assert dependencies(name)["postgres"] == {"condition": "service_healthy", "required": False}
        assert config_of(name).database_url is None  # the compose file alone: SQLite


def test_local_env_names_an_image_for_each_variable_the_compose_file_reads() -> None:
    """compose/local.env swaps every image a registry would serve for one made on the host; its
    variables are exactly those, and the Dockerfile reads the base's."""
    local = dict(
        line.split("=", 1)
        for line in (REPO / "compose" / "local.env").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    assert set(local) == {BASE_ARG, "KAFKA_IMAGE", "POSTGRES_IMAGE"}
    assert f"ARG {BASE_ARG}=" in DOCKERFILE
    swapped = {name: image(name, local) for name in SERVICES if image(name) != image(name, local)}
    from streamshop.kafka_jars import KAFKA_VERSION

    assert {image(name) for name in swapped} == {"postgres:15", f"apache/kafka:{KAFKA_VERSION}"}
    assert local["KAFKA_IMAGE"].endswith(f":{KAFKA_VERSION}")  # the same release, from Maven Central's jars
    assert set(swapped.values()) == {local["KAFKA_IMAGE"], local["POSTGRES_IMAGE"]}
