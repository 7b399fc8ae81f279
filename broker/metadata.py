"""Cluster metadata: topics, their ids, partition counts and config overrides, and the groups'
config overrides (`["group_config", group id]` -> {name: value}; a tombstone removes them).

Stored like everything else, as a compacted internal topic in the broker's own log
(`__cluster_metadata`, one partition, msgpack keys and values) and replayed on start.
Metadata writes are fsynced before they are acknowledged.  The topic is internal: Kafka
clients never see it.
"""

from __future__ import annotations

import asyncio
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import msgpack
import structlog

from broker.clock import Clock
from broker.config import BrokerConfig, LogConfig, validate_topic_configs, validate_topic_name
from broker.group_configs import parse_value
from broker.log.deletions import DeferredDeletes
from broker.log.log_dir import LogDir
from broker.log.partition_log import PartitionLog
from broker.protocol.errors import KafkaError
from broker.protocol.records import Record, build_batch
from broker.replay import Malformed, SkippedRecords, need

log = structlog.get_logger(__name__)

METADATA_TOPIC = "__cluster_metadata"
INTERNAL_TOPICS = frozenset({METADATA_TOPIC, "__consumer_offsets", "__transaction_state"})
OTHER_KINDS = frozenset({"scram", "acl", "quota"})  # records of the security store and of the quotas
_METADATA_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": str(1024 * 1024),
    "retention.ms": "-1",
    "message.timestamp.after.max.ms": str((1 << 63) - 1),
}


@dataclass
class Topic:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)  # overrides only
    internal: bool = False
    logs: list[PartitionLog] = field(default_factory=list, repr=False)


class AutoCreation(NamedTuple):
    """A topic being auto-created: its partitions, and the topic once made (None if not)."""

    partitions: int
    topic: asyncio.Future[Topic | None]


def _normal(name: str) -> str:
    return name.replace(".", "_")


def partition_dir(data_dir: Path, topic: str, partition: int) -> Path:
    return data_dir / f"{topic}-{partition}"


