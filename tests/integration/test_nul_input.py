"""U+0000 in a query string or a JSON body is refused with 422 by every service, the same on
SQLite and PostgreSQL (which can store it in neither text nor jsonb): orders list and create,
OTP request and verify, logs search and tail, each on a real HTTP server, a real broker and
registry, and a real database of each backend."""

from __future__ import annotations

import base64
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from services.logs.app import create_app as create_logs
from services.logs.config import LOG_TOPICS, LogsConfig
from services.orders.app import create_app as create_orders
from services.orders.config import OrdersConfig
from services.otp.app import create_app as create_otp
from services.otp.config import OtpConfig
from streamshop import postgres
from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import create_topic
from tests.support.postgres import fresh_database
from tests.support.registry import ThreadRegistry
from tests.support.services import serve_app

NUL_MESSAGE = "must not contain a NUL character (U+0000)"
ORDER = {"customer_id": "cust-1", "currency": "EUR", "items": [{"sku": "sku-1", "quantity": 1, "unit_price": "1.00"}]}
OTP = {"user_id": "user-1", "channels": ["sms"], "phone": "+15550100"}


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], dict[str, Any]]:
    """The database settings of one service on the backend under test."""
    if request.param == "sqlite":
        return lambda name: {"database_path": tmp_path / f"{name}.db"}
    server: postgres.Server = request.getfixturevalue("pg_server")
    return lambda name: {"database_url": fresh_database(server, name)}


@pytest.fixture
async def urls(
    broker: ThreadBroker, shared_registry: ThreadRegistry, database: Callable[[str], dict[str, Any]]
) -> AsyncIterator[dict[str, str]]:
    """The base URLs of the orders, otp and logs services, each on its own database."""
    for topic in LOG_TOPICS:
        create_topic(broker.bootstrap, topic, 1)
    common: dict[str, Any] = {
        "bootstrap_servers": broker.bootstrap,
        "registry_url": shared_registry.url,
        "log_shipping": False,
    }
    apps = {
        "orders": create_orders(OrdersConfig(**common, **database("orders"), relay_poll_interval=0.2)),
        "otp": create_otp(
            OtpConfig(
                **common,
                **database("otp"),
                relay_poll_interval=0.2,
                hash_key="test-hash-key",
                seal_key=base64.b64encode(secrets.token_bytes(32)).decode(),
            )
        ),
        "logs": create_logs(LogsConfig(**common, **database("logs"), commit_interval_ms=100)),
    }
    async with AsyncExitStack() as stack:
        served = {name: (await stack.enter_async_context(serve_app(app)))[0] for name, app in apps.items()}
        yield served


async def _call(method: str, url: str, *, body: Any = None, params: dict[str, str] | None = None) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, json=body, params=params) as response,
    ):
        return response.status, await response.json(content_type=None)


def _refused(answer: tuple[int, Any], field: str) -> None:
    status, body = answer
    assert status == 422, body
    assert body["error"] == "validation_failed"
    assert body["details"]["fields"] == {field: NUL_MESSAGE}


async def test_orders_refuse_nul_in_the_list_query_and_the_created_order(urls: dict[str, str]) -> None:
    orders = urls["orders"] + "/orders"
    _refused(await _call("GET", orders, params={"customer_id": "cust\x001"}), "customer_id")
    _refused(await _call("POST", orders, body={**ORDER, "customer_id": "cust\x001"}), "customer_id")
    item = {**ORDER["items"][0], "sku": "sku\x00"}  # type: ignore[dict-item]
    _refused(await _call("POST", orders, body={**ORDER, "items": [item]}), "items[0].sku")
    status, listing = await _call("GET", orders, params={"customer_id": "cust-1"})
    assert status == 200
    assert listing["items"] == []  # nothing was created


async def test_otp_refuses_nul_in_a_request_and_in_a_verification(urls: dict[str, str]) -> None:
    otp = urls["otp"] + "/otp"
    _refused(await _call("POST", otp, body={**OTP, "user_id": "user\x001"}), "user_id")
    _refused(await _call("POST", otp, body={**OTP, "phone": "+1555\x000100"}), "phone")
    verify = {"request_id": "00000000-0000-4000-8000-00000000000\x00", "code": "123456"}
    _refused(await _call("POST", otp + "/verify", body=verify), "request_id")
    _refused(await _call("POST", otp + "/verify", body={**verify, "request_id": "x", "code": "12\x003"}), "code")


async def test_logs_refuse_nul_in_search_and_tail_parameters(urls: dict[str, str]) -> None:
    logs = urls["logs"] + "/logs"
    _refused(await _call("GET", logs, params={"q": "needle\x00"}), "q")
    _refused(await _call("GET", logs, params={"service": "orders\x00"}), "service")
    _refused(await _call("GET", logs + "/tail", params={"q": "needle\x00"}), "q")
    status, found = await _call("GET", logs, params={"q": "needle"})
    assert status == 200, found
