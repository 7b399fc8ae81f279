"""`create_app(config)`: the otp service as an aiohttp application.

Startup opens the SQLite database (migrating it), connects to the schema registry and the
broker, creates the ``otp.requests`` topic when it is missing, and starts the outbox relay.
Cleanup stops the relay (finishing its batch), the producer, the registry client and the
database, in that order.  Without ``OTP_HASH_KEY`` a random hash key is drawn per process (codes
then do not survive a restart, and several instances cannot share requests); without
``OTP_SEAL_KEY`` events carry ``sealed_code: null``.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from datetime import timedelta

from aiohttp import web

from kit.logging import get_logger
from kit.openapi import serve_openapi
from schemas.catalog import default_catalog
from services.common.app import create_service_app, default_checks
from services.common.log_shipper import LogShipper
from services.common.outbox_service import RELAY_KEY, ensure_topic, open_outbox_service
from services.otp import handlers
from services.otp.config import OtpConfig
from services.otp.openapi import OTP_OPENAPI
from services.otp.store import OtpPolicy, OtpStore

__all__ = ["RELAY_KEY", "create_app", "ensure_topic", "policy_of"]

log = get_logger(__name__)


def policy_of(config: OtpConfig) -> OtpPolicy:
    """The store's keys and limits; `ConfigError` for an invalid setting."""
    config.check()
    if config.hash_key:
        hash_key = config.hash_key.encode()
    else:
        log.warning("OTP_HASH_KEY is not set: using a random key for this process")
        hash_key = secrets.token_bytes(32)
    return OtpPolicy(
        hash_key=hash_key,
        ttl=timedelta(seconds=config.code_ttl),
        max_attempts=config.max_attempts,
        rate_limit_max=config.rate_limit_max,
        rate_limit_window=timedelta(seconds=config.rate_limit_window),
        seal_key=config.seal_key_bytes(),
        seal_key_id=config.seal_key_id,
        destination_limit_max=config.rate_limit_destination_max,
        client_limit_max=config.rate_limit_client_max,
        client_exempt=config.client_exempt_networks(),
    )


def create_app(config: OtpConfig, *, shipper: LogShipper | None = None) -> web.Application:
    """The otp app: routes, readiness (broker, registry, database) and its lifecycle; with a
    `shipper`, the service's own logs go to the logs.* topics through its producer."""
    policy = policy_of(config)
    app = create_service_app(config, checks=default_checks(config), shipper=shipper)
    catalog = default_catalog()

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        log.info("otp starting", sealed=policy.seal_key is not None, **config.as_log_dict())
        async with open_outbox_service(
            config,
            catalog,
            lambda db, outbox: OtpStore(
                db, outbox, policy, topic=config.topic, service=config.service_name, instance=config.instance_id
            ),
            shipper=shipper,
        ) as service:
            app[handlers.STORE_KEY] = service.store
            app[RELAY_KEY] = service.relay
            yield

    app.cleanup_ctx.append(lifecycle)
    app.router.add_post("/otp", handlers.request_otp)
    app.router.add_post("/otp/verify", handlers.verify_otp)
    serve_openapi(app, OTP_OPENAPI)
    return app
