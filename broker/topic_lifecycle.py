"""The topic lifecycle: validating, reserving, creating, growing and deleting topics, and
auto-creating them on first use.

It owns the reservations (names and partitions being made or removed) and stands on the
metadata store alone, with the broker's settings, the thread its file work runs in and the
hook that drops a deleted topic's metric series; the hub builds it and hands it to the
topic handlers (`broker.handlers.services.TopicLifecycle`)."""

from __future__ import annotations

import asyncio
import collections
import gc
from collections.abc import Callable
from concurrent.futures import Executor

import structlog

from broker.config import BrokerConfig, check_combination, validate_topic_configs, validate_topic_name
from broker.log.partition_log import PartitionLog
from broker.metadata import INTERNAL_TOPICS, AutoCreation, MetadataStore, Topic
from broker.protocol.errors import ErrorCode, KafkaError
from kit.settings import ConfigError

log = structlog.get_logger(__name__)


class Topics:
    """Every change to the set of topics and their partitions, with the names and partition
    counts reserved while one is under way."""

    # Topic changes touching more partitions than this leave the event loop (directories
    # and files are made or removed in a worker thread).
    INLINE_PARTITIONS = 64

    def __init__(
        self,
        store: MetadataStore,
        config: BrokerConfig,
        file_workers: Executor,
        forget_metrics: Callable[[str], None],
    ) -> None:
        self._store = store
        self._config = config
        self._file_workers = file_workers  # makes and removes partitions' directories and files
        self._forget_metrics = forget_metrics  # a deleted topic's metric series
        self.pending_topics: collections.Counter[str] = collections.Counter()
        self._pending_partitions = 0

    def check_new_topic(
        self, name: str, partitions: int, replication: int, configs: dict[str, str | None]
    ) -> dict[str, str]:
        """Validate a CreateTopics entry; raises KafkaError with Kafka's code."""
        problem = validate_topic_name(name)
        if problem:
            raise KafkaError(ErrorCode.invalid_topic_exception, problem)
        if name in INTERNAL_TOPICS:
            raise KafkaError(ErrorCode.invalid_request, f"creation of internal topic {name} is prohibited")
        if self._store.get(name) is not None or name in self.pending_topics:
            raise KafkaError(ErrorCode.topic_already_exists, f"topic {name!r} already exists")
        collision = self._colliding_topic(name)
        if collision is not None:
            raise KafkaError(
                ErrorCode.invalid_topic_exception,
                f"topic {name!r} collides with existing topic {collision!r}: "
                "'.' and '_' are interchangeable in metric names",
            )
        if partitions == -1:
            partitions = self._config.values.num_partitions
        if partitions <= 0:
            raise KafkaError(ErrorCode.invalid_partitions, "number of partitions must be larger than 0")
        if replication not in (-1, 1):
            raise KafkaError(
                ErrorCode.invalid_replication_factor,
                f"replication factor {replication} is larger than the 1 available broker",
            )
        try:
            valid = validate_topic_configs(configs)
            check_combination({**self._config.topic_defaults(), **valid})
        except ConfigError as e:
            raise KafkaError(ErrorCode.invalid_config, str(e)) from None
        return valid

    def _colliding_topic(self, name: str) -> str | None:
        """Kafka refuses names that differ from an existing one only by '.' versus '_'."""
        other = self._store.normalized.get(name.replace(".", "_"))
        return other if other is not None and other != name else None

    # --- reservations ----------------------------------------------------------------

    def reserve_topic(self, name: str, partitions: int = 0) -> None:
        """Hold `name` while its partitions are made or removed: nobody else may create it,
        and the partitions count against max.partitions already."""
        self.pending_topics[name] += 1
        self._pending_partitions += partitions

    def release_topic(self, name: str, partitions: int = 0) -> None:
        self.pending_topics[name] -= 1
        if self.pending_topics[name] <= 0:
            del self.pending_topics[name]
        self._pending_partitions -= partitions

    def check_partition_budget(self, new: int) -> None:
        """max.partitions: the broker's total, counting partitions being created."""
        limit = self._config.values.max_partitions
        current = self._store.partition_count() + self._pending_partitions
        if current + new > limit:
            raise KafkaError(
                ErrorCode.policy_violation,
                f"the broker holds {current} partitions; {new} more would exceed max.partitions={limit}",
            )

    # --- changes ---------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> Topic:
        """Create a topic whose name is reserved, on the event loop.  Raises KafkaError."""
        try:
            return self._store.create_topic(name, partitions, configs)
        except OSError as e:
            raise KafkaError(ErrorCode.kafka_storage_error, f"cannot create topic {name!r}: {e}") from e

    async def create_topic_off_loop(self, name: str, partitions: int, configs: dict[str, str]) -> Topic:
        """Create a topic whose name is reserved: its partitions in a worker thread, then its
        record.  Raises KafkaError."""
        topic = self._store.new_topic(name, partitions, configs)
        try:
            logs = await asyncio.get_running_loop().run_in_executor(
                self._file_workers, self._store.open_partitions, topic, 0, partitions
            )
            self._store.register_topic(topic, logs)
        except OSError as e:
            raise KafkaError(ErrorCode.kafka_storage_error, f"cannot create topic {name!r}: {e}") from e
        # Thousands of new long-lived objects: out of the cyclic collector's way, or each full
        # collection walks them all while holding the event loop.
        gc.freeze()
        return topic

    def add_partitions(self, name: str, count: int) -> None:
        """Grow a reserved topic to `count` partitions, on the event loop.  Raises KafkaError."""
        topic = self._store.topics[name]
        try:
            self._grow(name, topic.partitions, self._store.open_partitions(topic, topic.partitions, count))
        except OSError as e:
            raise KafkaError(ErrorCode.kafka_storage_error, f"cannot add partitions to {name!r}: {e}") from e

    async def add_partitions_off_loop(self, name: str, count: int) -> None:
        """Grow a reserved topic: the new partitions made in a worker thread."""
        topic = self._store.topics.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} was deleted meanwhile")
        old = topic.partitions
        try:
            logs = await asyncio.get_running_loop().run_in_executor(
                self._file_workers, self._store.open_partitions, topic, old, count
            )
            self._grow(name, old, logs)
        except OSError as e:
            raise KafkaError(ErrorCode.kafka_storage_error, f"cannot add partitions to {name!r}: {e}") from e
        gc.freeze()  # as for a big new topic

    def _grow(self, name: str, old: int, logs: list[PartitionLog]) -> None:
        topic = self._store.topics.get(name)
        if topic is None or topic.partitions != old:
            for plog in logs:  # deleted (or grown) meanwhile
                plog.delete()
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} changed meanwhile")
        self._store.add_partitions(name, logs)

    def delete_topic(self, name: str) -> None:
        """Remove the topic now; its files go afterwards (in a worker thread when many),
        the name reserved until they are gone so a new topic cannot meet them."""
        logs = self._store.delete_topic(name)
        self._forget_metrics(name)
        if len(logs) <= self.INLINE_PARTITIONS:
            for plog in logs:
                plog.delete()
            return
        self.reserve_topic(name)

        def remove() -> None:
            for plog in logs:
                plog.delete()

        future = asyncio.get_running_loop().run_in_executor(self._file_workers, remove)
        future.add_done_callback(lambda f: self._files_removed(name, f))

    def _files_removed(self, name: str, future: asyncio.Future[None]) -> None:
        self.release_topic(name)
        if not future.cancelled() and future.exception() is not None:
            log.error("removing a deleted topic's files failed", topic=name, error=str(future.exception()))

    # --- auto-creation ---------------------------------------------------------------

    def auto_create_allowed(self, name: str) -> bool:
        """Would a request for this unknown topic create it (before limits)?"""
        return bool(
            self._config.values.auto_create_topics_enable
            and validate_topic_name(name) is None
            and name not in INTERNAL_TOPICS
            and name not in self.pending_topics
            and not self._colliding_topic(name)
        )

    def auto_create_off_loop(self, name: str) -> AutoCreation | None:
        """Kafka's auto.create.topics.enable: a metadata request for an unknown topic creates it
        with the broker defaults.  The name and its partitions are reserved now; the partitions
        are made in a worker thread by a task that runs even if the asker goes away.  None when
        disabled, invalid or over the limits."""
        if not self.auto_create_allowed(name):
            return None
        partitions = self._config.values.num_partitions
        try:
            self.check_partition_budget(partitions)
        except KafkaError as e:
            log.warning("cannot auto-create topic", topic=name, error=e.message)
            return None
        self.reserve_topic(name, partitions)

        async def create() -> Topic | None:
            try:
                topic = await self.create_topic_off_loop(name, partitions, {})
            except KafkaError as e:
                log.warning("cannot auto-create topic", topic=name, error=e.message)
                return None
            finally:
                self.release_topic(name, partitions)
            log.info("auto-created topic", topic=name)
            return topic

        return AutoCreation(partitions, asyncio.ensure_future(create()))
