"""`streamshop up --observability` without processes: the two children's commands, Prometheus's
generated configuration and targets, and the OpenTelemetry variables every other child gets."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from streamshop.cli import build_parser
from streamshop.clients import CommandError
from streamshop.stack.observability import (
    Backends,
    prometheus_config,
    scrape_targets,
    targets_file,
    with_observability,
    write_targets,
)
from streamshop.stack.plan import CHILDREN, Secrets, StackContext, external_broker, levels, scaled, with_broker
from streamshop.stack.supervisor import up

BACKENDS = Backends(Path("/opt/zipkin/zipkin-server-exec.jar"), "/usr/bin/java", "/usr/bin/prometheus")
SECRETS = Secrets("hash-key", base64.b64encode(bytes(range(32))).decode())
ENDPOINTS = {
    "traces": {"http": "http://127.0.0.1:19411"},
    "prometheus": {"http": "http://127.0.0.1:19090"},
    "broker": {"bootstrap": "127.0.0.1:19092", "admin": "http://127.0.0.1:19644"},
    "registry": {"http": "http://127.0.0.1:18081"},
    "catcher": {"http": "http://127.0.0.1:18025", "smtp": "127.0.0.1:11025"},
    "logs": {"http": "http://127.0.0.1:18003"},
}
CHILD_NAMES = {c.name for c in CHILDREN}
OTEL = ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_ZIPKIN_ENDPOINT", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES")


def context(tmp_path: Path, endpoints: dict[str, dict[str, str]] = ENDPOINTS) -> StackContext:
    return StackContext(tmp_path, "0.0.0.0", SECRETS, "json", endpoints)


def test_the_backends_start_first_need_nothing_and_every_launched_child_needs_the_traces() -> None:
    stack = with_observability(scaled(CHILDREN, {"orders": 2}), BACKENDS)
    first, *rest = levels(stack)
    assert [c.name for c in first] == ["traces", "prometheus"]
    assert [c.needs for c in first] == [(), ()]
    assert all("traces" in c.needs for level in rest for c in level)
    assert {c.name for level in rest for c in level} == {c.name for c in CHILDREN} | {"orders-2"}


def test_every_launched_child_exports_its_spans_to_zipkin_under_its_service_and_instance(tmp_path: Path) -> None:
    stack = with_observability(scaled(CHILDREN, {"orders": 2, "sms-sender": 2}), BACKENDS)
    ports = {"http": 18001, "smtp": 11025, "kafka": 19092, "admin": 19644}
    endpoints = {
        **ENDPOINTS,
        "orders": {"http": "http://127.0.0.1:18001"},
        "sms-sender": {"http": "http://127.0.0.1:18004"},
    }
    ctx = context(tmp_path, endpoints)
    launched = {c.name: c.launch(ctx, ports).env for c in stack if c.name not in ("traces", "prometheus")}
    assert set(launched) == {c.name for c in CHILDREN} | {"orders-2", "sms-sender-2"}
    for name, env in launched.items():
        assert {k: env[k] for k in OTEL} == {
            "OTEL_TRACES_EXPORTER": "zipkin",
            "OTEL_EXPORTER_ZIPKIN_ENDPOINT": "http://127.0.0.1:19411/api/v2/spans",
            "OTEL_SERVICE_NAME": name.removesuffix("-2"),  # a second instance is the same service
            "OTEL_RESOURCE_ATTRIBUTES": f"service.instance.id={name}",
        }, name
    # what the child had before is still there: the second instance's own id beside the OTEL ones
    assert launched["orders-2"]["ORDERS_INSTANCE_ID"] == "orders-2"


def test_without_observability_no_child_is_told_to_export_spans(tmp_path: Path) -> None:
    ports = {"http": 18001, "smtp": 11025, "kafka": 19092, "admin": 19644}
    for child in CHILDREN:
        launch = child.launch(context(tmp_path), ports)
        assert not [k for k in launch.environment({}) if k.startswith("OTEL_")], child.name
        assert "DASHBOARD_TRACES_URL" not in launch.environment({}), child.name


def test_the_dashboard_alone_is_told_where_the_trace_viewer_is(tmp_path: Path) -> None:
    """With --observability the dashboard links traced items to Zipkin's UI: it gets the traces
    child's URL; no other child does."""
    ports = {"http": 18001, "smtp": 11025, "kafka": 19092, "admin": 19644}
    stack = with_observability(CHILDREN, BACKENDS)
    envs = {c.name: c.launch(context(tmp_path), ports).environment({}) for c in stack if c.name in CHILD_NAMES}
    assert envs["dashboard"]["DASHBOARD_TRACES_URL"] == "http://127.0.0.1:19411"
    assert [name for name, env in envs.items() if any(k.endswith("_TRACES_URL") for k in env)] == ["dashboard"]


