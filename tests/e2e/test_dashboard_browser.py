"""The dashboard in a real browser: headless Chromium (Debian's package, which `make test`
installs) driven by Playwright, against a whole `streamshop up` stack with the analytics job,
while `streamshop demo` drives traffic through it.  The page must show live data in every
section; the screenshot is kept in ``test-artifacts/`` (or ``$STREAMSHOP_TEST_ARTIFACTS``)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from playwright.sync_api import Browser, Page, sync_playwright

from tests.support.harness import REPO
from tests.support.stack import Stack, http, running_stack

pytestmark = [pytest.mark.browser, pytest.mark.stack, pytest.mark.spark]

ARTIFACTS = Path(os.environ.get("STREAMSHOP_TEST_ARTIFACTS", REPO / "test-artifacts"))
# Chromium as root needs --no-sandbox; the others keep it from calling Google's services, which
# the closed network here refuses (and which a test has no business calling anyway).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# The stack serves before the analytics job is ready; its queries start one after the other, each
# after the first batch of the one before, about 20 s apart on 2 cores.  A bound, not a sleep.
LIVE_WITHIN_MS = 300_000


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    env = {"ANALYTICS_TRIGGER_SECONDS": "1"}
    with running_stack(
        tmp_path_factory.mktemp("browser"), env=env, within=300, without=(), args=("--observability",)
    ) as running:
        yield running


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    executable = shutil.which("chromium")
    assert executable is not None, "Debian's chromium is not installed: `make test` installs it (make browser)"
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


def demo_traffic(stack: Stack, orders: int, otps: int) -> None:
    command = [sys.executable, "-m", "streamshop.cli", "demo", "--stack", str(stack.data)]
    done = subprocess.run(
        [*command, "--orders", str(orders), "--otp", str(otps)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def cell(page: Page, table: str, row: str, col: str) -> str:
    return page.locator(f'[data-testid="{table}"] tr[{row}] [data-col="{col}"]').inner_text()


def test_the_page_shows_live_data_from_every_part_of_the_stack(stack: Stack, browser: Browser) -> None:
    url = stack.child("dashboard")["urls"]["http"]
    demo_traffic(stack, orders=30, otps=3)
    page = browser.new_page(viewport={"width": 1440, "height": 2200})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(url)

    # Cluster: the services' topics with their offsets, sizes and a messages-in chart.
    page.wait_for_selector('[data-testid="topics-table"] tr[data-topic="orders"]', timeout=90_000)
    assert int(cell(page, "topics-table", 'data-topic="orders"', "partitions")) == 6
    page.wait_for_function(
        """() => Number(document.querySelector('[data-testid="topics-table"] tr[data-topic="orders"]'
                 + ' [data-col="end"]').innerText.replace(/[^0-9]/g, '')) >= 30""",
        timeout=90_000,
    )
    assert cell(page, "topics-table", 'data-topic="orders"', "size") not in ("", "-", "?")
    page.wait_for_selector('[data-testid="chart-messages-in"] path[data-series]', timeout=90_000)

    # Replication, honestly for one broker: it is the controller and holds each partition's only replica.
    assert page.locator("#repl-controller").inner_text() == "broker 1"
    assert page.locator("#repl-urp").inner_text() == "0"
    assert page.locator("#repl-offline").inner_text() == "0"
    page.locator('[data-testid="replication-details"] summary').click()
    orders_0 = 'data-topic="orders"][data-partition="0"'
    assert [cell(page, "replication-table", orders_0, col) for col in ("leader", "replicas", "isr", "state")] == [
        "1",
        "1",
        "1",
        "in sync",
    ]

    # Groups: the fan-out, both sender groups on otp.requests: the sms-sender's aiokafka consumer
    # speaks the classic group protocol, the email-sender drains the topic as a share group.
    for group, kind in (("sms-sender", "classic"), ("email-sender", "share group")):
        row = f'data-group="{group}"'
        page.wait_for_selector(f'[data-testid="groups-table"] tr[{row}]', timeout=90_000)
        assert "otp.requests" in cell(page, "groups-table", row, "topics")
        assert int(cell(page, "groups-table", row, "members")) >= 1
        badge = page.locator(f'[data-testid="groups-table"] tr[{row}] [data-testid="group-type"]')
        assert badge.inner_text() == kind
    page.wait_for_selector('[data-testid="chart-lag"] path[data-series]', timeout=90_000)

    # Open transactions: one left open shows with the LSO lag it causes.
    txn = Producer({"bootstrap.servers": stack.child("broker")["urls"]["bootstrap"], "transactional.id": "browser"})
    txn.init_transactions(15)
    txn.begin_transaction()
    for i in range(3):
        txn.produce("txn.demo", b"pending-%d" % i, partition=0)
    assert txn.flush(15) == 0
    row = 'data-transaction="browser"'
    page.wait_for_selector(f'[data-testid="transactions-table"] tr[{row}]', timeout=90_000)
    assert cell(page, "transactions-table", row, "state") == "Ongoing"
    assert cell(page, "transactions-table", row, "lso-lag") == "3"
    assert "txn.demo-0 (3)" in cell(page, "transactions-table", row, "partitions")
    txn.abort_transaction(15)
    page.wait_for_selector(f'[data-testid="transactions-table"] tr[{row}]', state="detached", timeout=90_000)

    # Analytics: the Spark job's metrics arrive through analytics.metrics.
    page.wait_for_function(
        """() => !document.querySelector('[data-testid="analytics-status"]').innerText.includes('waiting')""",
        timeout=LIVE_WITHIN_MS,
    )
    for chart in ("chart-orders", "chart-revenue", "chart-otp-success", "chart-otp-latency", "chart-errors"):
        page.wait_for_selector(f'[data-testid="{chart}"] path[data-series]', timeout=LIVE_WITHIN_MS)
    page.wait_for_selector('[data-testid="funnel"] [data-stage]', timeout=LIVE_WITHIN_MS)

    # The Spark job's group has no members (it commits without joining): it shows as the job,
    # alive, with its client and last commit, not as a dead "Empty" group.
    analytics_row = 'data-group="analytics"'
    committer_line = f'[data-testid="groups-table"] tr[{analytics_row}] [data-testid="committer"]'
    page.wait_for_selector(committer_line, timeout=90_000)
    assert cell(page, "groups-table", analytics_row, "state") == "Committing"
    committer = page.locator(committer_line).inner_text()
    line = r"job analytics · \S+:\d+ · last commit [\d.]+ s ago, every 15 s · last batch [\d.]+ s ago · alive"
    assert re.fullmatch(line, committer), committer

    # Revenue: one logarithmic axis for every currency; every time axis starts at its first point.
    assert page.locator('[data-testid="chart-revenue"] g[data-scale="log"]').count() == 1
    status, snap = http("GET", url.rstrip("/") + "/api/snapshot")
    assert status == 200
    revenue = snap["analytics"]["series"]["orders.revenue"]
    first = min(t for points in revenue.values() for t, _ in points)
    ticks = page.locator('[data-testid="chart-revenue"] text[data-tick]')
    if len({t for points in revenue.values() for t, _ in points}) > 1:
        assert float(ticks.first.get_attribute("data-tick") or "nan") == first

    # The catcher's inbox holds the OTP mails; the log tail streams lines.
    page.wait_for_selector('[data-testid="inbox"] li[data-mail]', timeout=90_000)
    status, mails = http("GET", stack.child("catcher")["urls"]["http"].rstrip("/") + "/messages")
    assert status == 200
    assert mails["total"] >= 3
    shown = page.locator('[data-testid="inbox"] li[data-mail]').count()
    assert shown == min(mails["total"], 20)
    page.wait_for_selector('[data-testid="log-tail"] li[data-log-line]', timeout=90_000)
    # Access log lines say what was asked and answered, not just "http request".
    page.wait_for_function(
        """() => [...document.querySelectorAll('[data-testid="log-tail"] [data-testid="log-text"]')]
                 .some((e) => /^(GET|POST|DELETE|PUT) \\/\\S* → \\d{3} in [\\d.,]+ ms$/.test(e.innerText))""",
        timeout=90_000,
    )

    # The orders are listed with their trace, and a link to it in the stack's viewer (--observability).
    page.wait_for_selector('[data-testid="traced-table"] tr[data-traced^="orders["] [data-trace-logs]', timeout=90_000)
    links = page.locator('[data-testid="traced-table"] a[data-trace]')
    assert links.count() > 0
    viewer = stack.child("traces")["urls"]["http"] + "/zipkin/traces/"
    assert all(
        (href or "").startswith(viewer) for href in (links.nth(i).get_attribute("href") for i in range(links.count()))
    )

    # Each service instance, from its logs: orders served the demo's requests.
    page.wait_for_function(
        """() => [...document.querySelectorAll('[data-testid="instances-table"] tbody tr')]
                 .some((r) => r.cells[0].innerText === "orders"
                              && Number(r.cells[2].innerText.replace(/\\D/g, "")) > 0)""",
        timeout=90_000,
    )

    # Live: more traffic moves the page without a reload.
    before_updated = page.locator("body").get_attribute("data-updated")
    before_end = cell(page, "topics-table", 'data-topic="orders"', "end")
    demo_traffic(stack, orders=10, otps=0)
    page.wait_for_function(
        f"""() => document.body.dataset.updated !== {before_updated!r}
              && document.querySelector('[data-testid="topics-table"] tr[data-topic="orders"] [data-col="end"]')
                   .innerText !== {before_end!r}""",
        timeout=90_000,
    )

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)
    assert (ARTIFACTS / "dashboard.png").stat().st_size > 10_000
    assert errors == []
    page.close()


def frozen(pid: int) -> Callable[[], None]:
    """SIGSTOP a child's process group (the analytics job's includes its JVM): alive to its
    supervisor, silent to everyone else, as a hung process is; the function resumes it."""
    os.killpg(pid, signal.SIGSTOP)
    return lambda: os.killpg(pid, signal.SIGCONT)


def test_an_orders_trace_in_the_viewer_runs_from_its_request_through_the_relay_to_the_analytics_job(
    stack: Stack, browser: Browser
) -> None:
    """One order with a caller's trace: Zipkin's API holds its HTTP request in `orders`, the
    relay's ``send orders`` and the analytics job's ``process orders`` (its batch's sample, a
    child of the send); Zipkin's own page shows it, and the screenshot is kept."""
    traces, orders = stack.child("traces")["urls"]["http"], stack.child("orders")["urls"]["http"]
    trace_id = secrets.token_hex(16)
    body = {"customer_id": "cust-trace", "currency": "EUR", "items": [{"sku": "s", "quantity": 1, "unit_price": "1"}]}
    request = urllib.request.Request(
        f"{orders}/orders",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 201

    def span(spans: list[dict[str, Any]], service: str, name: str) -> dict[str, Any] | None:
        found = [s for s in spans if (s["localEndpoint"]["serviceName"], s["name"]) == (service, name)]
        return found[0] if found else None

    deadline = time.monotonic() + 300  # the job's next batch, then its exporter's next round
    spans: list[dict[str, Any]] = []
    wanted = (("orders", "post /orders"), ("orders", "send orders"), ("analytics", "process orders"))
    while any(span(spans, *w) is None for w in wanted):
        assert time.monotonic() < deadline, f"trace {trace_id} lacks one of {wanted}: {spans}"
        time.sleep(1)
        with (
            contextlib.suppress(urllib.error.HTTPError),
            urllib.request.urlopen(f"{traces}/api/v2/trace/{trace_id}", timeout=15) as response,
        ):
            spans = json.loads(response.read())
    server, send, job = (span(spans, *w) for w in wanted)
    assert server is not None
    assert send is not None
    assert job is not None
    assert (server["kind"], send["kind"], job["kind"]) == ("SERVER", "PRODUCER", "CONSUMER")
    assert send["parentId"] == server["id"]
    assert job["parentId"] == send["id"]
    assert job["tags"]["streamshop.analytics.job"] == "orders"

    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.goto(f"{traces}/zipkin/traces/{trace_id}")
    page.get_by_text("analytics", exact=False).first.wait_for(timeout=60_000)
    page.get_by_text("send orders", exact=False).first.wait_for(timeout=60_000)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "zipkin-order-trace.png"), full_page=True)
    page.close()


