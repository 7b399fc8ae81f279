"""The `streamshop-kafka` Spark source against a real broker and a real schema registry, with
real confluent-kafka producers and a local Spark (one session for the module: it takes ~6 s)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

from analytics.spark_kafka import read_kafka
from schemas.catalog import default_catalog
from schemas.serde import AvroSchema, encode, frame
from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import confluent_produce, create_topic
from tests.support.registry import ThreadRegistry
from tests.support.spark import (
    commit,
    committed,
    coordinates,
    positions,
    produce_avro,
    register,
    run_available_now,
)

pytestmark = pytest.mark.spark

CATALOG = default_catalog()
ORDER_CREATED = CATALOG.schema("OrderCreated")
STATUS_CHANGED = CATALOG.schema("OrderStatusChanged")
BASE_TIME = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)


@pytest.fixture
def registry_url(broker: ThreadBroker) -> Iterator[str]:
    # A registry on its own loop: Spark's workers call it while the test blocks in Spark.
    running = ThreadRegistry(broker.bootstrap)
    yield running.url
    running.close()


def order(i: int) -> dict[str, Any]:
    """A distinct OrderCreated datum."""
    datum = dict(CATALOG.example("OrderCreated"))
    quantity = i % 5 + 1
    price = Decimal(f"{i}.{i % 10:01d}25")
    return {
        **datum,
        "order_id": f"00000000-0000-4000-8000-{i:012d}",
        "customer_id": f"cust-{i}",
        "items": [{"sku": f"SKU-{i}", "quantity": quantity, "unit_price": price}],
        "total": price * quantity,
        "created_at": BASE_TIME + timedelta(milliseconds=i),
    }


def source(spark: SparkSession, bootstrap: str, **options: str) -> DataFrame:
    """A batch read of the source."""
    return spark.read.format("streamshop-kafka").option("bootstrap.servers", bootstrap).options(**options).load()


def stream(spark: SparkSession, bootstrap: str, **options: str) -> DataFrame:
    """A streaming read of the source."""
    return spark.readStream.format("streamshop-kafka").option("bootstrap.servers", bootstrap).options(**options).load()


def naive(ts: datetime) -> datetime:
    """Spark hands timestamps back as naive datetimes in the session time zone (UTC)."""
    return ts.astimezone(UTC).replace(tzinfo=None)


# -- batch -------------------------------------------------------------------------------------


def test_batch_read_decodes_avro_events_with_coordinates_keys_and_headers(
    spark: SparkSession, broker: ThreadBroker, registry_url: str
) -> None:
    create_topic(broker.bootstrap, "orders", 3)
    schema_id = register(registry_url, "orders-value", ORDER_CREATED)
    reports = produce_avro(
        broker.bootstrap,
        "orders",
        schema_id,
        ORDER_CREATED,
        [
            {"key": f"key-{i}", "value": order(i), "partition": i % 3, "headers": [("trace", f"t{i}".encode())]}
            for i in range(12)
        ],
    )
    df = source(
        spark,
        broker.bootstrap,
        topics="orders",
        **{"schema.registry.url": registry_url, "valueRecord": "OrderCreated", "includeHeaders": "true"},
    )

    assert df.columns == [
        "topic",
        "partition",
        "offset",
        "timestamp",
        "key",
        "envelope",
        "order_id",
        "customer_id",
        "items",
        "total",
        "currency",
        "created_at",
        "headers",
        "error",
        "value",
    ]
    rows = {r["key"]: r.asDict(recursive=True) for r in df.collect()}
    assert len(rows) == 12
    for i, report in enumerate(reports):
        sent = order(int(report.key().decode().split("-")[1]))  # type: ignore[union-attr]
        row = rows[report.key().decode()]  # type: ignore[union-attr]
        assert (row["topic"], row["partition"], row["offset"]) == ("orders", report.partition(), report.offset())
        assert row["timestamp"] == datetime.fromtimestamp(report.timestamp()[1] / 1000, UTC).replace(tzinfo=None)
        assert row["customer_id"] == sent["customer_id"]
        assert row["order_id"] == sent["order_id"]
        assert row["items"] == [{**sent["items"][0], "unit_price": sent["items"][0]["unit_price"]}]
        assert row["total"] == sent["total"]
        assert row["created_at"] == naive(sent["created_at"])
        assert row["envelope"]["occurred_at"] == naive(sent["envelope"]["occurred_at"])
        assert row["envelope"]["producer"] == sent["envelope"]["producer"]
        assert row["headers"] == [{"key": "trace", "value": f"t{int(row['key'].split('-')[1])}".encode()}]
        assert (row["error"], row["value"]) == (None, None), i


def test_batch_read_replays_an_offset_range_split_into_tasks(
    spark: SparkSession, broker: ThreadBroker, registry_url: str
) -> None:
    create_topic(broker.bootstrap, "orders", 2)
    schema_id = register(registry_url, "orders-value", ORDER_CREATED)
    produce_avro(
        broker.bootstrap,
        "orders",
        schema_id,
        ORDER_CREATED,
        [{"key": f"k{i}", "value": order(i), "partition": i % 2} for i in range(20)],
    )
    df = source(
        spark,
        broker.bootstrap,
        topics="orders",
        startingOffsets=json.dumps({"orders": {"0": 3, "1": -2}}),
        endingOffsets=json.dumps({"orders": {"0": 8, "1": 4}}),
        maxRecordsPerPartition="2",
        **{"schema.registry.url": registry_url, "valueRecord": "OrderCreated"},
    )

    rows = df.collect()
    assert coordinates(rows) == [("orders", 0, o) for o in range(3, 8)] + [("orders", 1, o) for o in range(4)]
    assert df.rdd.getNumPartitions() == 5  # [3,5) [5,7) [7,8) of partition 0, [0,2) [2,4) of partition 1
    assert all(r["error"] is None and r["customer_id"] for r in rows)

    # an end past the log's end reads to the log's end (partition 1 holds offsets 0-9)
    beyond = source(
        spark,
        broker.bootstrap,
        topics="orders",
        startingOffsets=json.dumps({"orders": {"0": 8, "1": 6}}),
        endingOffsets=json.dumps({"orders": {"0": 9, "1": 50}}),
        **{"schema.registry.url": registry_url, "valueRecord": "OrderCreated"},
    )
    assert coordinates(beyond.collect()) == [("orders", 0, 8)] + [("orders", 1, o) for o in range(6, 10)]


def test_without_a_registry_rows_carry_the_raw_value(spark: SparkSession, broker: ThreadBroker) -> None:
    create_topic(broker.bootstrap, "raw", 1)
    confluent_produce(broker.bootstrap, "raw", [{"key": "a", "value": b"\x01\x02"}, {"value": b"plain"}])

    df = source(spark, broker.bootstrap, topics="raw")

    assert df.columns == ["topic", "partition", "offset", "timestamp", "key", "value"]
    assert [(r["offset"], r["key"], r["value"]) for r in df.collect()] == [(0, "a", b"\x01\x02"), (1, None, b"plain")]


# -- streams -----------------------------------------------------------------------------------


def test_available_now_reads_everything_once_and_the_group_ends_at_the_end(
    spark: SparkSession, broker: ThreadBroker, registry_url: str, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap, "orders", 3)
    schema_id = register(registry_url, "orders-value", ORDER_CREATED)
    produce_avro(
        broker.bootstrap,
        "orders",
        schema_id,
        ORDER_CREATED,
        [{"value": order(i), "partition": i % 3} for i in range(9)],
    )
    options = {"topics": "orders", "schema.registry.url": registry_url, "valueRecord": "OrderCreated"}
    tps = [("orders", p) for p in range(3)]

    first = run_available_now(stream(spark, broker.bootstrap, **options), tmp_path / "ckpt")
    assert committed(broker.bootstrap, "analytics", tps) == dict.fromkeys(tps, 3)

    produce_avro(
        broker.bootstrap,
        "orders",
        schema_id,
        ORDER_CREATED,
        [{"value": order(i), "partition": 1} for i in range(9, 13)],
    )
    second = run_available_now(stream(spark, broker.bootstrap, **options), tmp_path / "ckpt")

    rows = [r for _, batch in first + second for r in batch]
    assert coordinates(rows) == sorted(
        [("orders", p, o) for p in range(3) for o in range(3)] + [("orders", 1, o) for o in range(3, 7)]
    )
    assert sorted(r["customer_id"] for r in rows) == sorted(f"cust-{i}" for i in range(13))
    assert committed(broker.bootstrap, "analytics", tps) == {("orders", 0): 3, ("orders", 1): 7, ("orders", 2): 3}


def test_max_records_per_trigger_splits_the_backlog_fairly_across_partitions(
    spark: SparkSession, broker: ThreadBroker, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap, "raw", 3)
    confluent_produce(broker.bootstrap, "raw", [{"value": b"%d" % i, "partition": i % 3} for i in range(30)])

    df = stream(spark, broker.bootstrap, topics="raw", maxRecordsPerTrigger="9")
    batches = run_available_now(df, tmp_path / "ckpt")

    assert [len(rows) for _, rows in batches] == [9, 9, 9, 3]
    for _, rows in batches:
        per_partition = [sum(1 for r in rows if r["partition"] == p) for p in range(3)]
        assert max(per_partition) - min(per_partition) == 0, per_partition
    assert coordinates(r for _, rows in batches for r in rows) == [("raw", p, o) for p in range(3) for o in range(10)]


def test_a_batch_whose_sink_fails_is_never_committed_to_the_group_and_runs_again_on_restart(
    spark: SparkSession, broker: ThreadBroker, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap, "raw", 3)
    confluent_produce(broker.bootstrap, "raw", [{"value": b"%d" % i, "partition": i % 3} for i in range(30)])
    tps = [("raw", p) for p in range(3)]
    checkpoint = tmp_path / "ckpt"
    # 9 records a batch, 3 per partition: batches 0, 1, 2 end at offsets 3, 6, 9 of each partition.
    df = stream(spark, broker.bootstrap, topics="raw", maxRecordsPerTrigger="9")
    written: list[tuple[int, int]] = []

    def failing_sink(batch: DataFrame, batch_id: int) -> None:
        rows = batch.count()
        if batch_id == 2:
            assert rows == 9  # planned, with data: the source already committed batch 1 then
            raise RuntimeError("the sink is down at batch 2")
        written.append((batch_id, rows))

    query = df.writeStream.foreachBatch(failing_sink).option("checkpointLocation", str(checkpoint))
    running = query.trigger(availableNow=True).start()
    try:
        with pytest.raises(StreamingQueryException, match="the sink is down at batch 2"):
            running.awaitTermination(90)
        progress = running.recentProgress
    finally:
        running.stop()

    assert written == [(0, 9), (1, 9)]
    assert [p.batchId for p in progress] == [0, 1]  # (numInputRows is 0 with foreachBatch)
    end_of_batch_1 = positions(progress[-1].sources[0].endOffset)
    assert end_of_batch_1 == dict.fromkeys(tps, 6)
    # Exactly the end of the last batch the sink wrote: not batch 2's end (9), not behind.
    assert committed(broker.bootstrap, "analytics", tps) == end_of_batch_1

    # Restarted on its checkpoint with a working sink: batch 2 runs again, same offsets, then 3.
    batches = run_available_now(stream(spark, broker.bootstrap, topics="raw", maxRecordsPerTrigger="9"), checkpoint)

    assert [batch_id for batch_id, _ in batches] == [2, 3]
    assert coordinates(batches[0][1]) == [("raw", p, o) for p in range(3) for o in range(6, 9)]
    assert coordinates(batches[1][1]) == [("raw", p, 9) for p in range(3)]
    assert committed(broker.bootstrap, "analytics", tps) == dict.fromkeys(tps, 10)


def test_group_start_with_a_fresh_checkpoint_resumes_from_the_committed_offsets(
    spark: SparkSession, broker: ThreadBroker, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap, "raw", 2)
    confluent_produce(broker.bootstrap, "raw", [{"value": b"%d" % i, "partition": i % 2} for i in range(12)])
    # Partition 0 was read up to offset 4 by an earlier query; partition 1 never committed.
    commit(broker.bootstrap, "analytics", {("raw", 0): 4})

    df = stream(spark, broker.bootstrap, topics="raw", startingOffsets="group")
    batches = run_available_now(df, tmp_path / "fresh-checkpoint")

    assert coordinates(r for _, rows in batches for r in rows) == [("raw", 0, o) for o in range(4, 6)] + [
        ("raw", 1, o) for o in range(6)
    ]
    assert committed(broker.bootstrap, "analytics", [("raw", 0), ("raw", 1)]) == {("raw", 0): 6, ("raw", 1): 6}


def test_a_custom_group_id_gets_the_commits(spark: SparkSession, broker: ThreadBroker, tmp_path: Path) -> None:
    create_topic(broker.bootstrap, "raw", 1)
    confluent_produce(broker.bootstrap, "raw", [{"value": b"x"}] * 3)

    run_available_now(stream(spark, broker.bootstrap, topics="raw", **{"group.id": "replay"}), tmp_path / "c")

    assert committed(broker.bootstrap, "replay", [("raw", 0)]) == {("raw", 0): 3}
    assert committed(broker.bootstrap, "analytics", [("raw", 0)]) == {}


def test_topic_pattern_picks_up_new_partitions_and_new_matching_topics(
    spark: SparkSession, broker: ThreadBroker, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap, "logs.app", 1)
    create_topic(broker.bootstrap, "other", 1)
    confluent_produce(broker.bootstrap, "logs.app", [{"value": b"a0"}])
    confluent_produce(broker.bootstrap, "other", [{"value": b"not matched"}])
    options = {"topicPattern": r"logs\..*", "startingOffsets": "earliest"}

    first = run_available_now(stream(spark, broker.bootstrap, **options), tmp_path / "ckpt")

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_partitions([NewPartitions("logs.app", 2)])["logs.app"].result(15)
    create_topic(broker.bootstrap, "logs.db", 1)
    confluent_produce(broker.bootstrap, "logs.app", [{"value": b"a1", "partition": 1}])
    confluent_produce(broker.bootstrap, "logs.db", [{"value": b"d0"}, {"value": b"d1"}])
    second = run_available_now(stream(spark, broker.bootstrap, **options), tmp_path / "ckpt")

    assert [r["value"] for _, rows in first for r in rows] == [b"a0"]
    assert coordinates(r for _, rows in second for r in rows) == [
        ("logs.app", 1, 0),
        ("logs.db", 0, 0),
        ("logs.db", 0, 1),
    ]


# -- schemas -----------------------------------------------------------------------------------

_V1 = {
    "type": "record",
    "name": "Visit",
    "namespace": "io.streamshop.test",
    "fields": [{"name": "page", "type": "string"}, {"name": "ms", "type": "int"}],
}
_V2 = {
    **_V1,
    "fields": [
        {"name": "page", "type": "string"},
        {"name": "ms", "type": "long"},
        {"name": "referrer", "type": ["null", "string"], "default": None},
        {"name": "device", "type": "string", "default": "unknown"},
    ],
}


def test_events_written_with_an_older_schema_version_decode_into_the_current_one(
    spark: SparkSession, broker: ThreadBroker, registry_url: str
) -> None:
    create_topic(broker.bootstrap, "visits", 1)
    v1, v2 = AvroSchema.parse(_V1), AvroSchema.parse(_V2)
    v1_id = register(registry_url, "visits-value", v1)
    v2_id = register(registry_url, "visits-value", v2)
    assert v1_id != v2_id
    produce_avro(broker.bootstrap, "visits", v1_id, v1, [{"value": {"page": "/old", "ms": 7}}])
    produce_avro(
        broker.bootstrap,
        "visits",
        v2_id,
        v2,
        [{"value": {"page": "/new", "ms": 2**40, "referrer": "/home", "device": "phone"}}],
    )
    produce_avro(broker.bootstrap, "visits", v1_id, v1, [{"value": {"page": "/old2", "ms": 9}}])

    df = source(
        spark,
        broker.bootstrap,
        topics="visits",
        **{"schema.registry.url": registry_url, "valueSubject": "visits-value"},
    )

    assert df.schema.simpleString() == (
        "struct<topic:string,partition:int,offset:bigint,timestamp:timestamp,key:string,"
        "page:string,ms:bigint,referrer:string,device:string,error:string,value:binary>"
    )
    assert [(r["page"], r["ms"], r["referrer"], r["device"], r["error"]) for r in df.orderBy("offset").collect()] == [
        ("/old", 7, None, "unknown", None),
        ("/new", 2**40, "/home", "phone", None),
        ("/old2", 9, None, "unknown", None),
    ]


def test_a_union_reader_decodes_each_event_type_of_a_topic_into_its_column(
    spark: SparkSession, broker: ThreadBroker, registry_url: str
) -> None:
    create_topic(broker.bootstrap, "orders", 1)
    created_id = register(registry_url, f"orders-{ORDER_CREATED.name}", ORDER_CREATED)
    changed_id = register(registry_url, f"orders-{STATUS_CHANGED.name}", STATUS_CHANGED)
    produce_avro(broker.bootstrap, "orders", created_id, ORDER_CREATED, [{"value": order(1)}])
    produce_avro(
        broker.bootstrap, "orders", changed_id, STATUS_CHANGED, [{"value": CATALOG.example(STATUS_CHANGED.name)}]
    )

    df = source(
        spark,
        broker.bootstrap,
        topics="orders",
        **{"schema.registry.url": registry_url, "valueRecord": "OrderCreated, OrderStatusChanged"},
    )
    rows = df.orderBy("offset").collect()

    assert df.columns[5:7] == ["OrderCreated", "OrderStatusChanged"]
    assert (rows[0]["OrderCreated"]["customer_id"], rows[0]["OrderStatusChanged"]) == ("cust-1", None)
    assert rows[1]["OrderCreated"] is None
    assert (rows[1]["OrderStatusChanged"]["from_status"], rows[1]["OrderStatusChanged"]["to_status"]) == (
        "created",
        "cancelled",
    )
    assert [r["error"] for r in rows] == [None, None]


def test_bad_records_are_quarantined_with_their_coordinates_and_raw_value(
    spark: SparkSession, broker: ThreadBroker, registry_url: str, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap, "orders", 1)
    schema_id = register(registry_url, "orders-value", ORDER_CREATED)
    good = frame(schema_id, encode(ORDER_CREATED, order(1)))
    values = [
        good,
        b'{"order_id": "not avro"}',  # JSON: magic byte 0x7b
        frame(999, encode(ORDER_CREATED, order(2))),  # an id the registry never handed out
        good[:-4],  # truncated
        good + b"\x00",  # trailing bytes
        frame(schema_id, encode(ORDER_CREATED, order(3))),
        frame(schema_id, encode(STATUS_CHANGED, CATALOG.example(STATUS_CHANGED.name))),  # under the wrong id
    ]
    confluent_produce(broker.bootstrap, "orders", [{"key": f"k{i}", "value": v} for i, v in enumerate(values)])
    options = {"topics": "orders", "schema.registry.url": registry_url, "valueRecord": "OrderCreated"}

    batch = source(spark, broker.bootstrap, **options).orderBy("offset").collect()
    streamed = [
        r for _, rows in run_available_now(stream(spark, broker.bootstrap, **options), tmp_path / "c") for r in rows
    ]

    for rows in (batch, sorted(streamed, key=lambda r: r["offset"])):
        assert [(r["offset"], r["key"]) for r in rows] == [(i, f"k{i}") for i in range(7)]
        assert [r["customer_id"] for r in rows] == ["cust-1", None, None, None, None, "cust-3", None]
        assert [r["value"] for r in rows] == [None, *values[1:5], None, values[6]]
        errors = [r["error"] for r in rows]
        assert errors[0] is None
        assert errors[1] is not None
        assert errors[1].startswith("unknown magic byte 0x7b")
        assert errors[2] == "schema id 999 not found in the schema registry"
        assert errors[3] is not None
        assert "truncated" in errors[3]
        assert errors[4] is not None
        assert "trailing bytes" in errors[4]
        assert errors[5] is None
        assert errors[6] is not None
        assert errors[6].startswith(f"schema id {schema_id} ({ORDER_CREATED.name}): ")
        assert all(r["envelope"] is None and r["items"] is None for r in rows if r["error"])


def varied_order(i: int) -> dict[str, Any]:
    """An OrderCreated datum with what a decoder can get wrong: no items or several, multi-byte
    text, decimals at their scale's edges, timestamps before 1970, an absent trace id."""
    datum = order(i)
    items = [
        {"sku": f"SKU-{i}-{j}-ü€😀", "quantity": (i * 7 + j) % 1000 + 1, "unit_price": Decimal(f"{j}.{i % 10000:04d}")}
        for j in range(i % 4)
    ]
    envelope = dict(datum["envelope"])
    if i % 3 == 0:
        envelope["trace_id"] = None
    envelope["occurred_at"] = BASE_TIME - timedelta(days=21_000 * (i % 2))
    return {
        **datum,
        "envelope": envelope,
        "customer_id": "客户-" * (i % 5) + str(i),
        "items": items,
        "total": Decimal(f"{'-' if i % 7 == 0 else ''}{i * 1_000_003 % 10**12}.{i % 10000:04d}"),
    }


