"""The base app on a real TCP server (127.0.0.1, OS port): health, readiness, metrics, the error
middleware's JSON shape, request ids; and the log shipper delivering to a real broker topic."""

from __future__ import annotations

import io
import json
import logging
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import aiohttp
import pytest
import structlog
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from aiokafka import AIOKafkaProducer

from kit.app import CHECKS_KEY, read_json
from kit.errors import Conflict, NotFound
from kit.logging import configure_logging
from kit.tracing import kafka_headers
from kit.validation import Int, Object, Str
from services.common.app import create_service_app, default_checks
from services.common.config import ServiceConfig
from services.common.log_shipper import LogShipper
from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import aiokafka_consume
from tests.support.registry import registry

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


@dataclass(frozen=True)
class DemoConfig(ServiceConfig):
    service_name: ClassVar[str] = "demo"


ITEM = Object({"sku": Str(min_len=1), "quantity": Int(minimum=1)})


async def ok_check() -> None:
    return None


async def get_item(request: web.Request) -> web.Response:
    if request.match_info["id"] == "missing":
        raise NotFound("no item missing", details={"id": "missing"})
    return web.json_response({"id": request.match_info["id"], "headers": {k: v.decode() for k, v in kafka_headers()}})


async def post_item(request: web.Request) -> web.Response:
    item = ITEM.validate(await read_json(request))
    if item["sku"] == "taken":
        raise Conflict("sku already exists")
    return web.json_response(item, status=201)


async def raw_json(request: web.Request) -> web.Response:
    return web.json_response(await request.json())  # JSONDecodeError reaches the middleware


async def stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse()
    await response.prepare(request)  # headers leave here, inside the handler
    await response.write(b"data: 1\n\n")
    return response


async def crash(request: web.Request) -> web.Response:
    raise RuntimeError("secret-internal-detail /etc/db")


@pytest.fixture
def log_output() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    level = root.level
    out = io.StringIO()
    configure_logging(stream=out, fmt="json", level="debug")
    yield out
    for h in [h for h in root.handlers if getattr(h, "_streamshop_handler", False)]:
        root.removeHandler(h)
    root.setLevel(level)
    structlog.reset_defaults()


def make_app(**kw: Any) -> web.Application:
    config = DemoConfig(client_max_size=kw.pop("client_max_size", 1024))
    app = create_service_app(config, checks=kw.pop("checks", {"ok": ok_check}), **kw)
    app.router.add_get("/items/{id}", get_item)
    app.router.add_post("/items", post_item)
    app.router.add_post("/raw", raw_json)
    app.router.add_get("/crash", crash)
    app.router.add_get("/stream", stream)
    return app


@pytest.fixture
async def client_for() -> AsyncIterator[Callable[..., Any]]:
    clients: list[TestClient[web.Request, web.Application]] = []

    async def make(app: web.Application) -> TestClient[web.Request, web.Application]:
        client = TestClient(TestServer(app, host="127.0.0.1", port=0))
        await client.start_server()
        clients.append(client)
        return client

    yield make
    for c in clients:
        await c.close()


@pytest.fixture
async def client(client_for: Callable[..., Any], log_output: io.StringIO) -> TestClient[web.Request, web.Application]:
    c: TestClient[web.Request, web.Application] = await client_for(make_app())
    return c


Client = TestClient[web.Request, web.Application]


async def error_of(response: aiohttp.ClientResponse) -> dict[str, Any]:
    body: dict[str, Any] = await response.json()
    assert set(body) == {"error", "message", "details"}  # one shape for every error
    return body


# -- health, readiness, metrics --------------------------------------------------------------------


async def test_healthz_answers_while_the_process_lives(client: Client) -> None:
    r = await client.get("/healthz")
    assert r.status == 200
    assert (await r.json())["service"] == "demo"


async def test_readyz_is_200_when_every_check_passes(client: Client) -> None:
    r = await client.get("/readyz")
    assert r.status == 200
    body = await r.json()
    assert body["status"] == "ready"
    assert body["checks"]["ok"]["ok"] is True


