"""The dashboard against a real broker and schema registry (child processes) with real Kafka
clients: topics with their partitions, offsets, sizes and rates; two consumer groups on one
topic (the fan-out) with members, assignments, lag and rebalances; analytics metrics decoded
from Avro, the newest (generation, batch_id) winning, garbage counted; the catcher's inbox and
the logs service's live tail passed through (502 when they are down); a stale snapshot while
the broker is down, fresh again once it is back; the page and its files; `streamshop
dashboard` as a process.  The dashboard app runs on a real HTTP server (127.0.0.1, OS port)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import json
import logging
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import aiohttp
import aiosmtplib
import pytest
import structlog
from aiohttp import web
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import Producer as ConfluentProducer

from analytics.metrics import window_key
from kit.logging import configure_logging
from kit.ports import free_port
from schemas.catalog import default_catalog
from schemas.client import RegistryClient
from schemas.serde import AvroDeserializer, encode, frame
from services.common.log_shipper import LogShipper
from services.dashboard.app import create_app
from services.dashboard.config import DashboardConfig
from services.logs.app import TAILS_KEY
from services.logs.app import create_app as create_logs_app
from services.logs.config import LOG_TOPICS, LogsConfig
from streamshop.broker_process import parse_service_ready_line
from tests.support.harness import REPO, BrokerProcess
from tests.support.kafka_clients import create_topic
from tests.support.kit_processes import consume_all
from tests.support.notify import parse_metrics, serve_catcher
from tests.support.registry import RegistryProcess
from tests.support.services import serve_app
from tests.support.sse import read_sse

Snapshot = dict[str, Any]


@dataclass
class Cluster:
    broker: BrokerProcess
    registry_url: str

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One broker and one registry process for the module; each test uses its own topics and groups."""
    root = tmp_path_factory.mktemp("dashboard")
    broker = BrokerProcess(root / "broker").start()
    registry = RegistryProcess(broker.bootstrap, root / "registry.log")
    try:
        registry.start()
        yield Cluster(broker, registry.url)
    finally:
        registry.stop()
        broker.kill()


@dataclass
class Dashboard:
    url: str
    app: web.Application
    session: aiohttp.ClientSession

    async def get(self, path: str, **kw: Any) -> tuple[int, Any]:
        async with self.session.get(self.url + path, **kw) as response:
            return response.status, await response.json()

    async def metrics(self) -> dict[str, float]:
        async with self.session.get(self.url + "/metrics") as response:
            return parse_metrics(await response.text())

    async def snapshot(self) -> Snapshot:
        status, body = await self.get("/api/snapshot")
        assert status == 200, body
        return dict(body)

    async def until(self, condition: Callable[[Snapshot], object], what: str, within: float = 15) -> Snapshot:
        """The first snapshot for which `condition` is true (an exception counts as false)."""
        deadline = time.monotonic() + within
        while True:
            snap = await self.snapshot()
            try:
                if condition(snap):
                    return snap
            except (KeyError, TypeError, StopIteration):
                pass
            if time.monotonic() > deadline:
                summary = {k: snap[k] for k in ("updated_at", "stale", "error", "groups", "analytics")}
                raise AssertionError(f"timed out after {within} s waiting for {what}; last snapshot: {summary}")
            await asyncio.sleep(0.05)


@asynccontextmanager
async def dashboard(bootstrap: str, registry_url: str, tmp_path: Path, **overrides: Any) -> AsyncIterator[Dashboard]:
    database = tmp_path / "dashboard.db"
    config = DashboardConfig(
        **{
            "listen": "127.0.0.1",
            "port": 0,
            "bootstrap_servers": bootstrap,
            "registry_url": registry_url,
            "refresh_interval": 0.2,
            "poll_timeout": 3.0,
            "history_points": 50,
            "log_shipping": False,
            "database_path": database,
            **overrides,
        }
    )
    app = create_app(config)
    async with serve_app(app) as (url, session):
        yield Dashboard(url, app, session)
    assert not database.exists()  # no database: nothing is written to disk


@asynccontextmanager
async def producer(bootstrap: str) -> AsyncIterator[AIOKafkaProducer]:
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await p.start()
    try:
        yield p
    finally:
        await p.stop()


async def produce_keyed(p: AIOKafkaProducer, topic: str, count: int, prefix: str = "k") -> None:
    for batch in [range(i, min(i + 10, count)) for i in range(0, count, 10)]:
        futures = [await p.send(topic, b"value-%d" % i, key=f"{prefix}{i}".encode()) for i in batch]
        await asyncio.gather(*futures)


