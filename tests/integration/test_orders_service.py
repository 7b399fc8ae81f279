"""The orders service on a real HTTP server (127.0.0.1, OS port), a real broker (in a thread),
a real schema registry and a real SQLite file: the HTTP contract, idempotency keys, the status
state machine, and the OrderCreated / OrderStatusChanged events the outbox relay publishes."""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import structlog

from kit.logging import configure_logging
from schemas.client import RegistryClient
from schemas.serde import AvroDeserializer, Decoded
from services.common.db_sqlite import SqliteDatabase
from services.common.log_shipper import LogShipper
from services.common.outbox import Outbox
from services.orders.app import RELAY_KEY, create_app
from services.orders.config import OrdersConfig
from services.orders.domain import CREATE_ORDER, NewOrder
from services.orders.store import OrderStore
from tests.support.harness import ThreadBroker
from tests.support.kit_processes import CATALOG, consume_all
from tests.support.registry import ThreadRegistry
from tests.support.services import ServedApp, serve_app

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
ORDER = {
    "customer_id": "cust-1",
    "currency": "EUR",
    "items": [
        {"sku": "sku-1", "quantity": 2, "unit_price": "12.50"},
        {"sku": "sku-2", "quantity": 1, "unit_price": "0.995"},
    ],
}


class Service(ServedApp):
    async def call(self, method: str, path: str, body: Any = None, **headers: str) -> tuple[int, Any, Any]:
        async with self.session.request(method, self.url + path, json=body, headers=headers) as r:
            return r.status, await r.json(), r.headers


@pytest.fixture
def config(tmp_path: Path, broker: ThreadBroker, shared_registry: ThreadRegistry) -> OrdersConfig:
    return OrdersConfig(
        bootstrap_servers=broker.bootstrap,
        registry_url=shared_registry.url,
        database_path=tmp_path / "orders.db",
        relay_poll_interval=0.2,
        log_shipping=False,
    )


@asynccontextmanager
async def serve(config: OrdersConfig) -> AsyncIterator[Service]:
    app = create_app(config)
    async with serve_app(app) as (url, session):
        yield Service(url, app, session)


@pytest.fixture
async def service(config: OrdersConfig) -> AsyncIterator[Service]:
    async with serve(config) as s:
        yield s


async def decoded_events(config: OrdersConfig, count: int, within: float = 10) -> list[tuple[str, Decoded, Any]]:
    """(key, decoded value, headers) of the first `count` records of `orders`, by partition then offset."""
    records = await consume_all(config.bootstrap_servers, "orders", count, within)
    async with RegistryClient(config.registry_url) as registry:
        de = AvroDeserializer(registry, reader_schemas=CATALOG.schemas.values())
        out = []
        for r in sorted(records, key=lambda r: (r.partition, r.offset)):
            assert r.key is not None
            assert r.value is not None
            out.append((r.key.decode(), await de.deserialize(r.value), dict(r.headers)))
        return out


async def test_create_returns_201_with_total_and_is_found_by_id_and_by_customer(service: Service) -> None:
    """POST /orders answers 201 with status created and the total (2 x 12.50 + 0.995 = 25.995 ->
    "26.00" at 2 places); GET by id returns it, GET by customer lists the customer's orders
    newest first; an unknown id is a 404 JSON error; the topic has 6 partitions."""
    status, body, headers = await service.call("POST", "/orders", ORDER)
    assert status == 201, body
    assert body["status"] == "created"
    assert body["total"] == "26.00"
    assert body["currency"] == "EUR"
    assert [i["amount"] for i in body["items"]] == ["25.00", "1.00"]
    assert body["allowed_transitions"] == ["paid", "cancelled"]
    assert headers["Location"] == f"/orders/{body['order_id']}"

    status, got, _ = await service.call("GET", f"/orders/{body['order_id']}")
    assert status == 200
    assert got == body

    second = (await service.call("POST", "/orders", {**ORDER, "items": ORDER["items"][:1]}))[1]
    await service.call("POST", "/orders", {**ORDER, "customer_id": "someone-else"})
    status, listing, _ = await service.call("GET", "/orders?customer_id=cust-1")
    assert status == 200
    assert [o["order_id"] for o in listing["items"]] == [second["order_id"], body["order_id"]]
    assert (await service.call("GET", "/orders?customer_id=cust-1&limit=1"))[1]["count"] == 1

    for missing in ("00000000-0000-4000-8000-000000000000", "not-a-uuid"):
        status, err, _ = await service.call("GET", f"/orders/{missing}")
        assert status == 404
        assert err["error"] == "not_found"

    await service.drained()


