"""The broker without its sockets: storage, metadata, durability and background work; the
topic lifecycle is its service `topics` (broker/topic_lifecycle.py).

`server.py` hands it, with each decoded request, to the request's handler, which sees of it
only the protocol of the services its module uses (`broker.handlers.Services` joins them).
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import structlog

from broker.appends import AppendWatch
from broker.clock import Clock, SystemClock
from broker.config import BrokerConfig
from broker.coordinator.consumer_groups import ConsumerGroupConfig
from broker.coordinator.coordinator import CoordinatorConfig, GroupCoordinator
from broker.group_configs import auto_offset_reset, group_config
from broker.housekeeping import Job, Ticker, ticks
from broker.log import cleaner
from broker.log.cleaner_worker import CleanerProcess
from broker.log.files import FILES, capacity_for
from broker.log.flusher import Flusher
from broker.log.partition_log import PartitionLog
from broker.log.segment import fsync_dir, replace_durably
from broker.metadata import METADATA_TOPIC, MetadataStore, Topic
from broker.metrics import BrokerMetrics
from broker.producer_ids import ProducerIdAllocator
from broker.quotas import Quotas
from broker.security.authorizer import Security
from broker.share.coordinator import GroupSettings, ShareConfig, ShareCoordinator
from broker.topic_lifecycle import Topics
from broker.txn.coordinator import TransactionCoordinator, TxnConfig

log = structlog.get_logger(__name__)

CLEAN_SHUTDOWN = ".clean-shutdown"
_BACKGROUND_SLICE = 256  # partitions a background pass handles before yielding to the loop


def _read_properties(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


class Broker:
    def __init__(self, config: BrokerConfig, clock: Clock | None = None) -> None:
        self.config = config
        self.clock: Clock = clock or SystemClock()
        self.durability: str = config.values.log_durability
        self.page_cache = self.durability == "page-cache"  # acknowledgements do not wait for fsync
        self.data_dir = config.data_dir
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.node_id: int = config.values.node_id
        self.cluster_id = self._load_cluster_id()
        marker = self.data_dir / CLEAN_SHUTDOWN
        self.recovered = not marker.exists()  # no marker: the last run did not stop cleanly
        marker.unlink(missing_ok=True)
        FILES.configure(capacity_for(config.values.log_open_files_max))
        self.metrics = BrokerMetrics()
        self.metrics.long_polls.set_function(self.long_polls)
        self.store = MetadataStore(config, self.clock, recover=self.recovered)
        self.metrics.store = self.store
        self.security = Security(config, self.store, self.metrics)
        self.quotas = Quotas(
            self.store, config.values.quota_window_num, config.values.quota_window_size_seconds, clock=self.clock
        )
        self.metrics.quota_sensors.set_function(lambda: self.quotas.tracked)
        self.producer_ids = ProducerIdAllocator(self.data_dir)
        self.coordinator = GroupCoordinator(
            self.store,
            self.clock,
            CoordinatorConfig(
                offsets_partitions=config.values.offsets_topic_num_partitions,
                initial_rebalance_delay_ms=config.values.group_initial_rebalance_delay_ms,
                min_session_timeout_ms=config.values.group_min_session_timeout_ms,
                max_session_timeout_ms=config.values.group_max_session_timeout_ms,
                offsets_retention_ms=config.values.offsets_retention_minutes * 60_000,
                max_metadata_bytes=config.values.offset_metadata_max_bytes,
                cleanup_interval_ms=config.values.offsets_retention_check_interval_ms,
                consumer=ConsumerGroupConfig(
                    session_timeout_ms=config.values.group_consumer_session_timeout_ms,
                    heartbeat_interval_ms=config.values.group_consumer_heartbeat_interval_ms,
                    assignors=config.values.group_consumer_assignors,
                    max_size=config.values.group_consumer_max_size,
                ),
            ),
            self.sync,
        )
        self.metrics.coordinator = self.coordinator
        self.shares = ShareCoordinator(
            self.store,
            self.clock,
            ShareConfig(
                state_partitions=config.values.share_coordinator_state_topic_num_partitions,
                session_timeout_ms=config.values.group_share_session_timeout_ms,
                heartbeat_interval_ms=config.values.group_share_heartbeat_interval_ms,
                lock_duration_ms=config.values.group_share_record_lock_duration_ms,
                delivery_limit=config.values.group_share_delivery_count_limit,
                max_locks=config.values.group_share_partition_max_record_locks,
                max_size=config.values.group_share_max_size,
                max_sessions=config.values.group_share_max_share_sessions,
            ),
            self.sync,
            settings=self.share_settings,
            other_kind=self._group_kind,
        )
        self.coordinator.is_share_group = self.shares.groups.__contains__
        self.metrics.shares = self.shares
        self.transactions = TransactionCoordinator(
            self.store,
            clock=self.clock,
            config=TxnConfig(
                partitions=config.values.transaction_state_log_num_partitions,
                max_timeout_ms=config.values.transaction_max_timeout_ms,
                id_expiration_ms=config.values.transactional_id_expiration_ms,
                max_ids=config.values.max_transactional_ids,
                max_partitions=config.values.max_partitions_per_transaction,
            ),
            producer_ids=self.producer_ids,
            groups=self.coordinator,
            sync=self.sync,
            notify=self.notify_append,
        )
        self.metrics.transactions_open.set_function(lambda: len(self.transactions.open_transactions()))
        self.metrics.transactions_timed_out.set_function(lambda: self.transactions.timed_out)
        self.metrics.transaction_markers.set_function(lambda: self.transactions.markers_written)
        self.log_dir = self.store.log_dir
        self.metrics.log_dir_offline.set_function(lambda: int(self.log_dir.offline))
        self.flusher = Flusher(on_round=self.metrics.fsync_round, log_dir=self.log_dir)
        # The first listener's advertised address, and every other listener's by name.
        self.advertised: tuple[str, int] = config.advertise or config.listen
        self.first_listener = self.security.listeners[0].name
        self.endpoints: dict[str, tuple[str, int]] = {}
        self._watches: dict[int, set[AppendWatch]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._flushes: set[asyncio.Task[None]] = set()  # flush.messages fsyncs under way
        self._flush_ms_task: asyncio.Task[None] | None = None
        self._flush_ms_logs: list[PartitionLog] = []  # partitions of topics that set flush.ms
        self._flush_ms_last: dict[int, int] = {}
        self._flush_ms_refreshed = -(1 << 62)
        self._ticker = self._housekeeping()
        # CPU work one request may need off the event loop (opening large batches).
        self.workers = ThreadPoolExecutor(max_workers=1, thread_name_prefix="broker-worker")
        self.admin_workers = ThreadPoolExecutor(max_workers=1, thread_name_prefix="broker-admin")
        self._cleaner = CleanerProcess()  # compaction builds there, not in a thread
        self.response_cache: dict[object, bytes] = {}  # encoded parts of responses (handlers' keys)
        # Creating, growing and deleting topics, with the names and partitions reserved meanwhile.
        self.topics = Topics(self.store, config, self.admin_workers, self.metrics.forget_topic)
        truncated = sum(p.truncated_bytes for p in self.store.all_logs())
        log.info(
            "log loaded",
            topics=len(self.store.topics),
            recovered=self.recovered,
            truncated_bytes=truncated,
            durability=self.durability,
        )

    def _load_cluster_id(self) -> str:
        path = self.data_dir / "meta.properties"
        props = _read_properties(path)
        cluster_id = props.get("cluster.id") or self.config.values.cluster_id
        if not cluster_id:
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        content = f"version=1\ncluster.id={cluster_id}\nnode.id={self.node_id}\n".encode()
        if not path.exists() or path.read_bytes() != content:
            # The cluster id must survive a machine crash: clients and tools compare it.
            replace_durably(path, content)
        return cluster_id

    def endpoint(self, listener: str) -> tuple[str, int]:
        """The address to tell a client: that of the listener it connected to."""
        if listener == self.first_listener:
            return self.advertised
        return self.endpoints.get(listener, self.advertised)

    # --- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        self.flusher.start()
        self._ticker.start()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._every("log.retention.check.interval.ms", self._retention_pass), name="retention"),
            loop.create_task(self._every("log.cleaner.backoff.ms", self._cleaner_pass), name="cleaner"),
            loop.create_task(self._recover_transactions(), name="transaction-recovery"),
            loop.create_task(
                self._every("transaction.abort.timed.out.transaction.cleanup.interval.ms", self.transactions.tick),
                name="transaction-timeouts",
            ),
        ]

    async def stop(self) -> None:
        self._ticker.stop()
        await self.transactions.drain()  # ends already answered: their markers, before the flusher stops
        flushes = [*self._flushes, *([self._flush_ms_task] if self._flush_ms_task is not None else [])]
        for task in [*self._tasks, *flushes]:
            task.cancel()
        await asyncio.gather(*self._tasks, *flushes, return_exceptions=True)
        await self.flusher.stop()
        self.workers.shutdown(wait=True)
        self.admin_workers.shutdown(wait=True)
        await self._cleaner.stop()
        self.store.close(clean=True)
        if self.log_dir.offline:
            # No clean-shutdown marker: the next start recovers from what verifies on disk.
            log.warning("log directory was offline: the next start recovers it", error=self.log_dir.error)
            return
        (self.data_dir / CLEAN_SHUTDOWN).write_text("")
        log.info("log closed cleanly")

    async def _recover_transactions(self) -> None:
        try:
            await self.transactions.recover()
        except Exception:
            log.exception("completing interrupted transactions failed; the periodic pass retries")

    async def _every(self, setting: str, job: Callable[[], Awaitable[object]]) -> None:
        interval = self.config.values.int_setting(setting) / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await job()
            except Exception:
                log.exception("background job failed", job=setting)

    def share_settings(self, group_id: str) -> GroupSettings:
        """A share group's configs: its own (`kafka-configs --entity-type groups`), else the
        broker's."""
        overrides = self.store.group_configs.get(group_id, {})

        def value(name: str) -> int | str:
            return group_config(self.config, overrides, name)

        reset, duration_ms = auto_offset_reset(str(value("share.auto.offset.reset")))
        return GroupSettings(
            lock_duration_ms=int(value("share.record.lock.duration.ms")),
            session_timeout_ms=int(value("share.session.timeout.ms")),
            heartbeat_interval_ms=int(value("share.heartbeat.interval.ms")),
            auto_offset_reset=reset,
            reset_duration_ms=duration_ms,
            read_committed=value("share.isolation.level") == "read_committed",
        )

    def _group_kind(self, group_id: str) -> str | None:
        if group_id in self.coordinator.consumer.groups:
            return "consumer"
        return "classic" if group_id in self.coordinator.groups else None

    def _housekeeping(self) -> Ticker:
        return Ticker(
            [
                # Session expiry, join deadlines and offset retention, at a fine grain so a
                # new group balances promptly after its initial delay.
                Job("group-coordinator", 1, self._coordinator_tick),
                Job("flush-ms", ticks(0.1), self._flush_due),
                Job("file-delete-delay", ticks(0.25), self.reap_deleted_segments),
            ],
            self.metrics.loop_lag.observe,
        )

    def _coordinator_tick(self) -> None:
        self.coordinator.tick()
        self.shares.tick()

    def _flush_due(self) -> None:
        """flush.ms: fsync the partitions of topics that set it, at least that often."""
        if self._flush_ms_task is not None and not self._flush_ms_task.done():
            return  # the last round still runs: these partitions are looked at next time
        if self.log_dir.offline:
            return
        now = self.clock.now_ms()
        if now - self._flush_ms_refreshed >= 1000:  # topics and their configs change rarely
            self._flush_ms_refreshed = now
            self._flush_ms_logs = [
                plog
                for topic in self.store.topics.values()
                if topic.logs and topic.logs[0].config.flush_ms < (1 << 62)
                for plog in topic.logs
            ]
        due = []
        for plog in self._flush_ms_logs:
            if now - self._flush_ms_last.get(id(plog), 0) >= plog.config.flush_ms and plog.dirty_segments():
                self._flush_ms_last[id(plog)] = now
                due.append(plog)
        if due:
            self._flush_ms_task = asyncio.get_running_loop().create_task(self.flusher.sync(due))
            self._flush_ms_task.add_done_callback(self._flushed)

    def reap_deleted_segments(self) -> int:
        return self.store.deletions.reap(self.clock.now_ms())

    def run_retention(self) -> int:
        """One retention pass over every partition, at once (tests call it directly)."""
        return sum(self._retain(plog) for plog in self.store.all_logs())

    async def _retention_pass(self) -> int:
        """The periodic pass: yields to the event loop between partitions, so a broker
        with many partitions keeps serving while it runs."""
        deleted = 0
        for i, plog in enumerate(self.store.all_logs()):
            deleted += self._retain(plog)
            if i % _BACKGROUND_SLICE == _BACKGROUND_SLICE - 1:
                await asyncio.sleep(0)
        if deleted:
            log.info("retention deleted segments", segments=deleted)
        return deleted

    def _retain(self, plog: PartitionLog) -> int:
        if not self._live(plog):
            return 0  # its topic was deleted while the pass went on
        deleted = plog.apply_retention()
        plog.producer_state.expire(self.clock.now_ms(), self.config.values.producer_id_expiration_ms)
        return deleted

    def _live(self, plog: PartitionLog) -> bool:
        if plog is self.store.meta_log:
            return True
        topic = self.store.topics.get(plog.topic)
        return topic is not None and plog.partition < len(topic.logs) and topic.logs[plog.partition] is plog

    def run_cleaner(self) -> int:
        if not self.config.values.log_cleaner_enable:
            return 0
        cleaned = 0
        for plog in self.store.all_logs():
            if cleaner.needs_cleaning(plog):
                stats = cleaner.clean(plog)
                if stats is not None:
                    cleaned += 1
                    log.info("compacted", topic=plog.topic, partition=plog.partition, **stats.__dict__)
        return cleaned

    async def _cleaner_pass(self) -> int:
        """The periodic pass: each partition is compacted in a worker thread and its new
        segments swapped in one at a time, so the event loop only does the renames."""
        if not self.config.values.log_cleaner_enable or self.log_dir.offline:
            return 0
        cleaned = 0
        for i, plog in enumerate(self.store.all_logs()):
            if i % _BACKGROUND_SLICE == _BACKGROUND_SLICE - 1:
                await asyncio.sleep(0)
            if not (self._live(plog) and cleaner.needs_cleaning(plog)):
                continue
            chosen = cleaner.plan(plog)
            if chosen is None:
                continue
            try:
                built = await self._cleaner.build(chosen.spec)
                result = cleaner.attach(chosen, built)
            except OSError as e:  # a segment deleted meanwhile (retention, topic deletion), or the disk
                log.warning("compaction skipped", topic=plog.topic, partition=plog.partition, error=str(e))
                continue
            installed = 0
            for group in result.groups:
                if not self._live(plog):
                    break  # its topic was deleted meanwhile: the directory is going too
                installed += await self._install(plog, group, result.staging)
            if not self._live(plog):
                cleaner.discard(result)
                continue
            stats = cleaner.finish(plog, result, installed)
            cleaned += 1
            log.info("compacted", topic=plog.topic, partition=plog.partition, **stats.__dict__)
        return cleaned

    async def _install(self, plog: PartitionLog, group: cleaner.StagedGroup, staging: Path) -> bool:
        """One compacted group swapped in: renames and the in-memory swap on the loop, the
        directory fsyncs (tens of milliseconds on a busy disk) in a worker thread."""
        loop = asyncio.get_running_loop()
        swap = cleaner.begin_install(plog, group, staging)
        if swap is None:
            return False
        await loop.run_in_executor(self.admin_workers, fsync_dir, plog.directory)
        if not self._live(plog):
            return False  # deleted meanwhile: its directory goes, the swap with it
        installed = cleaner.commit_install(plog, group, staging, swap)
        await loop.run_in_executor(self.admin_workers, fsync_dir, plog.directory)
        return installed

    def files_reserved(self) -> int:
        """Descriptors the log may keep open at once (sockets must leave them room)."""
        return FILES.capacity

    # --- durability ------------------------------------------------------------------

    async def sync(self, logs: Iterable[PartitionLog]) -> None:
        """What an acknowledgement waits for.  log.durability=fsync: everything appended to
        `logs` is on disk.  page-cache: it is in the page cache already (appends write at
        once), so nothing, as Kafka on one replica; flush.messages and flush.ms still fsync.

        Both wait for the topic records `logs` depend on, as Kafka's controller log is always
        fsynced: an internal topic made on first use (offsets, transactions, share state) has
        its record in the metadata log, and a machine crash that kept its partitions but lost
        that record would leave them orphans, removed at the next start."""
        meta = self.store.meta_log
        if self.page_cache:
            self.log_dir.check()  # an offline directory acknowledges nothing, in either mode
            if meta.dirty_segments():
                await self.flusher.sync([meta])
            return
        if meta.dirty_segments():
            logs = [*logs, meta]
        await self.flusher.sync(logs)

    def answers_wait(self) -> bool:
        """Whether an acknowledgement must await `sync`: always in fsync mode; in page-cache
        mode only while the metadata log has records to fsync or the directory is offline
        (`sync` then raises).  Otherwise a handler answers at once, without a task."""
        return not self.page_cache or self.log_dir.offline or bool(self.store.meta_log.dirty_segments())

    # --- long-poll support -----------------------------------------------------------

    def notify_append(self, plog: PartitionLog, nbytes: int) -> None:
        """`nbytes` were appended to `plog`: complete the long polls they satisfy, and fsync
        it when flush.messages records have come since it last asked, or a segment was rolled
        (as Kafka flushes a rolled segment in the background)."""
        if plog.unflushed_messages >= plog.config.flush_messages or plog.rolled:
            plog.rolled = False
            self._flush_now(plog)
        watches = self._watches.get(id(plog))
        if not watches:
            return
        for watch in list(watches):
            watch.needed -= nbytes
            if watch.needed <= 0 and not watch.future.done():
                watch.future.set_result(None)

    def _flush_now(self, plog: PartitionLog) -> None:
        """flush.messages: an fsync through the group-commit flusher, as flush.ms has; the
        append's answer does not wait for it (acks=all waits for its own)."""
        plog.unflushed_messages = 0
        if self.log_dir.offline:
            return
        task = asyncio.get_running_loop().create_task(self.flusher.sync([plog]))
        self._flushes.add(task)
        task.add_done_callback(self._flushed)

    def _flushed(self, task: asyncio.Task[None]) -> None:
        self._flushes.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background fsync failed", error=str(task.exception()))

    def watch_appends(self, logs: list[PartitionLog], needed_bytes: int) -> AppendWatch:
        """Register now for `needed_bytes` more appended to `logs` (together): the Fetch
        long poll, as Kafka's DelayedFetch, counts appends and reads nothing until they add
        up.  Its future completes when they do; `unwatch` when done or abandoned."""
        watch = AppendWatch(asyncio.get_running_loop().create_future(), needed_bytes, {id(p) for p in logs})
        for key in watch.keys:
            self._watches.setdefault(key, set()).add(watch)
        return watch

    def long_polls(self) -> int:
        """Fetch requests waiting for appends."""
        return len({watch for watches in self._watches.values() for watch in watches})

    def unwatch(self, watch: AppendWatch) -> None:
        for key in watch.keys:
            watches = self._watches.get(key)
            if watches is not None:
                watches.discard(watch)
                if not watches:
                    del self._watches[key]
        if not watch.future.done():
            watch.future.cancel()

    # --- topics ----------------------------------------------------------------------

    def visible_topics(self) -> list[Topic]:
        return [t for t in self.store.topics.values() if t.name != METADATA_TOPIC]

    async def sync_metadata(self) -> None:
        await self.flusher.sync([self.store.meta_log])
