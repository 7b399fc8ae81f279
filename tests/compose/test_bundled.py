"""The default profile (the bundled broker) as a compose user runs it: `up --wait` returns when
every service is healthy; an order POSTed on :8001 is a keyed Avro event on `orders`; an OTP
reaches both senders and the catcher; the logs service finds the order's logs; the dashboard
sees every group; a killed service comes back by its restart policy; `down` and `up` keep the
named volumes' data; `down -v` leaves nothing behind."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from tests.compose.conftest import FIGURES, running
from tests.compose.stackcheck import DASHBOARD, LOGS, ORDERS, eventually, http, otp_delivered, post_order, read_orders
from tests.support.docker import Compose, docker

pytestmark = pytest.mark.compose

ORDER_IDS: list[str] = []  # the orders of this run, checked again after `down` and `up`


@pytest.fixture(scope="module")
def stack(docker_host: str, images: None) -> Iterator[Compose]:
    project = Compose(docker_host, "streamshop-test")  # .env's profile: bundled
    with running(project, "up --wait, bundled broker (cold volumes)") as up:
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
    FIGURES["up --wait, bundled broker (volumes kept)"] = f"{stack.up():.0f} s"
    for order_id in ORDER_IDS:
        status, order = http("GET", f"{ORDERS}/orders/{order_id}")
        assert status == 200, order
    # The broker kept its log: the orders are still on the topic.
    assert read_orders(stack, set(ORDER_IDS)).keys() == set(ORDER_IDS)
