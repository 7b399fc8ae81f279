"""The registry's persistence: its state kept in step with a compacted Kafka topic (`_schemas`).

Every change is one record in a single-partition, `cleanup.policy=compact` topic, keyed and
valued as Confluent Schema Registry writes its `_schemas` topic (`registry.log_records`).
A registry replays the topic from the beginning before it serves, then tails it for as long as it
runs, applying each record to its `RegistryState` (`registry.state`), so any number of
registry processes pointing at one broker converge on the same state. A write is produced
(idempotent producer, `acks=all`) and answered only once this process has consumed that very
record back and applied it: what a client was told is what the log says.

Id allocation and concurrent writers
------------------------------------
Confluent elects one primary and forwards writes to it. Here every instance writes, optimistically:
under a per-process lock it catches up to the end of the log, picks `id = max id seen + 1` (or the
id the same schema already has) and `version = highest version of the subject + 1`, and produces.
Two instances can race and pick the same id for different schemas, or the same version of one
subject. The log decides, deterministically, because every instance applies records in log order
with the same rules, under which the first record in the log wins (`RegistryState.apply`):

* the writer of a rejected record sees the rejection when it reads its own record back, and retries
  from the top (catch up, recheck compatibility, new id/version) -- up to `write_attempts` times;
* compaction keeps only the last record of a key, so a rejected record must never stay the last
  one of its key: the loser then writes the key's current state again (a copy of the winner, or a
  tombstone when the key holds nothing) -- "healing". A registry that starts also heals every key
  whose last record was rejected (a loser that crashed before healing). Heals follow the same rules
  (a stale heal is itself rejected and healed again), so they converge.

Ids stay stable across restarts because they are data in the log, not counters. Caveats: an id
whose every version was permanently deleted, once compaction has also dropped the tombstones, is no
longer known and may be handed out again (so may Confluent's, which also derives ids from its store);
a compaction pass whose cleanable range ends exactly between a losing record and its heal
(milliseconds apart) keeps the loser instead of the winner. See docs/adr/003.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from registry import errors
from registry.config import RegistryConfig
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

log = structlog.get_logger(__name__)

TOPIC_ALREADY_EXISTS = 36
LATEST = -1

T = TypeVar("T")


class StoreUnavailable(Exception):
    """The broker or the `_schemas` topic cannot be used (start-up fails with this)."""


@dataclass(frozen=True)
class _LostRace:
    """A write attempt whose records the log rejected: the SCHEMA keys to heal before retrying."""

    keys: list[tuple[str, int]]


class SchemaStore:
    """The registry's state, kept in step with the `_schemas` topic, and its writes."""

    def __init__(self, config: RegistryConfig) -> None:
        self.config = config
        self.state = RegistryState(config.default_compatibility)
        self._tp = TopicPartition(config.topic, 0)
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        # A second client for ListOffsets: a broker answers one connection's requests in order,
        # so on the tailing consumer's connection they would queue behind its long-poll fetch.
        self._offsets: AIOKafkaConsumer | None = None
        self._tail_task: asyncio.Task[None] | None = None
        self._position = 0  # next offset to apply
        self._progress = asyncio.Event()
        self._outcomes: dict[int, bool] = {}
        self._lock = asyncio.Lock()
        self._tail_error: str | None = None
        self.started = False
        self.conflicts = 0  # own writes the log rejected (lost races), retried

    @property
    def position(self) -> int:
        return self._position

    # -- life cycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Create the topic if needed, replay it to its end, heal lost races: then serve."""
        deadline = time.monotonic() + self.config.startup_timeout
        try:
            await self._ensure_topic(deadline)
            self._producer = AIOKafkaProducer(
                bootstrap_servers=self.config.bootstrap_servers,
                client_id=self.config.client_id,
                **self.config.kafka_security.aiokafka_kwargs(),
                acks="all",
                enable_idempotence=True,
                linger_ms=0,
            )
            await self._producer.start()
            self._consumer = await self._start_consumer(auto_offset_reset="earliest", fetch_max_wait_ms=500)
            self._offsets = await self._start_consumer()
            partitions = self._consumer.partitions_for_topic(self.config.topic) or set()
            if len(partitions) > 1:
                raise StoreUnavailable(
                    f"topic {self.config.topic} has {len(partitions)} partitions; the registry needs exactly 1"
                )
            self._consumer.assign([self._tp])
            await self._consumer.seek_to_beginning(self._tp)
            self._tail_task = asyncio.create_task(self._tail(), name="registry-tail")
            await self.sync(max(1.0, deadline - time.monotonic()))
            async with self._lock:
                await self._heal(self.state.dirty_keys())
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

    async def _start_consumer(self, **options: Any) -> AIOKafkaConsumer:
        """A started consumer outside any group: the store assigns its one partition itself and
        keeps its position in memory (a replay always starts from the beginning)."""
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.config.bootstrap_servers,
            client_id=self.config.client_id,
            **self.config.kafka_security.aiokafka_kwargs(),
            group_id=None,
            enable_auto_commit=False,
            **options,
        )
        try:
            await consumer.start()
        except BaseException:
            await consumer.stop()  # `stop()` cannot: the consumer is not stored yet
            raise
        return consumer

    async def stop(self) -> None:
        self.started = False
        if self._tail_task is not None:
            self._tail_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._tail_task
            self._tail_task = None
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None
        if self._offsets is not None:
            await self._offsets.stop()
            self._offsets = None
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

    async def _ensure_topic(self, deadline: float) -> None:
        """Create the compacted single-partition topic, or check the existing one is compacted."""
        last_error: BaseException | None = None
        while (remaining := deadline - time.monotonic()) > 0:
            admin = AIOKafkaAdminClient(
                bootstrap_servers=self.config.bootstrap_servers,
                client_id=self.config.client_id,
                **self.config.kafka_security.aiokafka_kwargs(),
            )
            try:
                await asyncio.wait_for(self._create_topic(admin), remaining)
                return
            except StoreUnavailable:
                raise
            except Exception as e:  # broker not up yet: retry until the deadline
                last_error = e
                await asyncio.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
            finally:
                await admin.close()
        raise StoreUnavailable(f"broker {self.config.bootstrap_servers} unreachable: {last_error or 'timed out'}")

    async def _create_topic(self, admin: AIOKafkaAdminClient) -> None:
        await admin.start()
        brokers = len((await admin.describe_cluster())["brokers"])
        replicas = max(1, min(self.config.topic_replication_factor, brokers))
        response = await admin.create_topics(
            [NewTopic(self.config.topic, 1, replicas, topic_configs={"cleanup.policy": "compact"})]
        )
        for _topic, code, message in response.topic_errors:
            if code not in (0, TOPIC_ALREADY_EXISTS):
                raise StoreUnavailable(f"cannot create topic {self.config.topic}: {code} {message}")
            if code == TOPIC_ALREADY_EXISTS:
                await self._check_topic_config(admin)
            else:
                log.info("created schemas topic", topic=self.config.topic, replicas=replicas)

    async def _check_topic_config(self, admin: AIOKafkaAdminClient) -> None:
        responses = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, self.config.topic)])
        for response in responses:
            for resource in response.resources:
                for entry in resource[4]:
                    if entry[0] == "cleanup.policy" and "compact" not in str(entry[1]).split(","):
                        raise StoreUnavailable(
                            f"topic {self.config.topic} has cleanup.policy={entry[1]}; the registry needs compact"
                        )

    # -- following the log -------------------------------------------------------------------

    async def _tail(self) -> None:
        assert self._consumer is not None
        consumer = self._consumer
        while True:
            try:
                batches = await consumer.getmany(self._tp, timeout_ms=500, max_records=1000)
                records = batches.get(self._tp, [])
                for record in records:
                    try:
                        accepted = self.state.apply(record.offset, record.key, record.value)
                    except Exception as e:
                        self.state.unreadable += 1
                        log.warning("record skipped", offset=record.offset, error=f"{type(e).__name__}: {e}")
                        accepted = False
                    self._outcomes[record.offset] = accepted
                    if not accepted:
                        log.info(
                            "record rejected", offset=record.offset, key=(record.key or b"").decode(errors="replace")
                        )
                position = await consumer.position(self._tp)
                if records:
                    position = max(position, records[-1].offset + 1)
                self._position = max(self._position, position)
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
        assert self._offsets is not None
        try:
            ends = await asyncio.wait_for(self._offsets.end_offsets([self._tp]), within or self.config.write_timeout)
        except TimeoutError as e:
            raise errors.operation_timeout("timed out asking the broker for the end of the schemas topic") from e
        except Exception as e:
            raise errors.store_error(f"cannot reach the broker: {e}") from e
        return int(ends[self._tp])

    async def sync(self, within: float | None = None) -> None:
        """Read the log up to its current end: after this, every write that was answered
        before the call is applied here, whichever registry made it."""
        within = within or self.config.write_timeout
        deadline = time.monotonic() + within
        end = await self.end_offset(within)
        await self._wait_position(end, max(0.0, deadline - time.monotonic()))

    async def readiness(self) -> tuple[bool, dict[str, Any]]:
        """Broker reachable and the log read to its end."""
        detail: dict[str, Any] = {"position": self._position}
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

    # -- writing -------------------------------------------------------------------------------

    async def _produce(self, records: Sequence[Record]) -> list[bool]:
        """Produce records in order and wait until this process has applied them all;
        whether the log accepted each one."""
        producer = self._producer
        assert producer is not None

        async def send_all() -> list[Any]:
            futures = [
                await producer.send(self.config.topic, key=key, value=value, partition=0) for key, value in records
            ]
            return list(await asyncio.gather(*futures))

        try:
            metadata = await asyncio.wait_for(send_all(), self.config.write_timeout)
        except TimeoutError as e:
            raise errors.operation_timeout("timed out writing to the schemas topic") from e
        except Exception as e:
            raise errors.store_error(f"cannot write to the schemas topic: {e}") from e
        offsets = [int(m.offset) for m in metadata]
        await self._wait_position(max(offsets) + 1, self.config.write_timeout)
        return [self._outcomes.get(offset, False) for offset in offsets]

    async def _heal(self, keys: Iterable[tuple[str, int]]) -> None:
        """Make the last record of each key encode its current state again (see module doc)."""
        pending = list(dict.fromkeys(keys))
        for _ in range(self.config.write_attempts):
            pending = [key for key in pending if not self.state.last_schema_record.get(key, (0, True))[1]]
            if not pending:
                return
            records: list[Record] = []
            for subject, version in pending:
                current = self.state.subjects.get(subject, {}).get(version)
                records.append((schema_key(subject, version), current.value() if current is not None else None))
            log.info("healing keys after a lost race", keys=len(records))
            await self._produce(records)
        raise errors.store_error("could not settle the schemas topic after concurrent writes")

    def _writable(self, subject: str | None) -> None:
        if self.state.mode(subject) is Mode.READONLY:
            raise errors.read_only(subject)

    async def _write(self, subject: str, what: str, attempt: Callable[[], Awaitable[T | _LostRace]]) -> T:
        """Make one write, optimistically (see the module doc): under the lock, caught up with
        the log, `attempt` checks the request and produces; when the log rejected its records,
        heal their keys and start again, up to `write_attempts` times."""
        async with self._lock:
            for _ in range(self.config.write_attempts):
                await self.sync()
                self._writable(subject)
                outcome = await attempt()
                if not isinstance(outcome, _LostRace):
                    return outcome
                self.conflicts += 1
                await self._heal(outcome.keys)
        raise errors.store_error(f"could not {what} after {self.config.write_attempts} attempts")

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

        async def attempt() -> tuple[int, int] | _LostRace:
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
                    return sv.id, sv.version
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
                new_id = known_id if known_id is not None else state.max_id + 1
            existing = state.subjects.get(subject, {})
            if version is not None:
                if version in existing:
                    raise errors.operation_not_permitted(f"Version {version} of subject {subject} already exists")
                new_version = version
            else:
                new_version = max(existing, default=0) + 1
            sv = SchemaVersion(subject, new_version, new_id, schema)
            [accepted] = await self._produce([(schema_key(subject, new_version), sv.value())])
            if accepted:
                log.info("schema registered", subject=subject, version=new_version, id=new_id)
                return new_id, new_version
            log.info("lost a registration race; retrying", subject=subject, version=new_version, id=new_id)
            return _LostRace([(subject, new_version)])

        return await self._write(subject, f"register under {subject}", attempt)

    async def delete_version(self, subject: str, version: int, permanent: bool) -> int:
        """Soft-delete a version, or permanently delete a soft-deleted one; `LATEST` for the
        latest (live) version."""

        async def attempt() -> int | _LostRace:
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
            [accepted] = await self._produce([record])
            if accepted:
                log.info("version deleted", subject=subject, version=number, permanent=permanent)
                return number
            return _LostRace([(subject, number)])

        return await self._write(subject, f"delete from {subject}", attempt)

    async def delete_subject(self, subject: str, permanent: bool) -> list[int]:
        """Soft-delete every live version of a subject, or permanently delete a soft-deleted
        subject with its config and mode; the versions deleted."""

        async def attempt() -> list[int] | _LostRace:
            every = self._every_version(subject)
            live = self.state.versions(subject)
            records: list[Record] = []
            if permanent:
                if live:
                    raise errors.subject_not_soft_deleted(subject)
                numbers = sorted(every)
                records = [(schema_key(subject, n), None) for n in numbers]
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
            outcomes = await self._produce(records)
            if all(outcomes[: len(numbers)]):  # the SCHEMA records decide; the others always apply
                log.info("subject deleted", subject=subject, versions=numbers, permanent=permanent)
                return numbers
            return _LostRace([(subject, n) for n in numbers])

        return await self._write(subject, f"delete {subject}", attempt)

    async def set_compatibility(self, subject: str | None, level: Level) -> None:
        async with self._lock:
            await self._produce([(config_key(subject), config_value(level.value))])

    async def delete_compatibility(self, subject: str | None) -> Level:
        """Remove a subject's level (40401 when it has none) or reset the global one; the
        level in force before."""
        async with self._lock:
            await self.sync()
            if subject is not None and subject not in self.state.configs:
                raise errors.subject_not_found(subject)
            before = self.state.compatibility(subject)
            await self._produce([(config_key(subject), None)])
            return before

    async def set_mode(self, subject: str | None, mode: Mode, force: bool) -> None:
        async with self._lock:
            await self.sync()
            if mode is Mode.IMPORT and not force:
                names = [subject] if subject is not None else self.state.subject_names()
                if any(self.state.versions(name) for name in names):
                    raise errors.operation_not_permitted("Cannot import since found existing subjects")
            await self._produce([(mode_key(subject), mode_value(mode.value))])

    async def delete_mode(self, subject: str) -> Mode:
        async with self._lock:
            await self.sync()
            if subject not in self.state.modes:
                raise errors.subject_not_found(subject)
            before = self.state.modes[subject]
            await self._produce([(mode_key(subject), None)])
            return before