def topic_row(snap: Snapshot, name: str) -> dict[str, Any]:
    return next(t for t in snap["cluster"]["topics"] if t["name"] == name)


def group_row(snap: Snapshot, group_id: str) -> dict[str, Any]:
    return next(g for g in snap["groups"] if g["group_id"] == group_id)


# -- cluster -------------------------------------------------------------------------------------


async def test_a_topic_shows_its_partitions_end_offsets_sizes_and_a_positive_in_rate_after_a_second_burst(
    cluster: Cluster, tmp_path: Path
) -> None:
    topic = "dash.cluster"
    create_topic(cluster.bootstrap, topic, 3)
    async with dashboard(cluster.bootstrap, cluster.registry_url, tmp_path) as dash, producer(cluster.bootstrap) as p:
        await produce_keyed(p, topic, 30)
        # Offsets and sizes come from two requests: a poll that began during the burst may see
        # the end offsets after and the sizes before the last records; the next poll sees both.
        snap = await dash.until(
            lambda s: (
                topic_row(s, topic)["end_offset"] == 30
                and all(
                    (p["size_bytes"] > 0) == (p["end_offset"] > 0) for p in topic_row(s, topic)["partition_details"]
                )
            ),
            "30 records on the topic, and their sizes",
        )
        row = topic_row(snap, topic)
        assert (row["partitions"], row["start_offset"], row["messages"]) == (3, 0, 30)
        parts = row["partition_details"]
        assert [p["partition"] for p in parts] == [0, 1, 2]
        assert sum(p["end_offset"] for p in parts) == 30
        assert len([p for p in parts if p["end_offset"] > 0]) >= 2  # keyed records spread over the partitions
        assert snap["cluster"]["sizes_known"] is True  # DescribeLogDirs answered
        assert row["size_bytes"] == sum(p["size_bytes"] for p in parts) > 30 * len(b"value-00")
        assert [b["port"] for b in snap["cluster"]["brokers"]] == [cluster.broker.port]
        assert snap["stale"] is False
        assert snap["error"] is None

        await produce_keyed(p, topic, 30, prefix="second-")
        # As above, the sizes may trail the end offsets by one poll.
        snap = await dash.until(
            lambda s: (
                topic_row(s, topic)["end_offset"] == 60
                and topic_row(s, topic)["in_rate"] > 0
                and topic_row(s, topic)["size_bytes"] > row["size_bytes"]
            ),
            "the second burst counted as messages in, and its size",
        )
        assert any(point["messages_in"].get(topic, 0) > 0 for point in snap["history"])
        assert len(snap["history"]) <= 50


@pytest.mark.slow  # a rate over a 10 s window of real traffic: it takes that long
async def test_the_in_rate_of_a_topic_under_steady_bursty_traffic_stays_within_30_percent_between_refreshes(
    cluster: Cluster, tmp_path: Path
) -> None:
    """40 records every 2 s (an outbox relay's rhythm) with a refresh every second: between two
    polls that is 0 or 40/s by turns; measured over the rate window it is a steady ~20/s."""
    topic = "dash.steady"
    create_topic(cluster.bootstrap, topic, 3)
    settings = {"refresh_interval": 1.0, "rate_window": 10.0}
    async with (
        dashboard(cluster.bootstrap, cluster.registry_url, tmp_path, **settings) as dash,
        producer(cluster.bootstrap) as p,
    ):

        async def traffic() -> None:
            due = time.monotonic()
            while True:  # on a fixed 2 s schedule: a slow send must not stretch the rhythm
                await produce_keyed(p, topic, 40, prefix=f"{time.monotonic()}-")
                due += 2.0
                await asyncio.sleep(max(0.0, due - time.monotonic()))

        sending = asyncio.create_task(traffic())
        try:
            await asyncio.sleep(12.0)  # the rate window fills
            rates: list[float] = []
            seen: str | None = None
            while len(rates) < 8:
                snap = await dash.snapshot()
                if snap["updated_at"] != seen:
                    seen = snap["updated_at"]
                    rates.append(topic_row(snap, topic)["in_rate"])
                await asyncio.sleep(0.1)
        finally:
            sending.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sending
    mean = sum(rates) / len(rates)
    assert 14 <= mean <= 26, rates  # 20/s sent (a little less: each burst takes time to send)
    for before, after in itertools.pairwise(rates):
        assert abs(after - before) <= 0.3 * before, rates


