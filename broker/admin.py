"""The broker's admin HTTP API (aiohttp): health, Prometheus metrics, topics.

    GET /healthz               {"status": "ok", "node_id", "cluster_id"}
    GET /metrics               Prometheus text format (see broker/metrics.py)
    GET /api/topics            {"topics": [topic, ...]}, the cluster metadata log last
    GET /api/topics/{name}     one topic; 404 {"error": "not_found", "message"} if unknown

A topic is {name, id, internal, configs (effective), overrides (set on the topic),
size_bytes, partitions: [{partition, log_start_offset, log_end_offset, high_watermark,
size_bytes, segments}]}.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from broker.core import Broker
from broker.log.partition_log import PartitionLog
from broker.metadata import METADATA_TOPIC, Topic


def _partition(plog: PartitionLog) -> dict[str, Any]:
    return {
        "partition": plog.partition,
        "log_start_offset": plog.log_start_offset,
        "log_end_offset": plog.next_offset,
        "high_watermark": plog.high_watermark,
        "size_bytes": plog.size_bytes,
        "segments": len(plog.segments),
    }


def _topic(topic: Topic, defaults: dict[str, str]) -> dict[str, Any]:
    return {
        "name": topic.name,
        "id": str(topic.topic_id),
        "internal": topic.internal,
        "configs": {**defaults, **topic.configs},
        "overrides": dict(topic.configs),
        "size_bytes": sum(plog.size_bytes for plog in topic.logs),
        "partitions": [_partition(plog) for plog in topic.logs],
    }


def _metadata_log(broker: Broker) -> dict[str, Any]:
    meta = broker.store.meta_log
    return {
        "name": METADATA_TOPIC,
        "id": None,
        "internal": True,
        "configs": {},
        "overrides": {},
        "size_bytes": meta.size_bytes,
        "partitions": [_partition(meta)],
    }


def topic_summary(broker: Broker, include_internal: bool = True) -> list[dict[str, Any]]:
    defaults = broker.config.topic_defaults()
    out = [_topic(t, defaults) for t in sorted(broker.store.topics.values(), key=lambda t: t.name)]
    if include_internal:
        out.append(_metadata_log(broker))
    return out


def create_admin_app(broker: Broker) -> web.Application:
    app = web.Application()

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "node_id": broker.node_id, "cluster_id": broker.cluster_id})

    async def metrics(_: web.Request) -> web.Response:
        body = generate_latest(broker.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def topics(_: web.Request) -> web.Response:
        return web.json_response({"topics": topic_summary(broker)})

    async def topic(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name == METADATA_TOPIC:
            return web.json_response(_metadata_log(broker))
        found = broker.store.get(name)
        if found is None:
            return web.json_response({"error": "not_found", "message": f"topic {name!r} does not exist"}, status=404)
        return web.json_response(_topic(found, broker.config.topic_defaults()))

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/api/topics", topics)
    app.router.add_get("/api/topics/{name}", topic)
    return app