async def test_orders_topic_is_created_with_six_partitions(service: Service, config: OrdersConfig) -> None:
    """Starting the service creates topic `orders` with 6 partitions when it is missing."""
    assert await service.app[RELAY_KEY].producer.partitions_for("orders") == set(range(config.topic_partitions))
    assert config.topic_partitions == 6


async def test_invalid_input_is_422_with_field_paths(service: Service) -> None:
    """Every wrong field is reported at once under its path; a non-JSON body is 415; an invalid
    status body and unknown query parameters are 422 too."""
    bad = {
        "customer_id": "",
        "currency": "eur",
        "items": [{"sku": "a", "quantity": 0, "unit_price": 12.5}, {"quantity": True, "unit_price": "1.23456"}],
        "coupon": "x",
    }
    status, err, _ = await service.call("POST", "/orders", bad)
    assert status == 422
    assert err["error"] == "validation_failed"
    assert err["details"]["fields"] == {
        "customer_id": "must not be empty",
        "currency": "must be an upper-case ISO 4217 code such as EUR",
        "items[0].quantity": "must be at least 1",
        "items[0].unit_price": 'must be a decimal string such as "12.50"',
        "items[1].sku": "is required",
        "items[1].quantity": "must be an integer",
        "items[1].unit_price": "must have at most 4 decimal places",
        "coupon": "is not an allowed field",
    }
    for code in ("ZZQ", "XAU", "XTS"):  # not a currency; gold; the testing code
        status, err, _ = await service.call("POST", "/orders", {**ORDER, "currency": code})
        assert (status, err["details"]["fields"]) == (422, {"currency": "is not an ISO 4217 currency code"}), code
    for code in ("JPY", "XOF", "CHF"):
        assert (await service.call("POST", "/orders", {**ORDER, "currency": code}))[0] == 201, code
    status, err, _ = await service.call("POST", "/orders", {**ORDER, "items": []})
    assert status == 422
    assert err["details"]["fields"] == {"items": "must not be empty"}

    async with service.session.post(service.url + "/orders", data="x", headers={"Content-Type": "text/plain"}) as r:
        assert r.status == 415

    order_id = (await service.call("POST", "/orders", ORDER))[1]["order_id"]
    status, err, _ = await service.call("POST", f"/orders/{order_id}/status", {"status": "lost"})
    assert status == 422
    assert err["details"]["fields"] == {"status": "must be one of paid, shipped, delivered, cancelled"}
    status, err, _ = await service.call("GET", "/orders?customer=cust-1&limit=0")
    assert status == 422
    assert err["details"]["fields"] == {
        "customer_id": "is required",
        "customer": "is not an allowed field",
        "limit": "must be a positive integer",
    }
    await service.drained()


async def test_idempotency_key_retry_returns_same_order_and_publishes_one_event(
    service: Service, config: OrdersConfig
) -> None:
    """A retry with the same Idempotency-Key and body returns the same order with the same 201 and
    publishes nothing (one OrderCreated in the topic); the same key with another body is 422
    idempotency_key_reused and creates nothing."""
    results = await asyncio.gather(
        *(service.call("POST", "/orders", ORDER, **{"Idempotency-Key": "k-1"}) for _ in range(5))
    )
    assert {status for status, _, _ in results} == {201}
    assert len({body["order_id"] for _, body, _ in results}) == 1
    assert sum(1 for _, _, h in results if h.get("Idempotent-Replayed") == "true") == 4

    changed = {**ORDER, "items": [{"sku": "sku-1", "quantity": 3, "unit_price": "12.50"}]}
    status, err, _ = await service.call("POST", "/orders", changed, **{"Idempotency-Key": "k-1"})
    assert status == 422
    assert err["error"] == "idempotency_key_reused"
    assert err["details"]["order_id"] == results[0][1]["order_id"]

    status, _, _ = await service.call("POST", "/orders", ORDER, **{"Idempotency-Key": "  "})
    assert status == 422

    await service.drained()
    events = await decoded_events(config, 2, within=2)
    assert [(key, d.record_name.rsplit(".", 1)[-1]) for key, d, _ in events] == [
        (results[0][1]["order_id"], "OrderCreated")
    ]
    listing = (await service.call("GET", "/orders?customer_id=cust-1"))[1]
    assert listing["count"] == 1


