"""`streamshop-kafka`: a PySpark 4 Python Data Source reading Kafka topics with Avro decoding.

PySpark's wheel ships no Kafka connector and no spark-avro, so this source speaks the Kafka
protocol with confluent-kafka, decodes Confluent-framed Avro (see `analytics.avro_columns`) and
hands Spark Arrow record batches.  It works as a streaming source (`readStream`) and as a batch
source (`read`, for replays)::

    spark.dataSource.register(StreamshopKafkaSource)      # analytics.spark.spark_session() does it
    (spark.readStream.format("streamshop-kafka")
        .option("bootstrap.servers", "127.0.0.1:9092")
        .option("topics", "orders")
        .option("schema.registry.url", "http://127.0.0.1:8081")
        .option("valueRecord", "OrderCreated")
        .load())

Options (names are case-insensitive):
  bootstrap.servers       required.
  topics | topicPattern   a comma list, or a regex matched against whole topic names; with a
                          pattern, new matching topics (and new partitions of any topic) are
                          picked up at each trigger, read from their first offset.
  startingOffsets         earliest | latest | group | JSON {"topic": {"0": 12, "1": -2}} (-2
                          earliest, -1 latest; unnamed partitions start at earliest).  `group`
                          resumes from the consumer group's committed offsets, earliest where it
                          has none.  Default: group for streams, earliest for batch reads.  Used
                          only by a query without a checkpoint: a restart resumes from it.
  endingOffsets           batch reads only: latest (default) | JSON (unnamed partitions: latest;
                          an offset past the log end reads to the log end).
  maxRecordsPerTrigger    streams: at most this many records per micro-batch, shared fairly
                          across partitions (Spark's ReadMaxRows admission control).
  maxRecordsPerPartition  split a partition's range into Spark tasks of at most this many offsets.
  group.id                the consumer group progress is committed to (default `analytics`).
  schema.registry.url     decode Confluent-framed Avro values; without it, the raw `value` only.
  readerSchema | valueRecord | valueSubject
                          the reader schema values are decoded into: Avro JSON; a record of
                          `schemas/*.avsc` by full or short name (comma list: a union, e.g.
                          "OrderCreated,OrderStatusChanged"); or a registry subject's latest
                          version (fixed when the query starts).  Data written with any schema
                          that resolves to it (older versions) reads as it.  Required with a registry.
  includeHeaders          true | false (default false).
  pollTimeoutMs           a read task fails after this long without data (default 120000).
  kafka.<property>        passed to librdkafka as <property> (security, fetch sizes...).

Columns: topic string, partition int, offset bigint, timestamp timestamp (the record's), key
string (UTF-8, invalid bytes replaced), then the reader schema's top-level fields (a field whose
name is one of these columns is renamed `event_<name>`; with a union reader, one struct column
per record, named by its short name), then `headers` array<struct<key string, value binary>>
when includeHeaders, then `error` string and `value` binary.  A record that cannot be decoded --
not Confluent-framed ("unknown magic byte 0x7b ..."), an id the registry does not know ("schema
id 999 not found in the schema registry"), bytes that are not valid under its writer schema, or
a writer schema that does not resolve to the reader -- is quarantined: its decoded fields are
null, `error` says why, `value` keeps the raw bytes; it is never dropped and never fails the
query.  `value` is null for decoded rows.  Without a registry: topic ... key, [headers], value.

Delivery guarantee (streams), precisely -- at-least-once:
- Spark's checkpoint, not the consumer group, decides what is read: a query restarted on its
  checkpoint resumes exactly where it stopped; a batch that was planned but not committed is
  re-run with the same offsets, so the sink may see its rows twice (make it idempotent, e.g.
  keyed on `foreachBatch`'s batch_id).
- The group's offsets never run ahead of the sink: a position is committed to the group only
  once every batch ending there has been written by the sink and recorded in the checkpoint's
  commit log.  Two hooks do it:
  * Spark's `commit(end)`.  Spark calls it for batch N only while planning batch N+1, i.e. only
    when new data has arrived (measured: also not at the next start unless that start plans a
    batch).  Alone, it would leave the group one batch behind for as long as the stream is
    idle, and after a `trigger(availableNow=True)` run (which stops after its last batch)
    until some later run finds new data.
  * So `latestOffset(start)` also commits `start` (except the query's initial offset).  This is
    safe because MicroBatchExecution runs exactly one batch at a time and, on restart, re-runs
    an unfinished batch before planning: whenever it asks for offsets after `start`, the batch
    ending at `start` is complete.  The group therefore catches up at the next trigger (with a
    processing-time trigger, up to one interval later when idle), and an availableNow run
    leaves it at the run's end: its
    final latestOffset call, which finds nothing more, commits the last batch.
  A failed commit is logged and skipped; the next one catches up (committing less is safe).
  Lag tooling thus shows the records not yet processed, plus at most the batch in flight.
- A new query (fresh checkpoint) with startingOffsets=group resumes from the group: nothing is
  lost, and only records after the group's offsets that the old query had already written (at
  most its batch in flight when it stopped) are read again.
Batch reads never commit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import repeat
from operator import itemgetter
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Message
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from analytics import offsets as off
from analytics.avro_column_plan import SchemaResolutionError
from analytics.avro_columns import EventColumns
from analytics.kafka import KafkaClients, read_range, unreachable
from analytics.offsets import OffsetRange, Offsets, Partition
from contracts import commit_note
from schemas.blocking_registry import Missing, fetch_schema, latest_schema
from schemas.serde import HEADER_SIZE, AvroSchema, UnknownMagicByteError

__all__ = ["SOURCE_NAME", "Settings", "StreamshopKafkaSource"]

SOURCE_NAME = "streamshop-kafka"
DEFAULT_GROUP = "analytics"
_METADATA = ("topic", "partition", "offset", "timestamp", "key")
_TRAILER = ("headers", "error", "value")
_ARROW_CHUNK = 16_384  # records per Arrow batch handed to Spark

# Spark workers: stdlib logging to stderr, not structlog's stdout; "event key=value" text, as no handler shows extra=
log = logging.getLogger(__name__)

# Unchanged positions are committed again this often (each commit notes when): the group's last
# commit then says the job is alive even while no data comes.  Within one trigger interval more.
COMMIT_EVERY_S = 15.0
# How long a streaming query waits out a cluster it cannot reach, planning no batch meanwhile,
# before it fails: a broker's restart or a leader's election takes seconds to a minute.
UNREACHABLE_GRACE_S = 300.0

StartSpec = Literal["earliest", "latest", "group"] | dict[Partition, int]


@dataclass(frozen=True)
class Settings:
    """The parsed options; picklable, travels to the planner, the runner and every worker."""

    kafka: dict[str, Any]
    topics: tuple[str, ...]
    pattern: str | None
    starting: StartSpec | None
    ending: Literal["latest"] | dict[Partition, int]
    max_per_trigger: int | None
    max_per_partition: int | None
    group_id: str
    registry_url: str | None
    include_headers: bool
    poll_timeout_s: float
    reader_text: str | None = None  # the reader schema, resolved from readerSchema / valueRecord / valueSubject
    _reader_option: tuple[str, str] | None = field(default=None, repr=False)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> Settings:
        opts = {k.lower(): v for k, v in options.items()}
        servers = opts.get("bootstrap.servers")
        if not servers:
            raise ValueError(f"{SOURCE_NAME}: option bootstrap.servers is required")
        kafka: dict[str, Any] = {k[len("kafka.") :]: v for k, v in opts.items() if k.startswith("kafka.")}
        kafka["bootstrap.servers"] = servers
        topics = tuple(t.strip() for t in opts.get("topics", "").split(",") if t.strip())
        pattern = opts.get("topicpattern") or None
        if bool(topics) == bool(pattern):
            raise ValueError(f"{SOURCE_NAME}: give exactly one of the options topics and topicPattern")
        registry = opts.get("schema.registry.url") or None
        chosen = [(k, opts[k.lower()]) for k in ("readerSchema", "valueRecord", "valueSubject") if opts.get(k.lower())]
        if len(chosen) > 1:
            raise ValueError(f"{SOURCE_NAME}: give only one of readerSchema, valueRecord, valueSubject")
        if registry and not chosen:
            raise ValueError(f"{SOURCE_NAME}: with schema.registry.url, give readerSchema, valueRecord or valueSubject")
        if chosen and not registry:
            raise ValueError(f"{SOURCE_NAME}: {chosen[0][0]} needs schema.registry.url (writer schemas come from it)")
        return cls(
            kafka=kafka,
            topics=topics,
            pattern=pattern,
            starting=_parse_starting(opts.get("startingoffsets")),
            ending=_parse_ending(opts.get("endingoffsets")),
            max_per_trigger=_positive(opts, "maxRecordsPerTrigger"),
            max_per_partition=_positive(opts, "maxRecordsPerPartition"),
            group_id=opts.get("group.id") or DEFAULT_GROUP,
            registry_url=registry,
            include_headers=_boolean(opts, "includeHeaders"),
            poll_timeout_s=(_positive(opts, "pollTimeoutMs") or 120_000) / 1000,
            _reader_option=chosen[0] if chosen else None,
        )

    def resolved(self) -> Settings:
        """These settings with the reader schema text fetched / looked up (once, on the driver)."""
        if self._reader_option is None or self.reader_text is not None:
            return self
        name, value = self._reader_option
        if name == "readerSchema":
            text = value
        elif name == "valueRecord":
            text = _catalog_reader(value)
        else:
            assert self.registry_url is not None
            text = latest_schema(self.registry_url, value)
        AvroSchema.parse(text)  # fail early, on the driver, with the parser's message
        return replace(self, reader_text=text)


def _parse_starting(value: str | None) -> StartSpec | None:
    if value is None or not value.strip():
        return None
    v = value.strip()
    if v.lower() in ("earliest", "latest", "group"):
        return v.lower()  # type: ignore[return-value]
    return off.parse_offsets_json(v, "startingOffsets")


def _parse_ending(value: str | None) -> Literal["latest"] | dict[Partition, int]:
    if value is None or not value.strip() or value.strip().lower() == "latest":
        return "latest"
    parsed = off.parse_offsets_json(value.strip(), "endingOffsets")
    if off.EARLIEST in parsed.values():
        raise ValueError("endingOffsets: -2 (earliest) is not a valid end")
    return parsed


def _positive(opts: Mapping[str, str], name: str) -> int | None:
    raw = opts.get(name.lower())
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{SOURCE_NAME}: option {name} must be a positive integer, got {raw!r}") from None
    if value <= 0:
        raise ValueError(f"{SOURCE_NAME}: option {name} must be a positive integer, got {raw!r}")
    return value


def _boolean(opts: Mapping[str, str], name: str) -> bool:
    raw = opts.get(name.lower(), "false").strip().lower()
    if raw not in ("true", "false"):
        raise ValueError(f"{SOURCE_NAME}: option {name} must be true or false, got {raw!r}")
    return raw == "true"


def _catalog_reader(names: str) -> str:
    """Catalog record(s) by name -> reader schema text (a union for several)."""
    import json

    from schemas.catalog import default_catalog

    catalog = default_catalog()
    schemas = [json.loads(catalog.schema(n.strip()).text) for n in names.split(",") if n.strip()]
    if len(schemas) == 1:
        return json.dumps(schemas[0])
    # Each branch is self-contained; shared named types (Envelope...) must be defined only once
    # in a union, so later branches refer to the first definition by name.
    return json.dumps(_dedupe_named(schemas))


def _dedupe_named(branches: list[Any]) -> list[Any]:
    defined: set[str] = set()

    def walk(node: Any, namespace: str | None) -> Any:
        if isinstance(node, list):
            return [walk(b, namespace) for b in node]
        if not isinstance(node, dict):
            return node
        kind = node.get("type")
        if kind in ("record", "error", "enum", "fixed"):
            ns = node.get("namespace", namespace)
            full = node["name"] if "." in node["name"] or not ns else f"{ns}.{node['name']}"
            if full in defined:
                return full
            defined.add(full)
            out = dict(node)
            if kind in ("record", "error"):
                inner_ns = full.rpartition(".")[0] or None
                out["fields"] = [{**f, "type": walk(f["type"], inner_ns)} for f in node["fields"]]
            return out
        if kind == "array":
            return {**node, "items": walk(node["items"], namespace)}
        if kind == "map":
            return {**node, "values": walk(node["values"], namespace)}
        if isinstance(kind, (dict, list)):
            return {**node, "type": walk(kind, namespace)}
        return node

    return [walk(b, None) for b in branches]


# -- schema ------------------------------------------------------------------------------------


def _rename(name: str) -> str:
    return f"event_{name}" if name in _METADATA or name in _TRAILER else name


def _event_columns(settings: Settings) -> EventColumns | None:
    if settings.reader_text is None:
        return None
    return EventColumns(AvroSchema.parse(settings.reader_text), _rename)


_HEADERS = ArrayType(
    StructType([StructField("key", StringType(), True), StructField("value", BinaryType(), True)]), True
)


def spark_schema(settings: Settings) -> StructType:
    """The source's columns for these (resolved) settings."""
    fields = [
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("timestamp", TimestampType(), True),
        StructField("key", StringType(), True),
    ]
    columns = _event_columns(settings)
    if columns is not None:
        fields.extend(columns.fields)
    if settings.include_headers:
        fields.append(StructField("headers", _HEADERS, True))
    if columns is not None:
        fields.append(StructField("error", StringType(), True))
    fields.append(StructField("value", BinaryType(), True))
    return StructType(fields)


