"""Broker settings, by Kafka's names, and the broker's side of the topic configs.

Every setting is given at start (`--set` or `BROKER_SET`) and holds until the broker stops:
there are no dynamic broker configs.  Each setting records whether Kafka can change it at
runtime (per broker or cluster-wide), which DescribeConfigs reports as its `read_only` flag.
The topic configs, with their broker-level defaults, are in `broker.topic_configs`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.config_values import BOOLEAN, INT, INT_MAX, LIST, LONG, LONG_MAX, PASSWORD, STRING, boolean, choice, integer
from broker.listeners import DEFAULT_PROTOCOL_MAP, ListenerError, parse_endpoints, parse_protocol_map
from broker.topic_configs import (
    COMPRESSION_CODES,
    TOPIC_CONFIGS,
    LogConfig,
    TopicConfigDef,
    check_combination,
    validate_topic_configs,
)
from kit.settings import ConfigError

__all__ = [
    "BROKER_SETTINGS",
    "COMPRESSION_CODES",
    "DURABILITY_MODES",
    "TOPIC_CONFIGS",
    "BrokerConfig",
    "BrokerSettingDef",
    "LogConfig",
    "TopicConfigDef",
    "check_combination",
    "validate_topic_configs",
    "validate_topic_name",
]


def _assignors(raw: str) -> tuple[str, ...]:
    """group.consumer.assignors: the server-side assignors members may choose, the first
    the default (Kafka also takes its assignors' class names; here, their names)."""
    names = tuple(n.strip() for n in raw.split(",") if n.strip())
    unknown = [n for n in names if n not in ("uniform", "range")]
    if not names or unknown:
        raise ConfigError(f"{raw!r} must list assignors among uniform, range")
    return names


def _host_counts(raw: str) -> dict[str, int]:
    """Kafka's `max.connections.per.ip.overrides`: `host:count,host:count`."""
    out: dict[str, int] = {}
    for item in (p.strip() for p in raw.split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        if not sep or not host:
            raise ConfigError(f"{item!r} is not host:count")
        out[host] = integer(0, INT_MAX)(count)
    return out


def _listeners(raw: str) -> str:
    try:
        parse_endpoints(raw)
    except ListenerError as e:
        raise ConfigError(str(e)) from None
    return raw


def _protocol_map(raw: str) -> str:
    try:
        parse_protocol_map(raw)
    except ListenerError as e:
        raise ConfigError(str(e)) from None
    return raw


def _mechanisms(raw: str) -> list[str]:
    names = [m.strip().upper() for m in raw.split(",") if m.strip()]
    unknown = [m for m in names if m not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")]
    if unknown:
        raise ConfigError(f"unsupported SASL mechanism {unknown[0]!r} (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)")
    return names


@dataclass(frozen=True, slots=True)
class BrokerSettingDef:
    name: str
    default: str
    parse: Callable[[str], Any]
    config_type: int = STRING  # DescribeConfigs' type, as Kafka's (PASSWORD: never described)
    # Kafka can change it at runtime (DynamicBrokerConfig): DescribeConfigs says read_only=false.
    dynamic: bool = False
    # Kafka's default is null: described as null, with no DEFAULT_CONFIG synonym, while unset.
    null_default: bool = False

    @property
    def sensitive(self) -> bool:
        return self.config_type == PASSWORD


_S = BrokerSettingDef
DURABILITY_MODES = ("fsync", "page-cache")
# Types, dynamic flags and null defaults are Kafka 4.1's; settings Kafka lacks (marked
# streamshop's) are static.
BROKER_SETTINGS: dict[str, BrokerSettingDef] = {
    d.name: d
    for d in [
        _S("node.id", "1", integer(0, INT_MAX), INT),
        _S("num.partitions", "3", integer(1, 100_000), INT),
        _S("auto.create.topics.enable", "true", boolean, BOOLEAN),
        _S("default.replication.factor", "1", integer(1, 1), INT),
        _S("socket.request.max.bytes", "104857600", integer(1, INT_MAX), INT),
        _S("log.retention.check.interval.ms", "300000", integer(1), LONG),
        _S("log.cleaner.backoff.ms", "15000", integer(1), LONG, dynamic=True),
        _S("log.cleaner.enable", "true", boolean, BOOLEAN),
        _S("producer.id.expiration.ms", "86400000", integer(1), INT, dynamic=True),
        _S("cluster.id", "", str),  # streamshop's: Kafka keeps it in meta.properties
        # One partition, where Kafka has 50 to spread group coordinators over its brokers: on
        # one node the partitions only multiply files, and the commits of every group waiting
        # on one fsync round then share a single fdatasync.
        _S("offsets.topic.num.partitions", "1", integer(1, 1000), INT),
        _S("group.initial.rebalance.delay.ms", "100", integer(0), INT),
        _S("group.min.session.timeout.ms", "6000", integer(1, INT_MAX), INT),
        _S("group.max.session.timeout.ms", "1800000", integer(1, INT_MAX), INT),
        # The consumer group protocol (KIP-848).  The heartbeat interval bounds how long a
        # member takes to learn of a change: Kafka's 5 s suits large clusters; 250 ms lets a
        # group rebalance within half a second for 4 heartbeats a second per member.
        _S("group.consumer.session.timeout.ms", "45000", integer(1, INT_MAX), INT),
        _S("group.consumer.heartbeat.interval.ms", "250", integer(1, INT_MAX), INT),
        _S("group.consumer.assignors", "uniform,range", _assignors, LIST),
        _S("group.consumer.max.size", "1000", integer(1, INT_MAX), INT),
        # Bounds of a group's own consumer.* configs (broker.group_configs).  The minimum
        # heartbeat interval is streamshop's: Kafka's 5000 is above this broker's 250 ms.
        _S("group.consumer.min.session.timeout.ms", "45000", integer(1, INT_MAX), INT),
        _S("group.consumer.max.session.timeout.ms", "60000", integer(1, INT_MAX), INT),
        _S("group.consumer.min.heartbeat.interval.ms", "250", integer(1, INT_MAX), INT),
        _S("group.consumer.max.heartbeat.interval.ms", "15000", integer(1, INT_MAX), INT),
        # Share groups (KIP-932): Kafka 4.1's defaults and bounds.  A group may set its own
        # lock duration (share.record.lock.duration.ms) within the min and max.
        _S("group.share.session.timeout.ms", "45000", integer(1, INT_MAX), INT),
        _S("group.share.heartbeat.interval.ms", "5000", integer(1, INT_MAX), INT),
        _S("group.share.min.session.timeout.ms", "45000", integer(1, INT_MAX), INT),
        _S("group.share.max.session.timeout.ms", "60000", integer(1, INT_MAX), INT),
        _S("group.share.min.heartbeat.interval.ms", "5000", integer(1, INT_MAX), INT),
        _S("group.share.max.heartbeat.interval.ms", "15000", integer(1, INT_MAX), INT),
        _S("group.share.record.lock.duration.ms", "30000", integer(1000, 3_600_000), INT),
        _S("group.share.min.record.lock.duration.ms", "15000", integer(1000, 30_000), INT),
        _S("group.share.max.record.lock.duration.ms", "60000", integer(30_000, 3_600_000), INT),
        _S("group.share.delivery.count.limit", "5", integer(2, 10), INT),
        _S("group.share.partition.max.record.locks", "2000", integer(100, 10_000), INT),
        _S("group.share.max.size", "200", integer(10, 1000), INT),
        _S("group.share.max.share.sessions", "2000", integer(1, 30_000), INT),
        # Streams groups (KIP-1071): only their group configs' defaults and bounds, which a
        # group may override (this broker has no streams group protocol).
        _S("group.streams.session.timeout.ms", "45000", integer(1, INT_MAX), INT),
        _S("group.streams.min.session.timeout.ms", "45000", integer(1, INT_MAX), INT),
        _S("group.streams.max.session.timeout.ms", "60000", integer(1, INT_MAX), INT),
        _S("group.streams.heartbeat.interval.ms", "5000", integer(1, INT_MAX), INT),
        _S("group.streams.min.heartbeat.interval.ms", "5000", integer(1, INT_MAX), INT),
        _S("group.streams.max.heartbeat.interval.ms", "15000", integer(1, INT_MAX), INT),
        _S("group.streams.num.standby.replicas", "0", integer(0, INT_MAX), INT),
        _S("group.streams.max.standby.replicas", "2", integer(0, INT_MAX), INT),
        _S("share.coordinator.state.topic.num.partitions", "50", integer(1, 1000), INT),
        _S("offsets.retention.minutes", "10080", integer(1, INT_MAX), INT),
        _S("offset.metadata.max.bytes", "4096", integer(0, INT_MAX), INT),
        _S("offsets.retention.check.interval.ms", "600000", integer(1), LONG),
        _S("transaction.state.log.num.partitions", "50", integer(1, 1000), INT),
        _S("transaction.max.timeout.ms", "900000", integer(1, INT_MAX), INT),
        _S("transaction.abort.timed.out.transaction.cleanup.interval.ms", "10000", integer(1, INT_MAX), INT),
        _S("transactional.id.expiration.ms", "604800000", integer(1, INT_MAX), INT),
        _S("max.transactional.ids", "100000", integer(1, INT_MAX), INT),  # streamshop's
        _S("max.partitions.per.transaction", "10000", integer(1, INT_MAX), INT),  # streamshop's
        # Defences against hostile and careless clients (Kafka's names where Kafka has them).
        _S("connections.max.idle.ms", "600000", integer(-1), LONG),
        _S("max.connections", str(INT_MAX), integer(1, INT_MAX), INT, dynamic=True),
        _S("max.connections.per.ip", str(INT_MAX), integer(0, INT_MAX), INT, dynamic=True),
        _S("max.connections.per.ip.overrides", "", _host_counts, dynamic=True),
        _S("queued.max.request.bytes", "104857600", integer(-1, LONG_MAX), LONG),
        _S("queued.max.response.bytes", "67108864", integer(-1, LONG_MAX), LONG),  # streamshop's
        _S("fetch.max.bytes", "57671680", integer(1024, INT_MAX), INT),
        _S("quota.window.num", "11", integer(2, INT_MAX), INT),
        _S("quota.window.size.seconds", "1", integer(1, INT_MAX), INT),
        _S("fetch.max.wait.ms", "30000", integer(0, INT_MAX), INT),  # streamshop's
        _S("request.max.elements", "100000", integer(1, INT_MAX), INT),  # streamshop's
        # The partitions one DescribeTopicPartitions answer may hold (and the client's own limit).
        _S("max.request.partition.size.limit", "2000", integer(1, INT_MAX), INT),
        _S("max.partitions", "200000", integer(1, INT_MAX), INT),  # streamshop's
        _S("max.partitions.per.request", "10000", integer(1, INT_MAX), INT),  # streamshop's
        _S("message.max.decompressed.bytes", "67108864", integer(1024, INT_MAX), INT),  # streamshop's
        # Listeners and security, by Kafka's names (broker/security).  Kafka can change
        # listeners per broker, but not advertised.listeners.
        _S("listeners", "", _listeners, dynamic=True),
        _S("advertised.listeners", "", _listeners, null_default=True),
        _S("listener.security.protocol.map", DEFAULT_PROTOCOL_MAP, _protocol_map, dynamic=True),
        _S("sasl.enabled.mechanisms", "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512", _mechanisms, LIST, dynamic=True),
        _S("sasl.server.max.receive.size", "524288", integer(64, INT_MAX), INT),
        _S("connections.max.reauth.ms", "0", integer(0), LONG),
        _S("connection.failed.authentication.delay.ms", "100", integer(0, INT_MAX), INT),
        # Failed SASL logins per user name: after three, each closes the name for twice as long
        # as the last, up to this (a streamshop setting; 0: off).
        _S("authentication.failure.throttle.max.ms", "30000", integer(0, INT_MAX), INT),
        # A TLS handshake and a SASL exchange must finish this soon after accept (streamshop's
        # own; Kafka leaves a stalled handshake to connections.max.idle.ms).
        _S("authentication.timeout.ms", "10000", integer(1, INT_MAX), INT),
        _S("ssl.keystore.type", "PEM", choice("PEM"), dynamic=True),
        _S("ssl.keystore.location", "", str, dynamic=True, null_default=True),
        _S("ssl.key.password", "", str, PASSWORD, dynamic=True, null_default=True),
        _S("ssl.truststore.type", "PEM", choice("PEM"), dynamic=True),
        _S("ssl.truststore.location", "", str, dynamic=True, null_default=True),
        _S("ssl.client.auth", "none", choice("none", "requested", "required"), dynamic=True),
        _S("ssl.principal.mapping.rules", "DEFAULT", str),
        _S(
            "authorizer.class.name",
            "",
            choice("", "org.apache.kafka.metadata.authorizer.StandardAuthorizer", "StandardAuthorizer"),
        ),
        # The StandardAuthorizer's own settings.
        _S("super.users", "", str),
        _S("allow.everyone.if.no.acl.found", "false", boolean, BOOLEAN),
        # Segment files open at once (least recently used closed first); at most half the
        # soft descriptor limit, so sockets keep the rest (streamshop's).
        _S("log.open.files.max", "1000", integer(16, INT_MAX), INT),
        # When an acknowledgement (acks=all produce, OffsetCommit, a transaction's state and
        # markers, share state) is sent: after fdatasync ("fsync"), or once written to the page
        # cache ("page-cache"), as Kafka answers on one replica.  streamshop's; flush.messages
        # and flush.ms fsync in the background in both modes (docs/broker.md, Durability).
        _S("log.durability", "fsync", choice(*DURABILITY_MODES)),
    ]
}

_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")


def validate_topic_name(name: str | None) -> str | None:
    """Kafka's rules; returns an error message or None."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name {name!r} is not allowed"
    if len(name) > 249:
        return "topic name is longer than 249 characters"
    if not _TOPIC_NAME.match(name):
        return f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_' and '-'"
    return None


@dataclass
class BrokerConfig:
    data_dir: Path = Path("./data/broker")
    listen: tuple[str, int] = ("127.0.0.1", 9092)
    advertise: tuple[str, int] | None = None
    admin_listen: tuple[str, int] | None = ("127.0.0.1", 9644)
    settings: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for key, raw in self.settings.items():
            if key in BROKER_SETTINGS:
                BROKER_SETTINGS[key].parse(raw)
            elif key in _TOPIC_DEFAULT_BY_BROKER_NAME:
                try:
                    _TOPIC_DEFAULT_BY_BROKER_NAME[key].parse(raw)
                except ConfigError as e:
                    raise ConfigError(f"{key}: {e}") from None
            elif key in TOPIC_CONFIGS:
                broker_name = TOPIC_CONFIGS[key].broker_name
                raise ConfigError(
                    f"{key} is a topic config; its broker default is {broker_name}"
                    if broker_name
                    else f"{key} is a topic config without a broker default (as in Kafka)"
                )
            else:
                raise ConfigError(f"unknown broker setting {key!r}")
        check_combination(self.topic_defaults())

    def get(self, name: str) -> Any:
        definition = BROKER_SETTINGS[name]
        return definition.parse(self.settings.get(name, definition.default))

    def topic_defaults(self) -> dict[str, str]:
        """Broker-level defaults of every topic config, as strings."""
        return {
            d.name: self.settings.get(d.broker_name, d.default) if d.broker_name else d.default
            for d in TOPIC_CONFIGS.values()
        }


_TOPIC_DEFAULT_BY_BROKER_NAME = {d.broker_name: d for d in TOPIC_CONFIGS.values() if d.broker_name}
