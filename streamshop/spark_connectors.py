"""Spark's own Kafka source (`spark-sql-kafka-0-10`) and Avro functions (`spark-avro`) from
Maven Central, as spark-connectors/pom.xml pins them: `jars()` copies them once into a cache
directory and lists them for `spark.jars`.  With them a DataFrame reads a topic with
`format("kafka")` and decodes Confluent-framed Avro with `from_avro` on the value past its 5-byte
header (`framed_avro`): the JVM path a Spark user would otherwise take, which the benchmark and a
test set beside the project's Python source."""

from __future__ import annotations

import os
from pathlib import Path

from streamshop.maven_jars import copy_dependencies

__all__ = ["CONNECTORS_VERSION", "POM", "jars"]

PROJECT = Path(__file__).resolve().parents[1]
POM = PROJECT / "spark-connectors" / "pom.xml"
CONNECTORS_VERSION = "4.2.0"  # as spark-connectors/pom.xml
DEFAULT_CACHE = PROJECT / ".cache" / "spark-connectors"
CACHE_ENV = "STREAMSHOP_SPARK_CONNECTORS_CACHE"


def jars(cache: Path | None = None, *, quiet: bool = True) -> list[str]:
    """The connectors' jars (and the Kafka client they use), copied by Maven the first time."""
    root = cache or Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)
    lib = copy_dependencies(
        POM,
        root / CONNECTORS_VERSION / "lib",
        expect="spark-sql-kafka-0-10_2.13-*.jar",
        what=f"Spark {CONNECTORS_VERSION}'s Kafka and Avro connectors",
        quiet=quiet,
    )
    return sorted(str(p) for p in lib.glob("*.jar"))