async def test_readyz_is_503_naming_failed_and_timed_out_checks(client_for: Callable[..., Any]) -> None:
    async def broken() -> None:
        raise ConnectionError("refused")

    async def hangs() -> None:
        import asyncio

        await asyncio.sleep(10)

    client: Client = await client_for(make_app(checks={"ok": ok_check, "db": broken, "slow": hangs}, check_timeout=0.2))
    r = await client.get("/readyz")
    assert r.status == 503
    body = await error_of(r)
    assert body["error"] == "not_ready"
    assert body["message"] == "not ready: db, slow unreachable"
    checks = body["details"]["checks"]
    assert checks["db"] == {
        "ok": False,
        "error": "ConnectionError: refused",
        "duration_ms": checks["db"]["duration_ms"],
    }
    assert "timed out" in checks["slow"]["error"]
    assert checks["ok"]["ok"] is True


async def test_default_checks_reach_a_real_broker_registry_and_database(
    client_for: Callable[..., Any], broker: ThreadBroker, tmp_path: Path
) -> None:
    db = tmp_path / "demo.db"
    sqlite3.connect(db).close()
    async with registry(broker.bootstrap) as running:
        config = DemoConfig(bootstrap_servers=broker.bootstrap, registry_url=running.url, database_path=db)
        client: Client = await client_for(create_service_app(config, checks=default_checks(config)))
        r = await client.get("/readyz")
        assert r.status == 200, await r.text()
        # Dependencies going away flips readiness, naming each one.
        client.app[CHECKS_KEY].update(
            default_checks(
                DemoConfig(
                    bootstrap_servers="127.0.0.1:1",
                    database_path=tmp_path / "absent.db",
                    registry_url="http://127.0.0.1:1",
                )
            )
        )
        r = await client.get("/readyz")
        assert r.status == 503
        assert (await r.json())["message"] == "not ready: broker, database, registry unreachable"


async def test_metrics_count_requests_by_route_pattern_and_status(client_for: Callable[..., Any]) -> None:
    ship = LogShipper(service="demo", instance="demo-1", capacity=1)
    client: Client = await client_for(make_app(shipper=ship))
    await client.get("/items/a")
    await client.get("/items/b")
    await client.get("/items/missing")
    await client.get("/random/path")
    r = await client.get("/metrics")
    assert r.status == 200
    assert r.content_type == "text/plain"
    text = await r.text()
    assert 'http_requests_total{method="GET",route="/items/{id}",status="200"} 2.0' in text
    assert 'http_requests_total{method="GET",route="/items/{id}",status="404"} 1.0' in text
    assert 'http_requests_total{method="GET",route="unmatched",status="404"} 1.0' in text
    assert 'http_request_duration_seconds_bucket{le="0.1",method="GET",route="/items/{id}",status="200"}' in text
    assert "log_shipper_dropped_total 0.0" in text


async def test_two_apps_in_one_process_keep_separate_metrics(client_for: Callable[..., Any]) -> None:
    first: Client = await client_for(make_app())
    second: Client = await client_for(make_app())
    await first.get("/items/a")
    assert 'route="/items/{id}"' not in await (await second.get("/metrics")).text()


# -- errors ----------------------------------------------------------------------------------------


async def test_validation_errors_are_422_with_field_messages(client: Client) -> None:
    r = await client.post("/items", json={"sku": "", "quantity": 0, "extra": 1})
    assert r.status == 422
    body = await error_of(r)
    assert body["error"] == "validation_failed"
    assert body["details"]["fields"] == {
        "sku": "must not be empty",
        "quantity": "must be at least 1",
        "extra": "is not an allowed field",
    }
    r = await client.post("/items", json={"sku": "a", "quantity": 2})
    assert r.status == 201


async def test_domain_errors_keep_their_status_code_and_details(client: Client) -> None:
    r = await client.get("/items/missing")
    assert r.status == 404
    assert await error_of(r) == {"error": "not_found", "message": "no item missing", "details": {"id": "missing"}}
    r = await client.post("/items", json={"sku": "taken", "quantity": 1})
    assert r.status == 409
    assert (await error_of(r))["error"] == "conflict"


async def test_invalid_json_is_400_whether_read_by_the_helper_or_by_aiohttp(client: Client) -> None:
    headers = {"Content-Type": "application/json"}
    for path in ("/items", "/raw"):
        r = await client.post(path, data=b'{"sku": ', headers=headers)
        assert r.status == 400, path
        body = await error_of(r)
        assert body["error"] == "invalid_json"
        assert body["details"]["line"] == 1
    r = await client.post("/items", data=b"", headers=headers)
    assert (await error_of(r))["message"] == "request body is empty"


