"""The dashboard and traces, on a real broker, registry, logs service and HTTP servers: the
snapshot tells the page where a trace is shown (DASHBOARD_TRACES_URL, Zipkin's UI page of a
trace) or that there is no viewer; the page's "logs of this trace" is the logs service's
trace_id filter through the dashboard's tail, every line carrying its trace id; the newest
orders, OTP requests and dead letters are listed with their trace."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from kit.ports import free_port
from services.dashboard.traced import TracedRecords
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


def _traceparent(trace_id: str) -> bytes:
    return f"00-{trace_id}-00f067aa0ba902b7-01".encode()


async def test_the_newest_orders_otp_requests_and_dead_letters_come_with_their_trace_and_its_link(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Each record of `orders`, `otp.requests` and a `.dlq` topic is listed with the trace id of
    its traceparent header and the viewer's page of it; a header that is no traceparent gives no
    trace (and no link), and a topic of another kind is not listed."""
    hostile = b'00-"><img src=x onerror=alert(1)>-00f067aa0ba902b7-01'
    for topic in ("orders", "otp.requests", "orders.dlq", "payments"):
        create_topic(cluster.bootstrap, topic, 2)
    async with producer(cluster.bootstrap) as p:
        await p.send_and_wait("orders", b"\x00avro", key=b"order-1", headers=[("traceparent", _traceparent(TRACE_A))])
        await p.send_and_wait(
            "otp.requests", b"\x00avro", key=b"otp-1", headers=[("traceparent", _traceparent(TRACE_B))]
        )
        dead = [
            ("traceparent", _traceparent(TRACE_A)),
            ("dlq.error.class", b"SerdeError"),
            ("dlq.original.topic", b"orders"),
        ]
        await p.send_and_wait("orders.dlq", b"garbage", key=b"order-1", headers=dead)
        await p.send_and_wait("orders.dlq", b"garbage", key=b"order-2", headers=[("traceparent", hostile)])
        await p.send_and_wait("orders", b"\x00avro", key=b"order-3")  # no header: no trace
        await p.send_and_wait("payments", b"x", key=b"p", headers=[("traceparent", _traceparent(TRACE_A))])
        async with dashboard(
            cluster.bootstrap, cluster.registry_url, tmp_path, traces_url="http://zipkin:9411/"
        ) as dash:
            deadline = time.monotonic() + 30
            while True:
                status, body = await dash.get("/api/traced")
                assert status == 200, body
                if len(body["items"]) >= 5 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.1)
    assert body["error"] is None
    found = {(i["topic"], i["key"]): i for i in body["items"]}
    assert set(found) == {
        ("orders", "order-1"),
        ("otp.requests", "otp-1"),
        ("orders.dlq", "order-1"),
        ("orders.dlq", "order-2"),
        ("orders", "order-3"),
    }
    link = "http://zipkin:9411/zipkin/traces/"
    summary = {k: (i["kind"], i["trace_id"], i["trace_url"], i["original_topic"], i["error"]) for k, i in found.items()}
    assert summary == {
        ("orders", "order-1"): ("order", TRACE_A, link + TRACE_A, None, None),
        ("otp.requests", "otp-1"): ("otp request", TRACE_B, link + TRACE_B, None, None),
        ("orders.dlq", "order-1"): ("dead letter", TRACE_A, link + TRACE_A, "orders", "SerdeError"),
        ("orders.dlq", "order-2"): ("dead letter", None, None, None, None),
        ("orders", "order-3"): ("order", None, None, None, None),
    }
    stamps = [i["timestamp"] for i in body["items"]]
    assert stamps == sorted(stamps, reverse=True)  # newest first


async def test_the_list_says_why_when_the_cluster_cannot_be_read_or_does_not_answer() -> None:
    """A read that fails (no broker at the address) or does not end (a server that accepts and
    never answers) is an error beside the items of the last read that worked (none here), never a
    failed or hung request; the next read is tried after `max_age`."""
    nowhere = f"127.0.0.1:{free_port()}"
    topics = {"orders": [0], "payments": [0]}
    refused = TracedRecords(
        lambda: AIOKafkaConsumer(bootstrap_servers=nowhere, group_id=None, request_timeout_ms=2000),
        lambda: topics,
        None,
        max_age=0.0,
    )
    first = await refused.json()
    assert first["items"] == []
    assert str(first["error"]).startswith("the cluster cannot be read: ")
    assert (await refused.json())["error"] is not None  # tried again, failed again

    accepted: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # and never a byte back

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        hung = TracedRecords(
            lambda: AIOKafkaConsumer(bootstrap_servers=f"127.0.0.1:{port}", group_id=None),  # 40 s request timeout
            lambda: topics,
            None,
            max_age=0.0,
            read_timeout=1.0,
        )
        answer = await hung.json()
        # its own bound (asyncio's TimeoutError, no message), not the client's 40 s request timeout
        assert answer == {"items": [], "error": "the cluster cannot be read: TimeoutError: "}
        assert accepted  # it did connect, and waited for an answer
    finally:
        for writer in accepted:
            writer.close()
        server.close()
        await server.wait_closed()
