"""The registry's state and its persistence in a compacted Kafka topic (`_schemas`).

Storage
-------
Every change is one record in a single-partition, `cleanup.policy=compact` topic, keyed and
valued in JSON the way Confluent Schema Registry writes its `_schemas` topic:

=================  ==========================================================  =========================
key                                                                            value
=================  ==========================================================  =========================
schema version     {"keytype":"SCHEMA","subject":S,"version":V,"magic":1}      {"subject","version","id",
                                                                                "schema","deleted"}; null
                                                                                = permanently deleted
subject config     {"keytype":"CONFIG","subject":S|null,"magic":0}             {"compatibilityLevel":L}
subject mode       {"keytype":"MODE","subject":S|null,"magic":0}               {"mode":M}
subject deletion   {"keytype":"DELETE_SUBJECT","subject":S,"magic":0}          {"subject":S,"version":V}
=================  ==========================================================  =========================

A registry replays the topic from the beginning before it serves, then tails it for as long as it
runs, so any number of registry processes pointing at one broker converge on the same state. A
write is produced (idempotent producer, `acks=all`) and answered only once this process has
consumed that very record back and applied it: what a client was told is what the log says.

Id allocation and concurrent writers
------------------------------------
Confluent elects one primary and forwards writes to it. Here every instance writes, optimistically:
under a per-process lock it catches up to the end of the log, picks `id = max id seen + 1` (or the
id the same schema already has) and `version = highest version of the subject + 1`, and produces.
Two instances can race and pick the same id for different schemas, or the same version of one
subject. The log decides, deterministically, because every instance applies records in log order
with the same rules (`RegistryState.apply`):

* the **first** record in the log wins. A `SCHEMA` record is *rejected* (ignored) when its key
  already holds a different schema, when its id is bound to a different schema, or when its schema
  is bound to a different id (ids and schemas are one-to-one);
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
import functools
import json
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

import fastavro
import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from schemas.registry import errors
from schemas.registry.compatibility import Level, check
from schemas.registry.config import RegistryConfig
from schemas.registry.errors import RegistryError

log = structlog.get_logger(__name__)

TOPIC_ALREADY_EXISTS = 36
LATEST = -1


class Mode(StrEnum):
    READWRITE = "READWRITE"
    READONLY = "READONLY"
    IMPORT = "IMPORT"


class StoreUnavailable(Exception):
    """The broker or the `_schemas` topic cannot be used (start-up fails with this)."""


# ----------------------------------------------------------------------------------------------
# Avro schemas: validation and identity

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_NAMED = frozenset({"record", "error", "enum", "fixed"})
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class ParsedSchema:
    """`text`: the schema as stored and served (compact JSON of what was registered);
    `identity`: a normalised form, equal for schemas that differ only in layout, key order,
    `{"type": "int"}` vs `"int"` or how names are qualified; `obj`: the parsed JSON."""

    text: str
    identity: str
    obj: Any


def parse_avro(text: str) -> ParsedSchema:
    """Validate an Avro schema (fastavro, plus the rules fastavro leaves out) or raise
    `RegistryError` 42201."""
    try:
        return _parse_avro(text)
    except RegistryError:
        raise
    except Exception as e:  # fastavro raises several unrelated types
        raise errors.invalid_schema(str(e) or type(e).__name__) from e


@functools.lru_cache(maxsize=4096)
def _parse_avro(text: str) -> ParsedSchema:
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise errors.invalid_schema(f"not JSON: {e}") from e
    if not isinstance(obj, dict | list | str):
        raise errors.invalid_schema("an Avro schema is a JSON object, array or string")
    fastavro.parse_schema(obj, named_schemas={})
    _check_strict(obj)
    identity = json.dumps(_normalize(obj, ""), sort_keys=True, separators=(",", ":"))
    return ParsedSchema(json.dumps(obj, separators=(",", ":"), ensure_ascii=False), identity, obj)


def _check_strict(node: Any) -> None:
    """What the Avro specification requires and fastavro does not check."""
    if isinstance(node, list):
        seen: set[str] = set()
        for branch in node:
            if isinstance(branch, list):
                raise errors.invalid_schema("a union may not immediately contain another union")
            branch_kind = _branch_kind(branch)
            if branch_kind in seen:
                raise errors.invalid_schema(f"duplicate {branch_kind} in union")
            seen.add(branch_kind)
            _check_strict(branch)
        return
    if not isinstance(node, dict):
        return
    kind: Any = node.get("type")
    if kind in _NAMED:
        for part in str(node.get("name", "")).split("."):
            if not _NAME.fullmatch(part):
                raise errors.invalid_schema(f"invalid name {node.get('name')!r}")
    if kind in ("record", "error"):
        fields = node.get("fields")
        if not isinstance(fields, list):
            raise errors.invalid_schema(f"record {node.get('name')!r} has no fields list")
        names: set[str] = set()
        for f in fields:
            if not isinstance(f, dict) or not _NAME.fullmatch(str(f.get("name", ""))):
                raise errors.invalid_schema(f"invalid field in record {node.get('name')!r}: {f!r}")
            if f["name"] in names:
                raise errors.invalid_schema(f"duplicate field {f['name']!r} in record {node.get('name')!r}")
            names.add(f["name"])
            _check_strict(f.get("type"))
    elif kind == "array":
        _check_strict(node.get("items"))
    elif kind == "map":
        _check_strict(node.get("values"))
    elif isinstance(kind, dict | list):
        _check_strict(kind)


def _branch_kind(branch: Any) -> str:
    """Union branches must differ by type, named types by full name."""
    if isinstance(branch, str):
        return branch
    if isinstance(branch, dict):
        kind = branch.get("type")
        if kind in _NAMED:
            name = str(branch.get("name", ""))
            namespace = branch.get("namespace")
            return f"{namespace}.{name}" if namespace and "." not in name else name
        if isinstance(kind, str):
            return kind
    return json.dumps(branch, sort_keys=True)


def _qualify(name: str, namespace: str) -> str:
    if "." in name or not namespace or name in _PRIMITIVES:
        return name
    return f"{namespace}.{name}"


def _normalize(node: Any, namespace: str) -> Any:
    """A form that compares equal for equivalent spellings of one schema (the registry's
    notion of "the same schema"): full names everywhere, no `namespace` attributes, bare
    primitives. Docs, defaults, aliases and order of fields are kept: they are part of the
    schema a client registered."""
    if isinstance(node, str):
        return _qualify(node, namespace)
    if isinstance(node, list):
        return [_normalize(branch, namespace) for branch in node]
    if not isinstance(node, dict):
        return node
    kind = node.get("type")
    if isinstance(kind, str) and kind in _PRIMITIVES and len(node) == 1:
        return kind
    out = {k: v for k, v in node.items() if k != "namespace"}
    if kind in _NAMED:
        name = str(node.get("name", ""))
        explicit = node.get("namespace")
        full = name if "." in name else _qualify(name, explicit if isinstance(explicit, str) else namespace)
        out["name"] = full
        inner = full.rpartition(".")[0]
        if kind in ("record", "error"):
            out["fields"] = [
                {**f, "type": _normalize(f.get("type"), inner)} if isinstance(f, dict) else f
                for f in node.get("fields", [])
            ]
        return out
    if kind == "array":
        out["items"] = _normalize(node.get("items"), namespace)
    elif kind == "map":
        out["values"] = _normalize(node.get("values"), namespace)
    elif isinstance(kind, dict | list) or (isinstance(kind, str) and kind not in _PRIMITIVES):
        inner_type = _normalize(kind, namespace)
        if len(node) == 1:
            return inner_type
        out["type"] = inner_type
    return out


def checked(schema: ParsedSchema, existing: Sequence[SchemaVersion], level: Level) -> list[str]:
    """Why `schema` may not follow `existing` (oldest first) at `level`; 42201 if the checker
    finds the schema invalid where fastavro did not."""
    try:
        return check(schema.obj, [sv.schema.obj for sv in existing], level)
    except ValueError as e:
        raise errors.invalid_schema(str(e)) from e


# ----------------------------------------------------------------------------------------------
# Records of the `_schemas` topic


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def schema_key(subject: str, version: int) -> bytes:
    return _dumps({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1})


def config_key(subject: str | None) -> bytes:
    return _dumps({"keytype": "CONFIG", "subject": subject, "magic": 0})


def mode_key(subject: str | None) -> bytes:
    return _dumps({"keytype": "MODE", "subject": subject, "magic": 0})


def delete_subject_key(subject: str) -> bytes:
    return _dumps({"keytype": "DELETE_SUBJECT", "subject": subject, "magic": 0})


@dataclass(frozen=True)
class SchemaVersion:
    """One version of a subject: a `SCHEMA` record that the log accepted."""

    subject: str
    version: int
    id: int
    schema: ParsedSchema
    deleted: bool = False

    def value(self) -> bytes:
        return _dumps(
            {
                "subject": self.subject,
                "version": self.version,
                "id": self.id,
                "schema": self.schema.text,
                "deleted": self.deleted,
            }
        )

    def describe(self) -> dict[str, Any]:
        """The REST API's view of this version."""
        return {"subject": self.subject, "version": self.version, "id": self.id, "schema": self.schema.text}


