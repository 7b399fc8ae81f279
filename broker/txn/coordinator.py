"""The transaction coordinator: Kafka's transactions on one broker.

Every transactional id's state is a record in the compacted internal topic
`__transaction_state` (partition ``crc32(id) % transaction.state.log.num.partitions``), fsynced
before any answer depends on it, and replayed on start.  A transaction ends in two durable
steps, as in Kafka: the decision (PrepareCommit / PrepareAbort) is stored first, and EndTxn is
answered once it is on disk (one fsync round); then, in the background, a marker is written to
every partition of the transaction and its offsets are committed to their groups (only on
commit), both made durable in one more round, and the completion stored.  The id's next request
waits for that completion (it queues on the id's lock), as Kafka's coordinator holds the next
AddPartitionsToTxn until its markers are written.  A broker killed between the two steps
finishes the transaction on its next start, so a decision once taken is never lost or reversed.

Requests for one transactional id are served one at a time (a lock per id), so a client's
pipelined requests see each other's effects in order.  Transactions older than their timeout
are aborted with a bumped epoch, which fences the producer that left them open.

Transactions v2 (KIP-890, which ApiVersions finalizes): a transactional Produce v12+ adds its
partition and a TxnOffsetCommit v5+ its group, with no AddPartitionsToTxn or AddOffsetsToTxn;
an EndTxn v5+ bumps the epoch, its markers carry the new one, and its answer says it (an
exhausted epoch moves the producer to a new id once the transaction is complete).
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Awaitable, Callable, Collection, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgpack
import structlog

from broker.clock import Clock
from broker.coordinator.coordinator import COORDINATOR_TOPIC_CONFIG, OFFSETS_TOPIC
from broker.log.partition_log import PartitionLog
from broker.metadata import MetadataStore
from broker.producer_ids import ProducerIdAllocator
from broker.protocol.control import ControlType
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import Record, build_batch
from broker.txn.state import MAX_EPOCH, PendingOffsets, TxnMetadata, TxnState, parse_key, record_of

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from broker.coordinator.coordinator import GroupCoordinator

log = structlog.get_logger(__name__)

TRANSACTION_TOPIC = "__transaction_state"
COORDINATOR_EPOCH = 0  # one broker: the coordinator never moves
MANY_HELD = 1_000  # offsets and partitions of a transaction whose record is built off the loop

Sync = Callable[[Iterable[PartitionLog]], Awaitable[None]]
Notify = Callable[[PartitionLog, int], None]


@dataclass(frozen=True)
class TxnConfig:
    partitions: int = 50
    max_timeout_ms: int = 900_000
    id_expiration_ms: int = 604_800_000
    max_ids: int = 100_000
    max_partitions: int = 10_000


class TransactionCoordinator:
    def __init__(
        self,
        store: MetadataStore,
        *,
        clock: Clock,
        config: TxnConfig,
        producer_ids: ProducerIdAllocator,
        groups: GroupCoordinator,
        sync: Sync,
        notify: Notify,
    ) -> None:
        self.store = store
        self.clock = clock
        self.config = config
        self.producer_ids = producer_ids
        self.groups = groups
        self._sync = sync
        self._notify = notify
        self.txns: dict[str, TxnMetadata] = {}
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}  # per id: the lock, its users
        self._completing: set[asyncio.Task[None]] = set()  # ends answered, their markers not yet written
        self.markers_written = 0
        self.timed_out = 0
        topic = store.get(TRANSACTION_TOPIC)
        self.partitions = topic.partitions if topic is not None else config.partitions
        if topic is not None:
            self._load()

    # --- persistence -----------------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        return zlib.crc32(transactional_id.encode()) % self.partitions

    def _log_for(self, transactional_id: str) -> PartitionLog:
        if self.store.get(TRANSACTION_TOPIC) is None:
            self.store.create_topic(TRANSACTION_TOPIC, self.partitions, COORDINATOR_TOPIC_CONFIG, internal=True)
        plog = self.store.partition_log(TRANSACTION_TOPIC, self.partition_for(transactional_id))
        assert plog is not None
        return plog

    def _load(self) -> None:
        skipped = self.store.skipped
        for p in range(self.partitions):
            plog = self.store.partition_log(TRANSACTION_TOPIC, p)
            assert plog is not None
            for record in plog.records(lambda offset, why: skipped.skip(TRANSACTION_TOPIC, offset, why)):
                try:
                    transactional_id = parse_key(record.key)
                    if record.value is None:
                        self.txns.pop(transactional_id, None)
                        continue
                    meta = TxnMetadata.from_value(transactional_id, msgpack.unpackb(record.value))
                except Exception as e:
                    skipped.skip(TRANSACTION_TOPIC, record.offset, f"{type(e).__name__}: {e}")
                    continue
                self.txns[transactional_id] = meta
        log.info("transaction coordinator loaded", transactional_ids=len(self.txns))

    async def _store(self, meta: TxnMetadata | None, transactional_id: str, *, durable: bool = True) -> None:
        """Make `meta` durable, then current.  Raises KafkaError when the disk refuses.  A
        completion need not wait for its fsync (`durable=False`): lost, it leaves the decision
        stored before it, which the next start completes again (markers and offsets are
        idempotent), and the next durable write of the partition carries it anyway.

        The record of a transaction holding many offsets or partitions is built in a worker
        thread, the loop free meanwhile: every caller holds the id's lock, so `meta` is still
        the state to store when it is done."""
        held = 0 if meta is None else len(meta.partitions) + sum(len(o) for o in meta.offsets.values())
        if held > MANY_HELD:
            key, value = await asyncio.to_thread(record_of, meta, transactional_id)
        else:
            key, value = record_of(meta, transactional_id)
        batch = build_batch([Record(0, self.clock.now_ms(), key, value)])
        try:
            plog = self._log_for(transactional_id)
            plog.append_internal(batch)
            if durable:
                await self._sync([plog])
        except OSError as e:
            log.error("cannot store transaction state", transactional_id=transactional_id, error=str(e))  # noqa: TRY400
            raise KafkaError(ErrorCode.coordinator_not_available, f"transaction state not stored: {e}") from e
        if meta is None:
            self.txns.pop(transactional_id, None)
        else:
            self.txns[transactional_id] = meta

    @asynccontextmanager
    async def _locked(self, transactional_id: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(transactional_id) or (asyncio.Lock(), 0)
        self._locks[transactional_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[transactional_id]
            if users == 1:
                del self._locks[transactional_id]
            else:
                self._locks[transactional_id] = (lock, users - 1)

    # --- InitProducerId --------------------------------------------------------------

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, producer_id: int = -1, producer_epoch: int = -1
    ) -> tuple[int, int]:
        """(producer id, epoch) for the producer that now owns `transactional_id`; the previous
        owner is fenced and its open transaction aborted.  Raises KafkaError."""
        if not transactional_id:
            raise KafkaError(ErrorCode.invalid_request, "the transactional id is empty")
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            raise KafkaError(
                ErrorCode.invalid_transaction_timeout,
                f"transaction timeout {timeout_ms} ms is outside (0, {self.config.max_timeout_ms}]",
            )
        async with self._locked(transactional_id):
            now = self.clock.now_ms()
            meta = self.txns.get(transactional_id)
            if meta is None:
                if len(self.txns) >= self.config.max_ids:
                    raise KafkaError(ErrorCode.policy_violation, f"the broker holds {len(self.txns)} transactional ids")
                meta = TxnMetadata(transactional_id, self.producer_ids.allocate(), 0, timeout_ms, TxnState.EMPTY, now)
                await self._store(meta, transactional_id)
                return meta.producer_id, meta.producer_epoch
            if producer_id != -1:  # KIP-360: the producer says which epoch it had
                current = (meta.producer_id, meta.producer_epoch)
                if (producer_id, producer_epoch) == (meta.last_producer_id, meta.last_producer_epoch):
                    return current  # its retry of a bump that succeeded
                if (producer_id, producer_epoch) != current:
                    raise KafkaError(ErrorCode.producer_fenced, "the producer's epoch is not the current one")
            if meta.state.preparing:
                await self._complete(meta)
                meta = self.txns[transactional_id]
            if meta.state == TxnState.ONGOING:
                meta = await self._abort_fenced(meta)
            bumped = self._bump(meta).evolve(timeout_ms=timeout_ms, update_ms=self.clock.now_ms())
            await self._store(bumped, transactional_id)
            return bumped.producer_id, bumped.producer_epoch

    def _bump(self, meta: TxnMetadata) -> TxnMetadata:
        if meta.producer_epoch >= MAX_EPOCH:  # exhausted: a new producer id, as Kafka
            return meta.evolve(
                producer_id=self.producer_ids.allocate(),
                producer_epoch=0,
                last_producer_id=meta.producer_id,
                last_producer_epoch=meta.producer_epoch,
            )
        return meta.evolve(
            producer_epoch=meta.producer_epoch + 1,
            last_producer_id=meta.producer_id,
            last_producer_epoch=meta.producer_epoch,
        )

    async def _abort_fenced(self, meta: TxnMetadata) -> TxnMetadata:
        """Abort an open transaction with a bumped epoch: the markers fence its producer."""
        fenced = self._bump(meta).evolve(state=TxnState.PREPARE_ABORT, update_ms=self.clock.now_ms())
        await self._store(fenced, meta.transactional_id)
        await self._complete(fenced)
        return self.txns[meta.transactional_id]

    # --- the transaction's requests --------------------------------------------------

    def _current(self, transactional_id: str, producer_id: int, producer_epoch: int) -> TxnMetadata:
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            raise KafkaError(
                ErrorCode.invalid_producer_id_mapping,
                f"producer {producer_id} does not own transactional id {transactional_id!r}",
            )
        if producer_epoch != meta.producer_epoch:  # each API tells it as Kafka's does (broker/handlers)
            raise KafkaError(
                ErrorCode.producer_fenced,
                f"epoch {producer_epoch} is not the current {meta.producer_epoch}: the producer was fenced",
            )
        if meta.state.preparing:
            raise KafkaError(ErrorCode.concurrent_transactions, "the previous transaction is still completing")
        return meta

    async def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[tuple[str, int]]
    ) -> None:
        """AddPartitionsToTxn (and AddOffsetsToTxn's offsets partition).  Raises KafkaError."""
        async with self._locked(transactional_id):
            meta = self._current(transactional_id, producer_id, producer_epoch)
            await self._add(meta, frozenset(partitions), None)

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str) -> None:
        async with self._locked(transactional_id):
            meta = self._current(transactional_id, producer_id, producer_epoch)
            self.groups.ensure_offsets_topic()
            offsets_partition = (OFFSETS_TOPIC, self.groups.partition_for(group_id))
            await self._add(meta, frozenset([offsets_partition]), group_id)

    async def _add(self, meta: TxnMetadata, partitions: frozenset[tuple[str, int]], group_id: str | None) -> None:
        """Begin the transaction (from a settled state) or widen the ongoing one."""
        ongoing = meta.state == TxnState.ONGOING
        if ongoing and partitions <= meta.partitions and (group_id is None or group_id in meta.offsets):
            return  # nothing new: no write
        merged = meta.partitions | partitions if ongoing else partitions
        if len(merged) > self.config.max_partitions:
            raise KafkaError(ErrorCode.policy_violation, f"a transaction spans at most {self.config.max_partitions}")
        offsets = dict(meta.offsets) if ongoing else {}
        if group_id is not None:
            offsets.setdefault(group_id, {})
        now = self.clock.now_ms()
        await self._store(
            meta.evolve(
                state=TxnState.ONGOING,
                partitions=merged,
                offsets=offsets,
                start_ms=meta.start_ms if ongoing else now,
                update_ms=now,
            ),
            meta.transactional_id,
        )

    async def commit_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        offsets: PendingOffsets,
        *,
        add_group: bool = False,
    ) -> None:
        """TxnOffsetCommit: offsets held with the transaction until it commits.  `add_group`
        (v5+, transactions v2) adds the group first, as AddOffsetsToTxn would."""
        async with self._locked(transactional_id):
            meta = self._current(transactional_id, producer_id, producer_epoch)
            if add_group and (meta.state != TxnState.ONGOING or group_id not in meta.offsets):
                self.groups.ensure_offsets_topic()
                await self._add(meta, frozenset([(OFFSETS_TOPIC, self.groups.partition_for(group_id))]), group_id)
                meta = self.txns[transactional_id]
            if meta.state != TxnState.ONGOING or group_id not in meta.offsets:
                raise KafkaError(ErrorCode.invalid_txn_state, f"group {group_id!r} was not added to the transaction")
            pending = {**meta.offsets[group_id], **offsets}
            await self._store(
                meta.evolve(offsets={**meta.offsets, group_id: pending}, update_ms=self.clock.now_ms()),
                transactional_id,
            )

    async def forget_topics(self, topics: Collection[str]) -> None:
        """Deleted topics' offsets held with open transactions are dropped, durably, so that
        committing a transaction cannot hand them to a topic created again under a name
        (Kafka drops pending transactional offsets of deleted partitions too)."""
        if topics:
            await self._drop_pending(lambda _, tp: tp[0] in topics)

    async def forget_group(self, group_id: str) -> None:
        """A deleted group's offsets held with open transactions are dropped, durably, so that
        committing a transaction cannot bring the group back (Kafka's DeleteGroups drops them too)."""
        await self._drop_pending(lambda group, _: group == group_id)

    async def forget_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> None:
        """OffsetDelete: the group's offsets of `partitions` held with open transactions go
        too, durably (as Kafka's tombstones for them drop pending transactional offsets)."""
        doomed = set(partitions)
        if doomed:
            await self._drop_pending(lambda group, tp: group == group_id and tp in doomed)

    async def _drop_pending(self, doomed: Callable[[str, tuple[str, int]], bool]) -> None:
        """Each transaction is changed under its lock: one completing meanwhile has committed
        its offsets before this returns (the caller removes committed offsets after)."""

        def holds(meta: TxnMetadata) -> bool:
            return any(doomed(group, tp) for group, pending in meta.offsets.items() for tp in pending)

        for transactional_id in [t for t, meta in self.txns.items() if holds(meta)]:
            async with self._locked(transactional_id):
                meta = self.txns.get(transactional_id)
                if meta is None or not holds(meta):
                    continue
                kept = {
                    group: {tp: o for tp, o in pending.items() if not doomed(group, tp)}
                    for group, pending in meta.offsets.items()
                }
                await self._store(meta.evolve(offsets=kept), transactional_id)

    def pending_offsets(self, group_id: str) -> set[tuple[str, int]]:
        """The partitions of `group_id` with offsets in an open transaction (require_stable)."""
        return {tp for meta in self.txns.values() for tp in meta.offsets.get(group_id, {})}

    async def end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool, *, bump: bool = False
    ) -> tuple[int, int]:
        """EndTxn; the producer id and epoch to go on with.  `bump` is transactions v2 (EndTxn
        v5+).  Raises KafkaError."""
        async with self._locked(transactional_id):
            if bump:
                return await self._end_v2(transactional_id, producer_id, producer_epoch, commit)
            meta = self._current(transactional_id, producer_id, producer_epoch)
            done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
            if meta.state == done:
                return meta.producer_id, meta.producer_epoch  # a retry of the request that completed it
            if meta.state != TxnState.ONGOING:
                raise KafkaError(ErrorCode.invalid_txn_state, f"no transaction to end: it is {meta.state.value}")
            prepared = meta.evolve(
                state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT, update_ms=self.clock.now_ms()
            )
            await self._store(prepared, transactional_id)
            await self._complete_next(transactional_id)
            return meta.producer_id, meta.producer_epoch

    async def _end_v2(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> tuple[int, int]:
        """Kafka's EndTxn of transactions v2.  Each end bumps the epoch, so the epoch alone tells
        a retry (one below the current, or the last of an exhausted id) from the next end; an
        abort with nothing open still bumps it (the client may not know what its produce added):

        state           abort: retry / current    commit: retry / current
        Empty           PRODUCER_FENCED / bump    PRODUCER_FENCED / INVALID_TXN_STATE
        CompleteAbort   none / bump               INVALID_TXN_STATE / INVALID_TXN_STATE
        CompleteCommit  INVALID_TXN_STATE / bump  none / INVALID_TXN_STATE
        """
        meta = self.txns.get(transactional_id)
        if meta is None:
            raise KafkaError(ErrorCode.invalid_producer_id_mapping, f"no transactional id {transactional_id!r}")
        retry_on_overflow = (
            meta.last_producer_id == producer_id and producer_epoch == MAX_EPOCH and meta.producer_epoch == 0
        )
        retry_on_bump = meta.producer_epoch == producer_epoch + 1
        if meta.producer_id != producer_id and not retry_on_overflow:
            raise KafkaError(
                ErrorCode.invalid_producer_id_mapping,
                f"producer {producer_id} does not own transactional id {transactional_id!r}",
            )
        state = meta.state
        if state in (TxnState.ONGOING, TxnState.EMPTY):
            valid = producer_epoch == meta.producer_epoch
        elif state.preparing:
            valid = retry_on_bump
        else:
            valid = retry_on_bump or retry_on_overflow or producer_epoch == meta.producer_epoch
        if not valid:
            raise KafkaError(
                ErrorCode.producer_fenced, f"epoch {producer_epoch} is not the current {meta.producer_epoch}"
            )
        retry = retry_on_bump or retry_on_overflow
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if state == TxnState.ONGOING or (not commit and not retry and state.settled):
            return await self._prepare_v2(meta, commit)
        if state == done and retry:
            return meta.producer_id, meta.producer_epoch  # a retry of the end that completed it
        if state == (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT):
            raise KafkaError(ErrorCode.concurrent_transactions, "the transaction is still completing")
        raise KafkaError(
            ErrorCode.invalid_txn_state, f"cannot {'commit' if commit else 'abort'}: the transaction is {state.value}"
        )

    async def _prepare_v2(self, meta: TxnMetadata, commit: bool) -> tuple[int, int]:
        """The decision of a v2 end, stored with the bumped epoch its markers carry, then its
        completion; the producer id and epoch the producer goes on with."""
        now = self.clock.now_ms()
        exhausted = meta.producer_epoch >= MAX_EPOCH
        prepared = meta.evolve(
            state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
            producer_epoch=meta.producer_epoch + 1,  # at most 0x7FFF: an exhausted epoch moves to a new id
            last_producer_id=meta.producer_id,
            last_producer_epoch=meta.producer_epoch,
            next_producer_id=self.producer_ids.allocate() if exhausted else -1,
            start_ms=meta.start_ms if meta.state == TxnState.ONGOING else now,
            update_ms=now,
        )
        await self._store(prepared, meta.transactional_id)
        await self._complete_next(meta.transactional_id)
        if exhausted:  # what the completion moves the producer to
            return prepared.next_producer_id, 0
        return prepared.producer_id, prepared.producer_epoch

    def holds(self, transactional_id: str, producer_id: int, producer_epoch: int, tp: tuple[str, int]) -> bool:
        """Whether the producer's ongoing transaction has `tp` already (nothing to add)."""
        meta = self.txns.get(transactional_id)
        return (
            meta is not None
            and (meta.producer_id, meta.producer_epoch) == (producer_id, producer_epoch)
            and meta.state == TxnState.ONGOING
            and tp in meta.partitions
        )

    def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[tuple[str, int]]
    ) -> dict[tuple[str, int], ErrorCode]:
        """Kafka's verification that partitions are in the producer's transaction (KIP-890): a
        partition outside it is TRANSACTION_ABORTABLE.  Raises KafkaError for the whole request."""
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            raise KafkaError(ErrorCode.invalid_producer_id_mapping, "the producer does not own the transactional id")
        if producer_epoch != meta.producer_epoch:
            raise KafkaError(
                ErrorCode.producer_fenced, f"epoch {producer_epoch} is not the current {meta.producer_epoch}"
            )
        if meta.state.preparing:
            raise KafkaError(ErrorCode.concurrent_transactions, "the previous transaction is still completing")
        return {tp: ErrorCode.none if tp in meta.partitions else ErrorCode.transaction_abortable for tp in partitions}

    # --- completion ------------------------------------------------------------------

    async def _complete_next(self, transactional_id: str) -> None:
        """Complete the decided transaction in the background, next under the id's lock (the
        caller holds it): the task queues on the lock before the caller lets it go, so the id's
        next request finds the transaction complete.  A completion the disk refuses stays
        decided; the periodic pass or the next start finishes it."""
        task = asyncio.create_task(self._finish_decided(transactional_id, quiet=True))
        self._completing.add(task)
        task.add_done_callback(self._completed)
        await asyncio.sleep(0)  # the task's first step: it waits on the lock

    def _completed(self, task: asyncio.Task[None]) -> None:
        self._completing.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            message = error.message if isinstance(error, KafkaError) else repr(error)
            log.warning("transaction completion deferred: the periodic pass retries it", error=message)

    async def drain(self, within_s: float = 10.0) -> None:
        """Wait for the completions in flight, so a clean stop leaves none to recover; those
        still waiting `within_s` later (a disk that hangs) are cancelled: their decisions are
        durable, and the next start completes them."""
        if not self._completing:
            return
        _, pending = await asyncio.wait(self._completing, timeout=within_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def _complete(self, meta: TxnMetadata) -> None:
        """Markers, offsets, then the completion record: the second step of an end."""
        commit = meta.state == TxnState.PREPARE_COMMIT
        control = ControlType.COMMIT if commit else ControlType.ABORT
        touched: list[PartitionLog] = []
        for topic, partition in sorted(meta.partitions):
            if topic == OFFSETS_TOPIC:
                continue  # offsets are held by the transaction, not written to the log early
            plog = self.store.partition_log(topic, partition)
            if plog is None:
                continue  # the topic was deleted meanwhile
            try:
                result = plog.append_marker(
                    meta.producer_id, meta.producer_epoch, control, coordinator_epoch=COORDINATOR_EPOCH
                )
            except KafkaError as e:
                if e.code == ErrorCode.kafka_storage_error:
                    raise KafkaError(ErrorCode.coordinator_not_available, e.message) from e
                log.warning("transaction marker refused", topic=topic, partition=partition, error=e.message)
                continue
            self.markers_written += 1
            self._notify(plog, result.last_offset - result.base_offset + 1)
            touched.append(plog)
        # The markers and the offsets in one fsync round: started in one loop iteration, their
        # syncs share the flusher's round.  Their order does not matter: the decision is durable,
        # and completing again writes both again.
        offsets = meta.offsets.items() if commit else ()
        stored = await asyncio.gather(
            self._sync(touched), *(self.groups.commit(g, o) for g, o in offsets), return_exceptions=True
        )
        for error in stored:
            if isinstance(error, OSError):
                raise KafkaError(ErrorCode.coordinator_not_available, f"markers or offsets not stored: {error}")
            if isinstance(error, BaseException):
                raise error
        completed = meta.evolve(
            state=TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT,
            partitions=frozenset(),
            offsets={},
            start_ms=-1,
            update_ms=self.clock.now_ms(),
        )
        if meta.next_producer_id >= 0:  # the epoch is exhausted: the producer goes on as a new id
            completed = completed.evolve(
                producer_id=meta.next_producer_id,
                producer_epoch=0,
                last_producer_id=meta.producer_id,
                next_producer_id=-1,
            )
        await self._store(completed, meta.transactional_id, durable=False)

    async def recover(self) -> None:
        """Finish the transactions a stop interrupted between their decision and completion."""
        for transactional_id, meta in list(self.txns.items()):
            if meta.state.preparing:
                await self._finish_decided(transactional_id)

    async def _finish_decided(self, transactional_id: str, *, quiet: bool = False) -> None:
        async with self._locked(transactional_id):
            current = self.txns.get(transactional_id)
            if current is not None and current.state.preparing:
                await self._complete(current)
                if not quiet:
                    log.info("decided transaction completed", transactional_id=transactional_id)

    async def tick(self) -> None:
        """Abort timed-out transactions; forget ids idle past transactional.id.expiration.ms;
        retry completions a full disk interrupted."""
        now = self.clock.now_ms()
        for transactional_id, meta in list(self.txns.items()):
            try:
                if meta.state == TxnState.ONGOING and now - meta.start_ms > meta.timeout_ms:
                    async with self._locked(transactional_id):
                        current = self.txns.get(transactional_id)
                        if current is not None and current.state == TxnState.ONGOING:
                            self.timed_out += 1
                            await self._abort_fenced(current)
                            log.info("timed-out transaction aborted", transactional_id=transactional_id)
                elif meta.state.preparing:
                    await self._finish_decided(transactional_id)
                elif meta.state.settled and now - meta.update_ms > self.config.id_expiration_ms:
                    async with self._locked(transactional_id):
                        current = self.txns.get(transactional_id)
                        if current is not None and current.state.settled:
                            await self._store(None, transactional_id)
            except KafkaError as e:
                log.warning("transaction housekeeping failed", transactional_id=transactional_id, error=e.message)

    def open_transactions(self) -> list[TxnMetadata]:
        return [m for m in self.txns.values() if not m.state.settled]
