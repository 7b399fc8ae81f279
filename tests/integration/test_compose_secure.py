"""The compose file's ``secure`` profile, run as far as it runs without a Docker engine: its
set-up one-shot really runs (`streamshop secure setup`, the compose command with the volumes as
temporary directories), every process's settings are the compose environment plus the file the
set-up wrote, and the bundled broker, the grant one-shot, the registry and its healthcheck run
as real processes on loopback, with the service names ``broker`` and ``registry`` (Docker's DNS)
replaced by 127.0.0.1 and a free port.
"""

from __future__ import annotations

import argparse
import dataclasses
import http.server
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest
import urllib3
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from cryptography import x509

from analytics.settings import AnalyticsConfig
from kit import telemetry
from loadtest.targets import LoadTargets
from registry.config import RegistryConfig
from streamshop.broker_process import parse_ready_line, parse_registry_ready_line
from streamshop.env_file import ENV_FILE, read_env_file
from streamshop.stack.secure import ACCESS, ADMIN, HTTP_SERVICES, LOADTEST
from tests.support.compose_file import (
    SECURE_DIR,
    SERVICE_CONFIGS,
    SERVICES,
    command,
    environment,
    is_long_running,
    runs_locust,
    streamshop_services,
)
from tests.support.harness import REPO

BROKER_DIR = "/var/lib/streamshop/broker"
PROCESSES = sorted(n for n in SERVICES if is_long_running(n) and (runs_locust(n) or n in streamshop_services()))


@dataclass
class Volumes:
    """The two volumes the set-up writes, as directories."""

    secure: Path
    broker: Path

    def host(self, value: str) -> str:
        return value.replace(SECURE_DIR, str(self.secure)).replace(BROKER_DIR, str(self.broker))

    def credentials(self) -> dict[str, Any]:
        return dict(json.loads((self.secure / "credentials.json").read_text()))

    def settings(self, service: str) -> dict[str, str]:
        """What the process reads: its compose environment, then its settings file over it."""
        env = {name: self.host(value) for name, value in environment(service).items()}
        return env | read_env_file(Path(env[ENV_FILE]))


def setup_argv(volumes: Volumes, **variables: str) -> list[str]:
    argv = [volumes.host(arg) for arg in command("secure-setup", variables)]
    assert argv[:3] == ["streamshop", "secure", "setup"], argv
    return [sys.executable, "-m", "streamshop.cli", *argv[1:]]


def run(argv: list[str], env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=120, cwd=REPO, env={**os.environ, **(env or {})}, check=False
    )


@pytest.fixture(scope="module")
def volumes(tmp_path_factory: pytest.TempPathFactory) -> Volumes:
    root = tmp_path_factory.mktemp("compose-secure")
    made = Volumes(root / "secure", root / "broker")
    made.broker.mkdir()
    done = run(setup_argv(made))
    assert done.returncode == 0, done.stderr
    return made


# -- the settings each process reads -------------------------------------------------------------


def test_the_set_up_writes_one_owner_only_settings_file_for_every_process(volumes: Volumes) -> None:
    files = {p.stem: p for p in (volumes.secure / "env").iterdir()}
    assert sorted(files) == PROCESSES
    for path in files.values():
        assert path.stat().st_mode & 0o077 == 0, f"{path} is readable by others"
    for name in PROCESSES:
        assert Path(volumes.settings(name)[ENV_FILE]) == files[name]


def test_every_service_logs_in_as_itself_over_sasl_ssl_and_reaches_the_registry_over_https(volumes: Volumes) -> None:
    passwords = volumes.credentials()
    for name in streamshop_services():
        sub = streamshop_services()[name][0]
        if sub not in SERVICE_CONFIGS:
            continue
        settings = volumes.settings(name)
        config = SERVICE_CONFIGS[sub].from_env(settings)
        config.check()
        known = {config.env_name(f.name) for f in dataclasses.fields(config) if f.init}
        own = set(settings) - {ENV_FILE} - telemetry.VARIABLES  # OpenTelemetry's, read by kit.telemetry
        assert own <= known, f"{name}: {sorted(own - known)} are not settings"
        kafka = config.kafka_security
        assert (kafka.protocol, kafka.mechanism, kafka.username) == ("SASL_SSL", "SCRAM-SHA-512", name)
        assert kafka.password == passwords["kafka"][name]
        assert kafka.cafile is not None
        assert kafka.cafile.is_file()
        assert config.registry_url == "https://registry:8081", name
        assert (config.registry_username, config.registry_password) == (name, passwords["registry"][name])
        if name in HTTP_SERVICES:
            assert config.api_keys_file is not None
            assert config.api_keys_file.is_file(), name
        else:
            assert config.api_keys_file is None, name


