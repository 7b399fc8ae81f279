"""`streamshop up --observability --ephemeral-ports` as a real process tree (every child but the
analytics job): Zipkin lists back a span the OpenTelemetry SDK exported to it; an order's and an
OTP request's traces run through HTTP, the outbox, Kafka, both senders and the catcher, as
Zipkin's API returns them; Prometheus scrapes every child and answers PromQL; stopping the stack
stops both backends.

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

from tests.support.observability import ORDERS_PLACED, ORDERS_RATE, OTP_TRACE, get, holds, parent_of, query, spans_of
from tests.support.stack import Stack, alive, running_stack

pytestmark = pytest.mark.stack

BACKENDS = ["traces", "prometheus"]
# Each serves /metrics (the broker on its admin port); the senders and the logs service too.
SCRAPED = {"traces", "prometheus", "broker", "registry", "orders", "otp", "logs", "catcher", "dashboard"}
T = TypeVar("T")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    data = tmp_path_factory.mktemp("observability")
    with running_stack(data, without=("analytics",), args=("--observability",)) as running:
        yield running


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
    assert list(document["children"])[:2] == BACKENDS
    for name in document["children"]:
        child = document["children"][name]
        assert (child["state"], child["restarts"]) == ("ready", 0), name
        assert alive(child["pid"]), name
    output = stack.output.read_text()
    started = [m.group(1) for m in re.finditer(r"\| ([\w-]+) started \(pid", output)]
    assert min(started.index(n) for n in document["children"] if n not in BACKENDS) > max(
        started.index("traces"), started.index("prometheus")
    ), started
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


def _post(url: str, body: dict[str, Any], traceparent: str) -> tuple[int, Any]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "traceparent": traceparent},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status, json.loads(response.read())


def _trace(stack: Stack, trace_id: str, has: Callable[[list[dict[str, Any]]], bool]) -> list[dict[str, Any]]:
    """The spans Zipkin holds of `trace_id`, once `has` them (they arrive as each process's
    batch processor exports, every few seconds)."""
    traces = stack.child("traces")["urls"]["http"]

    seen: list[tuple[str, str, str]] = []

    def listed() -> list[dict[str, Any]] | None:
        status, spans = get(f"{traces}/api/v2/trace/{trace_id}")
        if status != 200:
            return None
        seen[:] = [(s["localEndpoint"]["serviceName"], s["name"], s.get("kind", "")) for s in spans]
        return spans if has(spans) else None

    try:
        return eventually(f"the spans of trace {trace_id}", listed, within=180)
    except AssertionError as e:
        said = [line for line in stack.output.read_text().splitlines() if re.search(r"(?i)error|warn|refused", line)]
        raise AssertionError(f"{e}; it held {sorted(seen)}; the stack's last problems: {said[-20:]}") from None


def test_an_orders_trace_runs_from_its_http_requests_through_the_outbox_relays_sends(stack: Stack) -> None:
    """The order is created, paid and shipped with one caller's trace: each request's SERVER
    span in `orders`, and the relay's ``send orders`` PRODUCER span of each event (published
    later, from the outbox row), a child of the request that wrote it; each request's database
    transaction, a CLIENT span; and the logs indexer's ``process logs.ingress``, in the trace as
    the child of a request whose access log line its batch indexed."""
    trace_id, caller = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    traceparent = f"00-{trace_id}-{caller}-01"
    orders = stack.child("orders")["urls"]["http"]
    status, order = _post(f"{orders}/orders", ORDER, traceparent)
    assert status == 201
    for step in ("paid", "shipped"):
        assert _post(f"{orders}/orders/{order['order_id']}/status", {"status": step}, traceparent)[0] == 200

    def complete(spans: list[dict[str, Any]]) -> bool:
        servers = spans_of(spans, "orders", "post /orders", "SERVER")
        changes = spans_of(spans, "orders", "post /orders/{order_id}/status", "SERVER")
        sends = spans_of(spans, "orders", "send orders", "PRODUCER")
        indexed = spans_of(spans, "logs", "process logs.ingress", "CONSUMER")
        return len(servers + changes) == 3 and len(sends) == 3 and bool(indexed)

    spans = _trace(stack, trace_id, complete)
    servers = spans_of(spans, "orders", "post /orders", "SERVER") + spans_of(
        spans, "orders", "post /orders/{order_id}/status", "SERVER"
    )
    assert len(servers) == 3
    assert {s["parentId"] for s in servers} == {caller}
    sends = spans_of(spans, "orders", "send orders", "PRODUCER")
    assert {parent_of(s, spans)["id"] for s in sends} == {s["id"] for s in servers}
    assert {s["tags"]["messaging.destination.name"] for s in sends} == {"orders"}
    assert {s["tags"]["messaging.kafka.message.key"] for s in sends} == {order["order_id"]}
    writes = [s for s in spans if s.get("kind") == "CLIENT" and s["tags"].get("db.system.name") == "sqlite"]
    assert {parent_of(s, spans)["id"] for s in writes} == {s["id"] for s in servers}
    assert {s["tags"]["db.operation.name"] for s in writes} == {"write"}
    indexed = spans_of(spans, "logs", "process logs.ingress", "CONSUMER")
    assert {parent_of(s, spans)["id"] for s in indexed} <= {s["id"] for s in servers}
    assert {s["tags"]["messaging.consumer.group.name"] for s in indexed} == {"log-indexer"}


def test_an_otp_requests_trace_holds_both_senders_and_the_catchers_deliveries(stack: Stack) -> None:
    """One OTP request, fanned out: the relay's ``send otp.requests``, then each sender's
    ``process otp.requests`` CONSUMER span (its child: the SMS sender's consumer group, the
    e-mail sender's share group with the delivery count), the SMS webhook's call and the
    mail, each received by the catcher in a span of the same trace."""
    trace_id = "5c0ffee5c0ffee5c0ffee5c0ffee5c0f"
    otp = stack.child("otp")["urls"]["http"]
    body = {"user_id": "u-trace", "channels": ["sms", "email"], "phone": "+15550100", "email": "t@example.com"}
    status, _ = _post(f"{otp}/otp", body, f"00-{trace_id}-00f067aa0ba902b7-01")
    assert status == 202

    spans = _trace(stack, trace_id, lambda spans: holds(spans, *OTP_TRACE))
    (send,) = spans_of(spans, "otp", "send otp.requests", "PRODUCER")
    assert parent_of(send, spans)["name"] == "post /otp"
    (sms,) = spans_of(spans, "sms-sender", "process otp.requests", "CONSUMER")
    (email,) = spans_of(spans, "email-sender", "process otp.requests", "CONSUMER")
    assert sms["parentId"] == email["parentId"] == send["id"]  # fan-out: two groups, one record
    assert sms["tags"]["messaging.consumer.group.name"] != email["tags"]["messaging.consumer.group.name"]
    assert email["tags"]["messaging.kafka.message.delivery_count"] == "1"  # a share group's record
    (webhook,) = spans_of(spans, "catcher", "post /sms", "SERVER")
    (mail,) = spans_of(spans, "catcher", "smtp receive", "SERVER")
    assert parent_of(parent_of(webhook, spans), spans)["id"] == sms["id"]  # through the client's span
    smtp = parent_of(mail, spans)
    assert (smtp["name"], smtp["localEndpoint"]["serviceName"]) == ("smtp send", "email-sender")
    assert parent_of(smtp, spans)["id"] == email["id"]


ORDER = {"customer_id": "cust-t", "currency": "EUR", "items": [{"sku": "sku-1", "quantity": 1, "unit_price": "2.50"}]}


def test_prometheus_scrapes_every_child_serving_metrics_and_answers_promql(stack: Stack) -> None:
    prometheus, catcher = stack.child("prometheus")["urls"]["http"], stack.child("catcher")["urls"]["http"]

    def all_up() -> list[dict[str, Any]] | None:
        status, body = get(prometheus + "/api/v1/targets")
        targets = body["data"]["activeTargets"] if status == 200 else []
        jobs = {t["labels"]["job"] for t in targets}
        return targets if jobs >= SCRAPED and all(t["health"] == "up" for t in targets) else None

    targets = eventually("every target up", all_up)
    by_job = {t["labels"]["job"]: t["scrapeUrl"] for t in targets}
    assert by_job["traces"] == stack.child("traces")["urls"]["http"] + "/prometheus"
    assert by_job["prometheus"] == prometheus + "/metrics"
    assert by_job["catcher"] == catcher + "/metrics"

    # a request the catcher counts, then Prometheus's view of that counter
    assert get(catcher + "/messages")[0] == 200
    assert eventually("the catcher's counter", lambda: query(prometheus, _CATCHER_QUERY)) >= 1
    # Orders placed: a rate once Prometheus saw the counter grow (its first sample, the order the
    # traces' test placed, starts the series; the rate is of what came after).
    assert eventually("the orders counter", lambda: query(prometheus, ORDERS_PLACED)) >= 1
    assert _post(stack.child("orders")["urls"]["http"] + "/orders", ORDER, _NEW_TRACE)[0] == 201
    assert eventually("the orders rate", lambda: query(prometheus, ORDERS_RATE) or None) > 0


_CATCHER_QUERY = 'http_requests_total{job="catcher",route="/messages"}'
_NEW_TRACE = "00-garbage"  # malformed: the order is placed in a trace of its own


def test_prometheus_accepts_its_generated_configuration(stack: Stack) -> None:
    config = stack.data / "prometheus" / "prometheus.yml"
    checked = subprocess.run(["promtool", "check", "config", str(config)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert (stack.data / "prometheus" / "data").is_dir()


def test_stopping_the_stack_stops_both_backends(stack: Stack) -> None:
    pids = {name: child["pid"] for name, child in stack.document()["children"].items()}
    stack.proc.send_signal(signal.SIGTERM)
    assert stack.proc.wait(timeout=120) == 0
    document = stack.document()
    assert document["state"] == "stopped"
    assert [name for name, pid in pids.items() if alive(pid)] == []
    output = stack.output.read_text()
    for name in ("traces", "prometheus"):
        assert re.search(rf"^up +\| {name} stopped \(", output, re.M), output
