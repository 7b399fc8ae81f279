"""`create_app(config)`: the dashboard as an aiohttp application.

    GET /                 the page (static/index.html); it refreshes itself every ~2 s
    GET /static/...       its script, styles and chart helpers (no CDN, no build: works offline)
    GET /api/snapshot     -> 200 {"updated_at", "stale", "error", "refresh_interval",
                                  "cluster", "groups", "transactions", "problems", "history", "analytics",
                                  "trace_link"}   (the trace viewer's page of a trace, `{trace_id}`
                                  standing for its id; null without DASHBOARD_TRACES_URL)
    GET /api/inbox        -> the catcher's latest mails (services.dashboard.proxy)
    GET /api/instances    -> each service instance seen in the last five minutes (the logs service's view)
    GET /api/logs/tail    -> the logs service's live tail, Server-Sent Events (services.dashboard.proxy)
    GET /api/traced       -> the newest orders, OTP requests and dead letters, each with its trace
                             (services.dashboard.traced)
    GET /healthz, /readyz (the broker is reachable), /metrics

Two background tasks run while the app does: the poller (services.dashboard.poller), which
observes the cluster every `refresh_interval` seconds, and the analytics feed
(services.dashboard.analytics_feed).  Handlers only read what they keep in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Middleware
from aiokafka import AIOKafkaConsumer
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kit.app import METRICS_REGISTRY_KEY
from kit.errors import NotFound
from kit.health import broker_check
from kit.logging import get_logger
from kit.throttle import LoginThrottle
from kit.users import Users
from schemas.client import RegistryClient
from services.common.app import create_service_app
from services.common.log_shipper import LogShipper
from services.common.outbox_service import shipping_logs
from services.dashboard.analytics_feed import LatestValues, MetricsFeed, analytics_json
from services.dashboard.config import DashboardConfig
from services.dashboard.kafka_reader import ClusterReader
from services.dashboard.login import Sessions, add_login_routes, login_middleware
from services.dashboard.poller import SnapshotPoller
from services.dashboard.proxy import fetch_inbox, fetch_instances, proxy_tail
from services.dashboard.traced import TracedRecords

__all__ = ["FEED_KEY", "POLLER_KEY", "STATIC_DIR", "create_app"]

log = get_logger(__name__)

STATIC_DIR = Path(__file__).parent / "static"
POLLER_KEY = web.AppKey("dashboard_poller", SnapshotPoller)
FEED_KEY = web.AppKey("dashboard_feed", MetricsFeed)
_SESSION_KEY = web.AppKey("dashboard_http", aiohttp.ClientSession)
_NO_CACHE = {"Cache-Control": "no-cache"}


class _AnalyticsView:
    """The analytics section, derived again only when the feed changed."""

    def __init__(self, feed: MetricsFeed) -> None:
        self.feed = feed
        self._key: tuple[Any, ...] | None = None
        self._body: dict[str, Any] = {}

    def json(self) -> dict[str, Any]:
        status = self.feed.status()
        key = (self.feed.latest.version, *status.values())
        if key != self._key:
            self._body = analytics_json(self.feed.latest, status)
            self._key = key
        return self._body


class DashboardCollector(Collector):
    def __init__(self, poller: SnapshotPoller, feed: MetricsFeed) -> None:
        self.poller = poller
        self.feed = feed

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily("dashboard_polls", "cluster observations attempted", value=self.poller.polls)
        yield CounterMetricFamily("dashboard_poll_failures", "cluster observations failed", value=self.poller.failures)
        yield GaugeMetricFamily(
            "dashboard_snapshot_stale", "1 while the last poll failed", value=int(self.poller.stale)
        )
        yield CounterMetricFamily("dashboard_metric_records", "analytics records read", value=self.feed.records_read)
        yield CounterMetricFamily(
            "dashboard_metric_undecodable", "analytics records skipped: undecodable", value=self.feed.undecodable
        )
        yield GaugeMetricFamily("dashboard_metric_keys", "analytics values held", value=len(self.feed.latest))


def create_app(config: DashboardConfig, *, shipper: LogShipper | None = None) -> web.Application:
    config.check()
    kafka = config.kafka_client_kwargs()
    poller = SnapshotPoller(
        ClusterReader(kafka),
        interval=config.refresh_interval,
        timeout=config.poll_timeout,
        history_points=config.history_points,
        rate_window=config.rate_window,
    )
    registry = RegistryClient(config.registry_url, **config.registry_options())
    feed = MetricsFeed(
        lambda: AIOKafkaConsumer(
            **kafka, client_id="streamshop-dashboard-metrics", group_id=None, enable_auto_commit=False
        ),
        lambda: poller.partitions(config.metrics_topic),
        registry,
        config.metrics_topic,
        LatestValues(config.metrics_window_minutes),
        retry_interval=config.refresh_interval,
    )
    analytics = _AnalyticsView(feed)
    traced = TracedRecords(
        lambda: AIOKafkaConsumer(
            **kafka, client_id="streamshop-dashboard-traced", group_id=None, enable_auto_commit=False
        ),
        poller.topics,
        config.trace_link,
        max_age=config.refresh_interval,
    )

    login: list[Middleware] = []
    if config.users_file is not None:
        sessions = Sessions(config.session_key.encode() if config.session_key else None, config.session_hours * 3600)
        login.append(login_middleware(sessions))
    app = create_service_app(
        config,
        middlewares=login,
        checks={"broker": broker_check(config.bootstrap_servers)},
        shipper=shipper,
        # the page asks for these every refresh: at info they would bury everything else
        quiet_paths=("/api/snapshot", "/api/inbox", "/api/instances", "/api/traced"),
    )
    app[POLLER_KEY] = poller
    app[FEED_KEY] = feed
    app[METRICS_REGISTRY_KEY].register(DashboardCollector(poller, feed))

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        async with shipping_logs(config, shipper):
            app[_SESSION_KEY] = session = aiohttp.ClientSession()
            # Background tasks: a broker that is down at start-up only makes the first snapshots stale.
            stop = asyncio.Event()
            tasks = [
                asyncio.create_task(poller.run(stop), name="dashboard-poller"),
                asyncio.create_task(feed.run(stop), name="dashboard-analytics-feed"),
            ]
            log.info(
                "dashboard started", bootstrap_servers=config.bootstrap_servers, metrics_topic=config.metrics_topic
            )
            try:
                yield
            finally:
                # Let a poll in progress finish (bounded by its own timeout), then cancel what is left.
                stop.set()
                _, pending = await asyncio.wait(tasks, timeout=config.poll_timeout + 1)
                for task in pending:
                    task.cancel()
                for task in tasks:
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                await session.close()
                await registry.close()

    async def index(request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC_DIR / "index.html", headers=_NO_CACHE)

    # The page's few files, listed once: a request can only name one of them (no path tricks),
    # and an unknown name is the kit's JSON 404 like any unknown path.
    static_files = {path.name: path for path in STATIC_DIR.iterdir() if path.is_file()}

    async def static_file(request: web.Request) -> web.FileResponse:
        path = static_files.get(request.match_info["name"])
        if path is None:
            raise NotFound(f"no file {request.path}")
        return web.FileResponse(path, headers=_NO_CACHE)

    async def snapshot(request: web.Request) -> web.Response:
        body = {**poller.state(), "analytics": analytics.json(), "trace_link": config.trace_link}
        return web.json_response(body, headers=_NO_CACHE)

    async def inbox(request: web.Request) -> web.Response:
        body = await fetch_inbox(request.app[_SESSION_KEY], config.catcher_url, config.catcher_token)
        return web.json_response(body, headers=_NO_CACHE)

    async def instances(request: web.Request) -> web.Response:
        body = await fetch_instances(request.app[_SESSION_KEY], config.logs_url, config.logs_token)
        return web.json_response(body, headers=_NO_CACHE)

    async def traced_records(request: web.Request) -> web.Response:
        return web.json_response(await traced.json(), headers=_NO_CACHE)

    async def logs_tail(request: web.Request) -> web.StreamResponse:
        return await proxy_tail(request, request.app[_SESSION_KEY], config.logs_url, config.logs_token)

    app.cleanup_ctx.append(lifecycle)
    app.router.add_get("/", index)
    app.router.add_get("/api/snapshot", snapshot)
    app.router.add_get("/api/inbox", inbox)
    app.router.add_get("/api/instances", instances)
    app.router.add_get("/api/logs/tail", logs_tail)
    app.router.add_get("/api/traced", traced_records)
    app.router.add_get("/static/{name}", static_file)
    if config.users_file is not None:
        users = Users.load(config.users_file, LoginThrottle(max_s=config.login_throttle_max_s))
        add_login_routes(app, users, sessions, secure_cookie=config.scheme == "https")
    return app