# -- consumer groups: the fan-out --------------------------------------------------------------


def consumer(bootstrap: str, topic: str, group_id: str) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group_id,
        client_id=f"{group_id}-client",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        heartbeat_interval_ms=200,
        session_timeout_ms=6000,
    )


async def read(c: AIOKafkaConsumer, count: int, within: float = 15) -> None:
    got = 0
    async with asyncio.timeout(within):
        while got < count:
            got += sum(len(r) for r in (await c.getmany(timeout_ms=200)).values())


def holds_every_partition(snap: Snapshot, group_id: str, topic: str) -> bool:
    g = group_row(snap, group_id)
    return (
        g["state"] == "Stable"
        and len(g["members"]) == 1
        and g["members"][0]["assignment"] == [{"topic": topic, "partitions": [0, 1, 2]}]
    )


async def test_two_groups_on_one_topic_each_hold_every_partition_and_their_lag_drops_to_zero_once_committed(
    cluster: Cluster, tmp_path: Path
) -> None:
    topic, sms, email = "dash.fanout", "dash-sms", "dash-email"
    create_topic(cluster.bootstrap, topic, 3)
    async with dashboard(cluster.bootstrap, cluster.registry_url, tmp_path) as dash, producer(cluster.bootstrap) as p:
        await produce_keyed(p, topic, 12)
        a, b = consumer(cluster.bootstrap, topic, sms), consumer(cluster.bootstrap, topic, email)
        await a.start()
        await b.start()
        try:
            await asyncio.gather(read(a, 12), read(b, 12))  # read, not committed yet
            snap = await dash.until(
                lambda s: holds_every_partition(s, sms, topic) and holds_every_partition(s, email, topic),
                "both groups stable, each with every partition",
            )
            for group_id in (sms, email):
                g = group_row(snap, group_id)
                assert g["topics"] == [topic]
                assert g["members"][0]["client_id"] == f"{group_id}-client"
                assert g["members"][0]["client_host"]
                assert g["lag"] == 12  # nothing committed: everything retained is still to do
                assert [(q["partition"], q["committed"]) for q in g["partitions"]] == [(0, None), (1, None), (2, None)]

            await a.commit()
            await b.commit()
            snap = await dash.until(lambda s: group_row(s, sms)["lag"] == group_row(s, email)["lag"] == 0, "lag 0")
            for group_id in (sms, email):
                parts = group_row(snap, group_id)["partitions"]
                assert all(q["committed"] == q["end_offset"] for q in parts)
                assert sum(q["committed"] for q in parts) == 12
            assert snap["history"][-1]["lag"][sms] == 0

            await produce_keyed(p, topic, 9, prefix="more-")
            await dash.until(lambda s: group_row(s, sms)["lag"] == 9, "lag of the new records")
            await asyncio.gather(read(a, 9), read(b, 9))
            await a.commit()
            await b.commit()
            # Each commit shows as a rate for one refresh, the two groups' maybe in different ones:
            # the history keeps both (the first commits, from nothing, count as no rate at all).
            snap = await dash.until(
                lambda s: all(any((h["messages_out"].get(g) or 0) > 0 for h in s["history"]) for g in (sms, email)),
                "committed offsets moving: messages out",
            )
            before = {g: group_row(snap, g)["rebalances"] for g in (sms, email)}

            # A second member in one group: its partitions are split, the other group is untouched.
            extra = consumer(cluster.bootstrap, topic, sms)
            await extra.start()
            try:
                # Both members keep polling, as a real consumer does, while the group rebalances.
                polling = asyncio.gather(read(extra, 10**9, within=60), read(a, 10**9, within=60))
                try:
                    snap = await dash.until(
                        lambda s: group_row(s, sms)["state"] == "Stable" and len(group_row(s, sms)["members"]) == 2,
                        "two members in one group",
                        within=30,
                    )
                finally:
                    polling.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await polling
                held = [
                    tuple(p for x in m["assignment"] for p in x["partitions"]) for m in group_row(snap, sms)["members"]
                ]
                assert sorted(p for ps in held for p in ps) == [0, 1, 2]
                assert all(held)
                assert group_row(snap, sms)["rebalances"] >= before[sms] + 1
                assert holds_every_partition(snap, email, topic)
                assert group_row(snap, email)["rebalances"] == before[email]
            finally:
                await extra.stop()
        finally:
            await a.stop()
            await b.stop()


