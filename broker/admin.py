"""The broker's admin HTTP API (aiohttp): health, Prometheus metrics, topics, groups.

    GET /healthz               {"status": "ok", "node_id", "cluster_id"}; 503 with "log_dir_offline"
                               once an I/O error took the log directory offline
    GET /metrics               Prometheus text format (see broker/metrics.py)
    GET /api/topics            {"topics": [topic, ...]}, the cluster metadata log last
    GET /api/topics/{name}     one topic; 404 {"error": "not_found", "message"} if unknown
    GET /api/groups            {"groups": [group summary, ...]} by group id
    GET /api/groups/{id}       one group in detail; 404 {"error": "not_found", "message"} if unknown

A topic is {name, id, internal, configs (effective), overrides (set on the topic),
size_bytes, partitions: [{partition, log_start_offset, log_end_offset, high_watermark,
size_bytes, segments}]}.

A group summary is {group, state, protocol_type, protocol, member_count, lag (total of the
known lags)}; the detail adds members: [{member_id, client_id, host, group_instance_id,
assignment: {topic: [partition, ...]} (null if it does not decode)}] and partitions:
[{topic, partition, committed_offset, log_end_offset, lag, member_id (its owner)}] for
every partition with a committed offset or an owner, and committer (the note a job that
commits without joining leaves in its offsets' metadata, contracts/commit_note.py) — the same record as
`streamshop groups describe --json`.  The log end offset is the high watermark, as
ListOffsets reports it; lag is log end offset minus committed offset, null while either
is unknown.  Assignments are reported only while the group is Stable, as DescribeGroups
does.  A share group (type "share") has, per partition, start_offset (the first record it is
not done with), log_end_offset, in_flight (records its members hold locked) and lag (the
records it is not done with: they finish out of order).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from broker.coordinator.consumer_group import ConsumerGroup
from broker.coordinator.consumer_protocol import assignment_partitions
from broker.coordinator.coordinator import CommittedOffset
from broker.coordinator.group import Group, GroupState
from broker.core import Broker
from broker.log.partition_log import PartitionLog
from broker.metadata import METADATA_TOPIC, Topic
from contracts import commit_note


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


def _members(group: Group | None) -> list[dict[str, Any]]:
    if group is None:
        return []
    stable = group.state == GroupState.STABLE
    out = []
    for m in sorted(group.members.values(), key=lambda m: m.member_id):
        assignment: dict[str, list[int]] | None = {}
        if stable and m.assignment:
            decoded = assignment_partitions(m.assignment) if group.protocol_type == "consumer" else None
            assignment = None if decoded is None else {t: sorted(ps) for t, ps in sorted(decoded.items())}
        out.append(
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "host": m.client_host,
                "group_instance_id": m.group_instance_id,
                "assignment": assignment,
            }
        )
    return out


def _consumer_members(broker: Broker, group: ConsumerGroup) -> list[dict[str, Any]]:
    names = {topic.topic_id: name for name, topic in broker.store.topics.items()}
    return [
        {
            "member_id": m.member_id,
            "client_id": m.client_id,
            "host": m.client_host,
            "group_instance_id": m.instance_id,
            "assignment": {
                names[t]: sorted(ps)
                for t, ps in sorted(m.assigned.items(), key=lambda tp: names.get(tp[0], ""))
                if t in names
            },
        }
        for m in sorted(group.members.values(), key=lambda m: m.member_id)
    ]


def _share_detail(broker: Broker, group_id: str) -> dict[str, Any]:
    """A share group: its members, and per partition its start offset (the first record it is
    not done with), the records its members hold locked, and its lag: the records it is not
    done with (they finish out of order, so not simply log end minus start)."""
    group = broker.shares.groups[group_id]
    names = {topic.topic_id: name for name, topic in broker.store.topics.items()}
    members = [
        {
            "member_id": m.member_id,
            "client_id": m.client_id,
            "host": m.client_host,
            "group_instance_id": None,
            "assignment": {
                names[t]: sorted(ps) for t, ps in sorted(m.assigned.items(), key=lambda tp: str(tp[0])) if t in names
            },
        }
        for m in sorted(group.members.values(), key=lambda m: m.member_id)
    ]
    partitions = []
    for (gid, topic_id, index), part in broker.shares.partitions.items():
        name = names.get(topic_id)
        plog = broker.store.partition_log(name, index) if gid == group_id and name is not None else None
        if name is None or plog is None:
            continue
        partitions.append(
            {
                "topic": name,
                "partition": index,
                "start_offset": part.start,
                "log_end_offset": plog.high_watermark,
                "lag": part.backlog(plog.high_watermark),
                "in_flight": part.in_flight(),
            }
        )
    partitions.sort(key=lambda p: (p["topic"], p["partition"]))
    return {
        "group": group_id,
        "state": group.state.value,
        "type": "share",
        "protocol_type": "share",
        "protocol": "simple",
        "member_count": len(members),
        "lag": sum(p["lag"] for p in partitions),
        "members": members,
        "partitions": partitions,
        "committer": None,
    }


def group_detail(broker: Broker, group_id: str) -> dict[str, Any] | None:
    """One group with its members and per-partition offsets and lag; None if unknown."""
    if group_id in broker.shares.groups:
        return _share_detail(broker, group_id)
    coordinator = broker.coordinator
    group = coordinator.groups.get(group_id)
    consumer_group = coordinator.consumer.groups.get(group_id)
    if group is not None and group.state == GroupState.DEAD:
        group = None
    if group is None and consumer_group is None and group_id not in coordinator.offsets:
        return None
    members = _members(group) if consumer_group is None else _consumer_members(broker, consumer_group)
    owners = {
        (topic, partition): m["member_id"]
        for m in members
        for topic, partitions in (m["assignment"] or {}).items()
        for partition in partitions
    }
    committed = coordinator.committed(group_id)
    partitions = []
    for topic, partition in sorted(set(committed) | set(owners)):
        entry = committed.get((topic, partition))
        plog = broker.store.partition_log(topic, partition)
        offset = entry.offset if entry is not None else None
        end = plog.high_watermark if plog is not None else None
        partitions.append(
            {
                "topic": topic,
                "partition": partition,
                "committed_offset": offset,
                "log_end_offset": end,
                "lag": end - offset if end is not None and offset is not None else None,
                "member_id": owners.get((topic, partition)),
            }
        )
    return {
        "group": group_id,
        # A group known only by its committed offsets is Empty, as ListGroups reports it.
        "state": _state(group, consumer_group),
        "type": "consumer" if consumer_group is not None else "classic",
        "protocol_type": "consumer" if consumer_group is not None else (group.protocol_type if group else None) or "",
        "protocol": coordinator.consumer.assignor_of(consumer_group)
        if consumer_group is not None
        else (group.protocol_name if group is not None else None) or "",
        "member_count": len(members),
        "lag": sum(p["lag"] for p in partitions if p["lag"] is not None),
        "members": members,
        "partitions": partitions,
        # A job that commits without joining (the analytics job), from its commits' metadata.
        "committer": _committer(committed.values()),
    }


def _state(group: Group | None, consumer_group: ConsumerGroup | None) -> str:
    if consumer_group is not None:
        return consumer_group.state.value
    return group.state.value if group is not None else GroupState.EMPTY.value


def _committer(entries: Iterable[CommittedOffset]) -> dict[str, object] | None:
    note = commit_note.newest(e.metadata for e in entries)
    return None if note is None else note.to_json(int(time.time() * 1000))


def group_summary(broker: Broker) -> list[dict[str, Any]]:
    out = []
    for group_id in sorted({*broker.coordinator.known_groups(), *broker.shares.groups}):
        detail = group_detail(broker, group_id)
        if detail is not None:
            out.append({k: v for k, v in detail.items() if k not in ("members", "partitions", "committer")})
    return out


def create_admin_app(broker: Broker) -> web.Application:
    app = web.Application()

    async def healthz(_: web.Request) -> web.Response:
        body: dict[str, object] = {"status": "ok", "node_id": broker.node_id, "cluster_id": broker.cluster_id}
        log_dir = broker.log_dir
        if log_dir.offline:
            # Alive, but it can neither take nor serve records until restarted.
            body.update(status="log_dir_offline", log_dir=log_dir.path, error=log_dir.error)
            return web.json_response(body, status=503)
        return web.json_response(body)

    async def metrics(_: web.Request) -> web.Response:
        # Per-partition gauges make a scrape of a broker with 100,000 partitions take
        # seconds of formatting: done in a thread, the event loop keeps serving clients.
        # The collectors only read; a dict resized by the loop meanwhile is read again.
        loop = asyncio.get_running_loop()
        for attempt in range(3):
            try:
                body = await loop.run_in_executor(None, generate_latest, broker.metrics.registry)
                break
            except RuntimeError:
                if attempt == 2:
                    raise
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

    async def groups(_: web.Request) -> web.Response:
        return web.json_response({"groups": group_summary(broker)})

    async def group(request: web.Request) -> web.Response:
        group_id = request.match_info["group_id"]
        found = group_detail(broker, group_id)
        if found is None:
            return web.json_response(
                {"error": "not_found", "message": f"group {group_id!r} does not exist"}, status=404
            )
        return web.json_response(found)

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/api/topics", topics)
    app.router.add_get("/api/topics/{name}", topic)
    app.router.add_get("/api/groups", groups)
    app.router.add_get("/api/groups/{group_id:.+}", group)  # group ids may contain "/"
    return app
