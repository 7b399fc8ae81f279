"""The three analytics jobs, and what one micro-batch of a job computes with Spark.

One streaming query per job, each reading its topics with the `streamshop-kafka` source:

| job    | topics                         | events                     |
|--------|--------------------------------|----------------------------|
| orders | `orders`                       | OrderCreated, OrderStatusChanged |
| otp    | `otp.deliveries`               | OtpDelivered, OtpFailed    |
| logs   | `logs.app`, `logs.ingress`, `logs.db` (pattern `logs\\.[^.]+`) | LogRecord |

Each job decodes its events into a *projection* of the catalog schemas: only the fields it
uses.  Avro schema resolution skips the others while decoding, which roughly doubles decoding
speed for orders (line items are never built).  Data written with any version of the schemas
that resolves to the catalog's reads the same way.

The query itself is stateless (no Spark state store): `foreachBatch` hands each micro-batch to
`aggregate()`, one Spark job that turns every record into one *fact* and groups the facts by
(kind, minute window, dimensions, topic-partition).  Its few result rows carry everything the
driver needs: the components to add (`analytics.metrics`), what each partition's offsets
were (coverage, for `analytics.ledger`) and the quarantined records themselves (one group per
record).  The running totals, the watermark and idempotence are the ledger's job.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F

from analytics.ledger import BatchFacts, Span
from analytics.metrics import QUARANTINED, WINDOW_MS, ComponentKey, Components

__all__ = ["JOBS", "Fact", "Job", "Quarantined", "aggregate", "facts_of", "reader_schema"]

_OTHER = "other"  # records that are neither facts nor quarantined: tombstones
_DIMS = 3


@dataclass(frozen=True)
class Fact:
    """A kind of fact a record can be: its condition, event time, dimensions and measures."""

    kind: str
    when: Column
    event_time: Column
    dims: tuple[Column, ...] = ()
    amount: Column | None = None
    latency: Column | None = None


@dataclass(frozen=True)
class Job:
    """One streaming query: what it subscribes to, the event fields it reads, its facts."""

    name: str
    subscription: Mapping[str, str]  # the source's topics / topicPattern option
    fields: Sequence[tuple[str, Sequence[str]]]  # catalog record -> the fields read (a.b: nested)
    facts: Callable[[], list[Fact]]  # built when the query starts (Columns need a session)


@dataclass(frozen=True, slots=True)
class Quarantined:
    """A record that could not be decoded, with its coordinates."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    key: str | None
    error: str
    value: bytes | None


def _order_facts() -> list[Fact]:
    created, changed = F.col("OrderCreated"), F.col("OrderStatusChanged")
    return [
        Fact("orders.created", created.isNotNull(), created["created_at"], (created["currency"],), created["total"]),
        Fact("orders.status", changed.isNotNull(), changed["changed_at"], (changed["to_status"],)),
    ]


def _otp_facts() -> list[Fact]:
    delivered, failed = F.col("OtpDelivered"), F.col("OtpFailed")
    outcome = F.when(failed["will_retry"], F.lit("retry")).otherwise(F.lit("final"))
    return [
        Fact(
            "otp.delivered",
            delivered.isNotNull(),
            delivered["envelope"]["occurred_at"],
            (delivered["channel"],),
            latency=delivered["latency_ms"],
        ),
        Fact("otp.failed", failed.isNotNull(), failed["envelope"]["occurred_at"], (failed["channel"], outcome)),
    ]


def _log_facts() -> list[Fact]:
    # LogRecord is a single record type: its fields are columns (`timestamp` is renamed, the
    # source's own `timestamp` column being the Kafka record's).
    return [
        Fact(
            "logs.record",
            F.col("service").isNotNull(),
            F.col("event_timestamp"),
            (F.col("service"), F.col("level"), F.col("event")),
        )
    ]


JOBS: Mapping[str, Job] = {
    "orders": Job(
        "orders",
        {"topics": "orders"},
        (("OrderCreated", ("total", "currency", "created_at")), ("OrderStatusChanged", ("to_status", "changed_at"))),
        _order_facts,
    ),
    "otp": Job(
        "otp",
        {"topics": "otp.deliveries"},
        (
            ("OtpDelivered", ("envelope.occurred_at", "channel", "latency_ms")),
            ("OtpFailed", ("envelope.occurred_at", "channel", "will_retry")),
        ),
        _otp_facts,
    ),
    # Not `logs\..*`: that would also match dead-letter topics such as `logs.app.dlq`.
    "logs": Job(
        "logs",
        {"topicPattern": r"logs\.[^.]+"},
        (("LogRecord", ("service", "level", "event", "timestamp")),),
        _log_facts,
    ),
}


