"""Cluster metadata: topics, their ids, partition counts and config overrides.

Stored like everything else, as a compacted internal topic in the broker's own log
(`__cluster_metadata`, one partition, msgpack keys and values) and replayed on start.
Metadata writes are fsynced before they are acknowledged.  The topic is internal: Kafka
clients never see it.
"""

from __future__ import annotations

import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import msgpack
import structlog

from broker.clock import Clock
from broker.config import BrokerConfig, LogConfig
from broker.log.partition_log import PartitionLog
from broker.protocol.records import Record, build_batch

log = structlog.get_logger(__name__)

METADATA_TOPIC = "__cluster_metadata"
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
        self.meta_log = PartitionLog(
            partition_dir(self.data_dir, METADATA_TOPIC, 0),
            METADATA_TOPIC,
            0,
            LogConfig.from_strings({**config.topic_defaults(), **_METADATA_CONFIG}),
            clock,
            recover=recover,
        )
        self._replay()
        self._open_logs()

    # --- persistence -----------------------------------------------------------------

    def _replay(self) -> None:
        state: dict[str, dict[str, object] | None] = {}
        for record in self.meta_log.records():
            kind, name = msgpack.unpackb(record.key or b"")
            if kind == "topic":
                state[name] = None if record.value is None else msgpack.unpackb(record.value)
        for name, value in state.items():
            if value is None:
                continue
            topic = Topic(
                name=name,
                topic_id=uuid.UUID(bytes=value["id"]),  # type: ignore[arg-type]
                partitions=int(value["partitions"]),  # type: ignore[call-overload]
                configs=dict(value["configs"]),  # type: ignore[call-overload]
                internal=bool(value.get("internal", False)),
            )
            self.topics[name] = topic
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

    def create_topic(self, name: str, partitions: int, configs: dict[str, str], *, internal: bool = False) -> Topic:
        topic = Topic(name, uuid.uuid4(), partitions, dict(configs), internal)
        self._write(topic)
        topic.logs = [self._open_partition(topic, p) for p in range(partitions)]
        self.topics[name] = topic
        self.by_id[topic.topic_id] = topic
        log.info("topic created", topic=name, partitions=partitions, configs=configs)
        return topic

    def delete_topic(self, name: str) -> Topic:
        topic = self.topics.pop(name)
        self.by_id.pop(topic.topic_id, None)
        self._write(topic, delete=True)
        for plog in topic.logs:
            plog.delete()
        log.info("topic deleted", topic=name)
        return topic

    def add_partitions(self, name: str, count: int) -> None:
        topic = self.topics[name]
        old = topic.partitions
        topic.partitions = count
        self._write(topic)
        topic.logs.extend(self._open_partition(topic, p) for p in range(old, count))

    def set_configs(self, name: str, configs: dict[str, str]) -> None:
        topic = self.topics[name]
        topic.configs = dict(configs)
        self._write(topic)
        new_config = self.log_config(topic)
        for plog in topic.logs:
            plog.update_config(new_config)

    def close(self, *, clean: bool) -> None:
        for plog in self.all_logs():
            plog.close(clean=clean)
