"""Broker and topic configuration, by Kafka's names.

Every topic config has a broker-level default (`log.retention.ms` for `retention.ms`...),
settable with `--set` or `BROKER_SET`; a topic's own overrides are stored in
the cluster metadata and survive restarts.  Only configs the broker implements exist here:
anything else is INVALID_CONFIG, so a user never sets a knob that does nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.listeners import DEFAULT_PROTOCOL_MAP, ListenerError, parse_endpoints, parse_protocol_map
from kit.settings import ConfigError

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1


def _int(lo: int, hi: int = LONG_MAX) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise ConfigError(f"{raw!r} is not an integer") from None
        if not lo <= value <= hi:
            raise ConfigError(f"{value} is outside [{lo}, {hi}]")
        return value

    return parse


def _float(lo: float, hi: float) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(f"{raw!r} is not a number") from None
        if not lo <= value <= hi:
            raise ConfigError(f"{value} is outside [{lo}, {hi}]")
        return value

    return parse


def _choice(*options: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if raw not in options:
            raise ConfigError(f"{raw!r} is not one of {', '.join(options)}")
        return raw

    return parse


def _assignors(raw: str) -> tuple[str, ...]:
    """group.consumer.assignors: the server-side assignors members may choose, the first
    the default (Kafka also takes its assignors' class names; here, their names)."""
    names = tuple(n.strip() for n in raw.split(",") if n.strip())
    unknown = [n for n in names if n not in ("uniform", "range")]
    if not names or unknown:
        raise ConfigError(f"{raw!r} must list assignors among uniform, range")
    return names


def _policy(raw: str) -> str:
    """delete, compact, both, or (as Kafka 4.2 allows) neither: an empty list keeps every
    segment, like retention.ms=-1 with retention.bytes=-1."""
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    if any(p not in ("delete", "compact") for p in parts):
        raise ConfigError(f"{raw!r} is not a list of delete, compact")
    return ",".join(sorted(set(parts), key=parts.index))


def _throttled_replicas(raw: str) -> str:
    """Kafka's replication throttle lists: `*`, or `partition:broker` pairs (empty: none)."""
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    if parts == ["*"]:
        return "*"
    for part in parts:
        partition, _, broker = part.partition(":")
        if not (partition.isdigit() and broker.isdigit()):
            raise ConfigError(f"{raw!r} is not * nor a list of partition:broker pairs")
    return ",".join(parts)


def _host_counts(raw: str) -> dict[str, int]:
    """Kafka's `max.connections.per.ip.overrides`: `host:count,host:count`."""
    out: dict[str, int] = {}
    for item in (p.strip() for p in raw.split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        if not sep or not host:
            raise ConfigError(f"{item!r} is not host:count")
        out[host] = _int(0, INT_MAX)(count)
    return out


def _bool(raw: str) -> bool:
    if raw.lower() not in ("true", "false"):
        raise ConfigError(f"{raw!r} is not true or false")
    return raw.lower() == "true"


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
class TopicConfigDef:
    name: str
    broker_name: str
    default: str
    parse: Callable[[str], Any]
    doc: str


TOPIC_CONFIGS: dict[str, TopicConfigDef] = {
    d.name: d
    for d in [
        TopicConfigDef(
            "cleanup.policy",
            "log.cleanup.policy",
            "delete",
            _policy,
            "delete old segments, compact to the latest record per key, or both",
        ),
        TopicConfigDef(
            "retention.ms",
            "log.retention.ms",
            "604800000",
            _int(-1),
            "delete segments whose newest record is older than this (-1: never)",
        ),
        TopicConfigDef(
            "retention.bytes",
            "log.retention.bytes",
            "-1",
            _int(-1),
            "delete the oldest segments while a partition is larger (-1: no limit)",
        ),
        TopicConfigDef(
            "segment.bytes", "log.segment.bytes", "1073741824", _int(14, INT_MAX), "roll to a new segment at this size"
        ),
        TopicConfigDef("segment.ms", "log.roll.ms", "604800000", _int(1), "roll to a new segment after this long"),
        TopicConfigDef(
            "index.interval.bytes",
            "log.index.interval.bytes",
            "4096",
            _int(0, INT_MAX),
            "bytes between sparse index entries",
        ),
        TopicConfigDef(
            "max.message.bytes", "message.max.bytes", "1048588", _int(0, INT_MAX), "largest record batch accepted"
        ),
        TopicConfigDef(
            "message.timestamp.type",
            "log.message.timestamp.type",
            "CreateTime",
            _choice("CreateTime", "LogAppendTime"),
            "keep the producer's timestamps or stamp on append",
        ),
        TopicConfigDef(
            "message.timestamp.before.max.ms",
            "log.message.timestamp.before.max.ms",
            str(LONG_MAX),
            _int(0),
            "reject timestamps older than this (CreateTime)",
        ),
        TopicConfigDef(
            "message.timestamp.after.max.ms",
            "log.message.timestamp.after.max.ms",
            "3600000",
            _int(0),
            "reject timestamps further in the future (CreateTime)",
        ),
        TopicConfigDef(
            "delete.retention.ms",
            "log.cleaner.delete.retention.ms",
            "86400000",
            _int(0),
            "how long compaction keeps tombstones",
        ),
        TopicConfigDef(
            "min.cleanable.dirty.ratio",
            "log.cleaner.min.cleanable.ratio",
            "0.5",
            _float(0.0, 1.0),
            "dirty share of a log that triggers compaction",
        ),
        TopicConfigDef(
            "min.compaction.lag.ms",
            "log.cleaner.min.compaction.lag.ms",
            "0",
            _int(0),
            "records younger than this are not compacted",
        ),
        TopicConfigDef(
            "compression.type",
            "compression.type",
            "producer",
            _choice("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
            "keep the producer's codec or recompress batches on append",
        ),
        TopicConfigDef(
            "flush.ms",
            "log.flush.interval.ms",
            str(LONG_MAX),
            _int(0),
            "fsync a partition at least this often, whatever the acks",
        ),
        TopicConfigDef("min.insync.replicas", "min.insync.replicas", "1", _int(1, 1), "single-node broker: always 1"),
        # Set and cleared by kafka-reassign-partitions --throttle/--verify: a single broker
        # replicates nothing, so there is nothing to throttle.
        TopicConfigDef(
            "leader.replication.throttled.replicas",
            "leader.replication.throttled.replicas",
            "",
            _throttled_replicas,
            "replicas whose replication the leader throttles: no effect on a single broker",
        ),
        TopicConfigDef(
            "follower.replication.throttled.replicas",
            "follower.replication.throttled.replicas",
            "",
            _throttled_replicas,
            "replicas whose replication followers throttle: no effect on a single broker",
        ),
    ]
}

COMPRESSION_CODES = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@dataclass(frozen=True, slots=True)
class BrokerSettingDef:
    name: str
    default: str
    parse: Callable[[str], Any]
    sensitive: bool = False  # a password: never described (Kafka's PASSWORD type)


BROKER_SETTINGS: dict[str, BrokerSettingDef] = {
    d.name: d
    for d in [
        BrokerSettingDef("node.id", "1", _int(0, INT_MAX)),
        BrokerSettingDef("num.partitions", "3", _int(1, 100_000)),
        BrokerSettingDef("auto.create.topics.enable", "true", _bool),
        BrokerSettingDef("default.replication.factor", "1", _int(1, 1)),
        BrokerSettingDef("socket.request.max.bytes", "104857600", _int(1, INT_MAX)),
        BrokerSettingDef("log.retention.check.interval.ms", "300000", _int(1)),
        BrokerSettingDef("log.cleaner.backoff.ms", "15000", _int(1)),
        BrokerSettingDef("log.cleaner.enable", "true", _bool),
        BrokerSettingDef("producer.id.expiration.ms", "86400000", _int(1)),
        BrokerSettingDef("cluster.id", "", str),
        BrokerSettingDef("offsets.topic.num.partitions", "50", _int(1, 1000)),
        BrokerSettingDef("group.initial.rebalance.delay.ms", "100", _int(0)),
        BrokerSettingDef("group.min.session.timeout.ms", "6000", _int(1, INT_MAX)),
        BrokerSettingDef("group.max.session.timeout.ms", "1800000", _int(1, INT_MAX)),
        # The consumer group protocol (KIP-848).  The heartbeat interval bounds how long a
        # member takes to learn of a change: Kafka's 5 s suits large clusters; 250 ms lets a
        # group rebalance within half a second for 4 heartbeats a second per member.
        BrokerSettingDef("group.consumer.session.timeout.ms", "45000", _int(1, INT_MAX)),
        BrokerSettingDef("group.consumer.heartbeat.interval.ms", "250", _int(1, INT_MAX)),
        BrokerSettingDef("group.consumer.assignors", "uniform,range", _assignors),
        BrokerSettingDef("group.consumer.max.size", "1000", _int(1, INT_MAX)),
        BrokerSettingDef("offsets.retention.minutes", "10080", _int(1, INT_MAX)),
        BrokerSettingDef("offset.metadata.max.bytes", "4096", _int(0, INT_MAX)),
        BrokerSettingDef("offsets.retention.check.interval.ms", "600000", _int(1)),
        BrokerSettingDef("transaction.state.log.num.partitions", "50", _int(1, 1000)),
        BrokerSettingDef("transaction.max.timeout.ms", "900000", _int(1, INT_MAX)),
        BrokerSettingDef("transaction.abort.timed.out.transaction.cleanup.interval.ms", "10000", _int(1, INT_MAX)),
        BrokerSettingDef("transactional.id.expiration.ms", "604800000", _int(1, INT_MAX)),
        BrokerSettingDef("max.transactional.ids", "100000", _int(1, INT_MAX)),
        BrokerSettingDef("max.partitions.per.transaction", "10000", _int(1, INT_MAX)),
        # Defences against hostile and careless clients (Kafka's names where Kafka has them).
        BrokerSettingDef("connections.max.idle.ms", "600000", _int(-1)),
        BrokerSettingDef("max.connections", str(INT_MAX), _int(1, INT_MAX)),
        BrokerSettingDef("max.connections.per.ip", str(INT_MAX), _int(0, INT_MAX)),
        BrokerSettingDef("max.connections.per.ip.overrides", "", _host_counts),
        BrokerSettingDef("queued.max.request.bytes", "104857600", _int(-1, LONG_MAX)),
        BrokerSettingDef("queued.max.response.bytes", "67108864", _int(-1, LONG_MAX)),
        BrokerSettingDef("fetch.max.bytes", "57671680", _int(1024, INT_MAX)),
        BrokerSettingDef("quota.window.num", "11", _int(2, INT_MAX)),
        BrokerSettingDef("quota.window.size.seconds", "1", _int(1, INT_MAX)),
        BrokerSettingDef("fetch.max.wait.ms", "30000", _int(0, INT_MAX)),
        BrokerSettingDef("request.max.elements", "100000", _int(1, INT_MAX)),
        BrokerSettingDef("max.partitions", "200000", _int(1, INT_MAX)),
        BrokerSettingDef("max.partitions.per.request", "10000", _int(1, INT_MAX)),
        BrokerSettingDef("message.max.decompressed.bytes", "67108864", _int(1024, INT_MAX)),
        # Listeners and security, by Kafka's names (broker/security).
        BrokerSettingDef("listeners", "", _listeners),
        BrokerSettingDef("advertised.listeners", "", _listeners),
        BrokerSettingDef("listener.security.protocol.map", DEFAULT_PROTOCOL_MAP, _protocol_map),
        BrokerSettingDef("sasl.enabled.mechanisms", "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512", _mechanisms),
        BrokerSettingDef("sasl.server.max.receive.size", "524288", _int(64, INT_MAX)),
        BrokerSettingDef("connections.max.reauth.ms", "0", _int(0)),
        BrokerSettingDef("connection.failed.authentication.delay.ms", "100", _int(0, INT_MAX)),
        # Failed SASL logins per user name: after three, each closes the name for twice as long
        # as the last, up to this (a streamshop setting; 0: off).
        BrokerSettingDef("authentication.failure.throttle.max.ms", "30000", _int(0, INT_MAX)),
        # A TLS handshake and a SASL exchange must finish this soon after accept (streamshop's
        # own; Kafka leaves a stalled handshake to connections.max.idle.ms).
        BrokerSettingDef("authentication.timeout.ms", "10000", _int(1, INT_MAX)),
        BrokerSettingDef("ssl.keystore.type", "PEM", _choice("PEM")),
        BrokerSettingDef("ssl.keystore.location", "", str),
        BrokerSettingDef("ssl.key.password", "", str, sensitive=True),
        BrokerSettingDef("ssl.truststore.type", "PEM", _choice("PEM")),
        BrokerSettingDef("ssl.truststore.location", "", str),
        BrokerSettingDef("ssl.client.auth", "none", _choice("none", "requested", "required")),
        BrokerSettingDef("ssl.principal.mapping.rules", "DEFAULT", str),
        BrokerSettingDef(
            "authorizer.class.name",
            "",
            _choice("", "org.apache.kafka.metadata.authorizer.StandardAuthorizer", "StandardAuthorizer"),
        ),
        BrokerSettingDef("super.users", "", str),
        BrokerSettingDef("allow.everyone.if.no.acl.found", "false", _bool),
        # Segment files open at once (least recently used closed first); at most half the
        # soft descriptor limit, so sockets keep the rest.
        BrokerSettingDef("log.open.files.max", "1000", _int(16, INT_MAX)),
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
                _TOPIC_DEFAULT_BY_BROKER_NAME[key].parse(raw)
            elif key in TOPIC_CONFIGS:
                raise ConfigError(f"{key} is a topic config; its broker default is {TOPIC_CONFIGS[key].broker_name}")
            else:
                raise ConfigError(f"unknown broker setting {key!r}")

    def get(self, name: str) -> Any:
        definition = BROKER_SETTINGS[name]
        return definition.parse(self.settings.get(name, definition.default))

    def topic_defaults(self) -> dict[str, str]:
        """Broker-level defaults of every topic config, as strings."""
        return {d.name: self.settings.get(d.broker_name, d.default) for d in TOPIC_CONFIGS.values()}


_TOPIC_DEFAULT_BY_BROKER_NAME = {d.broker_name: d for d in TOPIC_CONFIGS.values()}


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Check names and values; raises ConfigError naming the offending config."""
    out: dict[str, str] = {}
    for key, raw in configs.items():
        definition = TOPIC_CONFIGS.get(key)
        if definition is None:
            raise ConfigError(f"unknown topic config {key!r}")
        if raw is None:
            raise ConfigError(f"{key}: a value is required")
        try:
            definition.parse(raw)
        except ConfigError as e:
            raise ConfigError(f"{key}: {e}") from None
        out[key] = raw
    return out


@dataclass(frozen=True)
class LogConfig:
    """A topic's effective configuration, parsed."""

    cleanup_policy: str
    retention_ms: int
    retention_bytes: int
    segment_bytes: int
    segment_ms: int
    index_interval_bytes: int
    max_message_bytes: int
    log_append_time: bool
    timestamp_before_max_ms: int
    timestamp_after_max_ms: int
    delete_retention_ms: int
    min_cleanable_dirty_ratio: float
    min_compaction_lag_ms: int
    compression: int | None  # None: keep the producer's codec
    flush_ms: int

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @classmethod
    def from_strings(cls, values: Mapping[str, str]) -> LogConfig:
        def get(name: str) -> Any:
            return TOPIC_CONFIGS[name].parse(values[name])

        compression = get("compression.type")
        return cls(
            cleanup_policy=get("cleanup.policy"),
            retention_ms=get("retention.ms"),
            retention_bytes=get("retention.bytes"),
            segment_bytes=get("segment.bytes"),
            segment_ms=get("segment.ms"),
            index_interval_bytes=get("index.interval.bytes"),
            max_message_bytes=get("max.message.bytes"),
            log_append_time=get("message.timestamp.type") == "LogAppendTime",
            timestamp_before_max_ms=get("message.timestamp.before.max.ms"),
            timestamp_after_max_ms=get("message.timestamp.after.max.ms"),
            delete_retention_ms=get("delete.retention.ms"),
            min_cleanable_dirty_ratio=get("min.cleanable.dirty.ratio"),
            min_compaction_lag_ms=get("min.compaction.lag.ms"),
            compression=None if compression == "producer" else COMPRESSION_CODES[compression],
            flush_ms=get("flush.ms"),
        )