# -- analytics -----------------------------------------------------------------------------------


def metric(value: str, generation: int, batch_id: int, window: datetime) -> dict[str, Any]:
    return {
        "envelope": {
            "event_id": str(uuid.uuid4()),
            "occurred_at": window,
            "producer": {"service": "analytics", "instance": "test"},
            "trace_id": None,
        },
        "metric": "orders.revenue",
        "window_start": window,
        "window_end": datetime.fromtimestamp(window.timestamp() + 60, UTC),
        "dimensions": {"currency": "EUR"},
        "value": Decimal(value),
        "count": 3,
        "job": "orders",
        "generation": generation,
        "batch_id": batch_id,
        "computed_at": window,
    }


async def test_analytics_metrics_are_decoded_the_newest_generation_and_batch_wins_and_garbage_is_only_counted(
    cluster: Cluster, tmp_path: Path
) -> None:
    topic = "dash.metrics"
    schema = default_catalog().schema("AnalyticsMetric")
    async with RegistryClient(cluster.registry_url) as registry:
        schema_id = await registry.register(f"{topic}-value", schema.text)
    minute = int(time.time()) // 60 * 60
    window = datetime.fromtimestamp(minute, UTC)
    window_ms = minute * 1000
    key = window_key("orders.revenue", window_ms, {"currency": "EUR"}).encode()

    def framed(value: str, generation: int, batch_id: int) -> bytes:
        return frame(schema_id, encode(schema, metric(value, generation, batch_id, window)))

    async with dashboard(cluster.bootstrap, cluster.registry_url, tmp_path, metrics_topic=topic) as dash:
        snap = await dash.snapshot()
        assert snap["analytics"]["state"] == "waiting"
        assert snap["analytics"]["topic_found"] is False  # the job has not created its topic yet

        create_topic(cluster.bootstrap, topic, 1, {"cleanup.policy": "compact"})
        await dash.until(lambda s: s["analytics"]["topic_found"], "the feed finding the topic")
        async with producer(cluster.bootstrap) as p:
            await p.send_and_wait(topic, framed("12.5000", 1, 5), key=key)
            snap = await dash.until(lambda s: s["analytics"]["state"] == "ready", "the first metric")
            analytics = snap["analytics"]
            assert analytics["series"] == {"orders.revenue": {"EUR": [[window_ms, 12.5]]}}
            assert (analytics["metrics"], analytics["latest_window_ms"]) == (1, window_ms)

            await p.send_and_wait(topic, b"not avro at all", key=key)
            await p.send_and_wait(topic, frame(987_654, b"\x02"), key=key)  # no such schema id
            await p.send_and_wait(topic, framed("20.0000", 2, 0), key=key)  # a newer generation
            await p.send_and_wait(topic, framed("99.0000", 1, 9), key=key)  # older, though read later
            snap = await dash.until(lambda s: s["analytics"]["records_read"] == 5, "five records read")
        analytics = snap["analytics"]
        assert analytics["undecodable"] == 2
        assert analytics["last_undecodable"]
        assert analytics["series"] == {"orders.revenue": {"EUR": [[window_ms, 20.0]]}}
        assert analytics["state"] == "ready"
        assert analytics["error"] is None


# -- the inbox and the logs tail -----------------------------------------------------------------


async def test_the_inbox_lists_mails_the_catcher_received_over_smtp_newest_first(
    cluster: Cluster, tmp_path: Path
) -> None:
    async with serve_catcher() as catcher:
        for i, to in enumerate(["ada@example.com", "bob@example.com"]):
            mail = EmailMessage()
            mail["From"] = "streamshop <no-reply@streamshop.local>"
            mail["To"] = to
            mail["Subject"] = f"Your code {i}"
            mail.set_content("123456")
            await aiosmtplib.send(mail, hostname="127.0.0.1", port=catcher.smtp_port, timeout=5)
        async with dashboard(cluster.bootstrap, cluster.registry_url, tmp_path, catcher_url=catcher.url) as dash:
            status, inbox = await dash.get("/api/inbox")
    assert status == 200
    assert inbox["total"] == 2
    assert [(m["subject"], m["to"]) for m in inbox["items"]] == [
        ("Your code 1", ["bob@example.com"]),
        ("Your code 0", ["ada@example.com"]),
    ]
    assert set(inbox["items"][0]) == {"id", "from", "to", "subject", "received_at"}  # no mail bodies


