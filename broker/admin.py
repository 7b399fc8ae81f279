"""The broker's admin HTTP API (aiohttp): health, Prometheus metrics, topics."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from broker.core import Broker
from broker.metadata import METADATA_TOPIC


def topic_summary(broker: Broker, include_internal: bool = True) -> list[dict[str, Any]]:
    out = []
    topics = list(broker.store.topics.values())
    for topic in sorted(topics, key=lambda t: t.name):
        defaults = broker.config.topic_defaults()
        out.append(
            {
                "name": topic.name,
                "id": str(topic.topic_id),
                "internal": topic.internal,
                "configs": {**defaults, **topic.configs},
                "overrides": dict(topic.configs),
                "partitions": [
                    {
                        "partition": plog.partition,
                        "log_start_offset": plog.log_start_offset,
                        "log_end_offset": plog.next_offset,
                        "high_watermark": plog.high_watermark,
                        "size_bytes": plog.size_bytes,
                        "segments": len(plog.segments),
                    }
                    for plog in topic.logs
                ],
            }
        )
    if include_internal:
        meta = broker.store.meta_log
        out.append(
            {
                "name": METADATA_TOPIC,
                "id": None,
                "internal": True,
                "configs": {},
                "overrides": {},
                "partitions": [
                    {
                        "partition": 0,
                        "log_start_offset": meta.log_start_offset,
                        "log_end_offset": meta.next_offset,
                        "high_watermark": meta.high_watermark,
                        "size_bytes": meta.size_bytes,
                        "segments": len(meta.segments),
                    }
                ],
            }
        )
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
        for entry in topic_summary(broker):
            if entry["name"] == name:
                return web.json_response(entry)
        return web.json_response({"error": "not_found", "message": f"topic {name!r} does not exist"}, status=404)

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/api/topics", topics)
    app.router.add_get("/api/topics/{name}", topic)
    return app
