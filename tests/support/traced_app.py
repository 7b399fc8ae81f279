"""`python -m tests.support.traced_app`: the kit's base app served as a service is (its SDK set up
from the ``OTEL_*`` variables it is started with), with ``GET /work`` answering ``ok`` inside
one span of its own besides the request's.  Settings from ``TRACED_APP_*``
(``TRACED_APP_PORT=0``: any free port); it prints the kit's ready line once it listens."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from aiohttp import web
from opentelemetry import trace

from kit.app import create_base_app
from services.common.config import ServiceConfig
from services.common.log_shipper import LogShipper
from services.common.runner import run_service

_tracer = trace.get_tracer("tests.traced_app")


@dataclass(frozen=True, repr=False)
class TracedAppConfig(ServiceConfig):
    service_name: ClassVar[str] = "traced-app"
    log_shipping: bool = False  # no broker here


async def work(request: web.Request) -> web.Response:
    with _tracer.start_as_current_span("work"):
        return web.Response(text="ok")


def create_app(config: TracedAppConfig, shipper: LogShipper | None) -> web.Application:
    app = create_base_app(config)
    app.router.add_get("/work", work)
    return app


if __name__ == "__main__":
    raise SystemExit(run_service(TracedAppConfig, create_app))
