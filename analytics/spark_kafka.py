"""The JVM path a Spark user would otherwise take, for comparison with the project's source: a
topic read with Spark's own Kafka source (`format("kafka")`, the `spark-sql-kafka-0-10`
connector) and its Confluent-framed Avro values decoded with `from_avro` (`spark-avro`) past the
5-byte header, into the columns the `streamshop-kafka` source gives: the record's coordinates,
its key as text, and one column per field of the event.

What it does not do, and the project's source does: `from_avro` takes one schema for every record
and ignores the schema id in the header, so an event written with another schema version is
misread or fails, where the project's source fetches the writer schema from the registry and
resolves it to the reader's; and a record that does not decode is a null row (PERMISSIVE) or a
failed job (FAILFAST), not a quarantined row with its coordinates and raw bytes.  The connectors'
jars must be on the session's `spark.jars` (streamshop.spark_connectors)."""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro

__all__ = ["COORDINATES", "decode_framed", "read_kafka"]

COORDINATES = ("topic", "partition", "offset", "timestamp")
CONFLUENT_HEADER = 5  # magic byte 0 and a 4-byte schema id


def read_kafka(
    spark: SparkSession, bootstrap: str, topic: str, value_schema: str, options: Mapping[str, str] | None = None
) -> DataFrame:
    """A batch read of `topic` with Spark's Kafka source, values decoded with `value_schema`."""
    raw = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .options(**dict(options or {}))
        .load()
    )
    return decode_framed(raw, value_schema)


def decode_framed(raw: DataFrame, value_schema: str) -> DataFrame:
    """Rows of Spark's Kafka source with the Avro value past the Confluent header decoded into
    columns; a value that does not decode gives nulls (PERMISSIVE), as the project's source
    gives a row with its `error` set."""
    body = F.expr(f"substring(value, {CONFLUENT_HEADER + 1})")
    event = from_avro(body, value_schema, {"mode": "PERMISSIVE"}).alias("event")
    return raw.select(*COORDINATES, F.col("key").cast("string").alias("key"), event).select(
        *COORDINATES, "key", "event.*"
    )
