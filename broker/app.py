"""Run a broker: storage, the Kafka listener and the admin HTTP API, until a signal."""

from __future__ import annotations

import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass

import structlog
from aiohttp import web

from broker.admin import create_admin_app
from broker.clock import Clock
from broker.config import BrokerConfig
from broker.core import Broker
from broker.listeners import ListenerError
from broker.lock import DataDirInUse, lock_data_dir
from broker.protocol import record_walk
from broker.server import KafkaServer
from broker.settings import BrokerSettings
from kit import process

log = structlog.get_logger(__name__)


@dataclass
class RunningBroker:
    broker: Broker
    server: KafkaServer
    admin: web.AppRunner | None
    admin_port: int | None

    @property
    def port(self) -> int:
        return self.server.port

    async def stop(self) -> None:
        await self.server.stop()
        if self.admin is not None:
            await self.admin.cleanup()
        await self.broker.stop()


async def start_broker(config: BrokerConfig, clock: Clock | None = None) -> RunningBroker:
    broker = Broker(config, clock)
    await broker.start()
    server = KafkaServer(broker)
    await server.start()
    listeners = broker.security.listeners
    bound = {listener.name: (listener.host, server.ports[listener.name]) for listener in listeners}
    broker.endpoints = broker.security.advertised(bound)
    broker.advertised = broker.endpoints[broker.first_listener]
    admin_runner = None
    admin_port = None
    if config.admin_listen is not None:
        admin_runner = web.AppRunner(create_admin_app(broker), access_log=None)
        await admin_runner.setup()
        site = web.TCPSite(admin_runner, config.admin_listen[0], config.admin_listen[1])
        await site.start()
        admin_port = int(admin_runner.addresses[0][1])
    return RunningBroker(broker, server, admin_runner, admin_port)


async def serve(config: BrokerConfig) -> None:
    lock_data_dir(config.data_dir)  # held until the process exits
    running = await start_broker(config)
    stop = process.stop_event()
    # A write past the file-size limit must fail with EFBIG (answered KAFKA_STORAGE_ERROR),
    # not kill the process.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    host, port = running.broker.advertised
    endpoints = running.broker.endpoints
    others = (
        " listeners " + ",".join(f"{name}={h}:{p}" for name, (h, p) in endpoints.items()) if len(endpoints) > 1 else ""
    )
    admin = f" admin http://{config.admin_listen[0]}:{running.admin_port}" if config.admin_listen else ""
    process.settle_heap()
    # The one line scripts wait for.
    print(f"streamshop broker ready on {host}:{port}{admin} data {config.data_dir}{others}", flush=True)
    log.info(
        "broker ready",
        listen=f"{host}:{port}",
        admin_port=running.admin_port,
        data_dir=str(config.data_dir),
        record_walk="compiled" if record_walk.COMPILED else "python (built without a C compiler: slower produce)",
    )
    await stop.wait()
    log.info("shutting down")
    await running.stop()
    sys.stdout.flush()


def main(overrides: Mapping[str, object] | None = None, extra_settings: Mapping[str, str] | None = None) -> int:
    """`streamshop broker`: settings from ``BROKER_*`` (flags in `overrides`, Kafka settings in
    `extra_settings` over ``BROKER_SET``); serve until SIGINT/SIGTERM.  2 when a setting, the
    listeners or TLS cannot be used, or the data directory is in use."""

    def body() -> int:
        settings = process.load(BrokerSettings, overrides)
        config = settings.to_config(extra_settings)
        process.start_logging(settings, "broker")
        try:
            process.run(serve(config))
        except (DataDirInUse, ListenerError) as e:
            print(f"streamshop broker: {e}", file=sys.stderr)
            return 2
        return 0

    return process.main("streamshop broker", body)