class RegistryState:
    """Everything the registry knows, built only by `apply`-ing records in log order: two
    instances that applied the same records hold the same state."""

    def __init__(self, default_compatibility: Level = Level.BACKWARD) -> None:
        self.default_compatibility = default_compatibility
        self.subjects: dict[str, dict[int, SchemaVersion]] = {}
        self.schemas: dict[int, ParsedSchema] = {}  # ids bound by at least one (soft-deleted or not) version
        self.ids_by_identity: dict[str, int] = {}
        self.refs: dict[int, set[tuple[str, int]]] = {}
        self.max_id = 0
        self.configs: dict[str | None, Level] = {}
        self.modes: dict[str | None, Mode] = {}
        # Per SCHEMA key: offset of its last record and whether that record was accepted.
        self.last_schema_record: dict[tuple[str, int], tuple[int, bool]] = {}
        self.rejected = 0

    # -- reading ---------------------------------------------------------------------------

    def versions(self, subject: str, include_deleted: bool = False) -> list[SchemaVersion]:
        found = self.subjects.get(subject, {})
        return [found[v] for v in sorted(found) if include_deleted or not found[v].deleted]

    def subject_names(self, include_deleted: bool = False) -> list[str]:
        return sorted(s for s in self.subjects if self.versions(s, include_deleted))

    def compatibility(self, subject: str | None) -> Level:
        if subject is not None and subject in self.configs:
            return self.configs[subject]
        return self.configs.get(None, self.default_compatibility)

    def mode(self, subject: str | None) -> Mode:
        if subject is not None and subject in self.modes:
            return self.modes[subject]
        return self.modes.get(None, Mode.READWRITE)

    def versions_of_id(self, schema_id: int, include_deleted: bool = False) -> list[SchemaVersion]:
        found = [self.subjects[s][v] for s, v in self.refs.get(schema_id, ())]
        return sorted(
            (sv for sv in found if include_deleted or not sv.deleted), key=lambda sv: (sv.subject, sv.version)
        )

    def dirty_keys(self) -> list[tuple[str, int]]:
        """SCHEMA keys whose last record was rejected (compaction would keep the loser)."""
        return [key for key, (_, accepted) in self.last_schema_record.items() if not accepted]

    # -- applying records ----------------------------------------------------------------------

    def apply(self, offset: int, key: bytes | None, value: bytes | None) -> bool:
        """Apply one record of the log; False when it is rejected (or unreadable) and ignored."""
        try:
            k = json.loads(key) if key else None
            v = json.loads(value) if value is not None else None
        except ValueError:
            log.warning("unreadable record ignored", offset=offset)
            return False
        if not isinstance(k, dict):
            return False
        keytype = k.get("keytype")
        subject = k.get("subject")
        if subject is not None and not isinstance(subject, str):
            return False
        if keytype == "SCHEMA":
            version = k.get("version")
            if not isinstance(subject, str) or not isinstance(version, int) or isinstance(version, bool):
                return False
            accepted = self._apply_schema(subject, version, v)
            self.last_schema_record[(subject, version)] = (offset, accepted)
            if not accepted:
                self.rejected += 1
            return accepted
        if keytype == "CONFIG":
            return self._apply_setting(self.configs, subject, v, "compatibilityLevel", Level)
        if keytype == "MODE":
            return self._apply_setting(self.modes, subject, v, "mode", Mode)
        if keytype == "DELETE_SUBJECT":
            if isinstance(subject, str) and isinstance(v, dict) and isinstance(v.get("version"), int):
                for number, sv in list(self.subjects.get(subject, {}).items()):
                    if number <= v["version"] and not sv.deleted:
                        self.subjects[subject][number] = replace(sv, deleted=True)
            return True
        return True  # NOOP, CLEAR_SUBJECT and keys of newer registries: nothing to do

    @staticmethod
    def _apply_setting(table: dict[str | None, Any], subject: str | None, v: Any, field: str, kind: type) -> bool:
        if v is None:
            table.pop(subject, None)
            return True
        raw = v.get(field) if isinstance(v, dict) else None
        if not isinstance(raw, str):
            return False
        try:
            table[subject] = kind(raw.upper())
        except ValueError:
            return False
        return True

    def _apply_schema(self, subject: str, version: int, v: Any) -> bool:
        current = self.subjects.get(subject, {}).get(version)
        if v is None:  # tombstone: permanent deletion, only of a soft-deleted version
            if current is None:
                return True
            if not current.deleted:
                return False
            self._remove(current)
            return True
        if not isinstance(v, dict):
            return False
        schema_id, text, deleted = v.get("id"), v.get("schema"), v.get("deleted", False)
        if not isinstance(schema_id, int) or not isinstance(text, str) or not isinstance(deleted, bool):
            return False
        if str(v.get("schemaType") or "AVRO").upper() != "AVRO":
            return False
        try:
            parsed = parse_avro(text)
        except RegistryError:
            return False
        if current is not None:
            if current.id != schema_id or current.schema.identity != parsed.identity:
                return False  # the key holds another schema: the first record won
            if deleted == current.deleted:
                return True
            if not deleted:
                return False  # no record un-deletes a version
            self.subjects[subject][version] = replace(current, deleted=True)
            return True
        bound = self.schemas.get(schema_id)
        if bound is not None and bound.identity != parsed.identity:
            return False  # the id belongs to another schema
        other = self.ids_by_identity.get(parsed.identity)
        if other is not None and other != schema_id:
            return False  # the schema already has another id
        schema = bound if bound is not None else parsed
        self.subjects.setdefault(subject, {})[version] = SchemaVersion(subject, version, schema_id, schema, deleted)
        self.schemas[schema_id] = schema
        self.ids_by_identity[parsed.identity] = schema_id
        self.refs.setdefault(schema_id, set()).add((subject, version))
        self.max_id = max(self.max_id, schema_id)
        return True

    def _remove(self, sv: SchemaVersion) -> None:
        versions = self.subjects[sv.subject]
        del versions[sv.version]
        if not versions:
            del self.subjects[sv.subject]
        refs = self.refs[sv.id]
        refs.discard((sv.subject, sv.version))
        if not refs:
            del self.refs[sv.id]
            del self.schemas[sv.id]
            del self.ids_by_identity[sv.schema.identity]


