"""The catcher and the OTP senders served in-process for tests (real sockets on 127.0.0.1 with
OS-assigned ports), plus helpers to read and decode ``otp.deliveries`` and ``otp.requests.dlq``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiokafka.structs import ConsumerRecord

from schemas.client import RegistryClient
from schemas.serde import AvroDeserializer
from services.catcher.app import SMTP_PORT_KEY
from services.catcher.app import create_app as create_catcher
from services.catcher.config import CatcherConfig
from services.notify.app import RUNNER_KEY, SENDER_KEY
from services.notify.app import create_app as create_sender
from services.notify.config import SenderConfig
from services.notify.sender import Sender
from tests.support.kit_processes import CATALOG, consume_all
from tests.support.services import ServedApp, serve_app

__all__ = [
    "Catcher",
    "Delivery",
    "SenderApp",
    "Served",
    "decode_deliveries",
    "parse_metrics",
    "read_topic",
    "serve_catcher",
    "serve_sender",
    "status_server",
    "wait_for",
]


async def wait_for(
    condition: Callable[[], bool | Awaitable[bool]], within: float = 15, what: str = "condition"
) -> None:
    """Poll a condition (plain or async) until true."""
    deadline = time.monotonic() + within
    while True:
        result = condition()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within} s waiting for {what}")
        await asyncio.sleep(0.05)


class Served(ServedApp):
    """A served app with JSON helpers."""

    async def call(self, method: str, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        async with self.session.request(method, self.url + path, json=body, **kw) as r:
            return r.status, await r.json()

    async def get(self, path: str) -> Any:
        status, body = await self.call("GET", path)
        assert status == 200, body
        return body


@dataclass
class Catcher:
    http: Served
    smtp_port: int

    @property
    def url(self) -> str:
        return self.http.url

    async def mails(self, to: str | None = None) -> list[dict[str, Any]]:
        return list((await self.http.get("/messages" + (f"?to={to}" if to else "")))["items"])

    async def sms(self) -> list[dict[str, Any]]:
        return list((await self.http.get("/sms"))["items"])

    async def metrics(self) -> dict[str, float]:
        async with self.http.session.get(self.url + "/metrics") as r:
            return parse_metrics(await r.text())


def parse_metrics(text: str) -> dict[str, float]:
    """``name{labels} value`` lines of a Prometheus exposition, by their full sample name."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


@asynccontextmanager
async def serve_catcher(**overrides: Any) -> AsyncIterator[Catcher]:
    config = CatcherConfig(**{"listen": "127.0.0.1", "smtp_port": 0, "log_shipping": False, **overrides})
    app = create_catcher(config)
    async with serve_app(app) as (url, session):
        yield Catcher(Served(url, app, session), app[SMTP_PORT_KEY])


@dataclass
class SenderApp:
    http: Served

    @property
    def app(self) -> web.Application:
        return self.http.app

    @property
    def sender(self) -> Sender:
        return self.app[SENDER_KEY]

    async def caught_up(self) -> bool:
        """The runner holds partitions and has nothing left to read."""
        runner = self.app[RUNNER_KEY]
        if not runner.assignment():
            return False
        lag = await runner.lag()
        return bool(lag) and not any(lag.values())


@asynccontextmanager
async def serve_sender(config: SenderConfig) -> AsyncIterator[SenderApp]:
    app = create_sender(config)
    async with serve_app(app) as (url, session):
        yield SenderApp(Served(url, app, session))


@dataclass(frozen=True)
class Delivery:
    """A decoded record of otp.deliveries."""

    key: str
    record_name: str
    value: dict[str, Any]
    headers: dict[str, bytes]
    raw: bytes


async def read_topic(
    bootstrap: str, topic: str, *, count: int, within: float = 10, partitions: int = 6
) -> list[ConsumerRecord[bytes, bytes]]:
    """Records of `topic` from the start until `count` arrived or `within` passed (then what came)."""
    got = await consume_all(bootstrap, topic, count, within=within, partitions=partitions)
    return sorted(got, key=lambda r: (r.partition, r.offset))


async def decode_deliveries(registry_url: str, records: list[ConsumerRecord[bytes, bytes]]) -> list[Delivery]:
    async with RegistryClient(registry_url) as registry:
        de = AvroDeserializer(registry, reader_schemas=CATALOG.schemas.values())
        out = []
        for r in records:
            assert r.key is not None
            assert r.value is not None
            decoded = await de.deserialize(r.value)
            value = dict(decoded.value)
            value["request_id"] = str(value["request_id"])
            out.append(
                Delivery(r.key.decode(), decoded.record_name.rsplit(".", 1)[-1], value, dict(r.headers), r.value)
            )
        return out


@asynccontextmanager
async def status_server(status: int, body: Any = None) -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A real HTTP server answering every POST /sms with `status` (and JSON `body`); yields its URL
    and the requests it received (headers and JSON)."""
    seen: list[dict[str, Any]] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append({"headers": dict(request.headers), "json": await request.json()})
        return web.json_response(body, status=status)

    app = web.Application()
    app.router.add_post("/sms", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}/sms", seen
    finally:
        await runner.cleanup()