# -- the reader schema: a projection of catalog records ---------------------------------------

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_NAMED = frozenset({"record", "error", "enum", "fixed"})


def reader_schema(fields: Sequence[tuple[str, Sequence[str]]]) -> str:
    """The reader schema (Avro JSON) of a job: each record cut down to the fields it reads, a
    union when there are several records.  Named types keep their full names, so writers of the
    full records resolve to it; each named type is defined once, at its first use."""
    from schemas.catalog import default_catalog

    catalog = default_catalog()
    definitions: dict[str, Any] = {}
    branches = []
    for name, paths in fields:
        full = json.loads(catalog.schema(name).text)
        _collect(full, None, definitions)
        branches.append(_project(full, _spec(paths), definitions))
    root: Any = branches if len(branches) > 1 else branches[0]
    return json.dumps(_define_once(root, None, definitions, set()))


def _spec(paths: Iterable[str]) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    for path in paths:
        head, _, rest = path.partition(".")
        if rest:
            inner = spec.setdefault(head, {})
            if inner is None:
                raise ValueError(f"field {head} is read whole and in part")
            inner.update(_spec([rest]))
        else:
            spec[head] = None
    return spec


def _full_name(node: Mapping[str, Any], namespace: str | None) -> str:
    name = str(node["name"])
    ns = node.get("namespace", namespace)
    return name if "." in name or not ns else f"{ns}.{name}"


def _collect(node: Any, namespace: str | None, out: dict[str, Any]) -> None:
    """Every named definition in a schema, by full name."""
    if isinstance(node, list):
        for branch in node:
            _collect(branch, namespace, out)
    elif isinstance(node, dict):
        kind = node.get("type")
        if kind in _NAMED:
            full = _full_name(node, namespace)
            out.setdefault(full, {**node, "name": full.rpartition(".")[2], "namespace": full.rpartition(".")[0]})
            namespace = full.rpartition(".")[0] or None
            for f in node.get("fields", ()):
                _collect(f["type"], namespace, out)
        elif kind in ("array", "map"):
            _collect(node["items" if kind == "array" else "values"], namespace, out)
        elif isinstance(kind, (dict, list)):
            _collect(kind, namespace, out)


def _project(record: Mapping[str, Any], spec: Mapping[str, Any], definitions: Mapping[str, Any]) -> dict[str, Any]:
    names = {f["name"] for f in record["fields"]}
    missing = set(spec) - names
    if missing:
        raise ValueError(f"{record['name']} has no field {', '.join(sorted(missing))}")
    fields = []
    for f in record["fields"]:
        if f["name"] not in spec:
            continue
        sub = spec[f["name"]]
        if sub is None:
            fields.append(f)
            continue
        target = f["type"]
        if isinstance(target, str):
            target = definitions[target]
        if not (isinstance(target, dict) and target.get("type") == "record"):
            raise ValueError(f"{record['name']}.{f['name']} is not a record: it cannot be read in part")
        fields.append({**f, "type": _project(target, sub, definitions)})
    return {**record, "fields": fields}


def _define_once(node: Any, namespace: str | None, definitions: Mapping[str, Any], defined: set[str]) -> Any:
    """Define each named type at its first use and refer to it by full name afterwards,
    pulling in definitions that lived in fields the projection dropped."""
    if isinstance(node, str):
        if node in _PRIMITIVES:
            return node
        full = node if "." in node or not namespace else f"{namespace}.{node}"
        if full in defined:
            return full
        return _define_once(definitions[full], None, definitions, defined)
    if isinstance(node, list):
        return [_define_once(b, namespace, definitions, defined) for b in node]
    kind = node.get("type")
    if kind in _NAMED:
        full = _full_name(node, namespace)
        if full in defined:
            return full
        defined.add(full)
        ns, _, short = full.rpartition(".")
        out = {**node, "name": short, "namespace": ns}
        if "fields" in node:
            out["fields"] = [
                {**f, "type": _define_once(f["type"], ns or None, definitions, defined)} for f in node["fields"]
            ]
        return out
    if kind in ("array", "map"):
        part = "items" if kind == "array" else "values"
        return {**node, part: _define_once(node[part], namespace, definitions, defined)}
    if isinstance(kind, (dict, list)):
        return {**node, "type": _define_once(kind, namespace, definitions, defined)}
    return node


