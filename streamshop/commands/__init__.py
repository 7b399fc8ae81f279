"""The `streamshop` command's subcommands, one module per family, registered in the order of
`COMMANDS`.  Each module's `register(sub)` adds its parsers; implementations are imported when a
command runs, so `streamshop broker` never loads Spark or the services' Kafka clients."""

from __future__ import annotations

from streamshop.commands import (
    analytics,
    broker,
    groups,
    kafka_cluster,
    postgres,
    probe,
    records,
    registry,
    roundtrip,
    secure,
    services,
    settings,
    spark_cluster,
    stack,
    topics,
    transactions,
)

__all__ = ["COMMANDS"]

COMMANDS = (
    broker,
    topics,
    groups,
    transactions,
    records,
    roundtrip,
    stack,
    registry,
    services,
    analytics,
    kafka_cluster,
    spark_cluster,
    postgres,
    secure,
    probe,
    settings,
)
