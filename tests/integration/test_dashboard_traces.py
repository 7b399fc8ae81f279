"""The dashboard and traces, on a real broker, registry, logs service and HTTP servers: the
snapshot tells the page where a trace is shown (DASHBOARD_TRACES_URL, Zipkin's UI page of a
trace) or that there is no viewer; the page's "logs of this trace" is the logs service's
trace_id filter through the dashboard's tail, every line carrying its trace id."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

from aiokafka import AIOKafkaProducer

from services.logs.app import create_app as create_logs_app
from services.logs.config import LOG_TOPICS, LogsConfig
from tests.integration.test_dashboard import Cluster, cluster, dashboard, producer
from tests.support.kafka_clients import create_topic
from tests.support.services import serve_app
from tests.support.sse import read_sse

__all__ = ["cluster"]  # the module's broker and registry, used by name

TRACE_A = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACE_B = "0af7651916cd43dd8448eb211c80319c"


async def test_the_snapshot_says_where_the_trace_viewer_shows_a_trace_or_that_there_is_none(
    cluster: Cluster, tmp_path: Path
) -> None:
    async with dashboard(cluster.bootstrap, cluster.registry_url, tmp_path) as dash:
        assert (await dash.snapshot())["trace_link"] is None
    async with dashboard(
        cluster.bootstrap, cluster.registry_url, tmp_path, traces_url="http://127.0.0.1:9411/"
    ) as dash:
        snap = await dash.snapshot()
        assert snap["trace_link"] == "http://127.0.0.1:9411/zipkin/traces/{trace_id}"
        assert snap["trace_link"].replace("{trace_id}", TRACE_A) == f"http://127.0.0.1:9411/zipkin/traces/{TRACE_A}"


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


async def test_the_tail_of_one_trace_through_the_dashboard_has_only_its_lines_each_with_its_trace_id(
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
    )
    async with serve_app(create_logs_app(logs_config)) as (logs_url, _), producer(cluster.bootstrap) as p:
        await _line(p, "orders", "order created", TRACE_A)
        await _line(p, "otp", "code sent", TRACE_B)
        await _line(p, "orders", "untraced", None)
        async with dashboard(
            cluster.bootstrap, cluster.registry_url, tmp_path, logs_url=logs_url, traces_url="http://zipkin:9411"
        ) as dash:
            async with dash.session.get(dash.url + "/api/logs/tail?trace_id=NOT-A-TRACE") as bad:
                assert bad.status == 422  # the logs service's own answer, passed through
                assert (await bad.json())["details"]["fields"] == {
                    "trace_id": "must be a trace id: 32 lowercase hexadecimal digits"
                }
            response = await dash.session.get(dash.url + f"/api/logs/tail?trace_id={TRACE_A}&backlog=5")
            assert response.status == 200
            backlog = await read_sse(response, 1)
            assert [(e["data"]["event"], e["data"]["trace_id"]) for e in backlog] == [("order created", TRACE_A)]
            await _line(p, "otp", "other trace", TRACE_B)
            await _line(p, "notify", "order mail sent", TRACE_A)
            live = await read_sse(response, 1)
            assert [(e["data"]["service"], e["data"]["trace_id"]) for e in live] == [("notify", TRACE_A)]
            response.close()