def test_sparks_own_kafka_source_with_from_avro_decodes_every_record_to_the_same_values(
    spark: SparkSession, broker: ThreadBroker, registry_url: str
) -> None:
    """Spark's JVM path (spark-sql-kafka-0-10 + spark-avro from Maven Central), which the
    benchmark sets beside the project's source, reads the same rows: every column equal, record
    for record; a record that does not decode is all nulls on both (and an error on ours)."""
    create_topic(broker.bootstrap, "orders", 3)
    schema_id = register(registry_url, "orders-value", ORDER_CREATED)
    produce_avro(
        broker.bootstrap,
        "orders",
        schema_id,
        ORDER_CREATED,
        [{"key": f"key-{i}", "value": varied_order(i), "partition": i % 3} for i in range(240)],
    )
    truncated = frame(schema_id, encode(ORDER_CREATED, varied_order(1)))[:-6]
    confluent_produce(broker.bootstrap, "orders", [{"key": "poison", "value": truncated, "partition": 1}])
    ours = source(
        spark, broker.bootstrap, topics="orders", **{"schema.registry.url": registry_url, "valueRecord": "OrderCreated"}
    )
    theirs = read_kafka(spark, broker.bootstrap, "orders", ORDER_CREATED.text)

    columns = theirs.columns
    assert columns == ours.columns[: len(columns)]
    by_position = ["partition", "offset"]
    mine = [r.asDict(recursive=True) for r in ours.orderBy(*by_position).collect()]
    spark_rows = [r.asDict(recursive=True) for r in theirs.orderBy(*by_position).collect()]
    assert len(mine) == len(spark_rows) == 241
    for a, b in zip(mine, spark_rows, strict=True):
        assert {c: a[c] for c in columns} == b
    poison = [r for r in mine if r["key"] == "poison"]
    assert poison[0]["error"] is not None
    assert all(poison[0][c] is None for c in columns[5:])
    assert sum(1 for r in mine if r["error"] is not None) == 1


def test_the_driver_jvm_starts_with_the_configured_java_options(spark: SparkSession) -> None:
    """ANALYTICS_JAVA_OPTIONS (here the suite's C1-only JIT) reach the JVM's own command line,
    after the project's log4j configuration."""
    wanted = os.environ["ANALYTICS_JAVA_OPTIONS"].split()
    runtime = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()  # type: ignore[union-attr]
    arguments = [str(a) for a in runtime.getInputArguments()]
    assert wanted
    assert all(option in arguments for option in wanted), arguments
    assert any(a.startswith("-Dlog4j2.configurationFile=") for a in arguments)