class MetadataStore:
    """Topics by name and id; owns every PartitionLog."""

    def __init__(self, config: BrokerConfig, clock: Clock, *, recover: bool) -> None:
        self.config = config
        self.clock = clock
        self.data_dir = config.data_dir
        self.recover = recover
        self.topics: dict[str, Topic] = {}
        self.by_id: dict[uuid.UUID, Topic] = {}
        self.skipped = SkippedRecords()
        self.version = 0  # rises when a topic is created, deleted or grows (groups re-read subscriptions)
        self.other_records: dict[bytes, tuple[int, bytes | None]] = {}  # key: (offset, value)
        self.group_configs: dict[str, dict[str, str]] = {}  # group id: its overrides only
        self.deletions = DeferredDeletes()  # every partition's segments awaiting file.delete.delay.ms
        self.log_dir = LogDir(self.data_dir)  # the one log directory: offline after an I/O error
        self.meta_log = PartitionLog(
            partition_dir(self.data_dir, METADATA_TOPIC, 0),
            METADATA_TOPIC,
            0,
            LogConfig.from_strings({**config.topic_defaults(), **_METADATA_CONFIG}),
            clock,
            recover=recover,
            deletions=self.deletions,
            log_dir=self.log_dir,
        )
        self._replay()
        # Kept as topics come, go and grow: max.partitions is checked once per CreateTopics entry.
        self._partitions = sum(t.partitions for t in self.topics.values())
        self.normalized = {_normal(name): name for name in self.topics}  # '.' and '_' collide
        self._open_logs()

    # --- persistence -----------------------------------------------------------------

    def _replay(self) -> None:
        state: dict[str, Topic | None] = {}
        for record in self.meta_log.records(lambda offset, why: self.skipped.skip(METADATA_TOPIC, offset, why)):
            try:
                kind = _record_kind(record)
                if kind in OTHER_KINDS:
                    # users and ACLs: the last record per key wins, decoded by their owner
                    self.other_records[bytes(record.key or b"")] = (record.offset, record.value)
                    continue
                if kind == "group_config":
                    group_id, configs = _decode_group_config_record(record)
                    if configs:
                        self.group_configs[group_id] = configs
                    else:
                        self.group_configs.pop(group_id, None)
                    continue
                name, topic = _decode_topic_record(record)
            except Exception as e:
                self.skipped.skip(METADATA_TOPIC, record.offset, f"{type(e).__name__}: {e}")
                continue
            state[name] = topic
        for topic in state.values():
            if topic is not None and topic.topic_id not in self.by_id:
                self.topics[topic.name] = topic
                self.by_id[topic.topic_id] = topic

    def _open_logs(self) -> None:
        known = {partition_dir(self.data_dir, t.name, p) for t in self.topics.values() for p in range(t.partitions)}
        known.add(self.meta_log.directory)
        # A crash between a delete's tombstone and its directory removal leaves orphans.
        for child in self.data_dir.iterdir() if self.data_dir.exists() else []:
            if child.is_dir() and "-" in child.name and child not in known:
                log.info("removing partition directory of a deleted topic", path=str(child))
                shutil.rmtree(child, ignore_errors=True)
        for topic in self.topics.values():
            topic.logs = [self._open_partition(topic, p) for p in range(topic.partitions)]

    def _open_partition(self, topic: Topic, partition: int) -> PartitionLog:
        return PartitionLog(
            partition_dir(self.data_dir, topic.name, partition),
            topic.name,
            partition,
            self.log_config(topic),
            self.clock,
            recover=self.recover,
            deletions=self.deletions,
            log_dir=self.log_dir,
        )

    def _write(self, topic: Topic, *, delete: bool = False) -> None:
        key = msgpack.packb(["topic", topic.name])
        value = (
            None
            if delete
            else msgpack.packb(
                {
                    "id": topic.topic_id.bytes,
                    "partitions": topic.partitions,
                    "configs": topic.configs,
                    "internal": topic.internal,
                }
            )
        )
        now = self.clock.now_ms()
        self.meta_log.append_internal(build_batch([Record(0, now, key, value)]))

    def write_records(self, entries: list[tuple[list[object], object | None]]) -> None:
        """Append (key, value) records of another owner in one batch (value None: delete)."""
        now = self.clock.now_ms()
        records = [
            Record(i, now, msgpack.packb(key), None if value is None else msgpack.packb(value))
            for i, (key, value) in enumerate(entries)
        ]
        self.meta_log.append_internal(build_batch(records))

    # --- queries ---------------------------------------------------------------------

    def log_config(self, topic: Topic) -> LogConfig:
        return LogConfig.from_strings({**self.config.topic_defaults(), **topic.configs})

    def get(self, name: str) -> Topic | None:
        return self.topics.get(name)

    def partition_log(self, name: str, partition: int) -> PartitionLog | None:
        topic = self.topics.get(name)
        if topic is None or not 0 <= partition < topic.partitions:
            return None
        return topic.logs[partition]

    def all_logs(self) -> list[PartitionLog]:
        return [self.meta_log] + [plog for t in self.topics.values() for plog in t.logs]

    # --- changes (callers validate first, then fsync the metadata log) ---------------
    #
    # A topic's record is written only once its partitions exist on disk, so a failure
    # (descriptors, disk) never leaves a topic in the metadata that cannot be opened; a crash
    # in between leaves directories that the next start removes as orphans.

    def new_topic(self, name: str, partitions: int, configs: dict[str, str], *, internal: bool = False) -> Topic:
        return Topic(name, uuid.uuid4(), partitions, dict(configs), internal)

    def open_partitions(self, topic: Topic, start: int, end: int) -> list[PartitionLog]:
        """Create the partitions `start`..`end`-1 of `topic` on disk.  Touches no shared state
        (safe in a worker thread); on failure removes what it created and raises."""
        self.log_dir.check()
        logs: list[PartitionLog] = []
        try:
            logs.extend(self._open_partition(topic, p) for p in range(start, end))  # kept up to a failure
        except BaseException:
            for plog in logs:
                plog.delete()
            raise
        return logs

    def register_topic(self, topic: Topic, logs: list[PartitionLog]) -> None:
        """Write the record of a topic whose partitions exist, then make it visible."""
        try:
            self._write(topic)
        except BaseException:
            for plog in logs:
                plog.delete()
            raise
        topic.logs = logs
        self.topics[topic.name] = topic
        self.by_id[topic.topic_id] = topic
        self.normalized[_normal(topic.name)] = topic.name
        self._partitions += topic.partitions
        self.version += 1
        log.info("topic created", topic=topic.name, partitions=topic.partitions, configs=topic.configs)

    def create_topic(self, name: str, partitions: int, configs: dict[str, str], *, internal: bool = False) -> Topic:
        topic = self.new_topic(name, partitions, configs, internal=internal)
        self.register_topic(topic, self.open_partitions(topic, 0, partitions))
        return topic

    def delete_topic(self, name: str) -> list[PartitionLog]:
        """Remove the topic and write its tombstone; returns its logs, whose files the
        caller deletes (`PartitionLog.delete`, fine in a worker thread) while the name is
        still reserved against re-creation."""
        self.log_dir.check()  # before anything changes: an offline directory takes no tombstone
        topic = self.topics.pop(name)
        self.by_id.pop(topic.topic_id, None)
        self.normalized.pop(_normal(name), None)
        self._partitions -= topic.partitions
        self._write(topic, delete=True)
        self.version += 1
        log.info("topic deleted", topic=name)
        return topic.logs

    def add_partitions(self, name: str, logs: list[PartitionLog]) -> None:
        """Record the new partition count once the new partitions (`logs`, from
        `open_partitions`) exist, then serve them."""
        topic = self.topics[name]
        old = topic.partitions
        topic.partitions = old + len(logs)
        try:
            self._write(topic)
        except BaseException:
            topic.partitions = old
            for plog in logs:
                plog.delete()
            raise
        topic.logs.extend(logs)
        self._partitions += len(logs)
        self.version += 1

    def partition_count(self) -> int:
        return self._partitions

    def set_configs(self, name: str, configs: dict[str, str]) -> None:
        topic = self.topics[name]
        topic.configs = dict(configs)
        self._write(topic)
        new_config = self.log_config(topic)
        for plog in topic.logs:
            plog.update_config(new_config)

    def set_group_configs(self, group_id: str, configs: dict[str, str]) -> None:
        """Record a group's overrides, checked by the caller (none: remove the entry); the
        caller fsyncs the metadata log before acknowledging."""
        value = dict(configs)
        self.write_records([(["group_config", group_id], value or None)])
        if value:
            self.group_configs[group_id] = value
        else:
            self.group_configs.pop(group_id, None)

    def delete_group_configs(self, group_id: str) -> None:
        if group_id in self.group_configs:
            self.set_group_configs(group_id, {})

    def close(self, *, clean: bool) -> None:
        for plog in self.all_logs():
            plog.close(clean=clean)


