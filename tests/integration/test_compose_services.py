"""docker-compose.yml's services: the file's shape, the commands (every one a `streamshop`
subcommand the CLI accepts, the project image or Apache Kafka's, Locust's), the healthchecks,
and the start order of every run against what `streamshop up` starts each process after.

The fast tier (no Docker engine): each claim the file makes is checked against what the
processes really read and listen on.  tests/compose/ builds the images and runs the profiles
for real.
"""

from __future__ import annotations

import ipaddress
import os
import re
import subprocess
import sys

import pytest

from streamshop.stack.plan import CHILDREN
from tests.support.compose_file import (
    BASE_ARG,
    BOOTSTRAP_REF,
    COMPOSE,
    COMPOSE_FILE,
    DOCKERFILE,
    RUNS,
    SERVICES,
    STREAMSHOP_ENV_PREFIXES,
    active,
    command,
    command_of,
    dependencies,
    environment,
    http_port,
    image,
    interpolate,
    is_long_running,
    one_service,
    parse,
    runs_locust,
    runs_streamshop,
    services_running,
    streamshop_services,
    url_target,
)
from tests.support.harness import REPO


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


def streamshop_one_shots() -> dict[str, list[str]]:
    """The same for the one-shots running the CLI (the secure profile's set-up)."""
    return {name: command(name)[1:] for name in SERVICES if runs_streamshop(name) and not is_long_running(name)}


def test_the_compose_file_has_services_volumes_one_network_and_extension_fields_only() -> None:
    top = {"name", "services", "volumes", "networks", "configs"}
    assert set(COMPOSE) - top <= {k for k in COMPOSE if k.startswith("x-")}
    # The postgres profile's databases, made by the official image on first start, and the
    # observability profile's Prometheus configuration.
    assert set(COMPOSE.get("configs", {})) == {"postgres-databases", "prometheus"}
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
        elif name == "traces":
            assert image(name).startswith("openzipkin/zipkin:"), name
        elif name == "prometheus":
            assert image(name).startswith("prom/prometheus:"), name
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
        elif name == "traces":
            assert service["healthcheck"]["test"] == ["CMD", "docker-healthcheck"], name  # the image's: GET /health
        elif name == "prometheus":
            assert service["healthcheck"]["test"][:3] == ["CMD", "promtool", "query"], name
            assert f"http://127.0.0.1:{http_port(name)}" in service["healthcheck"]["test"], name
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
