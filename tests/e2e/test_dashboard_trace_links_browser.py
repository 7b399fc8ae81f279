"""The dashboard's trace links in a real browser (headless Chromium, as in
test_dashboard_browser.py, but against a broker, registry, logs service and dashboard of the
test's own, no stack): a traced log line links to its trace's page in the viewer and to "logs of
this trace", which follows that trace's lines alone, and so does an order listed with its trace;
a trace id that is not one (the topics are anyone's to write) gets no link and is never markup;
without a viewer there is no trace link."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from playwright.async_api import Browser, Page, async_playwright

from kit.ports import free_port
from registry.app import RunningRegistry
from services.logs.app import create_app as create_logs_app
from services.logs.config import LOG_TOPICS, LogsConfig
from tests.e2e.test_dashboard_browser import CHROMIUM_ARGS
from tests.integration.test_dashboard import dashboard
from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import create_topic
from tests.support.services import serve_app

pytestmark = [pytest.mark.browser]

TRACE_A = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACE_B = "0af7651916cd43dd8448eb211c80319c"
HOSTILE = '"><img src=x onerror="window.pwned=1">'
VIEWER = "http://zipkin.invalid:9411"
WITHIN_MS = 60_000
NO_CATCHER = {"catcher_url": f"http://127.0.0.1:{free_port()}"}  # nobody's: the inbox stays empty


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    executable = shutil.which("chromium")
    assert executable is not None, "Debian's chromium is not installed: `make test` installs it (make browser)"
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield launched
        await launched.close()


async def _line(p: AIOKafkaProducer, service: str, event: str, trace_id: str | None) -> None:
    record = {
        "envelope": {"event_id": str(uuid.uuid4())},
        "service": service,
        "instance": f"{service}-1",
        "level": "info",
        "event": event,
        "timestamp": datetime.now(UTC).isoformat(),
        "trace_id": trace_id,
    }
    await p.send_and_wait("logs.app", json.dumps(record).encode(), key=f"{service}-1".encode())


async def _tail(page: Page) -> list[str]:
    texts: list[str] = await page.locator('[data-testid="log-tail"] [data-testid="log-text"]').all_inner_texts()
    return texts


async def _until_tail(page: Page, expected: list[str]) -> None:
    deadline = time.monotonic() + WITHIN_MS / 1000
    while (seen := await _tail(page)) != expected:
        assert time.monotonic() < deadline, f"the tail shows {seen}, not {expected}"
        await asyncio.sleep(0.1)


async def test_traced_lines_link_to_the_viewer_and_to_their_traces_lines_and_hostile_ids_get_none(
    broker: ThreadBroker, running_registry: RunningRegistry, browser: Browser, tmp_path: Path
) -> None:
    for topic in (*LOG_TOPICS, "orders", "orders.dlq"):
        create_topic(broker.bootstrap, topic, 1)
    logs = LogsConfig(
        bootstrap_servers=broker.bootstrap,
        registry_url=running_registry.url,
        database_path=tmp_path / "logs.db",
        log_shipping=False,
        commit_interval_ms=100,
    )
    p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    await p.start()
    try:
        async with serve_app(create_logs_app(logs)) as (logs_url, _):
            await _line(p, "orders", "order created", TRACE_A)
            await _line(p, "otp", "code sent", TRACE_B)
            await _line(p, "orders", "untraced", None)
            await _line(p, "orders", HOSTILE, HOSTILE)
            traceparent = f"00-{TRACE_A}-00f067aa0ba902b7-01".encode()
            await p.send_and_wait("orders", b"\x00", key=b"order-1", headers=[("traceparent", traceparent)])
            await p.send_and_wait("orders.dlq", b"\x00", key=HOSTILE.encode(), headers=[("traceparent", b"00-x")])
            everything = [HOSTILE, "untraced", "code sent", "order created"]  # newest first
            errors: list[str] = []

            async with dashboard(
                broker.bootstrap, running_registry.url, tmp_path, logs_url=logs_url, traces_url=VIEWER, **NO_CATCHER
            ) as dash:
                page = await browser.new_page()
                # The script's own errors; the inbox's 502s (no catcher here) are the page's to show.
                page.on("pageerror", lambda e: errors.append(str(e)))
                await page.goto(dash.url)
                await _until_tail(page, everything)

                links = page.locator('[data-testid="log-tail"] a[data-trace]')
                hrefs = {await a.get_attribute("data-trace"): await a.get_attribute("href") for a in await links.all()}
                assert hrefs == {t: f"{VIEWER}/zipkin/traces/{t}" for t in (TRACE_A, TRACE_B)}
                assert {await a.get_attribute("target") for a in await links.all()} == {"_blank"}
                buttons = page.locator('[data-testid="log-tail"] [data-trace-logs]')
                assert sorted(await buttons.all_inner_texts()) == ["logs of this trace"] * 2
                assert await page.locator('[data-testid="log-tail"] img').count() == 0
                assert await page.evaluate("window.pwned") is None
                assert await page.locator('[data-testid="tail-all"]').is_hidden()

                records = page.locator('[data-testid="traced-table"] tbody tr')
                await records.nth(1).wait_for(timeout=WITHIN_MS)  # the order and the dead letter
                assert await records.count() == 2
                order = page.locator('[data-testid="traced-table"] tr[data-traced="orders[0]@0"]')
                assert await order.locator("a[data-trace]").get_attribute("href") == f"{VIEWER}/zipkin/traces/{TRACE_A}"
                dead = page.locator('[data-testid="traced-table"] tr[data-traced="orders.dlq[0]@0"]')
                assert HOSTILE in await dead.inner_text()  # as text, never markup
                assert await dead.locator("a, button").count() == 0  # no trace: no links
                assert await page.locator("img").count() == 0

                await order.locator(f'[data-trace-logs="{TRACE_A}"]').click()
                await _until_tail(page, ["order created"])
                assert TRACE_A in await page.locator("#tail-status").inner_text()
                await _line(p, "otp", "other trace", TRACE_B)
                await _line(p, "notify", "order mail sent", TRACE_A)
                await _until_tail(page, ["order mail sent", "order created"])

                await page.locator('[data-testid="tail-all"]').click()
                await _until_tail(page, ["order mail sent", "other trace", *everything])
                assert await page.locator('[data-testid="tail-all"]').is_hidden()
                await page.close()

            async with dashboard(
                broker.bootstrap, running_registry.url, tmp_path, logs_url=logs_url, **NO_CATCHER
            ) as dash:
                page = await browser.new_page()
                await page.goto(dash.url)
                await _until_tail(page, ["order mail sent", "other trace", *everything])
                assert await page.locator('[data-testid="log-tail"] a[data-trace]').count() == 0  # no viewer
                assert await page.locator('[data-testid="log-tail"] [data-trace-logs]').count() == 4
                await page.close()
            assert errors == []
    finally:
        await p.stop()