def test_analytics_the_registry_the_broker_and_locust_are_secured(
    volumes: Volumes, monkeypatch: pytest.MonkeyPatch
) -> None:
    passwords = volumes.credentials()
    analytics = AnalyticsConfig.from_args(argparse.Namespace(), volumes.settings("analytics"))
    assert analytics.kafka["security.protocol"] == "sasl_ssl"
    assert analytics.kafka["sasl.username"] == "analytics"
    assert analytics.registry_url == f"https://analytics:{passwords['registry']['analytics']}@registry:8081"
    assert Path(volumes.settings("analytics")["SSL_CERT_FILE"]).is_file()  # urllib in Spark's workers

    env = volumes.settings("registry")
    registry = RegistryConfig.from_env(env)
    assert registry.deprecations == ()
    assert registry.scheme == "https"
    assert registry.users_file is not None
    assert registry.users_file.is_file()
    assert (registry.kafka_security.protocol, registry.kafka_security.username) == ("SASL_SSL", "registry")

    broker = volumes.settings("broker")
    sets = broker["BROKER_SET"]
    for setting in (
        "listeners=SASL_SSL://0.0.0.0:9092",
        "advertised.listeners=SASL_SSL://broker:9092",
        f"super.users=User:{ADMIN}",
        "allow.everyone.if.no.acl.found=false",
    ):
        assert setting in sets.split(",") or f",{setting}," in f",{sets},", setting
    # The admin API has no login: in the secured run it leaves the container's loopback never.
    assert broker["BROKER_ADMIN_LISTEN"] == "127.0.0.1:9644"

    locust = volumes.settings("locust")
    assert LoadTargets.kafka_config(locust)["sasl.username"] == LOADTEST
    assert locust["STREAMSHOP_API_KEY"] == passwords["api_keys"][ADMIN]
    assert set(locust) <= LoadTargets.settings() | {ENV_FILE, "STREAMSHOP_API_KEY"}


def test_the_certificates_name_the_compose_services(volumes: Volumes) -> None:
    for name in ("broker", "registry"):
        cert = x509.load_pem_x509_certificate((volumes.secure / "pki" / f"{name}.pem").read_bytes())
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert {"broker", "registry", "localhost"} <= set(names.get_values_for_type(x509.DNSName)), name


def test_the_set_up_keeps_what_it_made_and_refuses_a_stack_on_another_broker(volumes: Volumes) -> None:
    before = (volumes.credentials(), (volumes.secure / "pki" / "ca.pem").read_bytes())
    again = run(setup_argv(volumes))
    assert again.returncode == 0, again.stderr
    assert (volumes.credentials(), (volumes.secure / "pki" / "ca.pem").read_bytes()) == before
    kafka = run(setup_argv(volumes, BOOTSTRAP_SERVERS="kafka-1:9092,kafka-2:9092,kafka-3:9092"))
    assert kafka.returncode == 2
    assert "kafka-cluster start --secure" in kafka.stderr


def test_a_settings_file_that_cannot_be_used_stops_the_process(tmp_path: Path) -> None:
    bad = tmp_path / "bad.env"
    bad.write_text("ORDERS_KAFKA_SASL_PASSWORD=hunter2\nnot a setting\n")
    done = run([sys.executable, "-m", "streamshop.cli", "orders"], {ENV_FILE: str(bad)})
    assert done.returncode == 2
    assert f"{bad}:2: expected NAME=VALUE" in done.stderr
    assert "hunter2" not in done.stderr + done.stdout


# -- the one-shots and the processes, on loopback --------------------------------------------------


class Child:
    """A compose service's process with its settings, until it prints its ready line."""

    def __init__(self, argv: list[str], env: Mapping[str, str], log: Path) -> None:
        self.log: IO[str] = log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streamshop.cli", *argv[1:]],
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            cwd=REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
        )

    def ready(self, parse: Any, timeout: float = 60) -> Any:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"exited with {self.proc.wait()}: see {self.log.name}")
            if (found := parse(line)) is not None:
                return found
        raise TimeoutError("no ready line")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.log.close()


@dataclass
class Running:
    bootstrap: str
    registry: str