def test_an_external_broker_is_left_as_it_is() -> None:
    broker = external_broker("kafka-1:9092")
    stack = with_observability(with_broker(CHILDREN, broker), BACKENDS)
    assert next(c for c in stack if c.name == "broker") is broker


def test_zipkin_runs_on_loopback_with_a_bounded_heap_and_store_and_is_ready_on_health(tmp_path: Path) -> None:
    traces = with_observability([], BACKENDS)[0]
    command = traces.launch(context(tmp_path, {}), {"http": 23456}).command
    assert command[:2] == ["/usr/bin/java", "-Xmx256m"]
    assert command[command.index("-jar") + 1] == "/opt/zipkin/zipkin-server-exec.jar"
    assert "--armeria.ports[0].ip=127.0.0.1" in command
    assert "--armeria.ports[0].port=23456" in command
    assert "--zipkin.storage.type=mem" in command
    assert "--zipkin.storage.mem.max-spans=100000" in command
    assert traces.jvm
    assert traces.health == "/health"
    assert traces.announce is not None
    assert traces.announce({"http": 23456}).urls == {"http": "http://127.0.0.1:23456"}


def test_prometheus_gets_a_config_of_its_own_in_the_data_directory_and_binds_loopback(tmp_path: Path) -> None:
    prometheus = with_observability([], BACKENDS)[1]
    command = prometheus.launch(context(tmp_path, {"traces": ENDPOINTS["traces"]}), {"http": 23457}).command
    assert command[0] == "/usr/bin/prometheus"
    assert "--web.listen-address=127.0.0.1:23457" in command
    assert f"--storage.tsdb.path={tmp_path / 'prometheus' / 'data'}" in command
    assert "--storage.tsdb.retention.size=512MB" in command
    config = json.loads((tmp_path / "prometheus" / "prometheus.yml").read_text())
    assert config == prometheus_config(targets_file(tmp_path))
    assert config["global"] == {"scrape_interval": "2s", "scrape_timeout": "2s"}
    [job] = config["scrape_configs"]
    assert job["file_sd_configs"][0]["files"] == [str(tmp_path / "prometheus" / "targets.json")]
    # the targets known when it starts are in the file before its first read
    assert json.loads(targets_file(tmp_path).read_text()) == scrape_targets({"traces": ENDPOINTS["traces"]})
    assert prometheus.health == "/-/ready"
    assert prometheus.announce is not None
    assert prometheus.announce({"http": 23457}).urls == {"http": "http://127.0.0.1:23457"}


def test_every_child_serving_metrics_is_a_target_named_after_it() -> None:
    endpoints = {
        **ENDPOINTS,
        "orders": {"http": "http://127.0.0.1:18001"},
        "orders-2": {"http": "http://127.0.0.1:18001"},  # up --scale: one port for both
        "analytics": {"master": "local[2]", "ui": "http://127.0.0.1:4040"},
        "postgres": {"postgresql": "postgresql://streamshop@127.0.0.1:15432"},
    }
    assert scrape_targets(endpoints) == [
        {"targets": ["127.0.0.1:19411"], "labels": {"job": "traces", "__metrics_path__": "/prometheus"}},
        {"targets": ["127.0.0.1:19090"], "labels": {"job": "prometheus", "__metrics_path__": "/metrics"}},
        {"targets": ["127.0.0.1:19644"], "labels": {"job": "broker", "__metrics_path__": "/metrics"}},
        {"targets": ["127.0.0.1:18081"], "labels": {"job": "registry", "__metrics_path__": "/metrics"}},
        {"targets": ["127.0.0.1:18025"], "labels": {"job": "catcher", "__metrics_path__": "/metrics"}},
        {"targets": ["127.0.0.1:18003"], "labels": {"job": "logs", "__metrics_path__": "/metrics"}},
        {"targets": ["127.0.0.1:18001"], "labels": {"job": "orders", "__metrics_path__": "/metrics"}},
    ]


def test_the_targets_file_is_replaced_only_when_the_targets_change(tmp_path: Path) -> None:
    path = tmp_path / "prometheus" / "targets.json"
    write_targets(path, ENDPOINTS)
    assert not path.exists()  # no Prometheus launched: no directory of its own
    path.parent.mkdir()
    write_targets(path, ENDPOINTS)
    first = path.stat().st_ino
    write_targets(path, dict(ENDPOINTS))
    assert path.stat().st_ino == first
    write_targets(path, {**ENDPOINTS, "otp": {"http": "http://127.0.0.1:18002"}})
    assert path.stat().st_ino != first
    assert json.loads(path.read_text())[-1]["labels"]["job"] == "otp"


def test_observability_is_refused_with_secure_before_anything_starts(tmp_path: Path) -> None:
    args = build_parser().parse_args(["up", "--observability", "--secure", "--data-dir", str(tmp_path / "stack")])
    with pytest.raises(CommandError, match=r"--observability .* not with --secure"):
        up(args)
    assert not (tmp_path / "stack").exists()
