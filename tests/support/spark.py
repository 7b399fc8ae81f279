"""Helpers for tests of the Spark source: a local session, Avro producing, group offsets, and
running `trigger(availableNow=True)` queries to completion."""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from pyspark.sql import DataFrame, Row, SparkSession

from analytics.spark import spark_session, stop_spark_session
from kit.jvm import ClassData
from schemas.serde import AvroSchema, encode, frame
from streamshop import spark_connectors
from tests.support.kafka_clients import confluent_produce

V1 = "application/vnd.schemaregistry.v1+json"


def start_spark() -> SparkSession:
    """The run's session: local[2], with Spark's own Kafka and Avro connectors on its class path
    (the tests set the project's source beside them).  It maps no class-data archive: the jobs'
    archive is of the wheel's jars alone, and one session of its own would not repay writing one."""
    return spark_session(
        "streamshop-tests",
        master="local[2]",
        conf={"spark.sql.shuffle.partitions": "2", "spark.jars": ",".join(spark_connectors.jars())},
        java_options=os.environ.get("ANALYTICS_JAVA_OPTIONS", ""),  # tests/conftest.py sets it
        archive=ClassData(()),
    )


def stop_spark(session: SparkSession) -> None:
    """Stop the session and its JVM: the run checks that nothing it started outlives it."""
    stop_spark_session(session)


REGISTER_TIMEOUT_S = 45.0


def register(registry_url: str, subject: str, schema: AvroSchema | str) -> int:
    """Register a schema under `subject` over the REST API; its id."""
    text = schema.text if isinstance(schema, AvroSchema) else schema
    request = urllib.request.Request(
        f"{registry_url}/subjects/{subject}/versions",
        data=json.dumps({"schema": text}).encode(),
        headers={"Content-Type": V1},
    )
    # Longer than the registry's own bound on a write (waiting for the writer, then the write:
    # 15 s each by default): on a fresh Apache Kafka cluster the first write also waits for the
    # transaction coordinator's topic, and a shorter wait here gives up on a write that succeeds.
    with urllib.request.urlopen(request, timeout=REGISTER_TIMEOUT_S) as response:
        return int(json.loads(response.read())["id"])


def produce_avro(
    bootstrap: str,
    topic: str,
    schema_id: int,
    schema: AvroSchema,
    records: Iterable[Mapping[str, Any]],
) -> list[Message]:
    """Produce records, each {"value": datum, "key": ..., "partition": ..., "headers": ...},
    framed with `schema_id`; their delivery reports."""
    return confluent_produce(
        bootstrap,
        topic,
        [{**r, "value": frame(schema_id, encode(schema, r["value"]))} for r in records],
    )


# What a group's coordinator answers while it moves or loads (a Kafka node restarted by another
# test, say): the question is asked again.
_COORDINATOR_MOVING = (
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
)


def committed(
    bootstrap: str, group: str, partitions: Iterable[tuple[str, int]], within: float = 60
) -> dict[tuple[str, int], int]:
    """The group's committed offsets (partitions without one left out), read with confluent-kafka."""
    asked = [TopicPartition(t, p) for t, p in partitions]
    deadline = time.monotonic() + within
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        while True:
            try:
                found = consumer.committed(asked, timeout=10)
                break
            except KafkaException as e:
                error = e.args[0] if e.args else None
                moving = isinstance(error, KafkaError) and error.code() in _COORDINATOR_MOVING
                if not moving or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()
    return {(tp.topic, tp.partition): tp.offset for tp in found if tp.offset >= 0}


def commit(bootstrap: str, group: str, positions: Mapping[tuple[str, int], int]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in positions.items()], asynchronous=False)
    finally:
        consumer.close()


def run_available_now(df: DataFrame, checkpoint: Path, timeout: int = 90) -> list[tuple[int, list[Row]]]:
    """Run a streaming DataFrame with trigger(availableNow=True) to its end; the batches it wrote,
    as (batch id, rows), via foreachBatch."""
    batches: list[tuple[int, list[Row]]] = []

    def sink(batch: DataFrame, batch_id: int) -> None:
        batches.append((batch_id, batch.collect()))

    query = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        finished = query.awaitTermination(timeout)
    finally:
        query.stop()
    assert finished, "the availableNow query did not finish in time"
    exception = query.exception()
    assert exception is None, exception
    return batches


def coordinates(rows: Iterable[Row]) -> list[tuple[str, int, int]]:
    return sorted((r["topic"], r["partition"], r["offset"]) for r in rows)


def positions(offsets_json: str) -> dict[tuple[str, int], int]:
    """A source offset as Spark shows it (`{"topic": {"0": 12}}`) -> {(topic, partition): offset}."""
    parsed = json.loads(offsets_json)
    return {(topic, int(p)): int(o) for topic, parts in parsed.items() for p, o in parts.items()}


def planned_end(checkpoint: Path, batch_id: int) -> dict[tuple[str, int], int]:
    """The end offsets Spark planned for a batch: the checkpoint's `offsets/<batch_id>` (a
    version line, the batch metadata, then one line per source: this one's only source)."""
    lines = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()
    assert lines[0] == "v1", lines
    assert len(lines) == 3, lines
    return positions(lines[2])
