"""`streamshop up --ephemeral-ports` as a real process tree: every child ready and answering,
traffic through it (`streamshop demo`), a SIGKILLed child restarted on the same URL, and SIGTERM
stopping everything in reverse order with exit status 0.

One stack serves the whole module (starting it is most of the cost); the tests run in file
order and the last one stops it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.harness import REPO
from tests.support.stack import Stack, alive, http, running_stack

pytestmark = pytest.mark.stack

CHILDREN = ["broker", "registry", "catcher", "orders", "otp", "logs", "sms-sender", "email-sender", "dashboard"]
SERVICES = [name for name in CHILDREN if name not in ("broker", "registry")]  # the ones with /readyz


def streamshop(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamshop.cli", *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("stack")) as running:
        yield running


def test_demo_without_a_running_stack_says_so_and_exits_1(tmp_path: Path) -> None:
    missing = streamshop("demo", "--stack", str(tmp_path))
    assert missing.returncode == 1
    assert f"streamshop demo: no stack runs from {tmp_path}" in missing.stderr
    unreachable = streamshop("demo", "--orders-url", "http://127.0.0.1:9", "--otp", "0")
    assert unreachable.returncode == 1
    assert "cannot reach orders at http://127.0.0.1:9" in unreachable.stderr


def test_a_child_that_cannot_start_fails_up_naming_it_and_stops_the_others(tmp_path: Path) -> None:
    # an invalid setting: `streamshop otp` exits with status 2 before it listens
    result = streamshop(
        *("up", "--ephemeral-ports", "--data-dir", str(tmp_path), "--without", "catcher", "--without", "analytics"),
        "--verbose",
        env={"OTP_CODE_TTL": "-1"},
    )
    assert result.returncode == 1, result.stdout
    log = tmp_path / "output" / "otp.log"
    # the reason on the console, in one line: how it exited, its last error line, where the rest is
    [failed] = [line for line in result.stdout.splitlines() if "the stack did not start" in line]
    assert failed.startswith("up "), failed
    assert "otp exited (status 2) before it was ready: " in failed, failed
    assert "OTP_CODE_TTL: must be positive" in failed, failed
    assert failed.endswith(f"; see {log}"), failed
    assert "OTP_CODE_TTL: must be positive" in log.read_text()
    # --verbose: the child's own lines on the console too, prefixed with its name
    assert any(line.startswith("otp ") and "OTP_CODE_TTL" in line for line in result.stdout.splitlines())
    document = json.loads((tmp_path / "stack.json").read_text())
    assert document["state"] == "failed"
    assert document["children"]["otp"]["state"] == "failed"
    assert {c["pid"] for c in document["children"].values()} == {None}
    started = [
        int(line.rsplit("pid ", 1)[1].rstrip(")")) for line in result.stdout.splitlines() if "started (pid" in line
    ]
    assert len(started) == 5
    assert [pid for pid in started if alive(pid)] == []


def test_up_starts_every_child_and_each_answers(stack: Stack) -> None:
    document = stack.document()
    assert document["pid"] == stack.proc.pid
    assert list(document["children"]) == CHILDREN
    for name, child in document["children"].items():
        assert (child["state"], child["restarts"]) == ("ready", 0), name
        assert alive(child["pid"]), name
    for name in SERVICES:
        status, body = http("GET", stack.child(name)["urls"]["http"] + "/readyz")
        assert (status, body["status"]) == (200, "ready"), (name, body)
    status, subjects = http("GET", stack.child("registry")["urls"]["http"] + "/subjects")
    # before any traffic, only the services' own log lines (LogRecord) have been published
    assert status == 200
    assert set(subjects) <= {"logs.app-value", "logs.ingress-value", "logs.db-value"}, subjects
    assert http("GET", stack.child("broker")["urls"]["admin"] + "/healthz")[0] == 200
    assert ":" in stack.child("catcher")["urls"]["smtp"]

    # the console: one line per child ready; each child's own output only in its log file
    output = stack.output.read_text()
    orders = stack.child("orders")
    assert re.search(rf"^up +\| orders ready in [0-9.]+ s: {re.escape(orders['urls']['http'])}$", output, re.M), output
    assert "streamshop orders ready on" not in output
    assert f"streamshop orders ready on {orders['urls']['http']}\n" in Path(orders["log"]).read_text()
    assert f"each child's output: {stack.data / 'output'} (--verbose shows it here)" in output
    assert stat.S_IMODE((stack.data / "secrets.json").stat().st_mode) == 0o600
    assert (stack.data / "orders" / "orders.db").exists()


def test_an_order_posted_to_the_stack_reads_back(stack: Stack) -> None:
    base = stack.child("orders")["urls"]["http"]
    customer = f"cust-{uuid.uuid4()}"
    status, created = http(
        "POST",
        f"{base}/orders",
        {"customer_id": customer, "currency": "EUR", "items": [{"sku": "MUG", "quantity": 2, "unit_price": "12.50"}]},
    )
    assert status == 201, created
    status, read = http("GET", f"{base}/orders/{created['order_id']}")
    assert status == 200
    assert (read["customer_id"], read["status"], read["total"]) == (customer, "created", "25.00")


def test_demo_drives_orders_and_verifies_every_otp_through_the_catcher(stack: Stack) -> None:
    result = streamshop("demo", "--orders", "20", "--otp", "5", "--stack", str(stack.data))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "orders   20 created:" in result.stdout
    assert "otp      5 requested, 5 verified;" in result.stdout
    assert "5 e-mails with the code" in result.stdout
    assert result.stdout.rstrip().endswith("result: OK")
    assert "25/25 flows 100%" in result.stderr


def test_a_killed_child_is_restarted_on_the_same_url(stack: Stack) -> None:
    before = stack.child("orders")
    os.kill(before["pid"], signal.SIGKILL)
    after = stack.wait_for(
        "orders restart",
        lambda d: d["children"]["orders"]["restarts"] == 1 and d["children"]["orders"]["state"] == "ready",
        within=90,
    )["children"]["orders"]
    assert after["pid"] != before["pid"]
    assert alive(after["pid"])
    assert after["urls"] == before["urls"]
    assert after["last_exit"] == -signal.SIGKILL
    assert http("GET", after["urls"]["http"] + "/readyz")[0] == 200
    # Its last line was an access-log line, not why it died: the console quotes none.
    assert "orders exited (killed by SIGKILL); see " in stack.output.read_text()
    assert all(c["restarts"] == 0 for name, c in stack.document()["children"].items() if name != "orders")


def test_a_second_up_on_the_same_data_dir_is_refused(stack: Stack) -> None:
    second = streamshop("up", "--ephemeral-ports", "--data-dir", str(stack.data), "--without", "analytics")
    assert second.returncode == 1
    assert f"a stack already runs from {stack.data} (pid {stack.proc.pid})" in second.stderr
    assert stack.document()["state"] == "running"


def test_sigterm_stops_every_child_in_reverse_order_and_exits_0(stack: Stack) -> None:
    stack.document()
    stack.proc.send_signal(signal.SIGTERM)
    assert stack.proc.wait(timeout=30) == 0
    assert [pid for pid in stack.pids if alive(pid)] == []
    document = stack.document()
    assert document["state"] == "stopped"
    assert {(c["state"], c["pid"]) for c in document["children"].values()} == {("stopped", None)}
    lines = stack.output.read_text().splitlines()

    def stopped(name: str) -> int:
        [index] = [i for i, line in enumerate(lines) if line.startswith("up ") and f"| {name} stopped (" in line]
        return index

    assert max(stopped(name) for name in SERVICES if name != "catcher") < stopped("registry") < stopped("broker")
    assert max(stopped(name) for name in ("sms-sender", "email-sender")) < stopped("catcher")
    assert "stack stopped" in lines[-1]