async def test_the_logs_tail_is_passed_through_with_its_filters_and_closing_it_ends_the_upstream_stream(
    cluster: Cluster, tmp_path: Path
) -> None:
    for log_topic in LOG_TOPICS:
        create_topic(cluster.bootstrap, log_topic, 1)
    logs_config = LogsConfig(
        bootstrap_servers=cluster.bootstrap,
        registry_url=cluster.registry_url,
        database_path=tmp_path / "logs.db",
        log_shipping=False,
        commit_interval_ms=100,
        tail_keepalive_s=30,
    )
    logs_app = create_logs_app(logs_config)
    async with serve_app(logs_app) as (logs_url, _), producer(cluster.bootstrap) as p:

        async def line(service: str, event: str) -> None:
            record = {
                "envelope": {"event_id": str(uuid.uuid4())},
                "service": service,
                "instance": f"{service}-1",
                "level": "info",
                "event": event,
                "timestamp": datetime.now(UTC).isoformat(),
            }
            await p.send_and_wait("logs.app", json.dumps(record).encode(), key=f"{service}-1".encode())

        await line("orders", "order created")
        await line("otp", "code sent")
        async with dashboard(cluster.bootstrap, cluster.registry_url, tmp_path, logs_url=logs_url) as dash:
            status, seen = await dash.get("/api/instances")
            assert status == 200
            assert [(i["service"], i["instance"], i["lines"]) for i in seen["items"]] in (
                [],  # not indexed yet: the tail below waits for them
                [("orders", "orders-1", 1)],
                [("orders", "orders-1", 1), ("otp", "otp-1", 1)],
            )
            async with dash.session.get(dash.url + "/api/logs/tail?service=orders&backlog=-1") as bad:
                assert bad.status == 422  # the logs service's own answer, passed through
                assert (await bad.json())["error"] == "validation_failed"

            response = await dash.session.get(dash.url + "/api/logs/tail?service=orders&backlog=5")
            assert response.status == 200
            assert response.headers["Content-Type"] == "text/event-stream"
            assert logs_app[TAILS_KEY].open == 1
            backlog = await read_sse(response, 1)
            assert [(e["data"]["service"], e["data"]["event"]) for e in backlog] == [("orders", "order created")]

            await line("otp", "not for this tail")
            await line("orders", "order paid")
            live = await read_sse(response, 1)
            assert [(e["data"]["service"], e["data"]["event"]) for e in live] == [("orders", "order paid")]
            assert live[0]["id"] > backlog[0]["id"]

            # The browser leaves while nothing is logged (and the logs service's keepalive is 30 s
            # away): the dashboard notices by itself, ends the request and closes its upstream stream,
            # which the logs service finds closed on its next write.
            response.close()
            served = 'http_requests_total{method="GET",route="/api/logs/tail",status="200"}'
            deadline = time.monotonic() + 30
            while (await dash.metrics()).get(served) != 1:
                assert time.monotonic() < deadline, "the dashboard still serves the closed tail"
                await asyncio.sleep(0.05)
            assert logs_app[TAILS_KEY].open == 1  # nothing written to it since
            await line("orders", "after the browser left")
            while logs_app[TAILS_KEY].open:
                assert time.monotonic() < deadline, "the upstream tail is still open"
                await asyncio.sleep(0.05)


async def test_the_catcher_or_the_logs_service_down_is_a_502_json_error(cluster: Cluster, tmp_path: Path) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    async with dashboard(
        cluster.bootstrap, cluster.registry_url, tmp_path, catcher_url=nowhere, logs_url=nowhere
    ) as dash:
        for path, upstream in (
            ("/api/inbox", "catcher"),
            ("/api/instances", "logs service"),
            ("/api/logs/tail", "logs service"),
        ):
            status, body = await dash.get(path)
            assert status == 502, path
            assert body["error"] == "upstream_unavailable"
            assert body["details"]["upstream"] == upstream
            assert nowhere in body["message"]


# -- a broker going away -------------------------------------------------------------------------


