"""The console tools' Kafka requests that librdkafka has no API for (share groups, transactions),
sent through an aiokafka admin client's connections with the dashboard's kio message classes.

The tools' client is confluent-kafka (streamshop/clients.py); librdkafka neither exposes these
admin APIs nor sends a request it does not know, so this module, and only it, opens aiokafka
connections for the tools (docs/adr/020-one-kafka-client-per-role.md).  `-X` takes the same
librdkafka settings as the other tools: those that say how to connect are translated, the
others tune librdkafka alone and are left to it.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import IncompatibleBrokerVersion, KafkaError

from contracts.kafka_security import KafkaSecurity
from streamshop.clients import CLIENT_ID, CommandError, parse_pairs

__all__ = ["UNSUPPORTED", "aiokafka_kwargs", "node_ids", "run"]

T = TypeVar("T")

# What a request raises when the broker does not implement its API (or no version we speak).
UNSUPPORTED: tuple[type[Exception], ...] = (IncompatibleBrokerVersion, NotImplementedError)

# librdkafka's -X settings that say how to connect -> KafkaSecurity's fields.
_SECURITY = {
    "security.protocol": "protocol",
    "sasl.mechanism": "mechanism",
    "sasl.mechanisms": "mechanism",
    "sasl.username": "username",
    "sasl.password": "password",
    "ssl.ca.location": "cafile",
    "ssl.certificate.location": "certfile",
    "ssl.key.location": "keyfile",
    "ssl.key.password": "key_password",
}
_PATHS = {"cafile", "certfile", "keyfile"}


def aiokafka_kwargs(bootstrap: str, extra: Sequence[str]) -> dict[str, Any]:
    """aiokafka's keyword arguments for the cluster at `bootstrap` with the `-X` settings."""
    values: dict[str, Any] = {}
    settings = parse_pairs(extra, "-X")
    for key, value in settings.items():
        field = _SECURITY.get(key)
        if field is not None:
            values[field] = Path(value) if field in _PATHS else value.upper() if field == "protocol" else value
    try:
        security = KafkaSecurity(**values)
    except ValueError as e:
        raise CommandError(str(e)) from None
    kwargs: dict[str, Any] = {"bootstrap_servers": bootstrap, "client_id": CLIENT_ID, **security.aiokafka_kwargs()}
    if "client.id" in settings:
        kwargs["client_id"] = settings["client.id"]
    check_hostname = settings.get("ssl.endpoint.identification.algorithm", "https").lower() == "https"
    if "ssl_context" in kwargs and not check_hostname:
        kwargs["ssl_context"].check_hostname = False
    return kwargs


def run(args: argparse.Namespace, what: str, work: Callable[[Any], Awaitable[T]]) -> T:
    """`work(admin)` with an aiokafka admin client connected to `args.bootstrap`; a KafkaError
    or no answer within `args.timeout` is a CommandError naming `what`."""

    async def connected() -> T:
        admin = AIOKafkaAdminClient(
            **aiokafka_kwargs(args.bootstrap, args.client_config), request_timeout_ms=int(args.timeout * 1000)
        )
        try:
            await admin.start()
            return await work(admin)
        finally:
            await admin.close()

    try:
        return asyncio.run(asyncio.wait_for(connected(), args.timeout))
    except KafkaError as e:
        raise CommandError(f"{what}: {type(e).__name__}: {e}") from None
    except TimeoutError:
        raise CommandError(f"{what}: no answer within {args.timeout:g} s") from None


def node_ids(admin: Any) -> list[int]:
    """The brokers of the cluster the admin client is connected to."""
    return sorted(broker.nodeId for broker in admin._client.cluster.brokers())
