"""Prometheus metrics of one broker (own registry, so several brokers can share a
process in tests)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector

from broker.coordinator.group import GroupState
from broker.log.files import FILES

if TYPE_CHECKING:
    from broker.coordinator.coordinator import GroupCoordinator
    from broker.metadata import MetadataStore
    from broker.share.coordinator import ShareCoordinator

# The mechanisms a label may name: a client names its mechanism before it authenticates, so any
# other string is counted as "other", never made a label (each would be a series kept forever).
SASL_MECHANISMS = frozenset({"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER"})
OTHER = "other"

_A = TypeVar("_A", bound=MetricWrapperBase)
_B = TypeVar("_B", bound=MetricWrapperBase)


class _LogCollector(Collector):
    def __init__(self, store: Callable[[], MetadataStore | None]) -> None:
        self._store = store

    def collect(self) -> Iterator[Metric]:
        store = self._store()
        if store is None:
            return
        labels = ["topic", "partition"]
        size = GaugeMetricFamily("streamshop_log_size_bytes", "Bytes on disk per partition", labels=labels)
        end = GaugeMetricFamily("streamshop_log_end_offset", "Log end offset per partition", labels=labels)
        start = GaugeMetricFamily("streamshop_log_start_offset", "Log start offset per partition", labels=labels)
        segments = GaugeMetricFamily("streamshop_log_segments", "Segments per partition", labels=labels)
        partitions = corrupt = mismatches = 0
        for plog in store.all_logs():
            corrupt += plog.corrupt_batches_served
            mismatches += sum(s.index_mismatches for s in plog.segments)
            values = [plog.topic, str(plog.partition)]
            size.add_metric(values, plog.size_bytes)
            end.add_metric(values, plog.next_offset)
            start.add_metric(values, plog.log_start_offset)
            segments.add_metric(values, len(plog.segments))
            if plog is not store.meta_log:
                partitions += 1
        yield size
        yield end
        yield start
        yield segments
        # Topic partitions, as Kafka's PartitionCount: the cluster metadata log is not one.
        yield GaugeMetricFamily("streamshop_partitions", "Topic partitions hosted", value=partitions)
        yield CounterMetricFamily(
            "streamshop_log_corrupt_reads", "Reads that met a batch failing its CRC on disk (not served)", value=corrupt
        )
        yield CounterMetricFamily(
            "streamshop_log_index_mismatches",
            "Offset-index entries found wrong when used (scanned instead)",
            value=mismatches,
        )
        skipped = CounterMetricFamily(
            "streamshop_internal_records_skipped",
            "Internal records that did not decode at replay (skipped)",
            labels=["topic"],
        )
        for topic, count in store.skipped.counts.items():
            skipped.add_metric([topic], count)
        yield skipped


class _GroupCollector(Collector):
    """Consumer-group gauges computed at scrape time from the coordinator's state: lag per
    committed partition (log end offset minus committed offset, as `groups describe` and
    /api/groups report it), members, and rebalances since the broker started."""

    def __init__(
        self,
        coordinator: Callable[[], GroupCoordinator | None],
        store: Callable[[], MetadataStore | None],
        shares: Callable[[], ShareCoordinator | None],
    ) -> None:
        self._coordinator = coordinator
        self._store = store
        self._shares = shares

    def collect(self) -> Iterator[Metric]:
        coordinator = self._coordinator()
        store = self._store()
        if coordinator is None or store is None:
            return
        lag = GaugeMetricFamily(
            "streamshop_group_lag",
            "Records a consumer group has yet to consume: log end offset minus committed offset",
            labels=["group", "topic", "partition"],
        )
        for group_id, offsets in sorted(coordinator.offsets.items()):
            for (topic, partition), committed in sorted(offsets.items()):
                plog = store.partition_log(topic, partition)
                if plog is not None:
                    lag.add_metric([group_id, topic, str(partition)], plog.high_watermark - committed.offset)
        members = GaugeMetricFamily("streamshop_group_members", "Members of a consumer group", labels=["group"])
        rebalances = CounterMetricFamily(
            "streamshop_group_rebalances", "Rebalances of a consumer group since the broker started", labels=["group"]
        )
        for group_id, group in sorted(coordinator.groups.items()):
            if group.state == GroupState.DEAD:
                continue
            members.add_metric([group_id], len(group.members))
            rebalances.add_metric([group_id], group.rebalances)
        for group_id, consumer_group in sorted(coordinator.consumer.groups.items()):
            members.add_metric([group_id], len(consumer_group.members))
            rebalances.add_metric([group_id], consumer_group.rebalances)
        in_flight = GaugeMetricFamily(
            "streamshop_share_group_records_in_flight", "Records a share group's members hold locked", labels=["group"]
        )
        shares = self._shares()
        if shares is not None:
            # A share group's lag: the records of a partition it is not done with.
            by_id = {t.topic_id: name for name, t in store.topics.items()}
            held: dict[str, int] = {}
            for (group_id, topic_id, partition), part in sorted(shares.partitions.items(), key=lambda kv: str(kv[0])):
                held[group_id] = held.get(group_id, 0) + part.in_flight()
                name = by_id.get(topic_id)
                plog = store.partition_log(name, partition) if name is not None else None
                if name is not None and plog is not None:
                    lag.add_metric([group_id, name, str(partition)], part.backlog(plog.high_watermark))
            for group_id, share_group in sorted(shares.groups.items()):
                members.add_metric([group_id], len(share_group.members))
                in_flight.add_metric([group_id], held.get(group_id, 0))
        yield lag
        yield members
        yield rebalances
        yield in_flight


class BrokerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.store: MetadataStore | None = None
        self.coordinator: GroupCoordinator | None = None
        self.shares: ShareCoordinator | None = None
        r = self.registry
        self.requests = Counter("streamshop_requests", "Requests handled", ["api"], registry=r)
        self.latency = Histogram(
            "streamshop_request_latency_seconds",
            "Time from request received to response queued",
            ["api"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
        self.bytes_in = Counter("streamshop_bytes_in", "Record bytes appended", ["topic"], registry=r)
        self.bytes_out = Counter("streamshop_bytes_out", "Record bytes served by Fetch", ["topic"], registry=r)
        self.records_in = Counter("streamshop_records_in", "Records appended", ["topic"], registry=r)
        self.records_out = Counter("streamshop_records_out", "Records served by Fetch", ["topic"], registry=r)
        self.errors = Counter("streamshop_request_errors", "Error codes returned", ["api", "error"], registry=r)
        self.connections = Counter("streamshop_connections", "Connections accepted", registry=r)
        self.closed_malformed = Counter(
            "streamshop_connections_closed_malformed", "Connections closed for a malformed request", registry=r
        )
        self.connections_open = Gauge("streamshop_connections_open", "Client connections open", registry=r)
        self.connections_rejected = Counter(
            "streamshop_connections_rejected",
            "Connections closed on accept: max.connections or max.connections.per.ip reached",
            ["reason"],
            registry=r,
        )
        self.connections_idle_closed = Counter(
            "streamshop_connections_idle_closed", "Connections closed after connections.max.idle.ms", registry=r
        )
        self.request_failures = Counter(
            "streamshop_request_failures",
            "Requests whose handling failed (the connection was closed)",
            ["api"],
            registry=r,
        )
        self.long_polls = Gauge("streamshop_fetch_long_polls", "Fetch requests waiting for appends", registry=r)
        open_files = Gauge("streamshop_log_open_files", "Segment files open (log.open.files.max)", registry=r)
        open_files.set_function(FILES.open_count)
        self.request_memory = Gauge(
            "streamshop_request_memory_bytes",
            "Receive-buffer bytes held beyond each connection's base buffer (queued.max.request.bytes)",
            registry=r,
        )
        self.response_memory = Gauge(
            "streamshop_response_memory_bytes",
            "Response bytes held in memory, queued or not yet taken by the client (queued.max.response.bytes)",
            registry=r,
        )
        self.transactions_open = Gauge(
            "streamshop_transactions_open", "Transactions begun and not yet completed", registry=r
        )
        self.transactions_timed_out = Gauge(
            "streamshop_transactions_timed_out", "Transactions the broker aborted at their timeout", registry=r
        )
        self.transaction_markers = Gauge(
            "streamshop_transaction_markers", "Commit and abort markers written to partitions", registry=r
        )
        self.fsync_rounds = Counter("streamshop_fsync_rounds", "Group-commit fsync rounds", registry=r)
        self.log_dir_offline = Gauge(
            "streamshop_log_dir_offline",
            "1 once an I/O error took the log directory offline (until restart)",
            registry=r,
        )
        self.fsync_files = Counter("streamshop_fsync_files", "Segment files fsynced by group commit", registry=r)
        self.loop_lag = Histogram(
            "streamshop_event_loop_lag_seconds",
            "How late the event loop ran its 25 ms housekeeping timer: how long something held it",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1),
            registry=r,
        )
        self.fsync_seconds = Histogram(
            "streamshop_fsync_round_seconds",
            "Duration of one group-commit fsync round",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1),
            registry=r,
        )
        self.authentications = Counter(
            "streamshop_authentications",
            "SASL authentications by mechanism and result (ok, failed, malformed)",
            ["mechanism", "result"],
            registry=r,
        )
        self.quota_sensors = Gauge(
            "streamshop_quota_sensors",
            "Client quota measurements held (one per client id or user measured; idle ones expire)",
            registry=r,
        )
        self.tls_failures = Counter(
            "streamshop_tls_handshake_failures",
            "TLS handshakes that failed or did not finish within authentication.timeout.ms",
            ["reason"],
            registry=r,
        )
        self.authentication_closed = Counter(
            "streamshop_connections_closed_authentication",
            "Connections closed for breaking the SASL sequence, timing out or expiring",
            ["reason"],
            registry=r,
        )
        self.authorization_denied = Counter(
            "streamshop_authorization_denied",
            "Actions the authorizer denied",
            ["operation", "resource_type"],
            registry=r,
        )
        self._appended: dict[str, tuple[Counter, Counter]] = {}
        self._served: dict[str, tuple[Counter, Counter]] = {}
        self._handled: dict[str, tuple[Counter, Histogram]] = {}
        r.register(_LogCollector(lambda: self.store))
        r.register(_GroupCollector(lambda: self.coordinator, lambda: self.store, lambda: self.shares))

    # Per-request counters keep their labelled children: `labels()` takes a lock and builds
    # its key on every call, a cost paid on every produce, fetch and answer.

    def appended(self, topic: str, nbytes: int, records: int) -> None:
        size, count = _children(self._appended, topic, self.bytes_in, self.records_in)
        size.inc(nbytes)
        count.inc(records)

    def served(self, topic: str, nbytes: int, records: int) -> None:
        size, count = _children(self._served, topic, self.bytes_out, self.records_out)
        size.inc(nbytes)
        count.inc(records)

    def forget_topic(self, topic: str) -> None:
        """A deleted topic's series go with it, as Kafka's BrokerTopicStats removes them: topics
        created and deleted in turn must not grow the registry."""
        self._appended.pop(topic, None)
        self._served.pop(topic, None)
        for metric in (self.bytes_in, self.bytes_out, self.records_in, self.records_out):
            with contextlib.suppress(KeyError):
                metric.remove(topic)

    def handled(self, api: str, seconds: float) -> None:
        requests, latency = _children(self._handled, api, self.requests, self.latency)
        requests.inc()
        latency.observe(seconds)

    def authentication(self, mechanism: str | None, result: str) -> None:
        """Count a SASL step's `result`; `mechanism` as the client named it (None: none yet)."""
        label = "none" if mechanism is None else mechanism if mechanism in SASL_MECHANISMS else OTHER
        self.authentications.labels(label, result).inc()

    def fsync_round(self, files: int, seconds: float) -> None:
        self.fsync_rounds.inc()
        self.fsync_files.inc(files)
        self.fsync_seconds.observe(seconds)


def _children(cache: dict[str, tuple[_A, _B]], label: str, first: _A, second: _B) -> tuple[_A, _B]:
    """Two metrics' children for one label value, made once."""
    children = cache.get(label)
    if children is None:
        children = cache[label] = (first.labels(label), second.labels(label))
    return children
