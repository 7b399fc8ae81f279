"""Topic configs: every one Apache Kafka 4.1 accepts, by its names, defaults and validation.

Each has Kafka's broker-level default (`log.retention.ms` for `retention.ms`...), settable
with `--set`; a topic's own overrides are stored in the cluster metadata.  Those that can
act on one broker without tiered storage are implemented; the others are accepted and
validated as Kafka does, and their documentation says why they change nothing here.  Any
other name is INVALID_CONFIG, as on Kafka.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from broker.config_values import (
    BOOLEAN,
    DOUBLE,
    INT,
    INT_MAX,
    LIST,
    LONG,
    LONG_MAX,
    STRING,
    boolean,
    choice,
    integer,
    integer_or,
    number,
)
from kit.settings import ConfigError

LONG_MIN = -(1 << 63)


def _policy(raw: str) -> str:
    """delete, compact, both, or neither (an empty list, as Kafka 4.1 accepts): no segment
    is ever deleted, like retention.ms=-1 with retention.bytes=-1."""
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


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    name: str
    broker_name: str | None  # Kafka's broker-level default (None: Kafka has none)
    default: str
    parse: Callable[[str], Any]
    config_type: int  # DescribeConfigs' type, as Kafka's
    doc: str
    # Kafka derives some broker defaults from another setting (log.retention.ms from
    # log.retention.hours): it then lists no DEFAULT_CONFIG synonym of the broker name.
    default_synonym: bool = True


_NO_REMOTE = "no effect here: it applies only to tiered storage, which this broker does not have"

TOPIC_CONFIGS: dict[str, TopicConfigDef] = {
    d.name: d
    for d in [
        TopicConfigDef(
            "cleanup.policy",
            "log.cleanup.policy",
            "delete",
            _policy,
            LIST,
            "delete old segments, compact to the latest record per key, both, or neither",
        ),
        TopicConfigDef(
            "retention.ms",
            "log.retention.ms",
            "604800000",
            integer(-1),
            LONG,
            "delete segments whose newest record is older than this (-1: never)",
            default_synonym=False,
        ),
        TopicConfigDef(
            "retention.bytes",
            "log.retention.bytes",
            "-1",
            integer(LONG_MIN),
            LONG,
            "delete the oldest segments while a partition is larger (negative: no limit)",
        ),
        # Kafka 4.1's minimum is 1 MiB (with internal.segment.bytes for its tests); smaller
        # segments are allowed here so that tests and small disks can roll them.
        TopicConfigDef(
            "segment.bytes",
            "log.segment.bytes",
            "1073741824",
            integer(14, INT_MAX),
            INT,
            "roll to a new segment at this size",
        ),
        TopicConfigDef(
            "segment.ms",
            "log.roll.ms",
            "604800000",
            integer(1),
            LONG,
            "roll to a new segment after this long",
            default_synonym=False,
        ),
        TopicConfigDef(
            "segment.jitter.ms",
            "log.roll.jitter.ms",
            "0",
            integer(0),
            LONG,
            "each segment rolls up to this much (random) before segment.ms, so that partitions do not all roll at once",
            default_synonym=False,
        ),
        TopicConfigDef(
            "segment.index.bytes",
            "log.index.size.max.bytes",
            "10485760",
            integer(4, INT_MAX),
            INT,
            "largest offset or time index of a segment: a segment whose index is full rolls",
        ),
        TopicConfigDef(
            "index.interval.bytes",
            "log.index.interval.bytes",
            "4096",
            integer(0, INT_MAX),
            INT,
            "bytes between sparse index entries",
        ),
        TopicConfigDef(
            "max.message.bytes",
            "message.max.bytes",
            "1048588",
            integer(0, INT_MAX),
            INT,
            "largest record batch accepted",
        ),
        TopicConfigDef(
            "message.timestamp.type",
            "log.message.timestamp.type",
            "CreateTime",
            choice("CreateTime", "LogAppendTime"),
            STRING,
            "keep the producer's timestamps or stamp on append",
        ),
        TopicConfigDef(
            "message.timestamp.before.max.ms",
            "log.message.timestamp.before.max.ms",
            str(LONG_MAX),
            integer(0),
            LONG,
            "reject timestamps older than this (CreateTime)",
        ),
        TopicConfigDef(
            "message.timestamp.after.max.ms",
            "log.message.timestamp.after.max.ms",
            "3600000",
            integer(0),
            LONG,
            "reject timestamps further in the future (CreateTime)",
        ),
        TopicConfigDef(
            "delete.retention.ms",
            "log.cleaner.delete.retention.ms",
            "86400000",
            integer(0),
            LONG,
            "how long compaction keeps tombstones",
        ),
        TopicConfigDef(
            "min.cleanable.dirty.ratio",
            "log.cleaner.min.cleanable.ratio",
            "0.5",
            number(0.0, 1.0),
            DOUBLE,
            "dirty share of a log that triggers compaction",
        ),
        TopicConfigDef(
            "min.compaction.lag.ms",
            "log.cleaner.min.compaction.lag.ms",
            "0",
            integer(0),
            LONG,
            "records younger than this are not compacted",
        ),
        TopicConfigDef(
            "max.compaction.lag.ms",
            "log.cleaner.max.compaction.lag.ms",
            str(LONG_MAX),
            integer(1),
            LONG,
            "a dirty record older than this is compacted whatever the dirty ratio; the active segment of a "
            "compacted topic rolls at least this often",
        ),
        TopicConfigDef(
            "compression.type",
            "compression.type",
            "producer",
            choice("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
            STRING,
            "keep the producer's codec or recompress batches on append",
        ),
        TopicConfigDef(
            "compression.gzip.level",
            "compression.gzip.level",
            "-1",
            integer_or(-1, 1, 9),
            INT,
            "gzip level of batches the broker recompresses (-1: zlib's default)",
        ),
        TopicConfigDef(
            "compression.lz4.level",
            "compression.lz4.level",
            "9",
            integer(1, 17),
            INT,
            "lz4 level of batches the broker recompresses",
        ),
        TopicConfigDef(
            "compression.zstd.level",
            "compression.zstd.level",
            "3",
            integer(-131072, 22),
            INT,
            "zstd level of batches the broker recompresses",
        ),
        TopicConfigDef(
            "file.delete.delay.ms",
            "log.segment.delete.delay.ms",
            "60000",
            integer(0),
            LONG,
            "a deleted segment's files are renamed *.deleted and removed this much later; reads already "
            "under way finish from them",
        ),
        TopicConfigDef(
            "flush.messages",
            "log.flush.interval.messages",
            str(LONG_MAX),
            integer(1),
            LONG,
            "fsync a partition after this many records, whatever the acks",
        ),
        TopicConfigDef(
            "flush.ms",
            "log.flush.interval.ms",
            str(LONG_MAX),
            integer(0),
            LONG,
            "fsync a partition at least this often, whatever the acks",
            default_synonym=False,
        ),
        # Kafka accepts more than the replication factor (acks=all then gets
        # NOT_ENOUGH_REPLICAS); with one broker, 1 is the only value it could honour.
        TopicConfigDef(
            "min.insync.replicas",
            "min.insync.replicas",
            "1",
            integer(1, 1),
            INT,
            "single-node broker: always 1",
        ),
        TopicConfigDef(
            "unclean.leader.election.enable",
            "unclean.leader.election.enable",
            "false",
            boolean,
            BOOLEAN,
            "no effect here: the one replica is always in sync and the leader, so there is never an "
            "out-of-sync replica to elect",
        ),
        TopicConfigDef(
            "preallocate",
            "log.preallocate",
            "false",
            boolean,
            BOOLEAN,
            "no effect here: segment files grow as they are written; a segment's length is its file's, "
            "so they are never pre-sized",
        ),
        TopicConfigDef(
            "remote.storage.enable",
            None,
            "false",
            boolean,
            BOOLEAN,
            "tiered storage: true is refused, as by a Kafka cluster whose remote log storage system is disabled",
        ),
        TopicConfigDef(
            "local.retention.ms",
            "log.local.retention.ms",
            "-2",
            integer(-2),
            LONG,
            f"local part of retention.ms with tiered storage (-2: retention.ms); {_NO_REMOTE}",
        ),
        TopicConfigDef(
            "local.retention.bytes",
            "log.local.retention.bytes",
            "-2",
            integer(-2),
            LONG,
            f"local part of retention.bytes with tiered storage (-2: retention.bytes); {_NO_REMOTE}",
        ),
        TopicConfigDef(
            "remote.log.copy.disable", None, "false", boolean, BOOLEAN, f"stop copying to remote storage; {_NO_REMOTE}"
        ),
        TopicConfigDef(
            "remote.log.delete.on.disable",
            None,
            "false",
            boolean,
            BOOLEAN,
            f"delete remote data when remote storage is turned off; {_NO_REMOTE}",
        ),
        # Set and cleared by kafka-reassign-partitions --throttle/--verify.
        TopicConfigDef(
            "leader.replication.throttled.replicas",
            None,
            "",
            _throttled_replicas,
            LIST,
            "replicas whose replication the leader throttles: no effect here, as one broker replicates nothing",
        ),
        TopicConfigDef(
            "follower.replication.throttled.replicas",
            None,
            "",
            _throttled_replicas,
            LIST,
            "replicas whose replication followers throttle: no effect here, as one broker replicates nothing",
        ),
    ]
}

COMPRESSION_CODES = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_LEVEL_CONFIGS = {1: "compression.gzip.level", 3: "compression.lz4.level", 4: "compression.zstd.level"}


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Check names and values one by one; raises ConfigError naming the offending config."""
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