HOSTILE_BODIES = {
    "5,000-digit integer": b'{"sku": "a", "quantity": ' + b"9" * 5_000 + b"}",
    "1,200 levels deep": b"[" * 1_200 + b"]" * 1_200,  # past the interpreter's recursion limit
    "100 levels deep": b'{"sku": ' + b"[" * 100 + b"]" * 100 + b"}",
    "lone surrogate": b'{"sku": "\\ud800", "quantity": 1}',
    "lone surrogate key": b'{"\\udfff": 1}',
    "infinite float": b'{"sku": "a", "quantity": 1e999}',
    "NaN": b'{"sku": "a", "quantity": NaN}',
}


@pytest.mark.parametrize("name", sorted(HOSTILE_BODIES))
async def test_bodies_beyond_the_json_bounds_are_400_not_500(
    client_for: Callable[..., Any], log_output: io.StringIO, name: str
) -> None:
    """What used to be 500s in orders, otp and catcher (they all read bodies with read_json)."""
    client: Client = await client_for(make_app(client_max_size=1 << 20))
    r = await client.post("/items", data=HOSTILE_BODIES[name], headers={"Content-Type": "application/json"})
    assert r.status == 400, name
    body = await error_of(r)
    assert body["error"] == "invalid_json"
    r = await client.post("/items", json={"sku": "after", "quantity": 2})  # and it still serves
    assert r.status == 201


