"""The default profile (the bundled broker) as a compose user runs it, with the `observability`
profile added as compose/observability.env adds it (`--env-file .env --env-file
compose/observability.env`, no --profile flag): `up --wait` returns when every service is
healthy; an order POSTed on :8001 is a keyed Avro event on `orders`; an OTP reaches both senders
and the catcher; the logs service finds the order's logs; the dashboard sees every group; an
order's and an OTP's traces are in Zipkin on :9411 and the dashboard links to them; Prometheus on
:9090 scrapes every service and answers the orders rate; with Zipkin stopped orders are still
placed, their spans' failed exports counted; a killed service comes back by its restart policy;
`down` and `up` keep the named volumes' data; `down -v` leaves nothing behind.

The observability profile only adds two containers and turns the services' span export on:
everything else checked here is what the default run does (`up --wait` of the default alone is
test_readme_docker's).  One stack for both saves the tier a full start."""

from __future__ import annotations

import json
import os
import re
import signal
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.compose.conftest import FIGURES, running
from tests.compose.stackcheck import (
    DASHBOARD,
    LOGS,
    ORDERS,
    OTP,
    eventually,
    http,
    order_body,
    otp_delivered,
    post_order,
    read_orders,
)
from tests.support.docker import LOCAL_ENV, OBSERVABILITY_ENV, Compose, docker
from tests.support.harness import REPO
from tests.support.observability import ORDERS_PLACED, ORDERS_RATE, OTP_TRACE, holds, query, spans_of

pytestmark = pytest.mark.compose

ORDER_IDS: list[str] = []  # the orders of this run, checked again after `down` and `up`


@pytest.fixture(scope="module")
def stack(docker_host: str, images: None) -> Iterator[Compose]:
    # The profiles of the last env file's COMPOSE_PROFILES: bundled and observability.
    project = Compose(docker_host, "streamshop-test", env_files=(REPO / ".env", LOCAL_ENV, OBSERVABILITY_ENV))
    with running(project, "up --wait, bundled broker and observability (cold volumes)") as up:
        yield up


def test_an_order_is_a_keyed_avro_event_on_orders(stack: Compose) -> None:
    ORDER_IDS.extend(post_order(i) for i in range(3))
    found = read_orders(stack, set(ORDER_IDS))
    assert found.keys() == set(ORDER_IDS)
    assert all(events[0]["total"] == 25 for events in found.values())


def test_an_otp_reaches_both_senders_and_the_catcher(stack: Compose) -> None:
    otp_delivered()


def test_the_logs_service_finds_the_orders_logs(stack: Compose) -> None:
    order_id = ORDER_IDS[0]
    assert http("GET", f"{ORDERS}/orders/{order_id}")[0] == 200

    def logged() -> list[Any]:
        # Every word of the query must occur: the order id's parts, in the request's path.
        status, body = http("GET", f"{LOGS}/logs?service=orders&stream=ingress&q={order_id}&limit=50")
        return list(body["items"]) if status == 200 else []

    items = eventually("the order's request in the orders service's logs", logged)
    assert any(order_id in json.dumps(item) for item in items), items


def test_the_dashboard_sees_every_group(stack: Compose) -> None:
    wanted = {"sms-sender", "email-sender", "log-indexer", "analytics"}

    def groups() -> set[str] | None:
        status, snap = http("GET", f"{DASHBOARD}/api/snapshot")
        seen = {g["group_id"] for g in snap.get("groups", [])} if status == 200 and isinstance(snap, dict) else set()
        return seen if wanted <= seen else None

    # The analytics job (a Spark driver in its container) joins last.
    eventually("every group on the dashboard", groups, within=300, every=2)


ZIPKIN = "http://127.0.0.1:9411"
PROMETHEUS = "http://127.0.0.1:9090"
# Every service serving /metrics, by its job in the compose file's Prometheus configuration.
SCRAPED = {"prometheus", "traces", "broker", "registry", "catcher", "orders", "otp", "logs", "sms-sender",
           "email-sender", "dashboard"}  # fmt: skip


def traced(trace_id: str, complete: Any, within: float = 300) -> list[dict[str, Any]]:
    """Zipkin's spans of `trace_id` through its published port, once `complete(spans)` (each
    process's batch processor exports every few seconds; the analytics job's span comes with its
    next micro-batch)."""

    def listed() -> list[dict[str, Any]] | None:
        status, spans = http("GET", f"{ZIPKIN}/api/v2/trace/{trace_id}")
        return spans if status == 200 and complete(spans) else None

    return eventually(f"the spans of trace {trace_id} in Zipkin", listed, within=within, every=2)


