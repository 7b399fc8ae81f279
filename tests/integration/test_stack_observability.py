"""`streamshop up --observability --ephemeral-ports` as a real process tree, with the fewest other
children (the catcher alone: `--without broker` leaves out everything that needs a broker):
Zipkin lists back a span the OpenTelemetry SDK exported to it, Prometheus scrapes every child
and answers PromQL, the catcher is told where to send its spans, and stopping the stack stops
both backends.

One stack serves the whole module; the tests run in file order and the last one stops it.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from opentelemetry.exporter.zipkin.json import ZipkinExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from tests.support.stack import Stack, alive, running_stack

pytestmark = pytest.mark.stack

CHILDREN = ["traces", "prometheus", "catcher"]
T = TypeVar("T")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    data = tmp_path_factory.mktemp("observability")
    with running_stack(data, without=("broker", "analytics"), args=("--observability",)) as running:
        yield running


def get(url: str) -> tuple[int, Any]:
    """The status and the body: JSON read, anything else as text."""
    try:
        with urllib.request.urlopen(url, timeout=15) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read()
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body.decode("utf-8", "replace")


def eventually(what: str, probe: Callable[[], T | None], within: float = 120) -> T:
    """`probe()`'s first answer that is not None; the bound only ends a hang."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = probe()
        if found is not None:
            return found
        time.sleep(0.5)
    raise AssertionError(f"no {what} within {within} s")


def test_both_backends_start_first_on_loopback_and_are_in_the_table_and_stack_json(stack: Stack) -> None:
    document = stack.document()
    assert list(document["children"]) == CHILDREN
    for name in CHILDREN:
        child = document["children"][name]
        assert (child["state"], child["restarts"]) == ("ready", 0), name
        assert alive(child["pid"]), name
    output = stack.output.read_text()
    started = [m.group(1) for m in re.finditer(r"\| (\w+) started \(pid", output)]
    assert started.index("catcher") > max(started.index("traces"), started.index("prometheus")), started
    for name in ("traces", "prometheus"):
        url = document["children"][name]["urls"]["http"]
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", url), url
        assert re.search(rf"^up +\| {name} +{re.escape(url)} ", output, re.M), output
        assert re.search(rf"^up +\| {name} ready in [0-9.]+ s: {re.escape(url)}$", output, re.M), output
    assert get(document["children"]["traces"]["urls"]["http"] + "/health")[0] == 200
    assert get(document["children"]["prometheus"]["urls"]["http"] + "/-/ready")[0] == 200


def test_the_catcher_is_told_to_export_its_spans_to_the_stacks_zipkin(stack: Stack) -> None:
    catcher, traces = stack.child("catcher"), stack.child("traces")
    environ = dict(
        item.split("=", 1) for item in Path(f"/proc/{catcher['pid']}/environ").read_text().split("\0") if "=" in item
    )
    assert environ["OTEL_TRACES_EXPORTER"] == "zipkin"
    assert environ["OTEL_EXPORTER_ZIPKIN_ENDPOINT"] == traces["urls"]["http"] + "/api/v2/spans"
    assert environ["OTEL_SERVICE_NAME"] == "catcher"


def test_a_span_exported_by_the_sdks_zipkin_exporter_is_listed_back_by_zipkin(stack: Stack) -> None:
    traces = stack.child("traces")["urls"]["http"]
    provider = TracerProvider(resource=Resource.create({"service.name": "observability-test"}))
    provider.add_span_processor(SimpleSpanProcessor(ZipkinExporter(endpoint=traces + "/api/v2/spans")))
    with provider.get_tracer(__name__).start_as_current_span("checkout", attributes={"order.id": "o-1"}) as span:
        trace_id = format(span.get_span_context().trace_id, "032x")
    provider.shutdown()

    def listed() -> list[dict[str, Any]] | None:
        status, spans = get(f"{traces}/api/v2/trace/{trace_id}")
        return spans if status == 200 and spans else None

    [stored] = eventually(f"trace {trace_id} in Zipkin", listed)
    assert stored["traceId"] == trace_id
    assert stored["name"] == "checkout"
    assert stored["localEndpoint"]["serviceName"] == "observability-test"
    assert stored["tags"]["order.id"] == "o-1"
    status, services = get(f"{traces}/api/v2/services")
    assert status == 200
    assert "observability-test" in services


def test_prometheus_scrapes_every_child_serving_metrics_and_answers_promql(stack: Stack) -> None:
    prometheus, catcher = stack.child("prometheus")["urls"]["http"], stack.child("catcher")["urls"]["http"]

    def all_up() -> list[dict[str, Any]] | None:
        status, body = get(prometheus + "/api/v1/targets")
        targets = body["data"]["activeTargets"] if status == 200 else []
        jobs = sorted(t["labels"]["job"] for t in targets)
        return targets if jobs == sorted(CHILDREN) and all(t["health"] == "up" for t in targets) else None

    targets = eventually("every target up", all_up)
    by_job = {t["labels"]["job"]: t["scrapeUrl"] for t in targets}
    assert by_job == {
        "traces": stack.child("traces")["urls"]["http"] + "/prometheus",
        "prometheus": prometheus + "/metrics",
        "catcher": catcher + "/metrics",
    }

    # a request the catcher counts, then Prometheus's view of that counter
    assert get(catcher + "/messages")[0] == 200
    query = 'http_requests_total{job="catcher",route="/messages"}'

    def counted() -> float | None:
        status, body = get(f"{prometheus}/api/v1/query?{urllib.parse.urlencode({'query': query})}")
        assert status == 200, body
        result = body["data"]["result"]
        return float(result[0]["value"][1]) if result else None

    assert eventually(query, counted) >= 1


def test_prometheus_accepts_its_generated_configuration(stack: Stack) -> None:
    config = stack.data / "prometheus" / "prometheus.yml"
    checked = subprocess.run(["promtool", "check", "config", str(config)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert (stack.data / "prometheus" / "data").is_dir()


def test_stopping_the_stack_stops_both_backends(stack: Stack) -> None:
    pids = {name: stack.child(name)["pid"] for name in CHILDREN}
    stack.proc.send_signal(signal.SIGTERM)
    assert stack.proc.wait(timeout=120) == 0
    document = stack.document()
    assert document["state"] == "stopped"
    assert [name for name, pid in pids.items() if alive(pid)] == []
    output = stack.output.read_text()
    for name in ("traces", "prometheus"):
        assert re.search(rf"^up +\| {name} stopped \(", output, re.M), output
