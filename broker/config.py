"""Broker settings, by Kafka's names, and the broker's side of the topic configs.

Every setting is given at start (`--set` or `BROKER_SET`) and holds until the broker stops:
there are no dynamic broker configs.  Each setting records whether Kafka can change it at
runtime (per broker or cluster-wide), which DescribeConfigs reports as its `read_only` flag.
Each setting is one field of `BrokerSettingValues`, which holds its definition: the broker
parses them all once, at start, and reads them as typed attributes (`config.values`).
The topic configs, with their broker-level defaults, are in `broker.topic_configs`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, TypeVar, cast, get_args

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

T = TypeVar("T")
# When an acknowledgement is sent (log.durability).
Durability = Literal["fsync", "page-cache"]

__all__ = [
    "BROKER_SETTINGS",
    "COMPRESSION_CODES",
    "DURABILITY_MODES",
    "TOPIC_CONFIGS",
    "BrokerConfig",
    "BrokerSettingDef",
    "BrokerSettingValues",
    "Durability",
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


def _mechanisms(raw: str) -> tuple[str, ...]:
    names = tuple(m.strip().upper() for m in raw.split(",") if m.strip())
    unknown = [m for m in names if m not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")]
    if unknown:
        raise ConfigError(f"unsupported SASL mechanism {unknown[0]!r} (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)")
    return names


@dataclass(frozen=True, slots=True)
class BrokerSettingDef:
    name: str
    default: str
    parse: Callable[[str], object]
    config_type: int = STRING  # DescribeConfigs' type, as Kafka's (PASSWORD: never described)
    # Kafka can change it at runtime (DynamicBrokerConfig): DescribeConfigs says read_only=false.
    dynamic: bool = False
    # Kafka's default is null: described as null, with no DEFAULT_CONFIG synonym, while unset.
    null_default: bool = False

    @property
    def sensitive(self) -> bool:
        return self.config_type == PASSWORD

    @property
    def attribute(self) -> str:
        """Its field of `BrokerSettingValues`: the Kafka name, dots and hyphens as underscores."""
        return self.name.replace(".", "_").replace("-", "_")


_DEFINITION = "broker_setting"


def _setting(
    name: str,
    default: str,
    parse: Callable[[str], T],
    config_type: int = STRING,
    *,
    dynamic: bool = False,
    null_default: bool = False,
) -> T:
    """A field of `BrokerSettingValues` holding the setting's whole definition.  Typed as the
    parser's result, so mypy holds the field's annotation to what its parser returns."""
    definition = BrokerSettingDef(name, default, parse, config_type, dynamic, null_default)
    return cast(T, field(metadata={_DEFINITION: definition}))


DURABILITY_MODES: tuple[Durability, ...] = get_args(Durability)


def _durability(raw: str) -> Durability:
    for mode in DURABILITY_MODES:
        if raw == mode:
            return mode
    raise ConfigError(f"{raw!r} is not one of {', '.join(DURABILITY_MODES)}")


@dataclass(frozen=True, slots=True)
class BrokerSettingValues:
    """Every broker setting, parsed: one field per Kafka setting, named after it (dots as
    underscores), whose metadata is the setting's definition (`BROKER_SETTINGS` is read from
    these fields).  Types, dynamic flags and null defaults are Kafka 4.1's; settings Kafka
    lacks (marked streamshop's) are static."""

    node_id: int = _setting("node.id", "1", integer(0, INT_MAX), INT)
    num_partitions: int = _setting("num.partitions", "3", integer(1, 100_000), INT)
    auto_create_topics_enable: bool = _setting("auto.create.topics.enable", "true", boolean, BOOLEAN)
    default_replication_factor: int = _setting("default.replication.factor", "1", integer(1, 1), INT)
    socket_request_max_bytes: int = _setting("socket.request.max.bytes", "104857600", integer(1, INT_MAX), INT)
    log_retention_check_interval_ms: int = _setting("log.retention.check.interval.ms", "300000", integer(1), LONG)
    log_cleaner_backoff_ms: int = _setting("log.cleaner.backoff.ms", "15000", integer(1), LONG, dynamic=True)
    log_cleaner_enable: bool = _setting("log.cleaner.enable", "true", boolean, BOOLEAN)
    producer_id_expiration_ms: int = _setting("producer.id.expiration.ms", "86400000", integer(1), INT, dynamic=True)
    cluster_id: str = _setting("cluster.id", "", str)  # streamshop's: Kafka keeps it in meta.properties
    # One partition, where Kafka has 50 to spread group coordinators over its brokers: on
    # one node the partitions only multiply files, and the commits of every group waiting
    # on one fsync round then share a single fdatasync.
    offsets_topic_num_partitions: int = _setting("offsets.topic.num.partitions", "1", integer(1, 1000), INT)
    group_initial_rebalance_delay_ms: int = _setting("group.initial.rebalance.delay.ms", "100", integer(0), INT)
    group_min_session_timeout_ms: int = _setting("group.min.session.timeout.ms", "6000", integer(1, INT_MAX), INT)
    group_max_session_timeout_ms: int = _setting("group.max.session.timeout.ms", "1800000", integer(1, INT_MAX), INT)
    # The consumer group protocol (KIP-848).  The heartbeat interval bounds how long a
    # member takes to learn of a change: Kafka's 5 s suits large clusters; 250 ms lets a
    # group rebalance within half a second for 4 heartbeats a second per member.
    group_consumer_session_timeout_ms: int = _setting(
        "group.consumer.session.timeout.ms", "45000", integer(1, INT_MAX), INT
    )
    group_consumer_heartbeat_interval_ms: int = _setting(
        "group.consumer.heartbeat.interval.ms", "250", integer(1, INT_MAX), INT
    )
    group_consumer_assignors: tuple[str, ...] = _setting("group.consumer.assignors", "uniform,range", _assignors, LIST)
    group_consumer_max_size: int = _setting("group.consumer.max.size", "1000", integer(1, INT_MAX), INT)
    # Bounds of a group's own consumer.* configs (broker.group_configs).  The minimum
    # heartbeat interval is streamshop's: Kafka's 5000 is above this broker's 250 ms.
    group_consumer_min_session_timeout_ms: int = _setting(
        "group.consumer.min.session.timeout.ms", "45000", integer(1, INT_MAX), INT
    )
    group_consumer_max_session_timeout_ms: int = _setting(
        "group.consumer.max.session.timeout.ms", "60000", integer(1, INT_MAX), INT
    )
    group_consumer_min_heartbeat_interval_ms: int = _setting(
        "group.consumer.min.heartbeat.interval.ms", "250", integer(1, INT_MAX), INT
    )
    group_consumer_max_heartbeat_interval_ms: int = _setting(
        "group.consumer.max.heartbeat.interval.ms", "15000", integer(1, INT_MAX), INT
    )
    # Share groups (KIP-932): Kafka 4.1's defaults and bounds.  A group may set its own
    # lock duration (share.record.lock.duration.ms) within the min and max.
    group_share_session_timeout_ms: int = _setting("group.share.session.timeout.ms", "45000", integer(1, INT_MAX), INT)
    group_share_heartbeat_interval_ms: int = _setting(
        "group.share.heartbeat.interval.ms", "5000", integer(1, INT_MAX), INT
    )
    group_share_min_session_timeout_ms: int = _setting(
        "group.share.min.session.timeout.ms", "45000", integer(1, INT_MAX), INT
    )
    group_share_max_session_timeout_ms: int = _setting(
        "group.share.max.session.timeout.ms", "60000", integer(1, INT_MAX), INT
    )
    group_share_min_heartbeat_interval_ms: int = _setting(
        "group.share.min.heartbeat.interval.ms", "5000", integer(1, INT_MAX), INT
    )
    group_share_max_heartbeat_interval_ms: int = _setting(
        "group.share.max.heartbeat.interval.ms", "15000", integer(1, INT_MAX), INT
    )
    group_share_record_lock_duration_ms: int = _setting(
        "group.share.record.lock.duration.ms", "30000", integer(1000, 3_600_000), INT
    )
    group_share_min_record_lock_duration_ms: int = _setting(
        "group.share.min.record.lock.duration.ms", "15000", integer(1000, 30_000), INT
    )
    group_share_max_record_lock_duration_ms: int = _setting(
        "group.share.max.record.lock.duration.ms", "60000", integer(30_000, 3_600_000), INT
    )
    group_share_delivery_count_limit: int = _setting("group.share.delivery.count.limit", "5", integer(2, 10), INT)
    group_share_partition_max_record_locks: int = _setting(
        "group.share.partition.max.record.locks", "2000", integer(100, 10_000), INT
    )
    group_share_max_size: int = _setting("group.share.max.size", "200", integer(10, 1000), INT)
    group_share_max_share_sessions: int = _setting("group.share.max.share.sessions", "2000", integer(1, 30_000), INT)
    # Streams groups (KIP-1071): only their group configs' defaults and bounds, which a
    # group may override (this broker has no streams group protocol).
    group_streams_session_timeout_ms: int = _setting(
        "group.streams.session.timeout.ms", "45000", integer(1, INT_MAX), INT
    )
    group_streams_min_session_timeout_ms: int = _setting(
        "group.streams.min.session.timeout.ms", "45000", integer(1, INT_MAX), INT
    )
    group_streams_max_session_timeout_ms: int = _setting(
        "group.streams.max.session.timeout.ms", "60000", integer(1, INT_MAX), INT
    )
    group_streams_heartbeat_interval_ms: int = _setting(
        "group.streams.heartbeat.interval.ms", "5000", integer(1, INT_MAX), INT
    )
    group_streams_min_heartbeat_interval_ms: int = _setting(
        "group.streams.min.heartbeat.interval.ms", "5000", integer(1, INT_MAX), INT
    )
    group_streams_max_heartbeat_interval_ms: int = _setting(
        "group.streams.max.heartbeat.interval.ms", "15000", integer(1, INT_MAX), INT
    )
    group_streams_num_standby_replicas: int = _setting(
        "group.streams.num.standby.replicas", "0", integer(0, INT_MAX), INT
    )
    group_streams_max_standby_replicas: int = _setting(
        "group.streams.max.standby.replicas", "2", integer(0, INT_MAX), INT
    )
    share_coordinator_state_topic_num_partitions: int = _setting(
        "share.coordinator.state.topic.num.partitions", "50", integer(1, 1000), INT
    )
    offsets_retention_minutes: int = _setting("offsets.retention.minutes", "10080", integer(1, INT_MAX), INT)
    offset_metadata_max_bytes: int = _setting("offset.metadata.max.bytes", "4096", integer(0, INT_MAX), INT)
    offsets_retention_check_interval_ms: int = _setting(
        "offsets.retention.check.interval.ms", "600000", integer(1), LONG
    )
    transaction_state_log_num_partitions: int = _setting(
        "transaction.state.log.num.partitions", "50", integer(1, 1000), INT
    )
    transaction_max_timeout_ms: int = _setting("transaction.max.timeout.ms", "900000", integer(1, INT_MAX), INT)
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = _setting(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms", "10000", integer(1, INT_MAX), INT
    )
    transactional_id_expiration_ms: int = _setting(
        "transactional.id.expiration.ms", "604800000", integer(1, INT_MAX), INT
    )
    max_transactional_ids: int = _setting("max.transactional.ids", "100000", integer(1, INT_MAX), INT)  # streamshop's
    max_partitions_per_transaction: int = _setting(
        "max.partitions.per.transaction", "10000", integer(1, INT_MAX), INT
    )  # streamshop's
    # Defences against hostile and careless clients (Kafka's names where Kafka has them).
    connections_max_idle_ms: int = _setting("connections.max.idle.ms", "600000", integer(-1), LONG)
    max_connections: int = _setting("max.connections", str(INT_MAX), integer(1, INT_MAX), INT, dynamic=True)
    max_connections_per_ip: int = _setting(
        "max.connections.per.ip", str(INT_MAX), integer(0, INT_MAX), INT, dynamic=True
    )
    max_connections_per_ip_overrides: Mapping[str, int] = _setting(
        "max.connections.per.ip.overrides", "", _host_counts, dynamic=True
    )
    queued_max_request_bytes: int = _setting("queued.max.request.bytes", "104857600", integer(-1, LONG_MAX), LONG)
    queued_max_response_bytes: int = _setting(
        "queued.max.response.bytes", "67108864", integer(-1, LONG_MAX), LONG
    )  # streamshop's
    fetch_max_bytes: int = _setting("fetch.max.bytes", "57671680", integer(1024, INT_MAX), INT)
    quota_window_num: int = _setting("quota.window.num", "11", integer(2, INT_MAX), INT)
    quota_window_size_seconds: int = _setting("quota.window.size.seconds", "1", integer(1, INT_MAX), INT)
    fetch_max_wait_ms: int = _setting("fetch.max.wait.ms", "30000", integer(0, INT_MAX), INT)  # streamshop's
    request_max_elements: int = _setting("request.max.elements", "100000", integer(1, INT_MAX), INT)  # streamshop's
    # The partitions one DescribeTopicPartitions answer may hold (and the client's own limit).
    max_request_partition_size_limit: int = _setting(
        "max.request.partition.size.limit", "2000", integer(1, INT_MAX), INT
    )
    max_partitions: int = _setting("max.partitions", "200000", integer(1, INT_MAX), INT)  # streamshop's
    max_partitions_per_request: int = _setting(
        "max.partitions.per.request", "10000", integer(1, INT_MAX), INT
    )  # streamshop's
    message_max_decompressed_bytes: int = _setting(
        "message.max.decompressed.bytes", "67108864", integer(1024, INT_MAX), INT
    )  # streamshop's
    # Listeners and security, by Kafka's names (broker/security).  Kafka can change
    # listeners per broker, but not advertised.listeners.
    listeners: str = _setting("listeners", "", _listeners, dynamic=True)
    advertised_listeners: str = _setting("advertised.listeners", "", _listeners, null_default=True)
    listener_security_protocol_map: str = _setting(
        "listener.security.protocol.map", DEFAULT_PROTOCOL_MAP, _protocol_map, dynamic=True
    )
    sasl_enabled_mechanisms: tuple[str, ...] = _setting(
        "sasl.enabled.mechanisms", "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512", _mechanisms, LIST, dynamic=True
    )
    sasl_server_max_receive_size: int = _setting("sasl.server.max.receive.size", "524288", integer(64, INT_MAX), INT)
    connections_max_reauth_ms: int = _setting("connections.max.reauth.ms", "0", integer(0), LONG)
    connection_failed_authentication_delay_ms: int = _setting(
        "connection.failed.authentication.delay.ms", "100", integer(0, INT_MAX), INT
    )
    # Failed SASL logins per user name: after three, each closes the name for twice as long
    # as the last, up to this (a streamshop setting; 0: off).
    authentication_failure_throttle_max_ms: int = _setting(
        "authentication.failure.throttle.max.ms", "30000", integer(0, INT_MAX), INT
    )
    # A TLS handshake and a SASL exchange must finish this soon after accept (streamshop's
    # own; Kafka leaves a stalled handshake to connections.max.idle.ms).
    authentication_timeout_ms: int = _setting("authentication.timeout.ms", "10000", integer(1, INT_MAX), INT)
    ssl_keystore_type: str = _setting("ssl.keystore.type", "PEM", choice("PEM"), dynamic=True)
    ssl_keystore_location: str = _setting("ssl.keystore.location", "", str, dynamic=True, null_default=True)
    ssl_key_password: str = _setting("ssl.key.password", "", str, PASSWORD, dynamic=True, null_default=True)
    ssl_truststore_type: str = _setting("ssl.truststore.type", "PEM", choice("PEM"), dynamic=True)
    ssl_truststore_location: str = _setting("ssl.truststore.location", "", str, dynamic=True, null_default=True)
    ssl_client_auth: str = _setting("ssl.client.auth", "none", choice("none", "requested", "required"), dynamic=True)
    ssl_principal_mapping_rules: str = _setting("ssl.principal.mapping.rules", "DEFAULT", str)
    authorizer_class_name: str = _setting(
        "authorizer.class.name",
        "",
        choice("", "org.apache.kafka.metadata.authorizer.StandardAuthorizer", "StandardAuthorizer"),
    )
    # The StandardAuthorizer's own settings.
    super_users: str = _setting("super.users", "", str)
    allow_everyone_if_no_acl_found: bool = _setting("allow.everyone.if.no.acl.found", "false", boolean, BOOLEAN)
    # Segment files open at once (least recently used closed first); at most half the
    # soft descriptor limit, so sockets keep the rest (streamshop's).
    log_open_files_max: int = _setting("log.open.files.max", "1000", integer(16, INT_MAX), INT)
    # When an acknowledgement (acks=all produce, OffsetCommit, a transaction's state and
    # markers, share state) is sent: after fdatasync ("fsync"), or once written to the page
    # cache ("page-cache"), as Kafka answers on one replica.  streamshop's; flush.messages
    # and flush.ms fsync in the background in both modes (docs/broker.md, Durability).
    log_durability: Durability = _setting("log.durability", "fsync", _durability)

    @classmethod
    def parse(cls, settings: Mapping[str, str]) -> BrokerSettingValues:
        """Each setting's given value, else its default, parsed; ConfigError naming the
        setting whose value is invalid (names that are not broker settings are ignored)."""
        parsed: dict[str, Any] = {}
        for definition in BROKER_SETTINGS.values():
            raw = settings.get(definition.name, definition.default)
            try:
                parsed[definition.attribute] = definition.parse(raw)
            except ConfigError as e:
                raise ConfigError(f"{definition.name}: {e}") from None
        return cls(**parsed)

    def int_setting(self, name: str) -> int:
        """An integer setting chosen at runtime (a group config's bounds, a job's interval):
        KeyError for a name that is not a broker setting, TypeError for one not an integer."""
        value: object = getattr(self, BROKER_SETTINGS[name].attribute)
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} is not an integer setting")
        return value


