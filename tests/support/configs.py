"""DescribeConfigs over the wire (v4, synonyms and documentation included), read into plain
values, and Apache Kafka 4.1's topic configs as a fresh Kafka 4.1 broker describes them: the
same checks then run against this broker and against Kafka itself."""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.static.primitive import i8

from broker.protocol.errors import ErrorCode
from tests.support.kafka_wire import connect

GROUP_RESOURCE = 32

TOPIC, BROKER = 2, 4
# ConfigSource
DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 1, 2, 3
STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 4, 5
# ConfigType
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST, PASSWORD = 1, 2, 3, 5, 6, 7, 9
LONG_MAX = str((1 << 63) - 1)

# name: (default, type, the broker setting Kafka lists as its DEFAULT_CONFIG synonym or None).
# Kafka lists none where it has no broker default (remote storage switches, throttles) or
# derives it from another setting (log.retention.ms from log.retention.hours...).
KAFKA_TOPIC_CONFIGS: dict[str, tuple[str, int, str | None]] = {
    "cleanup.policy": ("delete", LIST, "log.cleanup.policy"),
    "compression.gzip.level": ("-1", INT, "compression.gzip.level"),
    "compression.lz4.level": ("9", INT, "compression.lz4.level"),
    "compression.type": ("producer", STRING, "compression.type"),
    "compression.zstd.level": ("3", INT, "compression.zstd.level"),
    "delete.retention.ms": ("86400000", LONG, "log.cleaner.delete.retention.ms"),
    "file.delete.delay.ms": ("60000", LONG, "log.segment.delete.delay.ms"),
    "flush.messages": (LONG_MAX, LONG, "log.flush.interval.messages"),
    "flush.ms": (LONG_MAX, LONG, None),
    "follower.replication.throttled.replicas": ("", LIST, None),
    "index.interval.bytes": ("4096", INT, "log.index.interval.bytes"),
    "leader.replication.throttled.replicas": ("", LIST, None),
    "local.retention.bytes": ("-2", LONG, "log.local.retention.bytes"),
    "local.retention.ms": ("-2", LONG, "log.local.retention.ms"),
    "max.compaction.lag.ms": (LONG_MAX, LONG, "log.cleaner.max.compaction.lag.ms"),
    "max.message.bytes": ("1048588", INT, "message.max.bytes"),
    "message.timestamp.after.max.ms": ("3600000", LONG, "log.message.timestamp.after.max.ms"),
    "message.timestamp.before.max.ms": (LONG_MAX, LONG, "log.message.timestamp.before.max.ms"),
    "message.timestamp.type": ("CreateTime", STRING, "log.message.timestamp.type"),
    "min.cleanable.dirty.ratio": ("0.5", DOUBLE, "log.cleaner.min.cleanable.ratio"),
    "min.compaction.lag.ms": ("0", LONG, "log.cleaner.min.compaction.lag.ms"),
    "min.insync.replicas": ("1", INT, "min.insync.replicas"),
    "preallocate": ("false", BOOLEAN, "log.preallocate"),
    "remote.log.copy.disable": ("false", BOOLEAN, None),
    "remote.log.delete.on.disable": ("false", BOOLEAN, None),
    "remote.storage.enable": ("false", BOOLEAN, None),
    "retention.bytes": ("-1", LONG, "log.retention.bytes"),
    "retention.ms": ("604800000", LONG, None),
    "segment.bytes": ("1073741824", INT, "log.segment.bytes"),
    "segment.index.bytes": ("10485760", INT, "log.index.size.max.bytes"),
    "segment.jitter.ms": ("0", LONG, None),
    "segment.ms": ("604800000", LONG, None),
    "unclean.leader.election.enable": ("false", BOOLEAN, "unclean.leader.election.enable"),
}

# Topic configs Kafka 4.0 removed: unknown to Kafka 4.1, so INVALID_CONFIG.
REMOVED_IN_KAFKA_4 = ("message.downconversion.enable", "message.timestamp.difference.max.ms", "message.format.version")


# Validation as Kafka 4.1's (each a topic's whole set of overrides).
ACCEPTED = [
    {"remote.storage.enable": "false"},
    {"local.retention.ms": "999999999999", "retention.ms": "1000"},  # checked only with tiered storage
    {"local.retention.bytes": "-1"},
    {"remote.log.copy.disable": "true", "remote.log.delete.on.disable": "true"},
    {"preallocate": "True"},
    {"unclean.leader.election.enable": "true"},
    {"compression.gzip.level": "-1", "compression.lz4.level": "17", "compression.zstd.level": "-131072"},
    {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "10"},
    {"segment.index.bytes": "4", "segment.jitter.ms": "0", "flush.messages": "1", "file.delete.delay.ms": "0"},
    {"retention.bytes": "-5"},
    {"cleanup.policy": ""},
]
REFUSED = [
    {"remote.storage.enable": "true"},
    {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
    {"max.compaction.lag.ms": "0"},
    {"compression.gzip.level": "0"},
    {"compression.gzip.level": "10"},
    {"compression.lz4.level": "18"},
    {"compression.zstd.level": "-131073"},
    {"compression.zstd.level": "23"},
    {"local.retention.ms": "-3"},
    {"local.retention.bytes": "-3"},
    {"preallocate": "yes"},
    {"segment.index.bytes": "3"},
    {"segment.jitter.ms": "-1"},
    {"flush.messages": "0"},
    {"file.delete.delay.ms": "-1"},
    *({name: "1"} for name in REMOVED_IN_KAFKA_4),
]


@dataclass(frozen=True)
class Described:
    value: str | None
    source: int
    read_only: bool
    sensitive: bool
    config_type: int
    synonyms: list[tuple[str, str | None, int]]
    documentation: str | None


def describe(
    bootstrap: str,
    resource_type: int,
    name: str,
    keys: tuple[str, ...] | None = None,
    *,
    synonyms: bool = True,
) -> tuple[int, dict[str, Described]]:
    """(error code, configs by name) of one resource."""
    with connect(bootstrap) as conn:
        response = conn.request(
            DescribeConfigsRequest(
                resources=(
                    DescribeConfigsResource(
                        resource_type=i8(resource_type), resource_name=name, configuration_keys=keys
                    ),
                ),
                include_synonyms=synonyms,
                include_documentation=True,
            )
        )
    (result,) = response.results
    return int(result.error_code.value), {
        c.name: Described(
            c.value,
            int(c.config_source),
            c.read_only,
            c.is_sensitive,
            int(c.config_type),
            [(s.name, s.value, int(s.source)) for s in c.synonyms],
            c.documentation,
        )
        for c in result.configs
    }


def set_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    """Set a group's configs (IncrementalAlterConfigs SET on the GROUP resource), as
    `kafka-configs --entity-type groups --alter --add-config` does."""
    with connect(bootstrap) as conn:
        response = conn.request(
            IncrementalAlterConfigsRequest(
                resources=(
                    AlterConfigsResource(
                        resource_type=i8(GROUP_RESOURCE),
                        resource_name=group,
                        configs=tuple(
                            AlterableConfig(name=n, config_operation=i8(0), value=v) for n, v in configs.items()
                        ),
                    ),
                ),
                validate_only=False,
            )
        )
    result = response.responses[0]
    assert result.error_code == ErrorCode.none, result