@pytest.fixture(scope="module")
def running(volumes: Volumes, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    logs = tmp_path_factory.mktemp("compose-secure-logs")
    # The broker: its compose settings and file, bound to a free loopback port instead of broker:9092.
    env = volumes.settings("broker")
    sets = [s for s in env["BROKER_SET"].split(",") if not s.startswith("advertised.listeners=")]
    env["BROKER_SET"] = ",".join(sets).replace("0.0.0.0:9092", "127.0.0.1:0")
    env |= {"BROKER_LISTEN": "127.0.0.1:0", "BROKER_ADMIN_LISTEN": "127.0.0.1:0"}
    env.pop("BROKER_ADVERTISE")
    loopback_file = volumes.secure.parent / "broker-loopback.env"
    loopback_file.write_text("".join(f"{k}={v}\n" for k, v in env.items() if k != ENV_FILE))
    broker = Child(command("broker"), {**env, ENV_FILE: str(loopback_file)}, logs / "broker.log")
    children = [broker]
    try:
        bootstrap = broker.ready(parse_ready_line).bootstrap
        grant = [volumes.host(a).replace("broker:9092", bootstrap) for a in command("secure-grant")]
        done = run([sys.executable, "-m", "streamshop.cli", *grant[1:]])
        assert done.returncode == 0, done.stderr
        renv = {k: v.replace("broker:9092", bootstrap) for k, v in volumes.settings("registry").items()}
        renv |= {"REGISTRY_LISTEN": "127.0.0.1", "REGISTRY_PORT": "0"}
        registry = Child(command("registry"), renv, logs / "registry.log")
        children.append(registry)
        url = registry.ready(parse_registry_ready_line)
        yield Running(bootstrap, url.split("://", 1)[1])
    finally:
        for child in children:
            child.stop()


def _produce(bootstrap: str, login: Mapping[str, str], topic: str) -> KafkaError | None:
    errors: list[KafkaError | None] = []
    producer = Producer(
        {"bootstrap.servers": bootstrap, **login, "enable.idempotence": True, "message.timeout.ms": 30000}
    )
    producer.produce(topic, b"compose secure", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(45)
    return errors[0] if errors else KafkaError(KafkaError._MSG_TIMED_OUT)


def _login(volumes: Volumes, service: str, prefix: str) -> dict[str, str]:
    from contracts.kafka_security import KafkaSecurity

    return KafkaSecurity.from_env(volumes.settings(service), prefix).librdkafka_config()


def test_after_the_grant_each_process_logs_in_and_is_held_to_its_acls(running: Running, volumes: Volumes) -> None:
    operator = {"bootstrap.servers": running.bootstrap, **_login(volumes, "locust", "LOADTEST_")}
    operator |= {"sasl.username": ADMIN, "sasl.password": volumes.credentials()["kafka"][ADMIN]}
    admin = AdminClient(operator)
    topics = [NewTopic(t, num_partitions=1, replication_factor=1) for t in ("orders", "otp.requests", "loadtest.e2e")]
    for future in admin.create_topics(topics, request_timeout=15).values():
        future.result(15)
    assert _produce(running.bootstrap, _login(volumes, "orders", "ORDERS_"), "orders") is None
    denied = _produce(running.bootstrap, _login(volumes, "orders", "ORDERS_"), "otp.requests")
    assert denied is not None
    assert denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # Locust's Kafka users: an idempotent producer on their own topic, and nothing else.
    assert _produce(running.bootstrap, LoadTargets.kafka_config(volumes.settings("locust")), "loadtest.e2e") is None
    denied = _produce(running.bootstrap, LoadTargets.kafka_config(volumes.settings("locust")), "orders")
    assert denied is not None
    assert denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    listed = {str(acl.principal) for acl in admin.describe_acls(_any_acl(), request_timeout=15).result(15)}
    assert listed == {f"User:{p}" for p in ACCESS}


def _any_acl() -> Any:
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    return AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
    )


def _healthcheck(service: str, volumes: Volumes, address: str) -> list[str]:
    test = [volumes.host(str(a)).replace("127.0.0.1:8081", address) for a in SERVICES[service]["healthcheck"]["test"]]
    assert test[:3] == ["CMD", "streamshop", "probe"], test
    return [sys.executable, "-m", "streamshop.cli", *test[2:]]


def test_the_registry_is_healthy_over_https_and_wants_a_login(running: Running, volumes: Volumes) -> None:
    assert run(_healthcheck("registry", volumes, running.registry)).returncode == 0
    http = urllib3.PoolManager(ca_certs=str(volumes.secure / "pki" / "ca.pem"))
    url = f"https://{running.registry}/subjects"
    assert http.request("GET", url).status == 401
    password = volumes.credentials()["registry"]["orders"]
    headers = urllib3.make_headers(basic_auth=f"orders:{password}")
    assert http.request("GET", url, headers=headers).status == 200


def test_the_registry_healthcheck_passes_on_a_plain_registry_and_fails_on_none(
    volumes: Volumes, tmp_path: Path
) -> None:
    class Ready(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/readyz" else 404)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ready)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    plain = Volumes(tmp_path / "empty-secure", volumes.broker)  # no set-up ran: no CA
    try:
        address = f"127.0.0.1:{server.server_address[1]}"
        assert run(_healthcheck("registry", plain, address)).returncode == 0
    finally:
        server.shutdown()
        server.server_close()
    refused = run(_healthcheck("registry", plain, address))
    assert refused.returncode == 1
    assert "no CA file" in refused.stderr


@pytest.mark.slow
def test_the_set_up_run_again_beside_a_running_broker_keeps_its_users(running: Running, volumes: Volumes) -> None:
    again = run(setup_argv(volumes))
    assert again.returncode == 0, again.stderr
    assert "its users are kept" in again.stderr
    assert _produce(running.bootstrap, _login(volumes, "orders", "ORDERS_"), "orders") is None