async def test_the_snapshot_goes_stale_while_the_broker_is_down_and_fresh_once_it_is_back(
    broker_process_factory: Callable[..., BrokerProcess], cluster: Cluster, tmp_path: Path
) -> None:
    broker = broker_process_factory(name="stale-broker")
    create_topic(broker.bootstrap, "dash.stale", 2)
    async with dashboard(broker.bootstrap, cluster.registry_url, tmp_path, poll_timeout=2.0) as dash:
        fresh = await dash.until(lambda s: topic_row(s, "dash.stale") and not s["stale"], "a first snapshot")
        assert (await dash.get("/readyz"))[0] == 200

        broker.stop()
        stale = await dash.until(lambda s: s["stale"], "a stale snapshot")
        assert stale["error"].startswith("cannot read the cluster")
        assert topic_row(stale, "dash.stale")["partitions"] == 2  # the last good snapshot is kept
        assert stale["updated_at"] >= fresh["updated_at"]
        status, ready = await dash.get("/readyz")
        assert status == 503
        assert ready["details"]["checks"]["broker"]["ok"] is False

        broker.start()  # the same port
        back = await dash.until(lambda s: not s["stale"] and s["updated_at"] > stale["updated_at"], "recovery")
        assert back["error"] is None
        assert topic_row(back, "dash.stale")["partitions"] == 2


# -- the page ------------------------------------------------------------------------------------


async def test_the_page_and_its_files_are_served_and_unknown_paths_are_json_404s(
    cluster: Cluster, tmp_path: Path
) -> None:
    async with dashboard(cluster.bootstrap, cluster.registry_url, tmp_path) as dash:
        async with dash.session.get(dash.url + "/") as r:
            assert r.status == 200
            assert r.content_type == "text/html"
            page = await r.text()
        for reference in ('href="/static/dashboard.css"', 'src="/static/dashboard.js"'):
            assert reference in page
        for hook in (
            "topics-table",
            "groups-table",
            "chart-messages-in",
            "chart-lag",
            "chart-orders",
            "chart-revenue",
            "funnel",
            "chart-otp-success",
            "chart-otp-latency",
            "chart-errors",
            "inbox",
            "log-tail",
            "analytics-status",
        ):
            assert f'data-testid="{hook}"' in page, hook
        for name, content_type, marker in (
            ("dashboard.js", "application/javascript", "/api/snapshot"),
            ("charts.js", "application/javascript", "data-series"),
            ("dashboard.css", "text/css", ".chart"),
        ):
            async with dash.session.get(f"{dash.url}/static/{name}") as r:
                assert r.status == 200, name
                assert r.content_type == content_type
                assert marker in await r.text()
        for path in ("/api/nope", "/static/nope.js"):
            status, body = await dash.get(path)
            assert (status, body["error"]) == (404, "not_found"), path


# -- the command ---------------------------------------------------------------------------------