# -- reading (Spark workers) -------------------------------------------------------------------


class KafkaInputPartition(InputPartition):
    """One Spark task: records [start, end) of one topic-partition."""

    def __init__(self, r: OffsetRange) -> None:
        super().__init__(r)
        self.range = r


# Per worker process: the reader schema's column builders (with their compiled decoders), by
# reader text.  Spark reuses Python workers across tasks, so decoders compile once per process.
_COLUMNS: dict[str, EventColumns] = {}


def read_partition(settings: Settings, arrow_schema: pa.Schema, r: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The Arrow batches of one input partition (runs in a Spark Python worker)."""
    columns: EventColumns | None = None
    if settings.reader_text is not None:
        columns = _COLUMNS.get(settings.reader_text)
        if columns is None:
            columns = _event_columns(settings)
            assert columns is not None
            _COLUMNS[settings.reader_text] = columns
    builder = _BatchBuilder(settings, arrow_schema, r.topic, r.partition, columns)
    chunk: list[Any] = []
    for messages in read_range(settings.kafka, settings.group_id, r, idle_timeout_s=settings.poll_timeout_s):
        chunk.extend(messages)
        if len(chunk) >= _ARROW_CHUNK:
            yield builder.build(chunk)
            chunk = []
    if chunk:
        yield builder.build(chunk)


class _BatchBuilder:
    """confluent-kafka messages -> one Arrow RecordBatch in the declared schema, column by column."""

    def __init__(
        self, settings: Settings, schema: pa.Schema, topic: str, partition: int, columns: EventColumns | None
    ) -> None:
        self.settings = settings
        self.schema = schema
        self.topic = topic
        self.partition = partition
        self._topic = pa.scalar(topic, pa.string())
        self._partition = pa.scalar(partition, pa.int32())
        self.columns = columns
        self.event_types = [schema.field(name).type for name in columns.names] if columns is not None else []
        self.headers_type = schema.field("headers").type if settings.include_headers else None
        self.missing: dict[int, str] = {}  # unknown ids, for this read only: they may be registered later

    def build(self, messages: Sequence[Any]) -> pa.RecordBatch:
        n = len(messages)
        # map() over the C methods: no per-message bytecode (a list comprehension per accessor
        # costs several times more per message).
        values: list[bytes | None] = list(map(Message.value, messages))
        arrays: list[pa.Array] = [
            pa.repeat(self._topic, n),
            pa.repeat(self._partition, n),
            pa.array(list(map(Message.offset, messages)), pa.int64()),
            _timestamps(list(map(_TIMESTAMP, map(Message.timestamp, messages)))),
            _keys(list(map(Message.key, messages))),
        ]
        if self.columns is not None:
            # (On failure the builders, cached per worker process, are reset for the next task.)
            errors, event_arrays = self.columns.build(lambda: self._decode(values), self.event_types)
            arrays.extend(event_arrays)
        if self.headers_type is not None:
            arrays.append(_headers([m.headers() for m in messages], self.headers_type))
        if self.columns is not None:
            error_column: list[str | None] = [None] * n
            raw: list[bytes | None] = [None] * n
            for row, message in errors:
                error_column[row] = message
                raw[row] = values[row]
            arrays.append(pa.array(error_column, pa.string()))
            arrays.append(pa.array(raw, pa.binary()))
        else:
            arrays.append(pa.array(values, pa.binary()))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _decode(self, values: list[bytes | None]) -> list[tuple[int, str]]:
        """Decode runs of values sharing a Confluent header into the event columns."""
        columns = self.columns
        assert columns is not None
        assert self.settings.registry_url is not None
        errors: list[tuple[int, str]] = []
        row = 0
        n = len(values)
        while row < n:
            value = values[row]
            if value is None:  # a tombstone: a record without a value, nothing to decode
                columns.null_rows(1)
                row += 1
                continue
            if len(value) < HEADER_SIZE or value[0] != 0:
                framing = (
                    str(UnknownMagicByteError(value[0]))
                    if value and value[0] != 0
                    else f"{len(value)}-byte value: shorter than the {HEADER_SIZE}-byte Confluent header"
                )
                errors.append((row, framing))
                columns.null_rows(1)
                row += 1
                continue
            header = value[:HEADER_SIZE]
            end = row + 1
            if row == 0 and _all_framed_as(values, header):
                end = n  # the usual batch: one run (checked in C, not a loop per value)
            while end < n and (v := values[end]) is not None and v.startswith(header):
                end += 1
            schema_id = int.from_bytes(header[1:], "big")
            reason: str | None = self.missing.get(schema_id)
            writer = None
            if reason is None:
                found = fetch_schema(self.settings.registry_url, schema_id)
                if isinstance(found, Missing):
                    reason = self.missing[schema_id] = found.reason
                else:
                    writer = found
            if writer is not None:
                try:
                    decode = columns.decoder(writer)
                except SchemaResolutionError as e:
                    reason = f"schema id {schema_id} ({writer.name}) cannot be read as the reader schema: {e}"
                else:
                    failed: list[tuple[int, str]] = []
                    decode(values[row:end], HEADER_SIZE, row, failed)  # type: ignore[arg-type]  # no None in a run
                    errors.extend((r, f"schema id {schema_id} ({writer.name}): {m}") for r, m in failed)
            if reason is not None:
                errors.extend((r, reason) for r in range(row, end))
                columns.null_rows(end - row)
            row = end
        return errors


def _all_framed_as(values: list[bytes | None], header: bytes) -> bool:
    """Every value starts with `header` (none is a tombstone)."""
    try:
        return all(map(bytes.startswith, values, repeat(header)))  # type: ignore[arg-type]
    except TypeError:  # a None
        return False


_NO_TIMESTAMP = pa.scalar(None, pa.int64())
# Arrow scalars: a Python operand is converted on each call, with an import of dateutil tried.
_ZERO_MS = pa.scalar(0, pa.int64())
_US_PER_MS = pa.scalar(1000, pa.int64())
_TIMESTAMP = itemgetter(1)  # Message.timestamp() -> (type, ms): the ms


def _timestamps(millis: list[int]) -> pa.Array:
    """Record timestamps (ms) -> timestamp(us, UTC); -1 (no timestamp) -> null."""
    array = pa.array(millis, pa.int64())
    if millis and min(millis) < 0:
        array = pc.if_else(pc.less(array, _ZERO_MS), _NO_TIMESTAMP, array)
    return pc.multiply(array, _US_PER_MS).cast(pa.timestamp("us", tz="UTC"))


def _keys(keys: list[bytes | None]) -> pa.Array:
    """Kafka keys as strings, checked as UTF-8 in C; a key that is not UTF-8 (rare: streamshop's
    keys are ids) gets U+FFFD for its bad bytes rather than failing the batch."""
    try:
        return pa.array(keys, pa.binary()).cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([None if k is None else k.decode("utf-8", "replace") for k in keys], pa.string())


def _headers(headers: list[list[tuple[str, bytes | None]] | None], arrow_type: pa.DataType) -> pa.Array:
    offsets = [0]
    keys: list[str] = []
    vals: list[bytes | None] = []
    for pairs in headers:
        for k, v in pairs or ():
            keys.append(k)
            vals.append(v)
        offsets.append(len(keys))
    assert isinstance(arrow_type, pa.ListType)
    item = arrow_type.value_type
    entries = pa.StructArray.from_arrays([pa.array(keys, pa.string()), pa.array(vals, pa.binary())], fields=list(item))
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), entries, type=arrow_type)


# -- planning (driver side) --------------------------------------------------------------------


class _Planner:
    """What exists and where to start or stop: shared by the stream and batch readers."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._clients: KafkaClients | None = None

    @property
    def clients(self) -> KafkaClients:
        if self._clients is None:
            self._clients = KafkaClients(self.settings.kafka, self.settings.group_id)
        return self._clients

    def discover(self) -> list[Partition]:
        return self.clients.partitions(self.settings.topics, self.settings.pattern)

    def starting(self, spec: StartSpec, partitions: Sequence[Partition]) -> dict[Partition, int]:
        earliest = self.clients.earliest(partitions)
        if spec == "earliest":
            return earliest
        if spec == "latest":
            return self.clients.latest(partitions)
        if spec == "group":
            return {**earliest, **self.clients.committed(partitions)}
        assert isinstance(spec, dict)
        latest = self.clients.latest([tp for tp, o in spec.items() if o == off.LATEST])
        named = {
            tp: latest[tp] if o == off.LATEST else earliest.get(tp, 0) if o == off.EARLIEST else o
            for tp, o in spec.items()
        }
        return {**earliest, **named}

    def close(self) -> None:
        if self._clients is not None:
            self._clients.close()
            self._clients = None

    def __getstate__(self) -> dict[str, Any]:
        # Kafka clients never travel: the reader holding this planner is pickled to workers.
        return {"settings": self.settings, "_clients": None}


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches between Kafka positions; commits progress to the consumer group."""

    def __init__(self, settings: Settings, schema: StructType) -> None:
        self.settings = settings
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        self.planner = _Planner(settings)
        self._target: dict[Partition, int] | None = None  # availableNow: where to stop
        self._latest: Offsets | None = None
        self._initial: Offsets | None = None
        self._committed: dict[Partition, int] | None = None
        self._committed_at = 0.0
        self._progress_ms: int | None = None
        self._unreachable_since: float | None = None

    def initialOffset(self) -> dict[str, Any]:
        spec = self.settings.starting or "group"
        partitions = self.planner.discover()
        self._initial = off.canonical(self.planner.starting(spec, partitions))
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.settings.max_per_trigger is not None:
            return ReadMaxRows(self.settings.max_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._available()

    def _available(self) -> dict[Partition, int]:
        return self.planner.clients.latest(self.planner.discover())

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = off.flatten(start)
        if start != self._initial:
            # Spark runs one batch at a time and re-runs an unfinished batch before planning:
            # `start` is the end of a batch already in the checkpoint's commit log.
            self._commit(begin)
        latest = self._target if self._target is not None else self._reachable()
        if latest is None:
            return off.canonical(begin)  # no batch until the cluster answers
        self._latest = off.canonical(latest)
        # New partitions (absent from start) join once they hold a record; a topic that
        # disappeared keeps its position (offsets never go backwards).
        end = {**begin, **{tp: stop for tp, stop in latest.items() if stop > begin.get(tp, 0)}}
        available = {tp: e - begin.get(tp, 0) for tp, e in end.items()}
        if isinstance(limit, ReadMaxRows):
            granted = off.fair_share(available, limit.max_rows)
            end = {tp: begin.get(tp, 0) + granted[tp] for tp in end}
        elif isinstance(limit, ReadMinRows) and sum(available.values()) < limit.min_rows:
            end = dict(begin)
        return off.canonical(end)

    def _reachable(self) -> dict[Partition, int] | None:
        """The latest offsets; None while the cluster cannot be reached, for UNREACHABLE_GRACE_S."""
        try:
            latest = self._available()
        except Exception as e:
            if not unreachable(e):
                raise
            now = time.monotonic()
            since = self._unreachable_since = self._unreachable_since or now
            if now - since > UNREACHABLE_GRACE_S:
                raise
            log.warning("cluster unreachable, no batch until it answers error=%s for_s=%.0f", e, now - since)
            return None
        self._unreachable_since = None
        return latest

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return self._latest

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        ranges = off.ranges(off.flatten(start), off.flatten(end), self.settings.max_per_partition)
        return [KafkaInputPartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaInputPartition)
        return read_partition(self.settings, self.arrow_schema, partition.range)

    def commit(self, end: dict[str, Any]) -> None:
        self._commit(off.flatten(end))

    def _commit(self, positions: dict[Partition, int]) -> None:
        """Commit `positions`; unchanged positions again once COMMIT_EVERY_S has passed, so the
        group's last commit (with its note, contracts.commit_note) tells that the job is alive
        while no data comes."""
        now = time.monotonic()
        if not positions or (positions == self._committed and now - self._committed_at < COMMIT_EVERY_S):
            return
        now_ms = int(time.time() * 1000)
        if positions != self._committed:
            self._progress_ms = now_ms  # a batch moved the positions
        note = commit_note.note_text(self.settings.group_id, now_ms, COMMIT_EVERY_S, self._progress_ms)
        try:
            self.planner.clients.commit(positions, note)
        except Exception:
            log.warning("group commit failed group=%s retry=next_commit", self.settings.group_id, exc_info=True)
        else:
            self._committed, self._committed_at = positions, now

    def stop(self) -> None:
        self.planner.close()


class BatchReader(DataSourceReader):
    """A bounded read between startingOffsets and endingOffsets (replays); never commits."""

    def __init__(self, settings: Settings, schema: StructType) -> None:
        self.settings = settings
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")

    def partitions(self) -> Sequence[InputPartition]:
        planner = _Planner(self.settings)
        try:
            available = planner.discover()
            begin = planner.starting(self.settings.starting or "earliest", available)
            latest = planner.clients.latest(available)
            ending = self.settings.ending
            if ending != "latest":
                assert isinstance(ending, dict)
                # Only partitions that exist and are subscribed: others have nothing to read.  An
                # end past the log's end reads to the log's end (the records there are all there is).
                latest.update({tp: min(o, latest[tp]) for tp, o in ending.items() if tp in latest and o != off.LATEST})
        finally:
            planner.close()
        ranges = off.ranges(begin, latest, self.settings.max_per_partition)
        return [KafkaInputPartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaInputPartition)
        return read_partition(self.settings, self.arrow_schema, partition.range)


class StreamshopKafkaSource(DataSource):
    """The `streamshop-kafka` data source (see the module docstring)."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self._settings: Settings | None = None

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    @property
    def settings(self) -> Settings:
        # Resolved once (valueSubject asks the registry) and pickled along with this object, so
        # the planner, the streaming runner and the workers all decode into the same reader.
        if self._settings is None:
            self._settings = Settings.parse(self.options).resolved()
        return self._settings

    def schema(self) -> StructType:
        return spark_schema(self.settings)

    def _checked(self, schema: StructType) -> StructType:
        expected = spark_schema(self.settings)
        if schema != expected:
            raise ValueError(
                f"{SOURCE_NAME}: the schema is derived from the options; drop .schema(...) "
                f"(expected {expected.simpleString()})"
            )
        return schema

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(self.settings, self._checked(schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(self.settings, self._checked(schema))
