"""The group coordinator's settings, shared by the shard and both of its managers."""

from __future__ import annotations

from dataclasses import dataclass, field

from broker.coordinator.consumer_groups import ConsumerGroupConfig


@dataclass(frozen=True)
class CoordinatorConfig:
    offsets_partitions: int = 1
    initial_rebalance_delay_ms: int = 100
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    max_metadata_bytes: int = 4096
    cleanup_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    consumer: ConsumerGroupConfig = field(default_factory=ConsumerGroupConfig)  # the consumer group protocol (KIP-848)
