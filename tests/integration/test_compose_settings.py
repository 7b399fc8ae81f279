"""docker-compose.yml's environment: every variable a service sets is a setting of that service
and loads, the broker's listeners, one bootstrap variable switching to Apache Kafka, the
registry's address, the seal key shared by otp and the senders, and Locust's targets.

The fast tier (no Docker engine): each claim the file makes is checked against what the
processes really read and listen on.  tests/compose/ builds the images and runs the profiles
for real.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
from urllib.parse import urlsplit

import pytest

from analytics.settings import ENV as ANALYTICS_ENV
from analytics.settings import AnalyticsConfig
from broker.settings import BrokerSettings
from contracts.otp import SEAL_KEY_BYTES
from kit import telemetry
from kit.settings import Settings
from loadtest.targets import LoadTargets
from registry.config import RegistryConfig
from services.catcher.config import CatcherConfig
from services.notify.config import EmailSenderConfig, SenderConfig, SmsSenderConfig
from services.otp.config import OtpConfig
from streamshop.env_file import ENV_FILE
from streamshop.stack.plan import CHILDREN
from tests.support.compose_file import (
    BOOTSTRAP_REF,
    KAFKA_BOOTSTRAP,
    RUNS,
    SERVICE_CONFIGS,
    SERVICES,
    _effective,
    active,
    command_of,
    config_of,
    environment,
    http_port,
    interpolate,
    one_service,
    runs_locust,
    runs_streamshop,
    services_running,
    streamshop_services,
    subcommand,
    url_target,
)

PROCESS_SETTINGS: dict[str, type[Settings]] = {"broker": BrokerSettings, "registry": RegistryConfig}


def test_every_variable_a_service_sets_is_a_setting_of_that_service(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, argv in streamshop_services().items():
        env = environment(name)
        # Read by the CLI itself (and the locustfile) before any component: streamshop.env_file
        assert env.pop(ENV_FILE, None), f"{name} names no settings file"
        # OpenTelemetry's standard variables, read by kit.telemetry in every process: a valid exporter
        traced = {k: env.pop(k) for k in set(env) & telemetry.VARIABLES}
        telemetry.exporter_name(traced)
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