def _definitions(values: type[BrokerSettingValues]) -> dict[str, BrokerSettingDef]:
    """The settings `values` holds, in its fields' order; TypeError for a field not named
    after its setting."""
    out: dict[str, BrokerSettingDef] = {}
    for f in fields(values):
        definition: BrokerSettingDef = f.metadata[_DEFINITION]
        if f.name != definition.attribute:
            raise TypeError(f"{values.__name__}.{f.name} holds {definition.name}: name it {definition.attribute}")
        out[definition.name] = definition
    return out


BROKER_SETTINGS: dict[str, BrokerSettingDef] = _definitions(BrokerSettingValues)

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
    # As given (DescribeConfigs tells the settings set from the defaults by them).
    settings: dict[str, str] = field(default_factory=dict)
    # Every broker setting, parsed once from `settings` and the defaults.
    values: BrokerSettingValues = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for key, raw in self.settings.items():
            if key in BROKER_SETTINGS:
                continue  # parsed below, with the defaults
            if key in _TOPIC_DEFAULT_BY_BROKER_NAME:
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
        self.values = BrokerSettingValues.parse(self.settings)
        check_combination(self.topic_defaults())

    def topic_defaults(self) -> dict[str, str]:
        """Broker-level defaults of every topic config, as strings."""
        return {
            d.name: self.settings.get(d.broker_name, d.default) if d.broker_name else d.default
            for d in TOPIC_CONFIGS.values()
        }


_TOPIC_DEFAULT_BY_BROKER_NAME = {d.broker_name: d for d in TOPIC_CONFIGS.values() if d.broker_name}