# -- one micro-batch ---------------------------------------------------------------------------


def aggregate(df: DataFrame, facts: Sequence[Fact]) -> DataFrame:
    """One row per (kind, window, dimensions, topic-partition), and one per quarantined record."""
    error = F.col("error").isNotNull()

    def pick(choose: Callable[[Fact], Column | None], quarantined: Column | None = None) -> Column:
        expr = F.when(error, quarantined)
        for fact in facts:
            expr = expr.when(fact.when, choose(fact))
        return expr

    event_ms = pick(lambda f: F.unix_millis(f.event_time), F.unix_millis(F.col("timestamp")))

    def dim(i: int) -> Column:
        return pick(lambda f: f.dims[i].cast("string") if i < len(f.dims) else None, F.col("topic") if i == 0 else None)

    dims = [dim(i) for i in range(_DIMS)]
    kinds = pick(lambda f: F.lit(f.kind), F.lit(QUARANTINED)).otherwise(F.lit(_OTHER))
    projected = df.select(
        kinds.alias("kind"),
        (event_ms - F.pmod(event_ms, F.lit(WINDOW_MS))).alias("window_ms"),
        *(d.alias(f"d{i}") for i, d in enumerate(dims)),
        pick(lambda f: f.amount).cast("decimal(18,4)").alias("amount"),
        pick(lambda f: f.latency).cast("bigint").alias("latency"),
        event_ms.alias("event_ms"),
        F.when(error, F.col("offset")).alias("q_offset"),
        "topic",
        "partition",
        "offset",
        "timestamp",
        "key",
        "error",
        "value",
    )
    return projected.groupBy("kind", "window_ms", "d0", "d1", "d2", "topic", "partition", "q_offset").agg(
        F.count(F.lit(1)).alias("n"),
        F.sum("amount").alias("amount"),
        F.collect_list("latency").alias("latencies"),
        F.min("offset").alias("first_offset"),
        F.max("offset").alias("last_offset"),
        F.max("event_ms").alias("max_event_ms"),
        # A quarantine group is one record: first() is that record's.
        F.first("error", ignorenulls=True).alias("error"),
        F.first("value", ignorenulls=True).alias("value"),
        F.first(F.unix_millis("timestamp"), ignorenulls=True).alias("timestamp_ms"),
        F.first("key", ignorenulls=True).alias("key"),
    )


def facts_of(rows: Iterable[Row], arity: Mapping[str, int]) -> tuple[BatchFacts, list[Quarantined]]:
    """The collected rows of `aggregate()` as the ledger's input, plus the quarantined records.
    `arity`: how many dimensions each fact kind has."""
    out = BatchFacts()
    quarantined: list[Quarantined] = []
    for r in rows:
        tp = (str(r["topic"]), int(r["partition"]))
        span = Span(int(r["first_offset"]), int(r["last_offset"]))
        out.coverage[tp] = out.coverage[tp].union(span) if tp in out.coverage else span
        n = int(r["n"])
        out.records += n
        kind = str(r["kind"])
        if kind == _OTHER:
            continue
        window = r["window_ms"]
        if kind == QUARANTINED:
            quarantined.append(
                Quarantined(tp[0], tp[1], int(r["q_offset"]), r["timestamp_ms"], r["key"], str(r["error"]), r["value"])
            )
            if window is not None:  # a record without a timestamp is in the Parquet output only
                key = ComponentKey(QUARANTINED, int(window), (tp[0],))
                out.quarantined.setdefault(key, Components()).add(Components(n=n))
            continue
        dims = tuple("" if r[f"d{i}"] is None else str(r[f"d{i}"]) for i in range(arity[kind]))
        amount = r["amount"]
        components = Components(
            n=n,
            amount=amount if isinstance(amount, Decimal) else Decimal(0),
            latencies=Counter(int(v) for v in r["latencies"]),
        )
        out.components.setdefault(ComponentKey(kind, int(window), dims), Components()).add(components)
        event_ms = int(r["max_event_ms"])
        out.max_event_ms = event_ms if out.max_event_ms is None else max(out.max_event_ms, event_ms)
    quarantined.sort(key=lambda q: (q.topic, q.partition, q.offset))
    return out, quarantined
