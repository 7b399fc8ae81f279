"""One order's trace across HTTP, the outbox and Kafka, with OpenTelemetry's SDK: the orders
service on a real HTTP server, a real broker (in a thread) and registry, the outbox relay and a
consumer runner, their spans recorded in memory (tests/support/spans.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

from registry.app import RunningRegistry
from services.common.consumer import ConsumerRunner, Message, PermanentError
from services.orders.app import create_app
from services.orders.config import OrdersConfig
from tests.support.harness import ThreadBroker
from tests.support.kit_processes import kit
from tests.support.services import serve_app
from tests.support.spans import hex_trace, named, recorder

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
ORDER = {"customer_id": "cust-1", "currency": "EUR", "items": [{"sku": "sku-1", "quantity": 1, "unit_price": "1.50"}]}


async def _until(condition: Callable[[], bool], within: float = 30) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


def _parent(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def _id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


async def test_an_orders_trace_runs_from_the_http_request_through_the_outbox_to_each_consumer(
    tmp_path: Path, broker: ThreadBroker, running_registry: RunningRegistry
) -> None:
    """POST /orders (with a caller's traceparent) -> SERVER span, child of the caller's; the
    relay's ``send orders`` PRODUCER span, later and from the row, child of the server span; a
    consumer's ``process orders`` CONSUMER span, child of the send span and current while the
    handler runs (its log lines and the events it causes are in the same trace); a record it
    dead-letters goes to the DLQ with the producer's context unchanged."""
    spans = recorder()
    config = OrdersConfig(
        bootstrap_servers=broker.bootstrap,
        registry_url=running_registry.url,
        database_path=tmp_path / "orders.db",
        relay_poll_interval=0.2,
        log_shipping=False,
    )
    seen_in_handler: list[str] = []
    async with serve_app(create_app(config)) as (url, session), kit(broker.bootstrap, running_registry.url) as tools:
        headers = {"traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01", "X-Request-ID": "req-7"}
        async with session.post(url + "/orders", json=ORDER, headers=headers) as r:
            assert r.status == 201

        async def handler(message: Message) -> None:
            from kit.tracing import current_context, kafka_headers

            ctx = current_context()
            assert ctx is not None
            seen_in_handler.append(ctx.trace.trace_id)
            assert ctx.request_id == "req-7"  # the request's id travels with its trace
            assert dict(kafka_headers())["traceparent"].decode().split("-")[1] == TRACE_ID
            raise PermanentError("dead-letter it, to see what the DLQ record carries")

        runner = ConsumerRunner(
            broker.bootstrap,
            "tracing-test",
            ["orders"],
            handler,
            deserializer=tools.deserializer,
            producer=tools.producer,
        )
        await runner.start()
        try:
            await _until(lambda: runner.stats.dead_lettered == 1)
        finally:
            await runner.stop()

    finished = spans.get_finished_spans()
    (server,) = named(finished, "POST /orders")
    (send,) = named(finished, "send orders")
    (process,) = named(finished, "process orders")
    (dlq,) = named(finished, "send orders.dlq")
    assert server.kind == SpanKind.SERVER
    assert _parent(server) == int(CALLER_SPAN, 16)
    assert send.kind == SpanKind.PRODUCER
    assert _parent(send) == _id(server)  # from the outbox row, on the relay's task
    assert process.kind == SpanKind.CONSUMER
    assert _parent(process) == _id(send)
    assert _parent(dlq) == _id(process)
    assert {hex_trace(s) for s in (server, send, process, dlq)} == {TRACE_ID}
    assert seen_in_handler == [TRACE_ID]
    assert send.attributes is not None
    assert send.attributes["messaging.destination.name"] == "orders"
    assert send.attributes["messaging.kafka.offset"] == 0
    assert process.attributes is not None
    assert process.attributes["messaging.consumer.group.name"] == "tracing-test"
    assert process.attributes["messaging.kafka.offset"] == 0
    assert server.attributes is not None
    assert server.attributes["http.response.status_code"] == 201
    # The request's transaction is one CLIENT span, its wait for the group commit included; the
    # relay's polls of the outbox, outside any request, start no trace of their own.
    (write,) = named(finished, "write orders.db")
    assert write.kind == SpanKind.CLIENT
    assert _parent(write) == _id(server)
    assert write.attributes is not None
    assert write.attributes["db.system.name"] == "sqlite"
    assert write.attributes["db.operation.name"] == "write"
    database = [s for s in finished if s.attributes and "db.system.name" in s.attributes]
    assert all(hex_trace(s) == TRACE_ID for s in database), [(s.name, hex_trace(s)) for s in database]