async def test_status_state_machine_allows_the_lifecycle_and_refuses_other_moves(service: Service) -> None:
    """created -> paid -> shipped -> delivered succeeds; cancel works before shipping only;
    a refused move is 409 invalid_transition naming the allowed statuses; unknown order 404."""
    order_id = (await service.call("POST", "/orders", ORDER))[1]["order_id"]
    status, err, _ = await service.call("POST", f"/orders/{order_id}/status", {"status": "shipped"})
    assert status == 409
    assert err["error"] == "invalid_transition"
    assert err["details"] == {"from": "created", "to": "shipped", "allowed": ["paid", "cancelled"]}

    for step in ("paid", "shipped", "delivered"):
        status, body, _ = await service.call("POST", f"/orders/{order_id}/status", {"status": step})
        assert status == 200
        assert body["status"] == step
    assert [(h["from"], h["to"]) for h in body["history"]] == [
        (None, "created"),
        ("created", "paid"),
        ("paid", "shipped"),
        ("shipped", "delivered"),
    ]
    status, err, _ = await service.call("POST", f"/orders/{order_id}/status", {"status": "cancelled"})
    assert status == 409
    assert err["details"]["allowed"] == []

    shipped = (await service.call("POST", "/orders", ORDER))[1]["order_id"]
    for step in ("paid", "shipped"):
        await service.call("POST", f"/orders/{shipped}/status", {"status": step})
    status, err, _ = await service.call("POST", f"/orders/{shipped}/status", {"status": "cancelled"})
    assert status == 409
    assert err["details"]["allowed"] == ["delivered"]

    paid = (await service.call("POST", "/orders", ORDER))[1]["order_id"]
    await service.call("POST", f"/orders/{paid}/status", {"status": "paid"})
    status, body, _ = await service.call(
        "POST", f"/orders/{paid}/status", {"status": "cancelled", "reason": "changed mind"}
    )
    assert status == 200
    assert body["status"] == "cancelled"
    assert body["history"][-1]["reason"] == "changed mind"

    status, err, _ = await service.call(
        "POST", "/orders/00000000-0000-4000-8000-000000000000/status", {"status": "paid"}
    )
    assert status == 404
    await service.drained()


async def test_events_decode_with_order_key_envelope_and_trace(service: Service, config: OrdersConfig) -> None:
    """The relay publishes OrderCreated then OrderStatusChanged keyed by the order id (same
    partition, in order); they decode with AvroDeserializer; money is Decimal(18,4); the
    envelope names the producer and carries the request's trace id, which also travels in the
    traceparent and x-request-id headers."""
    headers = {"traceparent": TRACEPARENT, "X-Request-ID": "req-42"}
    order_id = (await service.call("POST", "/orders", ORDER, **headers))[1]["order_id"]
    await service.call("POST", f"/orders/{order_id}/status", {"status": "paid", "reason": "card"}, **headers)
    await service.drained()
    events = await decoded_events(config, 2)
    assert [key for key, _, _ in events] == [order_id, order_id]
    (_, created, h1), (_, changed, h2) = events
    assert created.record_name == "io.streamshop.events.orders.OrderCreated"
    assert changed.record_name == "io.streamshop.events.orders.OrderStatusChanged"
    value = created.value
    assert str(value["order_id"]) == order_id
    assert value["customer_id"] == "cust-1"
    assert value["currency"] == "EUR"
    assert value["total"] == Decimal("25.9950")
    assert [(i["sku"], i["quantity"], i["unit_price"]) for i in value["items"]] == [
        ("sku-1", 2, Decimal("12.5000")),
        ("sku-2", 1, Decimal("0.9950")),
    ]
    assert (changed.value["from_status"], changed.value["to_status"], changed.value["reason"]) == (
        "created",
        "paid",
        "card",
    )
    for decoded, hdrs in ((created, h1), (changed, h2)):
        envelope = decoded.value["envelope"]
        assert envelope["trace_id"] == TRACE_ID
        assert envelope["producer"] == {"service": "orders", "instance": config.instance_id}
        assert hdrs["traceparent"].decode().split("-")[1] == TRACE_ID
        assert hdrs["x-request-id"] == b"req-42"
        assert hdrs["event_id"].decode() == str(envelope["event_id"])