def check_combination(values: Mapping[str, str]) -> None:
    """Kafka's rules across configs, on a topic's effective set (broker defaults with its
    overrides, each already valid); raises ConfigError with Kafka's words."""

    def get(name: str) -> Any:
        return TOPIC_CONFIGS[name].parse(values.get(name, TOPIC_CONFIGS[name].default))

    low, high = get("min.compaction.lag.ms"), get("max.compaction.lag.ms")
    if low > high:
        raise ConfigError(
            f"conflict topic config setting min.compaction.lag.ms ({low}) > max.compaction.lag.ms ({high})"
        )
    if get("remote.storage.enable"):
        raise ConfigError(
            "Tiered Storage functionality is disabled in the broker. "
            "Topic cannot be configured with remote log storage."
        )


@dataclass(frozen=True)
class LogConfig:
    """A topic's effective configuration, parsed (the configs that act on the log)."""

    cleanup_policy: str
    retention_ms: int
    retention_bytes: int
    segment_bytes: int
    segment_ms: int
    segment_jitter_ms: int
    segment_index_bytes: int
    index_interval_bytes: int
    max_message_bytes: int
    log_append_time: bool
    timestamp_before_max_ms: int
    timestamp_after_max_ms: int
    delete_retention_ms: int
    min_cleanable_dirty_ratio: float
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    compression: int | None  # None: keep the producer's codec
    compression_level: int | None  # of `compression`; None: the codec's own default
    file_delete_delay_ms: int
    flush_messages: int
    flush_ms: int

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def max_segment_ms(self) -> int:
        """How long the active segment may stay open: a compacted topic's records must
        reach a closed segment within max.compaction.lag.ms to be cleaned (Kafka's rule)."""
        if self.compact:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms

    @classmethod
    def from_strings(cls, values: Mapping[str, str]) -> LogConfig:
        def get(name: str) -> Any:
            return TOPIC_CONFIGS[name].parse(values[name])

        codec = get("compression.type")
        compression = None if codec == "producer" else COMPRESSION_CODES[codec]
        level_config = _LEVEL_CONFIGS.get(compression or 0)
        level = None if level_config is None else get(level_config)
        return cls(
            cleanup_policy=get("cleanup.policy"),
            retention_ms=get("retention.ms"),
            retention_bytes=get("retention.bytes"),
            segment_bytes=get("segment.bytes"),
            segment_ms=get("segment.ms"),
            segment_jitter_ms=get("segment.jitter.ms"),
            segment_index_bytes=get("segment.index.bytes"),
            index_interval_bytes=get("index.interval.bytes"),
            max_message_bytes=get("max.message.bytes"),
            log_append_time=get("message.timestamp.type") == "LogAppendTime",
            timestamp_before_max_ms=get("message.timestamp.before.max.ms"),
            timestamp_after_max_ms=get("message.timestamp.after.max.ms"),
            delete_retention_ms=get("delete.retention.ms"),
            min_cleanable_dirty_ratio=get("min.cleanable.dirty.ratio"),
            min_compaction_lag_ms=get("min.compaction.lag.ms"),
            max_compaction_lag_ms=get("max.compaction.lag.ms"),
            compression=compression,
            compression_level=None if level == -1 else level,  # gzip's -1: zlib's default
            file_delete_delay_ms=get("file.delete.delay.ms"),
            flush_messages=get("flush.messages"),
            flush_ms=get("flush.ms"),
        )