# ----------------------------------------------------------------------------------------------
# The store: state + the Kafka topic


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
                bootstrap_servers=self.config.bootstrap,
                client_id=self.config.client_id,
                acks="all",
                enable_idempotence=True,
                linger_ms=0,
            )
            await self._producer.start()
            self._consumer = AIOKafkaConsumer(
                bootstrap_servers=self.config.bootstrap,
                client_id=self.config.client_id,
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                fetch_max_wait_ms=500,
            )
            await self._consumer.start()
            self._offsets = AIOKafkaConsumer(
                bootstrap_servers=self.config.bootstrap,
                client_id=self.config.client_id,
                group_id=None,
                enable_auto_commit=False,
            )
            await self._offsets.start()
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
            admin = AIOKafkaAdminClient(bootstrap_servers=self.config.bootstrap, client_id=self.config.client_id)
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
        raise StoreUnavailable(f"broker {self.config.bootstrap} unreachable: {last_error or 'timed out'}")

    async def _create_topic(self, admin: AIOKafkaAdminClient) -> None:
        await admin.start()
        response = await admin.create_topics(
            [NewTopic(self.config.topic, 1, 1, topic_configs={"cleanup.policy": "compact"})]
        )
        for _topic, code, message in response.topic_errors:
            if code not in (0, TOPIC_ALREADY_EXISTS):
                raise StoreUnavailable(f"cannot create topic {self.config.topic}: {code} {message}")
            if code == TOPIC_ALREADY_EXISTS:
                await self._check_topic_config(admin)
            else:
                log.info("created schemas topic", topic=self.config.topic)

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
                    accepted = self.state.apply(record.offset, record.key, record.value)
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

    async def _produce(self, records: Sequence[tuple[bytes, bytes | None]]) -> list[bool]:
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
            records: list[tuple[bytes, bytes | None]] = []
            for subject, version in pending:
                current = self.state.subjects.get(subject, {}).get(version)
                records.append((schema_key(subject, version), current.value() if current is not None else None))
            log.info("healing keys after a lost race", keys=len(records))
            await self._produce(records)
        raise errors.store_error("could not settle the schemas topic after concurrent writes")

    def _writable(self, subject: str | None) -> None:
        if self.state.mode(subject) is Mode.READONLY:
            raise errors.read_only(subject)

    async def register(
        self, subject: str, schema: ParsedSchema, schema_id: int | None = None, version: int | None = None
    ) -> tuple[int, int]:
        """Register `schema` under `subject`: its id and version (existing ones if the subject
        already has it). `schema_id`/`version` are only accepted in IMPORT mode."""
        async with self._lock:
            for _ in range(self.config.write_attempts):
                await self.sync()
                state = self.state
                self._writable(subject)
                mode = state.mode(subject)
                if (schema_id is not None or version is not None) and mode is not Mode.IMPORT:
                    raise errors.operation_not_permitted(
                        f"Overwrite new schema with id {schema_id} or version {version} is only permitted in "
                        "IMPORT mode"
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
                    reasons = checked(schema, live, state.compatibility(subject))
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
                self.conflicts += 1
                log.info("lost a registration race; retrying", subject=subject, version=new_version, id=new_id)
                await self._heal([(subject, new_version)])
        raise errors.store_error(f"could not register under {subject} after {self.config.write_attempts} attempts")

    async def delete_version(self, subject: str, version: int, permanent: bool) -> int:
        """Soft-delete a version, or permanently delete a soft-deleted one; `LATEST` for the
        latest (live) version."""
        async with self._lock:
            for _ in range(self.config.write_attempts):
                await self.sync()
                self._writable(subject)
                every = self.state.subjects.get(subject)
                if not every:
                    raise errors.subject_not_found(subject)
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
                    record: tuple[bytes, bytes | None] = (schema_key(subject, number), None)
                else:
                    if sv.deleted:
                        raise errors.version_soft_deleted(subject, number)
                    record = (schema_key(subject, number), replace(sv, deleted=True).value())
                [accepted] = await self._produce([record])
                if accepted:
                    log.info("version deleted", subject=subject, version=number, permanent=permanent)
                    return number
                self.conflicts += 1
                await self._heal([(subject, number)])
        raise errors.store_error(f"could not delete from {subject} after {self.config.write_attempts} attempts")

    async def delete_subject(self, subject: str, permanent: bool) -> list[int]:
        """Soft-delete every live version of a subject, or permanently delete a soft-deleted
        subject with its config and mode; the versions deleted."""
        async with self._lock:
            for _ in range(self.config.write_attempts):
                await self.sync()
                self._writable(subject)
                every = self.state.subjects.get(subject)
                if not every:
                    raise errors.subject_not_found(subject)
                live = self.state.versions(subject)
                records: list[tuple[bytes, bytes | None]] = []
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
                    records.append((delete_subject_key(subject), _dumps({"subject": subject, "version": max(every)})))
                outcomes = await self._produce(records)
                if all(outcomes[: len(numbers)]):
                    log.info("subject deleted", subject=subject, versions=numbers, permanent=permanent)
                    return numbers
                self.conflicts += 1
                await self._heal((subject, n) for n in numbers)
        raise errors.store_error(f"could not delete {subject} after {self.config.write_attempts} attempts")

    async def set_compatibility(self, subject: str | None, level: Level) -> None:
        async with self._lock:
            await self._produce([(config_key(subject), _dumps({"compatibilityLevel": level.value}))])

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
            await self._produce([(mode_key(subject), _dumps({"mode": mode.value}))])

    async def delete_mode(self, subject: str) -> Mode:
        async with self._lock:
            await self.sync()
            if subject not in self.state.modes:
                raise errors.subject_not_found(subject)
            before = self.state.modes[subject]
            await self._produce([(mode_key(subject), None)])
            return before