async def test_restart_keeps_orders_and_publishes_pending_outbox_rows(config: OrdersConfig) -> None:
    """Orders survive a restart (SQLite); an order committed while no relay ran (a crash before
    publishing) has its pending OrderCreated published by the next start."""
    async with serve(config) as first:
        kept = (await first.call("POST", "/orders", ORDER))[1]
        await first.drained()

    db = await SqliteDatabase(config.database_path).open()
    try:
        store = OrderStore(db, Outbox(db, CATALOG.schema), topic="orders", service="orders", instance="offline")
        await store.setup()
        pending, _ = await store.create(NewOrder.from_cleaned(CREATE_ORDER.validate(ORDER)))
        assert await store.outbox.pending_count() == 1
    finally:
        await db.close()

    async with serve(config) as second:
        status, body, _ = await second.call("GET", f"/orders/{kept['order_id']}")
        assert status == 200
        assert body == kept
        assert (await second.call("GET", f"/orders/{pending.id}"))[0] == 200
        await second.drained()
    events = await decoded_events(config, 2)
    assert sorted(key for key, _, _ in events) == sorted([kept["order_id"], pending.id])


async def test_readyz_checks_broker_registry_and_database(service: Service) -> None:
    """/readyz is 200 with the broker, registry and database checks all passing; /healthz is live."""
    status, body, _ = await service.call("GET", "/readyz")
    assert status == 200
    assert set(body["checks"]) == {"broker", "registry", "database"}
    assert all(c["ok"] for c in body["checks"].values())
    assert (await service.call("GET", "/healthz"))[0] == 200


async def test_with_log_shipping_the_services_own_access_log_reaches_logs_ingress(config: OrdersConfig) -> None:
    """ORDERS_LOG_SHIPPING: the shipper is started on the service's own producer, and the
    access log line of a request lands on logs.ingress keyed by the instance."""
    shipper = LogShipper(
        service="orders",
        instance=config.instance_id,
        flush_interval=0.05,
        exclude_loggers=("services.common.log_shipper", "aiokafka", "kafka", "broker", "schemas"),
    )
    configure_logging(stream=io.StringIO(), fmt="json", tap=shipper)
    try:
        async with serve_app(create_app(config, shipper=shipper)) as (base_url, session):
            url = f"{base_url}/orders/00000000-0000-4000-8000-000000000000"
            async with session.get(url, headers={"X-Request-ID": "req-orders"}) as r:
                assert r.status == 404  # health checks are kept out of the access log; this is not
            deadline = asyncio.get_running_loop().time() + 10
            while shipper.shipped == 0 and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.05)
    finally:
        root = logging.getLogger()
        for h in [h for h in root.handlers if getattr(h, "_streamshop_handler", False)]:
            root.removeHandler(h)
        structlog.reset_defaults()
    records = await consume_all(config.bootstrap_servers, "logs.ingress", 1, 10)
    async with RegistryClient(config.registry_url) as registry:  # shipped as Avro LogRecords
        decoded = [await AvroDeserializer(registry).deserialize(r.value or b"") for r in records]
    assert {d.record_name for d in decoded} == {"io.streamshop.events.logs.LogRecord"}
    lines = [d.value for d in decoded]
    assert any(line["request_id"] == "req-orders" and line["service"] == "orders" for line in lines), lines
    assert {r.key for r in records} == {None}  # one line per request: spread, not keyed by instance
