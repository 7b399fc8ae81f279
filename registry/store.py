"""The registry's persistence: its state kept in step with a compacted Kafka topic (`_schemas`).

Every change is one record in a single-partition, `cleanup.policy=compact` topic, keyed and
valued as Confluent Schema Registry writes its `_schemas` topic (`registry.log_records`).
A registry replays the topic from the beginning before it serves, then tails it for as long as it
runs, applying each record to its `RegistryState` (`registry.state`), so any number of
registry processes pointing at one broker converge on the same state.

One writer
----------
Only the primary writes (`registry.election` elects it; the others forward writes to it). When
it becomes primary it opens a transactional producer whose `transactional.id` is the group's:
the broker then fences every earlier primary (its next commit fails) and aborts whatever it left
open, and the new primary reads the log to its end before it picks an id. Each write is one
transaction: catch up, check, `id = max id seen + 1`, `version = highest version + 1`, commit,
and answer once this process has read its own records back and applied them. Readers use
`read_committed`, so a fenced or crashed primary's records are never applied anywhere. With one
writer the log is a plain sequence of changes and records apply last-wins, as Confluent's do; so a
compacted log replays to the same state as the full one.

The highest id handed out is also kept outside the topic (`registry.id_mark`): a registry
refuses to start on a `_schemas` topic that lost its history while those ids are in use.

Its clients never let the broker create a topic (`allow.auto.create.topics=false`): the topic is
created once, compacted, by the admin API at start. A registry that finds it gone (deleted, or
deleted and created again) stops serving writes and says so, rather than writing into a topic
with the broker's defaults; restarting creates it properly.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import structlog
from confluent_kafka import KafkaError, KafkaException, Message, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType
from confluent_kafka.aio import AIOConsumer

from registry import errors, id_mark
from registry.config import RegistryConfig
from registry.election import Primary
from registry.errors import RegistryError
from registry.levels import Level
from registry.log_records import (
    Record,
    config_key,
    config_value,
    delete_subject_key,
    delete_subject_value,
    mode_key,
    mode_value,
    schema_key,
)
from registry.schema_text import ParsedSchema, checked
from registry.state import Mode, RegistryState, SchemaVersion
from registry.writer import CLOSE_SECONDS, Broken, Fenced, TransactionalWriter, WriteFailed

log = structlog.get_logger(__name__)

LATEST = -1
TOPIC_CHECK_SECONDS = 5.0  # how often the tail checks the topic still exists
TAIL_WAIT_SECONDS = 0.1

T = TypeVar("T")


class StoreUnavailable(Exception):
    """The broker or the `_schemas` topic cannot be used (start-up fails with this)."""


class SchemaStore:
    """The registry's state, kept in step with the `_schemas` topic, and its writes (when this
    instance is the primary)."""

    def __init__(self, config: RegistryConfig, on_lost: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.state = RegistryState(config.default_compatibility)
        self._tp = TopicPartition(config.topic, 0)
        self._consumer: AIOConsumer | None = None
        # A second client for offsets and metadata: a broker answers one connection's requests in
        # order, so on the tailing consumer's connection they would queue behind its long-poll fetch.
        self._offsets: AIOConsumer | None = None
        self._tail_task: asyncio.Task[None] | None = None
        self._position = 0  # next offset to apply
        self._progress = asyncio.Event()
        self._outcomes: dict[int, bool] = {}
        self._lock = asyncio.Lock()
        self._tail_error: str | None = None
        self._lost: str | None = None
        self._on_lost = on_lost
        self._mark = id_mark.Mark()  # the highest id handed out, as known here
        self._new_mark: id_mark.Mark | None = None  # one the write being built takes
        # The writer: present only while this instance is the primary.
        self._role: Primary | None = None
        self._role_task: asyncio.Task[None] | None = None
        self._writer: TransactionalWriter | None = None
        self._spare: TransactionalWriter | None = None  # a writer not yet initialised
        self._writable = asyncio.Event()
        self.started = False
        self.fenced = 0  # writes refused because another instance had taken over
        # The generation in which this instance lost its writer (fenced, or the producer broken),
        # and when: it writes again in a later generation, or in this one once the election
        # confirms the role after that moment.
        self._suspended_in: int | None = None
        self._suspended_at = 0.0

    @property
    def position(self) -> int:
        return self._position

    @property
    def role(self) -> Primary | None:
        return self._role

    # -- life cycle ----------------------------------------------------------------------------

    def _client_config(self, **extra: Any) -> dict[str, Any]:
        return {
            **self.config.librdkafka_config(),
            "client.id": self.config.client_id,
            "allow.auto.create.topics": False,
            "log_level": 3,  # librdkafka's own errors only; the store logs what it makes of them
            **extra,
        }

    def _consumer_config(self) -> dict[str, Any]:
        # Assigned, never joined: `group.id` is required by the client but nothing is committed.
        return self._client_config(
            **{
                "group.id": self.config.group_id,
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "enable.partition.eof": True,
                "fetch.wait.max.ms": 500,
            }
        )

    async def start(self) -> None:
        """Create the topic if needed, then replay it to its end: then serve."""
        deadline = time.monotonic() + self.config.startup_timeout
        try:
            await self._ensure_topic(deadline)
            await self._ensure_topic(deadline, id_mark.ids_topic(self.config.topic))
            self._consumer = AIOConsumer(self._consumer_config(), max_workers=1)
            self._offsets = AIOConsumer(self._consumer_config(), max_workers=1)
            # Offset 0, not OFFSET_BEGINNING: that one is asked of the broker first, and librdkafka
            # retries the question half a second later when its connection is not up yet. A log
            # that no longer starts at 0 is out of range, and `auto.offset.reset` starts it earliest.
            await self._consumer.assign([TopicPartition(self.config.topic, 0, 0)])
            self._tail_task = asyncio.create_task(self._tail(), name="registry-tail")
            self._spare = self._new_writer()
            await self.sync(max(1.0, deadline - time.monotonic()))
            await self._check_history(deadline)
        except BaseException:
            await self.stop()
            raise
        self.started = True
        log.info(
            "registry store ready",
            topic=self.config.topic,
            position=self._position,
            subjects=len(self.state.subjects),
            schemas=len(self.state.schemas),
        )

    async def _check_history(self, deadline: float) -> None:
        reader = AIOConsumer(self._consumer_config(), max_workers=1)
        try:
            self._mark = await id_mark.read(
                reader, id_mark.ids_topic(self.config.topic), max(1.0, deadline - time.monotonic())
            )
        finally:
            with contextlib.suppress(Exception):
                await reader.close()
        # The end now, not the position replayed to: a mark another primary committed since
        # came with its schema record, which this end then covers.
        end = await self.end_offset(max(1.0, deadline - time.monotonic()))
        problem = id_mark.check(self._mark, self.config.topic, end)
        if problem is not None:
            log.error("schemas topic lost its history: not starting", problem=problem)
            raise StoreUnavailable(problem)

    async def stop(self) -> None:
        self.started = False
        self._writable.clear()
        for task in (self._role_task, self._tail_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._role_task = self._tail_task = None
        await self._drop_writer()
        if self._spare is not None:
            await self._spare.close()
            self._spare = None
        for name, consumer in (("tail", self._consumer), ("offsets", self._offsets)):
            if consumer is None:
                continue
            # Bounded like the writers' close: a stop must end even when a consumer's close does
            # not (its handle is left to the process's exit).
            try:
                await asyncio.wait_for(consumer.close(), CLOSE_SECONDS)
            except TimeoutError:
                log.warning("schemas consumer did not close in time", consumer=name, within_s=CLOSE_SECONDS)
            except Exception as e:
                log.warning("schemas consumer failed to close", consumer=name, error=str(e))
        self._consumer = self._offsets = None

    async def _ensure_topic(self, deadline: float, topic: str | None = None) -> None:
        """Create the compacted single-partition topic (`_schemas`, or `topic`), or check the
        existing one is compacted."""
        last_error: BaseException | None = None
        topic = topic or self.config.topic
        try:
            admin = [AdminClient(self._admin_config())]
        except KafkaException as e:
            raise StoreUnavailable(f"cannot create the admin client: {e}") from None
        try:
            # librdkafka's admin calls answer futures, awaited here within the deadline.
            while (remaining := deadline - time.monotonic()) > 0:
                try:
                    await asyncio.wait_for(self._create_topic(admin[0], topic, remaining), remaining)
                    return
                except StoreUnavailable:
                    raise
                except Exception as e:  # broker not up yet: retry until the deadline
                    last_error = e.with_traceback(None)  # its frames would keep the admin client
                    await asyncio.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
        finally:
            # Its last reference dropped off the event loop: librdkafka's destroy joins its threads.
            await asyncio.to_thread(admin.clear)
        raise StoreUnavailable(f"broker {self.config.bootstrap_servers} unreachable: {last_error or 'timed out'}")

    def _admin_config(self) -> dict[str, Any]:
        return {
            **self.config.librdkafka_config(),
            "client.id": self.config.client_id,
            "log_level": 3,  # librdkafka's own errors only; the store logs what it makes of them
        }

    async def _create_topic(self, admin: AdminClient, topic: str, within: float) -> None:
        cluster = await asyncio.wrap_future(admin.describe_cluster(request_timeout=within))
        replicas = max(1, min(self.config.topic_replication_factor, len(cluster.nodes)))
        [created] = admin.create_topics(
            [NewTopic(topic, 1, replicas, config={"cleanup.policy": "compact"})], request_timeout=within
        ).values()
        try:
            await asyncio.wrap_future(created)
        except KafkaException as e:
            error = e.args[0]
            if not isinstance(error, KafkaError) or error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                code = error.code() if isinstance(error, KafkaError) else None
                text = error.str() if isinstance(error, KafkaError) else str(error)
                raise StoreUnavailable(f"cannot create topic {topic}: {code} {text}") from None
            await self._check_topic(admin, topic, within)
        else:
            log.info("created schemas topic", topic=topic, replicas=replicas)

    async def _check_topic(self, admin: AdminClient, topic: str, within: float) -> None:
        [described] = admin.describe_topics(TopicCollection([topic]), request_timeout=within).values()
        partitions = len((await asyncio.wrap_future(described)).partitions)
        if partitions > 1:
            raise StoreUnavailable(f"topic {topic} has {partitions} partitions; the registry needs exactly 1")
        [configs] = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)], request_timeout=within).values()
        policy = (await asyncio.wrap_future(configs)).get("cleanup.policy")
        if policy is not None and "compact" not in str(policy.value).split(","):
            raise StoreUnavailable(f"topic {topic} has cleanup.policy={policy.value}; the registry needs compact")

    # -- following the log -------------------------------------------------------------------

    async def _tail(self) -> None:
        assert self._consumer is not None
        consumer = self._consumer
        checked = time.monotonic()
        while True:
            try:
                # A batch call waits until the batch is full: wait for one, then take what is there.
                # A short wait: closing the consumer waits for the call in flight.
                messages = await consumer.consume(num_messages=1, timeout=TAIL_WAIT_SECONDS)
                if messages:
                    messages += await consumer.consume(num_messages=1000, timeout=0)
                for message in messages:
                    self._take(message)
                self._position = max(self._position, await self._consumer_position(consumer))
                if time.monotonic() - checked > TOPIC_CHECK_SECONDS:
                    checked = time.monotonic()
                    await self._check_still_there()
                self._tail_error = None
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if self._tail_error is None:
                    log.warning("reading the schemas topic failed", error=str(e))
                self._tail_error = str(e) or type(e).__name__
                await asyncio.sleep(0.5)
                continue
            while len(self._outcomes) > 10_000:
                del self._outcomes[next(iter(self._outcomes))]
            event, self._progress = self._progress, asyncio.Event()
            event.set()

    def _take(self, message: Message) -> None:
        """Apply one message of the topic, or learn from its error."""
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                self._position = max(self._position, int(message.offset() or 0))
            elif error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION):
                self._topic_lost(f"the schemas topic {self.config.topic} no longer exists")
            else:
                raise KafkaException(error)
            return
        offset = int(message.offset() or 0)
        key, value = message.key(), message.value()
        try:
            accepted = self.state.apply(offset, _raw(key), _raw(value))
        except Exception as e:
            self.state.unreadable += 1
            log.warning("record skipped", offset=offset, error=f"{type(e).__name__}: {e}")
            accepted = False
        self._outcomes[offset] = accepted
        if not accepted:
            log.info("record refused", offset=offset, key=(_raw(key) or b"").decode(errors="replace"))
        self._position = max(self._position, offset + 1)

    async def _consumer_position(self, consumer: AIOConsumer) -> int:
        [tp] = await consumer.position([self._tp])
        return max(0, int(tp.offset))

    async def _check_still_there(self) -> None:
        """Deleted, or deleted and created again (its end now below what was read): lost."""
        assert self._offsets is not None
        metadata = await self._offsets.list_topics(self.config.topic, timeout=5)
        topic = metadata.topics.get(self.config.topic)
        if topic is None or (topic.error is not None and topic.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            self._topic_lost(f"the schemas topic {self.config.topic} no longer exists")
            return
        end = await self.end_offset(5.0)
        if end < self._position:
            self._topic_lost(
                f"the schemas topic {self.config.topic} ends at offset {end}, before the {self._position} "
                "records already read: it was deleted and created again"
            )

    def _topic_lost(self, reason: str) -> None:
        if self._lost is not None:
            return
        self._lost = f"{reason}; restart the registry to create it again"
        self._writable.clear()
        log.error("schemas topic lost: writes stopped", problem=self._lost)
        if self._on_lost is not None:
            self._on_lost(self._lost)

    async def _wait_position(self, target: int, within: float) -> None:
        deadline = time.monotonic() + within
        while self._position < target:
            if self._tail_task is None or self._tail_task.done():
                raise errors.store_error("the registry is not reading the schemas topic")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise errors.operation_timeout(
                    f"timed out reading the schemas topic to offset {target} (at {self._position})"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._progress.wait(), remaining)

    async def end_offset(self, within: float | None = None) -> int:
        """The last stable offset: the end of what committed transactions wrote. A partition
        whose leader is moving (or just created) is asked again until `within` runs out."""
        assert self._offsets is not None
        within = within or self.config.write_timeout
        deadline = time.monotonic() + within
        while True:
            remaining = deadline - time.monotonic()
            try:
                _low, high = await asyncio.wait_for(
                    self._offsets.get_watermark_offsets(self._tp, timeout=max(0.1, remaining), cached=False),
                    max(0.1, remaining) + 1,
                )
                return int(high)
            except TimeoutError as e:
                raise errors.operation_timeout("timed out asking the broker for the end of the schemas topic") from e
            except KafkaException as e:
                error = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
                if error is None or not _passing(error) or time.monotonic() + 0.1 >= deadline:
                    raise errors.store_unavailable(f"cannot reach the broker: {e}") from e
                await asyncio.sleep(0.1)
            except Exception as e:
                raise errors.store_unavailable(f"cannot reach the broker: {e}") from e

    async def sync(self, within: float | None = None) -> None:
        """Read the log up to its current end: after this, every write that was answered
        before the call is applied here, whichever registry made it."""
        if self._lost is not None:
            raise errors.store_error(self._lost)
        within = within or self.config.write_timeout
        deadline = time.monotonic() + within
        end = await self.end_offset(within)
        await self._wait_position(end, max(0.0, deadline - time.monotonic()))

    async def readiness(self) -> tuple[bool, dict[str, Any]]:
        """Broker reachable and the log read to its end."""
        detail: dict[str, Any] = {"position": self._position}
        if self._role is not None:
            detail["primary"] = self._role.url
            detail["role"] = "primary" if self._role.is_self else "secondary"
        if self._lost is not None:
            return False, {**detail, "reason": self._lost}
        if not self.started or self._tail_task is None or self._tail_task.done():
            return False, {**detail, "reason": "not started"}
        if self._tail_error is not None:
            return False, {**detail, "reason": f"reading the schemas topic failed: {self._tail_error}"}
        try:
            end = await self.end_offset(2.0)
            detail["end"] = end
            await self._wait_position(end, 2.0)
        except RegistryError as e:
            return False, {**detail, "reason": e.message}
        detail["position"] = self._position
        return True, detail

    # -- the writer: this instance's role ---------------------------------------------------------

    def follow(self, primary: Primary | None) -> None:
        """What the election decided (`registry.election`): open the writer when this instance
        was elected, close it when another was."""
        self._role = primary
        if primary is None or not primary.is_self:
            self._writable.clear()
        if self._role_task is None or self._role_task.done():
            self._role_task = asyncio.create_task(self._settle_role(), name="registry-role")

    async def _settle_role(self) -> None:
        while True:
            role = self._role
            elected = role is not None and role.is_self and role.generation != self._suspended_in and self._lost is None
            try:
                if elected and self._writer is None:
                    await self._open_writer()
                elif role is not None and not role.is_self and self._writer is not None:
                    async with self._lock:  # after the write in flight
                        await self._drop_writer()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("taking the primary role failed; retrying", error=f"{type(e).__name__}: {e}")
                await self._drop_writer()
                await asyncio.sleep(0.5)
                continue
            if self._role is role:
                if elected and self._writer is not None:
                    self._writable.set()
                return

    def confirmed(self, primary: Primary, sent_at: float) -> None:
        """The election's word that `primary` still holds: a heartbeat sent at `sent_at`
        (monotonic) was answered without error. A writer lost before that moment is replaced
        now, in the same generation: nobody else can have been elected in it."""
        if self._suspended_in is None or not primary.is_self or primary.generation != self._suspended_in:
            return
        if sent_at <= self._suspended_at:
            return  # sent before the loss: it proves nothing about who fenced this instance
        log.info("the group still names this registry primary: opening a new writer", generation=primary.generation)
        self._suspended_in = None
        self.follow(primary)

    def _suspend(self) -> None:
        self._suspended_in = self._role.generation if self._role is not None else None
        self._suspended_at = time.monotonic()

    def _new_writer(self) -> TransactionalWriter:
        return TransactionalWriter(
            self._client_config(
                **{
                    "transactional.id": self.config.group_id,
                    "linger.ms": 0,
                    "transaction.timeout.ms": max(1000, int(self.config.write_timeout * 4000)),
                    "message.timeout.ms": max(1000, int(self.config.write_timeout * 1000)),
                    # Connected to every broker from the start: librdkafka looks for the
                    # transaction coordinator among connected brokers only, and otherwise
                    # retries half a second later.
                    "enable.sparse.connections": False,
                }
            )
        )

    async def _open_writer(self) -> None:
        """Fence every earlier primary, then read what it committed: only then pick ids."""
        # The spare was created (and connected) while this instance waited for the role.
        writer, self._spare = self._spare or self._new_writer(), None
        self._writer = writer
        await writer.init(self.config.write_timeout)
        await self.sync()
        log.info("this registry writes the schemas topic", transactional_id=self.config.group_id)

    async def _drop_writer(self) -> None:
        self._writable.clear()
        writer, self._writer = self._writer, None
        if writer is not None:
            await writer.close()
            if self.started:
                self._spare = self._new_writer()  # ready, not initialised: it fences no one

    async def _commit(self, records: Sequence[Record]) -> None:
        """Write `records` in one transaction and wait until this process has applied them."""
        writer = self._writer
        assert writer is not None
        timeout = self.config.write_timeout
        try:
            mark, self._new_mark = self._new_mark, None
            also = (id_mark.ids_topic(self.config.topic), [mark.record()]) if mark is not None else None
            offsets = await writer.write(self.config.topic, records, timeout, also=also)
        except Fenced as e:
            # Another instance took the role over: it alone writes now.
            self.fenced += 1
            log.warning("fenced: another registry is the primary now", error=str(e))
            # Never take the role back on its own (that would fence the new primary in turn):
            # only the election may, in a later generation or by confirming this one.
            self._suspend()
            await self._drop_writer()
            raise errors.forwarding_error("this registry is no longer the primary; send the write again") from e
        except Broken as e:
            # Stuck (paused mid-commit, say): this write's outcome is unknown until a new
            # producer ends the transaction. The same rule as a fence: it may be a newer
            # primary's doing, so only the election lets this instance open another.
            log.warning("the schemas topic's producer is stuck: replacing it", error=str(e))
            self._suspend()
            await self._drop_writer()
            raise errors.store_unavailable(f"cannot write to the schemas topic now: {e}") from e
        except WriteFailed as e:  # aborted: nothing of it is visible, the next write may pass
            raise errors.store_unavailable(f"cannot write to the schemas topic: {e}") from e
        if mark is not None:
            self._mark = mark
        await self._wait_position(max(offsets) + 1, timeout)
        if not all(self._outcomes.get(offset, False) for offset in offsets):
            raise errors.store_error("the registry could not apply a record it wrote to the schemas topic")

    async def _await_writable(self) -> None:
        try:
            await asyncio.wait_for(self._writable.wait(), self.config.write_timeout)
        except TimeoutError:
            if self._lost is not None:
                raise errors.store_error(self._lost) from None
            raise errors.unknown_primary("this registry did not become the primary in time; send it again") from None

    async def _write(self, subject: str | None, build: Callable[[], tuple[Sequence[Record], T]]) -> T:
        """Make one write as the primary: under the lock, caught up with the log, `build` checks
        the request against the state and returns the records to commit and the answer."""
        while True:
            await self._await_writable()
            async with self._lock:
                if not self._writable.is_set() or self._writer is None:
                    continue  # the role moved while this write waited for the lock
                await self.sync()
                if subject is not None:
                    self._check_writable(subject)
                self._new_mark = None
                records, answer = build()
                if records:
                    await self._commit(records)
                    log.info("schemas topic written", keys=[key.decode(errors="replace") for key, _ in records])
                return answer

    def _check_writable(self, subject: str) -> None:
        if self.state.mode(subject) is Mode.READONLY:
            raise errors.read_only(subject)

    def _every_version(self, subject: str) -> dict[int, SchemaVersion]:
        """The versions of `subject`, soft-deleted ones too; 40401 when it has none."""
        every = self.state.subjects.get(subject)
        if not every:
            raise errors.subject_not_found(subject)
        return every

    async def register(
        self, subject: str, schema: ParsedSchema, schema_id: int | None = None, version: int | None = None
    ) -> tuple[int, int]:
        """Register `schema` under `subject`: its id and version (existing ones if the subject
        already has it). `schema_id`/`version` are only accepted in IMPORT mode."""

        def build() -> tuple[list[Record], tuple[int, int]]:
            state = self.state
            mode = state.mode(subject)
            if (schema_id is not None or version is not None) and mode is not Mode.IMPORT:
                raise errors.operation_not_permitted(
                    f"Overwrite new schema with id {schema_id} or version {version} is only permitted in IMPORT mode"
                )
            live = state.versions(subject)
            for sv in reversed(live):
                if sv.schema.identity == schema.identity:
                    if schema_id is not None and schema_id != sv.id:
                        raise errors.id_does_not_match(
                            f"Schema already registered with id {sv.id} instead of input id {schema_id}"
                        )
                    return [], (sv.id, sv.version)
            if mode is not Mode.IMPORT:
                reasons = checked(schema, [sv.schema for sv in live], state.compatibility(subject))
                if reasons:
                    raise errors.incompatible_schema(subject, reasons)
            known_id = state.ids_by_identity.get(schema.identity)
            if schema_id is not None:
                if known_id is not None and known_id != schema_id:
                    raise errors.id_does_not_match(
                        f"Schema already registered with id {known_id} instead of input id {schema_id}"
                    )
                taken = state.schemas.get(schema_id)
                if taken is not None and taken.identity != schema.identity:
                    raise errors.id_does_not_match(f"Overwrite new schema with id {schema_id} is not permitted.")
                new_id = schema_id
            else:
                # above the mark too: ids are never handed out twice, even once compaction has
                # dropped the record of a permanently deleted schema that had the highest id
                new_id = known_id if known_id is not None else max(state.max_id, self._mark.schema_id) + 1
            existing = state.subjects.get(subject, {})
            if version is not None:
                if version in existing:
                    raise errors.operation_not_permitted(f"Version {version} of subject {subject} already exists")
                new_version = version
            else:
                new_version = max(existing, default=0) + 1
            sv = SchemaVersion(subject, new_version, new_id, schema)
            if new_id > self._mark.schema_id:
                self._new_mark = id_mark.Mark(new_id, self._position)
            return [(schema_key(subject, new_version), sv.value())], (new_id, new_version)

        return await self._write(subject, build)

    async def delete_version(self, subject: str, version: int, permanent: bool) -> int:
        """Soft-delete a version, or permanently delete a soft-deleted one; `LATEST` for the
        latest (live) version."""

        def build() -> tuple[list[Record], int]:
            every = self._every_version(subject)
            number = version
            if version == LATEST:
                live = self.state.versions(subject)
                if not live and not permanent:
                    raise errors.subject_not_found(subject)
                number = live[-1].version if live else max(every)
            sv = every.get(number)
            if sv is None:
                raise errors.version_not_found(number)
            if permanent:
                if not sv.deleted:
                    raise errors.version_not_soft_deleted(subject, number)
                record: Record = (schema_key(subject, number), None)
            else:
                if sv.deleted:
                    raise errors.version_soft_deleted(subject, number)
                record = (schema_key(subject, number), replace(sv, deleted=True).value())
            return [record], number

        return await self._write(subject, build)

    async def delete_subject(self, subject: str, permanent: bool) -> list[int]:
        """Soft-delete every live version of a subject, or permanently delete a soft-deleted
        subject with its config and mode; the versions deleted."""

        def build() -> tuple[list[Record], list[int]]:
            every = self._every_version(subject)
            live = self.state.versions(subject)
            if permanent:
                if live:
                    raise errors.subject_not_soft_deleted(subject)
                numbers = sorted(every)
                records: list[Record] = [(schema_key(subject, n), None) for n in numbers]
                records.append((delete_subject_key(subject), None))
                if subject in self.state.configs:
                    records.append((config_key(subject), None))
                if subject in self.state.modes:
                    records.append((mode_key(subject), None))
            else:
                if not live:
                    raise errors.subject_soft_deleted(subject)
                numbers = [sv.version for sv in live]
                records = [(schema_key(subject, sv.version), replace(sv, deleted=True).value()) for sv in live]
                records.append((delete_subject_key(subject), delete_subject_value(subject, max(every))))
            return records, numbers

        return await self._write(subject, build)

    async def set_compatibility(self, subject: str | None, level: Level) -> None:
        await self._write(None, lambda: ([(config_key(subject), config_value(level.value))], None))

    async def delete_compatibility(self, subject: str | None) -> Level:
        """Remove a subject's level (40401 when it has none) or reset the global one; the
        level in force before."""

        def build() -> tuple[list[Record], Level]:
            if subject is not None and subject not in self.state.configs:
                raise errors.subject_not_found(subject)
            return [(config_key(subject), None)], self.state.compatibility(subject)

        return await self._write(None, build)

    async def set_mode(self, subject: str | None, mode: Mode, force: bool) -> None:
        def build() -> tuple[list[Record], None]:
            if mode is Mode.IMPORT and not force:
                names = [subject] if subject is not None else self.state.subject_names()
                if any(self.state.versions(name) for name in names):
                    raise errors.operation_not_permitted("Cannot import since found existing subjects")
            return [(mode_key(subject), mode_value(mode.value))], None

        await self._write(None, build)

    async def delete_mode(self, subject: str) -> Mode:
        def build() -> tuple[list[Record], Mode]:
            if subject not in self.state.modes:
                raise errors.subject_not_found(subject)
            return [(mode_key(subject), None)], self.state.modes[subject]

        return await self._write(None, build)


def _passing(error: KafkaError) -> bool:
    """A condition that passes by itself: a leader being elected or moved, a topic just created."""
    return bool(error.retriable()) or error.code() in (
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        # The client's own metadata has not caught up with a topic a cluster just created.
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._UNKNOWN_TOPIC,
    )


def _raw(data: str | bytes | None) -> bytes | None:
    return data.encode() if isinstance(data, str) else data
