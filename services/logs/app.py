"""The logs service's aiohttp app: the ``log-indexer`` consumer plus the search API.

    GET /logs?service=orders&level=info&stream=app&q=text&since=2026-01-01T00:00:00Z&trace_id=<32 hex>&limit=50
        -> 200 {"items": [...]}   newest first; 422 naming each invalid parameter
    GET /logs/tail?service=&level=&stream=&q=&since=&trace_id=&backlog=10 -> text/event-stream (services.logs.tail)
    GET /logs/stats -> 200 {"total": n, "levels": {...}, "services": {svc: {level: n, "total": n}}}
    GET /logs/instances?since= -> 200 {"since": ..., "items": [{service, instance, lines, errors, requests, last_seen}]}

Readiness is the broker and the database: JSON log lines need no registry, and an unreachable
registry only holds back Avro lines (the runner retries them), it does not stop the service.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import AsyncIterator, Iterator
from datetime import datetime

from aiohttp import web
from multidict import MultiMapping
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kit.app import CHECKS_KEY, METRICS_REGISTRY_KEY
from kit.errors import ValidationError
from kit.logging import get_logger
from kit.openapi import serve_openapi
from schemas.catalog import default_catalog
from schemas.client import RegistryClient
from schemas.serde import AvroSerializer
from services.common.app import create_service_app, default_checks
from services.common.consumer import ConsumerRunner, consuming, runner_check, runner_for_service
from services.common.db import open_for_service
from services.common.kafka import EventProducer
from services.common.log_shipper import LogShipper, SendRawAdapter, avro_log_encoder
from services.common.outbox_service import ensure_topics
from services.logs.config import LogsConfig
from services.logs.indexer import Indexer, LogRecordDeserializer
from services.logs.openapi import LOGS_OPENAPI
from services.logs.store import LEVELS, STREAMS, LogQuery, LogStore, iso_ms
from services.logs.tail import LogFeed, TailStreams, parse_backlog, stream_tail

__all__ = ["FEED_KEY", "INDEXER_KEY", "RUNNER_KEY", "STORE_KEY", "create_app", "parse_query"]

log = get_logger(__name__)

STORE_KEY = web.AppKey("log_store", LogStore)
INDEXER_KEY = web.AppKey("log_indexer", Indexer)
RUNNER_KEY = web.AppKey("log_runner", ConsumerRunner)
FEED_KEY = web.AppKey("log_feed", LogFeed)
TAILS_KEY = web.AppKey("log_tails", TailStreams)
TAIL_KEEPALIVE_KEY = web.AppKey("log_tail_keepalive", float)

MAX_LIMIT = 500
DEFAULT_LIMIT = 50
_PARAMS = ("service", "level", "stream", "q", "since", "trace_id", "limit")
_TAIL_PARAMS = ("service", "level", "stream", "q", "since", "trace_id", "backlog")
# As log lines carry it (W3C trace-context): anything else could never match a stored line.
_TRACE_ID = re.compile(r"[0-9a-f]{32}")


_MAX_SINCE_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z; SQLite's INTEGER ends at 2^63-1


def _since_ms(text: str) -> int:
    if text.isascii() and text.isdigit():
        if len(text) > 15 or int(text) > _MAX_SINCE_MS:
            raise ValueError("beyond the year 9999")
        return int(text)
    if len(text) > 64:
        raise ValueError("too long for a timestamp")
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        raise ValueError("naive timestamp")
    return int(parsed.timestamp() * 1000)


def parse_query(params: MultiMapping[str], *, allowed: tuple[str, ...] = _PARAMS) -> LogQuery:
    """The search filters of a query string; `ValidationError` (422) names every bad parameter."""
    errors: dict[str, str] = {}
    for name in sorted(set(params.keys())):
        if name not in allowed:
            errors[name] = f"is not an allowed parameter (allowed: {', '.join(allowed)})"
        elif len(params.getall(name)) > 1:
            errors[name] = "must be given at most once"
    values = {name: params.get(name) for name in _PARAMS}
    for name, longest in (("service", 128), ("q", 500)):
        value = values[name]
        if value is not None and not 1 <= len(value) <= longest:
            errors.setdefault(name, f"must be 1 to {longest} characters")
    for name, choices in (("level", LEVELS), ("stream", STREAMS)):
        value = values[name]
        if value is not None and value not in choices:
            errors.setdefault(name, f"must be one of {', '.join(choices)}")
    trace_id = values["trace_id"]
    if trace_id is not None and not _TRACE_ID.fullmatch(trace_id):
        errors.setdefault("trace_id", "must be a trace id: 32 lowercase hexadecimal digits")
    limit = DEFAULT_LIMIT
    if values["limit"] is not None:
        try:
            limit = int(values["limit"])
        except ValueError:
            errors.setdefault("limit", "must be an integer")
        else:
            if not 1 <= limit <= MAX_LIMIT:
                errors.setdefault("limit", f"must be between 1 and {MAX_LIMIT}")
    since: int | None = None
    if values["since"] is not None:
        try:
            since = _since_ms(values["since"])
        except ValueError:
            errors.setdefault(
                "since", "must be an ISO 8601 timestamp with a time zone, or epoch milliseconds up to the year 9999"
            )
    if errors:
        raise ValidationError(errors, "invalid query parameters")
    return LogQuery(
        service=values["service"],
        level=values["level"],
        stream=values["stream"],
        q=values["q"],
        since_ms=since,
        trace_id=trace_id,
        limit=limit,
    )


async def search_logs(request: web.Request) -> web.Response:
    query = parse_query(request.query)
    items = await request.app[STORE_KEY].search(query)
    return web.json_response({"items": items})


async def tail_logs(request: web.Request) -> web.StreamResponse:
    query = parse_query(request.query, allowed=_TAIL_PARAMS)
    backlog = parse_backlog(request.query.get("backlog"))
    with request.app[TAILS_KEY].slot():
        return await stream_tail(
            request,
            request.app[STORE_KEY],
            request.app[FEED_KEY],
            query,
            backlog,
            keepalive=request.app[TAIL_KEEPALIVE_KEY],
        )


async def log_stats(request: web.Request) -> web.Response:
    return web.json_response(await request.app[STORE_KEY].stats())


INSTANCES_WINDOW_MS = 5 * 60 * 1000


async def log_instances(request: web.Request) -> web.Response:
    query = parse_query(request.query, allowed=("since",))
    since = query.since_ms if query.since_ms is not None else int(time.time() * 1000) - INSTANCES_WINDOW_MS
    items = await request.app[STORE_KEY].instances(since)
    return web.json_response({"since": iso_ms(since), "items": items})


class IndexerCollector(Collector):
    """Indexer counters and consumer lag for ``/metrics``, read when scraped."""

    def __init__(self, app: web.Application) -> None:
        self.app = app

    def collect(self) -> Iterator[Metric]:
        indexer = self.app.get(INDEXER_KEY)
        runner = self.app.get(RUNNER_KEY)
        if indexer is None or runner is None:
            return
        yield GaugeMetricFamily("logs_indexed_records", "log records indexed by this process", value=indexer.indexed)
        yield GaugeMetricFamily("logs_duplicate_records", "redelivered log records skipped", value=indexer.duplicates)
        yield GaugeMetricFamily(
            "logs_dead_lettered_records", "poison log records sent to the DLQ", value=runner.stats.dead_lettered
        )
        lag = GaugeMetricFamily(
            "logs_consumer_lag", "records behind the log end, per partition", labels=["topic", "partition"]
        )
        for tp, behind in sorted(runner.last_lag.items()):
            lag.add_metric([tp.topic, str(tp.partition)], behind)
        yield lag


def create_app(config: LogsConfig, *, shipper: LogShipper | None = None) -> web.Application:
    """The logs service; consumer, producer (DLQ and shipped logs) and database start with the app."""
    checks = default_checks(config)
    del checks["registry"]
    app = create_service_app(config, checks=checks, shipper=shipper)
    app[METRICS_REGISTRY_KEY].register(IndexerCollector(app))
    app.router.add_get("/logs", search_logs)
    app.router.add_get("/logs/stats", log_stats)
    app.router.add_get("/logs/instances", log_instances)
    app.router.add_get("/logs/tail", tail_logs)
    serve_openapi(app, LOGS_OPENAPI)
    feed = LogFeed()
    app[FEED_KEY] = feed
    app[TAILS_KEY] = TailStreams(config.max_tail_clients)
    app[TAIL_KEEPALIVE_KEY] = config.tail_keepalive_s

    async def end_tails(app: web.Application) -> None:
        feed.close()

    app.on_shutdown.append(end_tails)

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        kafka = config.kafka_client_kwargs()
        bootstrap = kafka.pop("bootstrap_servers")
        async with contextlib.AsyncExitStack() as stack:
            db = config.open_database()
            store = LogStore(db, max_records=config.max_records)
            indexer = Indexer(db, store, name=config.group_id, on_indexed=feed.publish)
            await open_for_service(db, indexer.setup)
            stack.push_async_callback(db.close)
            registry = await stack.enter_async_context(RegistryClient(config.registry_url, **config.registry_options()))
            serializer = AvroSerializer(registry)
            producer = EventProducer(
                bootstrap, serializer, client_id=f"{config.service_name}-{config.instance_id}", **kafka
            )
            await stack.enter_async_context(producer)
            if shipper is not None:
                await shipper.start(SendRawAdapter(producer), avro_log_encoder(serializer))
                stack.push_async_callback(shipper.stop)
            # Created before the group subscribes: a consumer subscribed to a topic that does not
            # exist yet is given nothing, and notices the topic only at its next metadata refresh
            # (minutes later) on a cluster that does not auto-create topics for consumers.
            await ensure_topics(
                config, dict.fromkeys(config.topics, config.topic_partitions), config.topic_replication_factor
            )
            runner = runner_for_service(
                config,
                config.group_id,
                config.topics,
                indexer,
                deserializer=LogRecordDeserializer(registry, reader_schemas=[default_catalog().schema("LogRecord")]),
                producer=producer,
                commit_every=config.commit_every,
                commit_interval_ms=config.commit_interval_ms,
            )
            # Runs the consumer and forgets processed event ids older than the dedupe window.
            await stack.enter_async_context(
                consuming(runner, prune=indexer.handler, dedupe_window_ms=config.dedupe_window_s * 1000)
            )
            app[STORE_KEY] = store
            app[INDEXER_KEY] = indexer
            app[RUNNER_KEY] = runner
            app[CHECKS_KEY]["consumer"] = runner_check(runner)
            log.info("logs service started", topics=list(config.topics), group=config.group_id, fts5=store.full_text)
            yield

    app.cleanup_ctx.append(lifecycle)
    return app