def test_an_orders_trace_in_zipkin_holds_its_request_the_relays_send_and_the_analytics_job(stack: Compose) -> None:
    trace_id, caller = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    status, order = http("POST", f"{ORDERS}/orders", order_body(9), {"traceparent": f"00-{trace_id}-{caller}-01"})
    assert status == 201, order

    def complete(spans: list[dict[str, Any]]) -> bool:
        return holds(
            spans,
            ("orders", "post /orders", "SERVER"),
            ("orders", "send orders", "PRODUCER"),
            ("analytics", "process orders", "CONSUMER"),
        )

    spans = traced(trace_id, complete)
    (server,) = spans_of(spans, "orders", "post /orders", "SERVER")
    assert server["parentId"] == caller
    (send,) = spans_of(spans, "orders", "send orders", "PRODUCER")
    assert send["parentId"] == server["id"]  # the relay's send, in the request's trace
    assert send["tags"]["messaging.kafka.message.key"] == order["order_id"]
    assert {s["parentId"] for s in spans_of(spans, "analytics", "process orders", "CONSUMER")} == {send["id"]}

    # The dashboard links the order to that trace, at the address the browser opens.
    def listed() -> dict[str, Any] | None:
        got, body = http("GET", f"{DASHBOARD}/api/traced")
        items = body.get("items", []) if got == 200 and isinstance(body, dict) else []
        return next((item for item in items if item.get("key") == order["order_id"]), None)

    item = eventually("the order among the dashboard's traced items", listed)
    assert item["trace_url"] == f"{ZIPKIN}/zipkin/traces/{trace_id}"
    assert http("GET", item["trace_url"])[0] == 200


def test_an_otp_requests_trace_in_zipkin_reaches_both_senders_and_the_catcher(stack: Compose) -> None:
    trace_id = uuid.uuid4().hex
    body = {"user_id": "compose-traced", "channels": ["sms", "email"], "phone": "+15550199", "email": "t@example.com"}
    status, answer = http("POST", f"{OTP}/otp", body, {"traceparent": f"00-{trace_id}-{uuid.uuid4().hex[:16]}-01"})
    assert status == 202, answer

    traced(trace_id, lambda spans: holds(spans, *OTP_TRACE), within=180)


def test_prometheus_scrapes_every_service_and_answers_the_orders_rate(stack: Compose) -> None:
    def all_up() -> list[dict[str, Any]] | None:
        status, body = http("GET", f"{PROMETHEUS}/api/v1/targets")
        targets = body["data"]["activeTargets"] if status == 200 else []
        jobs = {t["labels"]["job"] for t in targets}
        return targets if jobs >= SCRAPED and all(t["health"] == "up" for t in targets) else None

    targets = eventually("every target up", all_up, within=180, every=2)
    by_job = {t["labels"]["job"]: t["scrapeUrl"] for t in targets}
    assert by_job["traces"].endswith(":9411/prometheus"), by_job
    assert by_job["broker"].endswith(":9644/metrics"), by_job
    # A rate once Prometheus saw the counter grow: the orders of the tests above start the series.
    assert eventually("the orders counter", lambda: query(PROMETHEUS, ORDERS_PLACED), within=120) >= 1
    post_order(10)
    assert eventually("the orders rate", lambda: query(PROMETHEUS, ORDERS_RATE) or None, within=120) > 0


def test_a_stopped_zipkin_costs_spans_not_orders(stack: Compose) -> None:
    """Nothing waits for the viewer: with it stopped, orders are still placed; their spans'
    exports fail and are counted on /metrics."""

    def failures() -> float:
        status, text = http("GET", f"{ORDERS}/metrics")
        assert status == 200, text
        found = re.search(r"^otel_span_export_failures_total ([0-9.e+]+)$", str(text), re.M)
        assert found, text
        return float(found.group(1))

    stack("stop", "traces")
    try:
        before = failures()
        order_id = post_order(11)
        assert http("GET", f"{ORDERS}/orders/{order_id}")[0] == 200
        eventually("an export of the orders service failed", lambda: failures() > before, within=120, every=1)
    finally:
        stack("start", "traces")


def test_logs_are_json_lines(stack: Compose) -> None:
    lines = stack("logs", "--no-color", "--no-log-prefix", "orders").stdout.splitlines()
    events = [json.loads(line) for line in lines if line.startswith("{")]
    assert events, lines[-10:]
    assert all("event" in event for event in events)


def test_a_killed_service_comes_back_by_its_restart_policy(stack: Compose) -> None:
    container = stack("ps", "-q", "orders").stdout.strip()
    pid = int(docker(stack.host, "inspect", "-f", "{{.State.Pid}}", container).stdout)
    os.kill(pid, signal.SIGKILL)  # the container's init dies: not a stop docker was asked for

    def back() -> bool:
        state = json.loads(docker(stack.host, "inspect", "-f", "{{json .State}}", container).stdout)
        restarts = int(docker(stack.host, "inspect", "-f", "{{.RestartCount}}", container).stdout)
        return restarts >= 1 and state.get("Health", {}).get("Status") == "healthy"

    eventually("orders restarted and healthy", back, within=180, every=1)
    # Its published port is forwarded again once the new process listens.
    eventually("the order served again", lambda: http("GET", f"{ORDERS}/orders/{ORDER_IDS[0]}")[0] == 200, within=60)


def test_down_and_up_keep_the_named_volumes(stack: Compose) -> None:
    stack("down", "--timeout", "20")
    FIGURES["up --wait, bundled broker and observability (volumes kept)"] = f"{stack.up():.0f} s"
    for order_id in ORDER_IDS:
        status, order = http("GET", f"{ORDERS}/orders/{order_id}")
        assert status == 200, order
    # The broker kept its log: the orders are still on the topic.
    assert read_orders(stack, set(ORDER_IDS)).keys() == set(ORDER_IDS)