async def test_a_body_that_is_not_declared_json_is_415(client: Client) -> None:
    r = await client.post("/items", data=b"sku=a", headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status == 415
    assert (await error_of(r))["error"] == "unsupported_media_type"


async def test_a_body_over_client_max_size_is_413(client: Client) -> None:
    r = await client.post("/items", json={"sku": "x" * 5000, "quantity": 1})
    assert r.status == 413
    body = await error_of(r)
    assert body["error"] == "payload_too_large"
    assert body["details"] == {"max_bytes": 1024}


async def test_unknown_routes_and_methods_are_404_and_405_in_the_same_shape(client: Client) -> None:
    r = await client.get("/nope")
    assert r.status == 404
    assert await error_of(r) == {"error": "not_found", "message": "no route for GET /nope", "details": None}
    r = await client.delete("/items/a")
    assert r.status == 405
    body = await error_of(r)
    assert body["error"] == "method_not_allowed"
    assert body["details"] == {"allowed": ["GET", "HEAD"]}
    assert r.headers["Allow"] == "GET,HEAD"


async def test_unexpected_exceptions_are_500_without_internals_and_logged_with_traceback(
    client: Client, log_output: io.StringIO
) -> None:
    r = await client.get("/crash", headers={"X-Request-ID": "req-crash"})
    assert r.status == 500
    text = await r.text()
    assert "secret-internal-detail" not in text
    assert json.loads(text) == {"error": "internal_error", "message": "internal server error", "details": None}
    assert r.headers["X-Request-ID"] == "req-crash"
    logged = [json.loads(line) for line in log_output.getvalue().splitlines()]
    (error,) = [line for line in logged if line["event"] == "unhandled error"]
    assert error["request_id"] == "req-crash"
    assert "RuntimeError: secret-internal-detail" in error["exception"]


# -- request ids and access log ----------------------------------------------------------------------


async def test_the_request_id_is_echoed_or_generated_and_bound_to_the_access_log(
    client: Client, log_output: io.StringIO
) -> None:
    r = await client.get("/items/a", headers={"X-Request-ID": "req-42"})
    assert r.headers["X-Request-ID"] == "req-42"
    r = await client.get("/items/b")
    generated = r.headers["X-Request-ID"]
    assert len(generated) == 32
    r = await client.get("/nope", headers={"X-Request-ID": "req-404"})
    assert r.headers["X-Request-ID"] == "req-404"  # error responses too
    r = await client.get("/stream", headers={"X-Request-ID": "req-sse"})
    assert r.headers["X-Request-ID"] == "req-sse"  # and streamed ones
    assert await r.read() == b"data: 1\n\n"
    access = [json.loads(x) for x in log_output.getvalue().splitlines() if '"http request"' in x]
    assert [(a["request_id"], a["status"], a["logger"]) for a in access] == [
        ("req-42", 200, "services.common.access"),
        (generated, 200, "services.common.access"),
        ("req-404", 404, "services.common.access"),
        ("req-sse", 200, "services.common.access"),
    ]
    assert access[0]["path"] == "/items/a"
    assert access[0]["duration_ms"] >= 0


async def test_probes_and_the_quiet_paths_an_app_names_are_access_logged_at_debug_unless_they_fail(
    client_for: Callable[..., Any], log_output: io.StringIO
) -> None:
    client = await client_for(make_app(quiet_paths=("/items/polled",)))
    for path in ("/healthz", "/items/polled", "/items/other", "/crash"):
        await client.get(path)
    access = [json.loads(x) for x in log_output.getvalue().splitlines() if '"http request"' in x]
    assert [(a["path"], a["status"], a["level"]) for a in access] == [
        ("/healthz", 200, "debug"),
        ("/items/polled", 200, "debug"),
        ("/items/other", 200, "info"),
        ("/crash", 500, "error"),
    ]


async def test_answers_by_design_are_access_logged_as_info_and_server_errors_as_errors(
    client_for: Callable[..., Any], log_output: io.StringIO
) -> None:
    client = await client_for(make_app(quiet_paths=("/items/missing",)))
    await client.get("/items/missing")  # 404, on a quiet path too
    await client.post("/items", json={"sku": ""})  # 422
    await client.get("/crash")  # 500
    access = [json.loads(x) for x in log_output.getvalue().splitlines() if '"http request"' in x]
    # a 404 or a 422 is the API answering as designed: nothing for `?level=warning` to show
    assert [(a["status"], a["level"]) for a in access] == [(404, "info"), (422, "info"), (500, "error")]


async def test_events_caused_by_a_request_carry_its_traceparent_and_request_id(client: Client) -> None:
    incoming = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
    r = await client.get("/items/a", headers={"traceparent": incoming, "X-Request-ID": "req-t"})
    headers = (await r.json())["headers"]
    assert headers["x-request-id"] == "req-t"
    version, trace_id, span_id, flags = headers["traceparent"].split("-")
    assert (version, trace_id, flags) == ("00", TRACE_ID, "01")
    assert span_id != "00f067aa0ba902b7"


# -- the shipper on a real broker --------------------------------------------------------------------


class AioKafkaSender:
    """The shipper's producer protocol over a plain aiokafka producer."""

    def __init__(self, producer: AIOKafkaProducer) -> None:
        self.producer = producer

    async def send(self, topic: str, key: bytes | None, value: bytes, headers: Sequence[tuple[str, bytes]]) -> Any:
        return await self.producer.send(topic, value=value, key=key, headers=list(headers))


async def test_the_shipper_delivers_service_logs_to_a_real_logs_topic(
    client_for: Callable[..., Any], broker: ThreadBroker
) -> None:
    ship = LogShipper(
        service="demo",
        instance="demo-1",
        flush_interval=0.05,
        # The in-process test broker logs through the same structlog setup: keep its lines out.
        exclude_loggers=("services.common.log_shipper", "aiokafka", "kafka", "broker", "schemas"),
    )
    configure_logging(stream=io.StringIO(), fmt="json", tap=ship)
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        await ship.start(AioKafkaSender(producer))
        client: Client = await client_for(make_app(shipper=ship))
        await client.get("/items/a", headers={"X-Request-ID": "req-ship"})
        structlog.get_logger("services.demo.api").info("order created", order_id="o-1")
        await ship.stop()
    finally:
        await producer.stop()
        root = logging.getLogger()
        for h in [h for h in root.handlers if getattr(h, "_streamshop_handler", False)]:
            root.removeHandler(h)
        structlog.reset_defaults()
    # Topics are auto-created with the broker's default partition count; application lines are
    # keyed by instance, access lines (one per request) are not.
    everywhere = {(topic, p): 0 for topic in ("logs.ingress", "logs.app") for p in range(3)}
    got = await aiokafka_consume(broker.bootstrap, everywhere, count=2, within=10)
    ingress = [g for g in got if g.topic == "logs.ingress"]
    app_logs = [g for g in got if g.topic == "logs.app"]
    assert [g.key for g in ingress + app_logs] == [None, b"demo-1"]
    access = json.loads(ingress[0].value or b"")
    assert access["request_id"] == "req-ship"
    assert access["fields"]["path"] == "/items/a"
    assert access["envelope"]["producer"] == {"service": "demo", "instance": "demo-1"}
    line = json.loads(app_logs[0].value or b"")
    assert (line["event"], line["fields"]["order_id"], line["level"]) == ("order created", "o-1", "info")
    assert (ship.shipped, ship.dropped, ship.failed) == (2, 0, 0)
