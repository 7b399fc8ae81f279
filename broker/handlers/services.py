"""The parts of the broker's hub that several handler families use, as protocols.

Each handler module names what it depends on in a protocol of its own, built from these and
the members only it uses; `broker.handlers.Services` joins them all, and mypy checks that the
hub (`broker.core.Broker`) satisfies it where the server hands the hub to the API table.
Members a handler only reads are read-only properties."""

from __future__ import annotations

from collections.abc import Container, Iterable
from typing import Protocol

from broker.appends import AppendWatch
from broker.config import BrokerConfig
from broker.coordinator.coordinator import GroupCoordinator
from broker.log.log_dir import LogDir
from broker.log.partition_log import PartitionLog
from broker.metadata import AutoCreation, MetadataStore, Topic
from broker.metrics import BrokerMetrics
from broker.quotas import Quotas
from broker.security.authorizer import Security
from broker.share.coordinator import ShareCoordinator
from broker.txn.coordinator import TransactionCoordinator


class HasSecurity(Protocol):
    """Authorization, authentication, ACLs and SCRAM credentials."""

    @property
    def security(self) -> Security: ...


class HasStore(Protocol):
    """Topics, their partitions' logs and the cluster metadata."""

    @property
    def store(self) -> MetadataStore: ...


class HasConfig(Protocol):
    """The broker's settings."""

    @property
    def config(self) -> BrokerConfig: ...


class HasNodeId(Protocol):
    @property
    def node_id(self) -> int: ...


class HasLogDir(Protocol):
    """The log directory, offline after an I/O error."""

    @property
    def log_dir(self) -> LogDir: ...


class HasMetrics(Protocol):
    @property
    def metrics(self) -> BrokerMetrics: ...


class HasQuotas(Protocol):
    @property
    def quotas(self) -> Quotas: ...


class HasGroupCoordinator(Protocol):
    """Classic and consumer (KIP-848) groups and their committed offsets."""

    @property
    def coordinator(self) -> GroupCoordinator: ...


class HasShareCoordinator(Protocol):
    """Share groups (KIP-932)."""

    @property
    def shares(self) -> ShareCoordinator: ...


class HasTransactions(Protocol):
    @property
    def transactions(self) -> TransactionCoordinator: ...


class MetadataDurability(Protocol):
    async def sync_metadata(self) -> None:
        """Cluster metadata written so far is on disk."""


class LogDurability(Protocol):
    async def sync(self, logs: Iterable[PartitionLog]) -> None:
        """What an acknowledgement of appends to `logs` waits for."""


class AppendNotices(Protocol):
    def notify_append(self, plog: PartitionLog, nbytes: int) -> None:
        """`nbytes` were appended to `plog` (long polls, flush.messages)."""


class AppendWatches(Protocol):
    """The Fetch long poll's registrations for appends."""

    def watch_appends(self, logs: list[PartitionLog], needed_bytes: int) -> AppendWatch: ...

    def unwatch(self, watch: AppendWatch) -> None: ...


class VisibleTopics(Protocol):
    def visible_topics(self) -> list[Topic]: ...


class Endpoint(Protocol):
    def endpoint(self, listener: str) -> tuple[str, int]:
        """The address to tell a client connected to `listener`."""


class TopicLifecycle(Protocol):
    """Creating, growing and deleting topics (CreateTopics, CreatePartitions, DeleteTopics)."""

    @property
    def INLINE_PARTITIONS(self) -> int: ...

    @property
    def pending_topics(self) -> Container[str]: ...

    def check_new_topic(
        self, name: str, partitions: int, replication: int, configs: dict[str, str | None]
    ) -> dict[str, str]: ...

    def reserve_topic(self, name: str, partitions: int = 0) -> None: ...

    def release_topic(self, name: str, partitions: int = 0) -> None: ...

    def check_partition_budget(self, new: int) -> None: ...

    def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> Topic: ...

    async def create_topic_off_loop(self, name: str, partitions: int, configs: dict[str, str]) -> Topic: ...

    def add_partitions(self, name: str, count: int) -> None: ...

    async def add_partitions_off_loop(self, name: str, count: int) -> None: ...

    def delete_topic(self, name: str) -> None: ...


class TopicAutoCreation(Protocol):
    """auto.create.topics.enable: a request for an unknown topic creates it."""

    def auto_create_allowed(self, name: str) -> bool: ...

    def auto_create_off_loop(self, name: str) -> AutoCreation | None: ...


class TopicService(TopicLifecycle, TopicAutoCreation, Protocol):
    """The hub's topic service (`broker.topic_lifecycle.Topics`): all its handlers use of it."""


class HasTopicLifecycle(Protocol):
    """The hub's topic service, as the topic requests use it."""

    @property
    def topics(self) -> TopicLifecycle: ...


class HasTopicAutoCreation(Protocol):
    """The hub's topic service, as Metadata uses it."""

    @property
    def topics(self) -> TopicAutoCreation: ...