async def test_streamshop_dashboard_runs_as_a_process_announces_itself_and_refuses_bad_settings(
    cluster: Cluster, tmp_path: Path
) -> None:
    database = tmp_path / "never.db"
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "DASHBOARD_BOOTSTRAP_SERVERS": cluster.bootstrap,
        "DASHBOARD_REGISTRY_URL": cluster.registry_url,
        "DASHBOARD_DATABASE_PATH": str(database),
        "DASHBOARD_REFRESH_INTERVAL": "0.2",
        "DASHBOARD_LOG_FORMAT": "json",
    }
    command = [sys.executable, "-m", "streamshop.cli", "dashboard", "--port", "0"]
    bad = await asyncio.create_subprocess_exec(
        *command, cwd=REPO, env={**env, "DASHBOARD_HISTORY_POINTS": "1"}, stderr=asyncio.subprocess.PIPE
    )
    _, err = await asyncio.wait_for(bad.communicate(), 30)
    assert bad.returncode == 2
    assert b"DASHBOARD_HISTORY_POINTS" in err

    proc = await asyncio.create_subprocess_exec(
        *command, cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode().strip()
        ready = parse_service_ready_line(line)
        assert ready is not None, line
        assert ready.name == "dashboard"
        async with aiohttp.ClientSession() as session:
            dash = Dashboard(ready.url, web.Application(), session)
            await dash.until(lambda s: s["cluster"]["brokers"] and not s["stale"], "a snapshot from the process")
            async with session.get(ready.url + "/") as r:
                assert r.status == 200
                assert "streamshop dashboard" in await r.text()
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    assert not database.exists()


async def test_with_log_shipping_its_own_access_log_goes_to_logs_ingress_as_avro(
    cluster: Cluster, tmp_path: Path
) -> None:
    """DASHBOARD_LOG_SHIPPING: shipped as Avro LogRecords, as every service's, so the logs service
    and the analytics job read them (through the kit's `shipping_logs`, which the catcher uses too)."""
    config = DashboardConfig(
        listen="127.0.0.1",
        port=0,
        bootstrap_servers=cluster.bootstrap,
        registry_url=cluster.registry_url,
        database_path=tmp_path / "dashboard.db",
        log_shipping=True,
    )
    shipper = LogShipper(
        service="dashboard",
        instance=config.instance_id,
        flush_interval=0.05,
        exclude_loggers=("services.common.log_shipper", "aiokafka", "kafka", "broker", "schemas"),
    )
    configure_logging(stream=io.StringIO(), fmt="json", tap=shipper)
    try:
        async with serve_app(create_app(config, shipper=shipper)) as (url, session):
            async with session.get(url + "/", headers={"X-Request-ID": "req-dash"}) as r:
                assert r.status == 200
            deadline = time.monotonic() + 10
            while shipper.shipped == 0 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
    finally:
        root = logging.getLogger()
        for h in [h for h in root.handlers if getattr(h, "_streamshop_handler", False)]:
            root.removeHandler(h)
        structlog.reset_defaults()
    records = await consume_all(cluster.bootstrap, "logs.ingress", 1, 10)
    async with RegistryClient(cluster.registry_url) as registry:
        decoded = [await AvroDeserializer(registry).deserialize(r.value or b"") for r in records]
    assert {d.record_name for d in decoded} == {"io.streamshop.events.logs.LogRecord"}
    assert any(d.value["request_id"] == "req-dash" and d.value["service"] == "dashboard" for d in decoded)
    assert {r.key for r in records} == {None}  # access lines are spread, not keyed by instance


async def test_an_open_transaction_is_listed_with_the_lso_lag_it_causes_until_it_commits(
    cluster: Cluster, tmp_path: Path
) -> None:
    """ListTransactions and DescribeTransactions over the Kafka protocol, the LSO from ListOffsets
    at read_committed: an open transaction's partitions show high watermark - LSO, and it leaves
    the list once it commits."""
    topic = f"ledger-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, 2)
    txn = ConfluentProducer({"bootstrap.servers": cluster.bootstrap, "transactional.id": f"dash-{topic}"})
    txn.init_transactions(15)
    txn.begin_transaction()
    for i in range(5):
        txn.produce(topic, b"pending-%d" % i, partition=1)
    assert txn.flush(15) == 0
    async with dashboard(cluster.bootstrap, cluster.registry_url, tmp_path) as d:
        snap = await d.until(
            lambda s: any(t["transactional_id"] == f"dash-{topic}" for t in s["transactions"]["open"]),
            "the open transaction",
        )
        [row] = [t for t in snap["transactions"]["open"] if t["transactional_id"] == f"dash-{topic}"]
        assert snap["transactions"]["known"] is True
        assert (row["state"], row["producer_epoch"], row["lso_lag"]) == ("Ongoing", 0, 5)
        assert row["partitions"] == [
            {"topic": topic, "partition": 1, "high_watermark": 5, "last_stable_offset": 0, "lso_lag": 5}
        ]
        assert row["age_s"] >= 0
        txn.commit_transaction(15)
        await d.until(
            lambda s: all(t["transactional_id"] != f"dash-{topic}" for t in s["transactions"]["open"]),
            "the committed transaction to leave the list",
        )


@pytest.mark.slow
async def test_the_broker_durability_is_shown_as_describe_configs_gives_it(cluster: Cluster, tmp_path: Path) -> None:
    """The bundled broker's log.durability, read with DescribeConfigs: the module's broker has
    the default, a second one started with --durability page-cache (BROKER_DURABILITY) its own."""
    async with dashboard(cluster.bootstrap, cluster.registry_url, tmp_path) as dash:
        snap = await dash.until(lambda s: s["cluster"]["durability"] is not None, "the durability")
        assert snap["cluster"]["durability"] == "fsync"
    page_cache = BrokerProcess(tmp_path / "page-cache")
    page_cache.env = {"BROKER_DURABILITY": "page-cache"}
    try:
        page_cache.start()
        async with dashboard(page_cache.bootstrap, cluster.registry_url, tmp_path / "second") as dash:
            snap = await dash.until(lambda s: s["cluster"]["durability"] is not None, "the durability")
            assert snap["cluster"]["durability"] == "page-cache"
    finally:
        page_cache.kill()
