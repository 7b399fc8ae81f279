"""A local SparkSession set up for streamshop's jobs, with the `streamshop-kafka` source registered."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

from analytics.source import StreamshopKafkaSource

__all__ = ["PROJECT_ROOT", "spark_session"]

PROJECT_ROOT = Path(__file__).resolve().parents[1]
_LOG4J = Path(__file__).resolve().with_name("log4j2.properties")


def spark_session(
    app_name: str, master: str = "local[2]", conf: Mapping[str, str] | None = None, java_options: str = ""
) -> SparkSession:
    """Start (or return the running) SparkSession for a streamshop job.

    The environment is set before the JVM starts, because Spark's Python workers inherit it:
    `SPARK_LOCAL_IP` (the hostname resolves to loopback here, Spark warns and may pick a wrong
    interface), `PYSPARK_PYTHON` (this interpreter, not whatever `python3` is on PATH) and
    `PYTHONPATH` (workers unpickle the source's classes, so they must import this project).
    `java_options` go to the driver's JVM (in local mode, the executors' too) as it starts.
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if str(PROJECT_ROOT) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(PROJECT_ROOT), *[p for p in paths if p]])
    # Errors only from the JVM; the file is absent from a wheel built without package data.
    log4j = f"-Dlog4j2.configurationFile=file:{_LOG4J}" if _LOG4J.exists() else ""
    driver_options = f"{log4j} {java_options}".strip()
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.sql.shuffle.partitions", "4")  # the default 200 is for clusters: tiny tasks here
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.extraJavaOptions", driver_options)
        .config("spark.executor.extraJavaOptions", log4j)
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(StreamshopKafkaSource)
    return spark
