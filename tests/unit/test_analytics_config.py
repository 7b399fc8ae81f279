"""`streamshop analytics` options: flags, then ANALYTICS_* variables, then defaults."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from analytics.runner import _wait
from analytics.settings import AnalyticsConfig, ConfigError
from streamshop.cli import build_parser


def config(argv: list[str], env: dict[str, str]) -> AnalyticsConfig:
    return AnalyticsConfig.from_args(build_parser().parse_args(["analytics", *argv]), env)


def test_defaults_without_flags_or_variables() -> None:
    c = config(["run"], {})
    assert c == AnalyticsConfig()
    assert (c.bootstrap_servers, c.registry_url, c.data_dir) == (
        "127.0.0.1:9092",
        "http://127.0.0.1:8081",
        Path("data/analytics"),
    )
    assert (c.trigger_seconds, c.starting_offsets, c.group_id, c.results_topic) == (
        2.0,
        "group",
        "analytics",
        "analytics.metrics",
    )
    assert (c.jobs, c.once, c.lateness_seconds, c.max_records_per_trigger) == (
        ("orders", "otp", "logs"),
        False,
        120.0,
        None,
    )


def test_every_setting_has_a_variable_and_flags_win() -> None:
    env = {
        "ANALYTICS_BOOTSTRAP_SERVERS": "kafka:9092",
        "ANALYTICS_REGISTRY_URL": "http://registry:8081",
        "ANALYTICS_DATA_DIR": "/var/lib/analytics",
        "ANALYTICS_TRIGGER_SECONDS": "5",
        "ANALYTICS_STARTING_OFFSETS": "EARLIEST",
        "ANALYTICS_GROUP_ID": "g",
        "ANALYTICS_RESULTS_TOPIC": "t",
        "ANALYTICS_JOBS": "logs, orders",
        "ANALYTICS_MAX_RECORDS_PER_TRIGGER": "1000",
        "ANALYTICS_LATENESS_SECONDS": "30",
        "ANALYTICS_SPARK_MASTER": "spark://spark:7077",
        "ANALYTICS_PYTHON_ENV": "/srv/analytics-env.tar.gz",
        "ANALYTICS_ONCE": "true",
        "ANALYTICS_KAFKA_SECURITY_PROTOCOL": "SSL",
        "ANALYTICS_KAFKA_SSL_CA_LOCATION": "/ca.pem",
    }
    from_env = config(["run"], env)
    assert from_env == AnalyticsConfig(
        bootstrap_servers="kafka:9092",
        registry_url="http://registry:8081",
        data_dir=Path("/var/lib/analytics"),
        trigger_seconds=5.0,
        starting_offsets="earliest",
        group_id="g",
        results_topic="t",
        jobs=("logs", "orders"),
        max_records_per_trigger=1000,
        lateness_seconds=30.0,
        spark_master="spark://spark:7077",
        python_env=Path("/srv/analytics-env.tar.gz"),
        once=True,
        kafka={"security.protocol": "SSL", "ssl.ca.location": "/ca.pem"},
    )
    flags = config(["run", "--bootstrap", "b:1", "--trigger", "0.5", "--jobs", "otp", "-X", "ssl.ca.location=/x"], env)
    assert (flags.bootstrap_servers, flags.trigger_seconds, flags.jobs) == ("b:1", 0.5, ("otp",))
    assert flags.kafka == {"security.protocol": "SSL", "ssl.ca.location": "/x"}


def test_the_general_bootstrap_variable_is_the_fallback() -> None:
    assert config(["run"], {"STREAMSHOP_BOOTSTRAP_SERVERS": "x:1"}).bootstrap_servers == "x:1"
    both = {"STREAMSHOP_BOOTSTRAP_SERVERS": "x:1", "ANALYTICS_BOOTSTRAP_SERVERS": "y:2"}
    assert config(["run"], both).bootstrap_servers == "y:2"


def test_bad_variables_are_all_reported_by_name() -> None:
    env = {"ANALYTICS_TRIGGER_SECONDS": "0", "ANALYTICS_JOBS": "orders,nope", "ANALYTICS_ONCE": "maybe"}
    with pytest.raises(ConfigError) as raised:
        config(["run"], env)
    message = str(raised.value)
    assert "ANALYTICS_TRIGGER_SECONDS: expected a positive number" in message
    assert "ANALYTICS_JOBS: expected a comma list of orders, otp, logs" in message
    assert "ANALYTICS_ONCE: expected true or false" in message


def test_a_packed_environment_is_for_a_cluster_master_only() -> None:
    """Spark finds the pack by a path relative to where an executor starts its Python workers,
    which in local mode is the driver's directory."""
    flags = ["run", "--python-env", "env.tar.gz"]
    assert config([*flags, "--spark-master", "spark://h:7077"], {}).python_env == Path("env.tar.gz")
    with pytest.raises(ConfigError, match="ANALYTICS_PYTHON_ENV: a packed environment is for a cluster's executors"):
        config(flags, {})  # local[2,4]


def test_bad_flags_are_refused_by_the_parser() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["analytics", "run", "--max-records-per-trigger", "0"])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["analytics", "run", "--starting-offsets", "middle"])


def test_a_replay_runs_once_from_earliest_beside_the_live_job() -> None:
    replay = config(["replay", "--data-dir", "/d", "--group", "g"], {"ANALYTICS_RESULTS_TOPIC": "t"}).replay()
    assert (replay.data_dir, replay.group_id, replay.results_topic) == (Path("/d/replay"), "g-replay", "t.replay")
    assert (replay.starting_offsets, replay.once) == ("earliest", True)


class _Query:
    """What `_wait` reads of a StreamingQuery: isActive and exception()."""

    def __init__(self, active: bool = True, error: Exception | None = None) -> None:
        self.isActive = active
        self.error = error

    def exception(self) -> Exception | None:
        return self.error


def test_the_job_stops_waiting_as_soon_as_one_query_failed() -> None:
    failed = _Query(active=False, error=RuntimeError("registry unavailable"))
    _wait([(None, _Query()), (None, failed), (None, _Query())], threading.Event(), poll=0.01)  # type: ignore[list-item]


def test_once_the_job_waits_until_every_query_finished() -> None:
    slow = _Query()
    timer = threading.Timer(0.2, lambda: setattr(slow, "isActive", False))
    timer.start()
    began = time.monotonic()
    _wait([(None, _Query(active=False)), (None, slow)], threading.Event(), poll=0.01)  # type: ignore[list-item]
    assert time.monotonic() - began >= 0.15
    assert not slow.isActive
