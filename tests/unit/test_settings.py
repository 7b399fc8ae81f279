"""One settings system for every process (kit.settings): one HOST:PORT parser, one ConfigError
that names every bad variable, the same prefix scheme, old names read and reported, flags checked
by the same parser as variables, secrets never shown, and docs/settings.md generated from it."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from analytics.settings import AnalyticsConfig
from broker.settings import BrokerSettings
from kit.settings import ConfigError, HostPort, HttpSettings, KafkaClientSettings, parse_host_port, secret, setting
from registry.config import RegistryConfig
from services.orders.config import OrdersConfig
from streamshop.cli import build_parser
from streamshop.commands.broker import broker_overrides
from streamshop.commands.settings import PROCESSES, markdown
from streamshop.settings import CliSettings
from tests.support.harness import REPO


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9092", HostPort("127.0.0.1", 9092)),
        ("broker:0", HostPort("broker", 0)),
        (":8081", HostPort("0.0.0.0", 8081)),
        ("[::1]:9092", HostPort("::1", 9092)),
        ("PLAINTEXT://kafka-1:9092", HostPort("kafka-1", 9092)),
        (" 10.0.0.1:65535 ", HostPort("10.0.0.1", 65535)),
    ],
)
def test_the_one_host_port_parser_reads_each_spelling(text: str, expected: HostPort) -> None:
    assert parse_host_port(text) == expected


@pytest.mark.parametrize(
    "text", ["127.0.0.1:70000", "127.0.0.1", "host:port", "::1:9092", "a b:1", "[::1]9092", ":-1", ""]
)
def test_the_one_host_port_parser_refuses_what_is_not_an_address(text: str) -> None:
    with pytest.raises(ValueError, match=r"HOST:PORT|port must be|whitespace|\[IPV6\]"):
        parse_host_port(text)


@pytest.mark.parametrize(
    "argv",
    [
        ["broker", "--listen", "127.0.0.1:70000"],
        ["broker", "--admin-listen", "127.0.0.1:70000"],
        ["registry", "--listen", "127.0.0.1:70000"],
        ["orders", "--port", "70000"],
        ["logs", "--bootstrap", "127.0.0.1:70000"],
    ],
)
def test_every_command_refuses_port_70000_at_start_with_status_2(argv: list[str], tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "streamshop.cli", *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=110,  # a hang guard only (under the test's own 120 s): a loaded host took over 60 s
        check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert done.returncode == 2, done.stderr
    assert "70000" in done.stderr
    assert "Traceback" not in done.stderr


def test_every_bad_variable_is_reported_at_once_by_name() -> None:
    env = {"ORDERS_PORT": "x", "ORDERS_LOG_LEVEL": "loud", "ORDERS_BOOTSTRAP_SERVERS": "nohost", "ORDERS_TOPIC": "ok"}
    with pytest.raises(ConfigError) as raised:
        OrdersConfig.from_env(env)
    problems = raised.value.problems
    assert [p.split(":")[0] for p in problems] == ["ORDERS_BOOTSTRAP_SERVERS", "ORDERS_LOG_LEVEL", "ORDERS_PORT"]


def test_every_process_has_one_prefix_and_a_known_class() -> None:
    prefixes = {
        BrokerSettings.prefix(),
        RegistryConfig.prefix(),
        OrdersConfig.prefix(),
        AnalyticsConfig.prefix(),
        CliSettings.prefix(),
    }
    assert prefixes == {"BROKER", "REGISTRY", "ORDERS", "ANALYTICS", "STREAMSHOP"}


def test_the_old_broker_names_still_work_are_reported_and_the_new_ones_win() -> None:
    old = BrokerSettings.from_env(
        {"STREAMSHOP_BROKER_LISTEN": "0.0.0.0:9099", "STREAMSHOP_BROKER_SET": "num.partitions=6"}
    )
    assert old.listen == HostPort("0.0.0.0", 9099)
    assert old.set == {"num.partitions": "6"}
    assert old.deprecations == (
        "STREAMSHOP_BROKER_LISTEN is deprecated: set BROKER_LISTEN",
        "STREAMSHOP_BROKER_SET is deprecated: set BROKER_SET",
    )
    both = BrokerSettings.from_env({"STREAMSHOP_BROKER_LISTEN": "0.0.0.0:9099", "BROKER_LISTEN": "127.0.0.1:9098"})
    assert both.listen == HostPort("127.0.0.1", 9098)
    assert both.deprecations == ()


def test_the_old_registry_names_still_work_listen_as_host_port_included() -> None:
    config = RegistryConfig.from_env(
        {"STREAMSHOP_REGISTRY_BOOTSTRAP": "kafka:9092", "STREAMSHOP_REGISTRY_LISTEN": "0.0.0.0:8181"}
    )
    assert (config.bootstrap_servers, config.listen, config.port) == ("kafka:9092", "0.0.0.0", 8181)
    assert len(config.deprecations) == 2
    with pytest.raises(ConfigError, match="STREAMSHOP_REGISTRY_LISTEN"):
        RegistryConfig.from_env({"STREAMSHOP_REGISTRY_LISTEN": "0.0.0.0:99999"})


def test_a_flag_overrides_its_variable_and_is_checked_by_the_same_parser() -> None:
    env = {"BROKER_LISTEN": "127.0.0.1:9092"}
    assert BrokerSettings.from_env(env, overrides={"listen": "127.0.0.1:0"}).listen.port == 0
    with pytest.raises(ConfigError, match=r"--listen: '127\.0\.0\.1:70000'"):
        BrokerSettings.from_env(env, overrides={"listen": "127.0.0.1:70000"})


@dataclass(frozen=True, repr=False)
class _Demo(HttpSettings, KafkaClientSettings):
    env_prefix: ClassVar[str] = "DEMO"
    token: str | None = secret(help="a token")
    url: str = setting("http://user:pw@example:1/", help="a URL with a login")


def test_secrets_and_passwords_in_urls_never_show() -> None:
    settings = _Demo.from_env(
        {"DEMO_TOKEN": "t0ps3cret", "DEMO_KAFKA_SASL_PASSWORD": "pw2", "DEMO_KAFKA_SASL_USERNAME": "u"}
    )
    shown = repr(settings) + str(settings.as_log_dict())
    assert "t0ps3cret" not in shown
    assert "pw2" not in shown
    assert ":pw@" not in shown
    assert settings.as_log_dict()["token"] == "***"
    assert settings.kafka_security.password == "pw2"


def test_https_needs_both_a_certificate_and_a_key() -> None:
    with pytest.raises(ConfigError, match="DEMO_SSL_CERTFILE"):
        _Demo.from_env({"DEMO_SSL_CERTFILE": "/x.pem"})


def test_docs_settings_md_is_what_streamshop_settings_prints() -> None:
    """docs/settings.md is generated (`streamshop settings --markdown > docs/settings.md`): it
    lists every variable every process reads, so it cannot drift from the code."""
    assert (REPO / "docs" / "settings.md").read_text() == markdown(PROCESSES)


def test_admin_listen_off_turns_the_admin_api_off_from_the_flag_and_the_variable() -> None:
    args = build_parser().parse_args(["broker", "--admin-listen", "off"])
    assert BrokerSettings.from_env({}, overrides=broker_overrides(args)).admin_listen is None
    assert BrokerSettings.from_env({"BROKER_ADMIN_LISTEN": "off"}).admin_listen is None
    assert BrokerSettings.from_env({}).admin_listen == HostPort("127.0.0.1", 9644)
