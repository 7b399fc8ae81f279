"""`python -m tests.support.ready_app`: the smallest service run by `run_service`, for the runner
tests.  Its startup announces ``smtp=127.0.0.1:2525`` on the ready line through
`READY_FIELDS_KEY`; its cleanup prints ``cleaned up`` (stdout, flushed).  Settings from
``READY_DEMO_*`` (``READY_DEMO_PORT=0``: any free port)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import ClassVar

from aiohttp import web

from kit.app import create_base_app
from kit.process import READY_FIELDS_KEY
from services.common.config import ServiceConfig
from services.common.log_shipper import LogShipper
from services.common.runner import run_service


@dataclass(frozen=True, repr=False)
class ReadyDemoConfig(ServiceConfig):
    service_name: ClassVar[str] = "ready-demo"
    log_shipping: bool = False  # no broker here


def create_app(config: ReadyDemoConfig, shipper: LogShipper | None) -> web.Application:
    app = create_base_app(config)

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        app[READY_FIELDS_KEY] = {"smtp": "127.0.0.1:2525"}  # as a catcher would, once its server listens
        yield
        print("cleaned up", flush=True)

    app.cleanup_ctx.append(lifecycle)
    return app


if __name__ == "__main__":
    raise SystemExit(run_service(ReadyDemoConfig, create_app))