def _record_kind(record: Record) -> str:
    key = msgpack.unpackb(record.key or b"")
    need(isinstance(key, list) and len(key) >= 2 and isinstance(key[0], str), "key is not [kind, ...]")
    return str(key[0])


def _decode_topic_record(record: Record) -> tuple[str, Topic | None]:
    """(name, topic or None for a tombstone) of a metadata record; raises on any other shape."""
    key = msgpack.unpackb(record.key or b"")
    need(isinstance(key, list) and len(key) == 2 and key[0] == "topic", 'key is not ["topic", name]')
    name = key[1]
    need(isinstance(name, str) and validate_topic_name(name) is None, "topic name is not valid")
    if record.value is None:
        return name, None
    value = msgpack.unpackb(record.value)
    need(isinstance(value, dict), "value is not a map")
    partitions, configs, topic_id = value.get("partitions"), value.get("configs"), value.get("id")
    need(isinstance(partitions, int) and 0 < partitions <= 1_000_000, "partition count is not valid")
    need(isinstance(topic_id, bytes) and len(topic_id) == 16, "topic id is not 16 bytes")
    need(
        isinstance(configs, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in configs.items()),
        "configs are not a map of strings",
    )
    validate_topic_configs(configs)
    return name, Topic(name, uuid.UUID(bytes=topic_id), partitions, dict(configs), bool(value.get("internal", False)))


def _decode_group_config_record(record: Record) -> tuple[str, dict[str, str]]:
    """(group id, its overrides; empty for a tombstone); raises unless every name and value is
    one Kafka's GroupConfig accepts (the broker-level bounds may have changed since: not judged)."""
    key = msgpack.unpackb(record.key or b"")
    need(isinstance(key, list) and len(key) == 2 and isinstance(key[1], str) and key[1] != "", "group id is not valid")
    group_id = str(key[1])
    if record.value is None:
        return group_id, {}
    value = msgpack.unpackb(record.value)
    need(
        isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()),
        "group configs are not a map of strings",
    )
    try:
        return group_id, {name: str(parse_value(name, raw)) for name, raw in value.items()}
    except KafkaError as e:
        raise Malformed(e.message or "invalid group config") from None