def test_the_banner_says_what_is_wrong_the_job_stopped_or_the_broker_down_and_clears(
    stack: Stack, browser: Browser
) -> None:
    url = stack.child("dashboard")["urls"]["http"]
    page = browser.new_page(viewport={"width": 1440, "height": 1400})
    page.goto(url)
    page.wait_for_selector('[data-testid="groups-table"] tr[data-group="analytics"] [data-testid="committer"]')
    # A normal stack: no banner, nothing orange for lag that is only work in progress, empty
    # states that say so, each chart under its own heading.
    page.wait_for_function("() => document.body.dataset.updated !== ''", timeout=90_000)
    assert page.locator('[data-testid="problems"]').is_hidden()
    assert page.locator('[data-testid="transactions-none"]').inner_text() == "none open"
    assert page.locator('[data-testid="groups-table"] .lag-positive').count() == 0
    assert page.locator("#throughput h2").inner_text() == "Messages in"
    assert page.locator('#throughput [data-testid="chart-messages-in"]').count() == 1
    page.screenshot(path=str(ARTIFACTS / "dashboard-normal.png"))

    # The analytics job hangs: the banner names it once it has missed three commits.
    resume = frozen(stack.child("analytics")["pid"])
    try:
        problem = '[data-testid="problems"] li[data-problem="job"][data-subject="job analytics"]'
        page.wait_for_selector(problem, timeout=90_000)
        assert "stopped committing: last commit" in page.locator(problem).inner_text()
        assert "since" in page.locator(f"{problem} .since").inner_text()
        assert cell(page, "groups-table", 'data-group="analytics"', "state") == "Empty (job stopped)"
        page.screenshot(path=str(ARTIFACTS / "dashboard-analytics-stopped.png"))
    finally:
        resume()
    page.wait_for_selector(problem, state="detached", timeout=90_000)

    # The broker hangs: the cluster cannot be read, said at the top with since when.
    resume = frozen(stack.child("broker")["pid"])
    try:
        problem = '[data-testid="problems"] li[data-problem="cluster"]'
        page.wait_for_selector(problem, timeout=60_000)
        assert "cannot read the cluster" in page.locator(problem).inner_text()
        page.screenshot(path=str(ARTIFACTS / "dashboard-broker-down.png"))
    finally:
        resume()
    page.wait_for_selector('[data-testid="problems"]', state="hidden", timeout=60_000)
    page.close()
