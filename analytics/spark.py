"""A local SparkSession set up for streamshop's jobs, with the `streamshop-kafka` source registered;
its driver's classes mapped from a class-data archive (kit.jvm), which `stop_spark_session` keeps
when the run wrote one."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

import pyspark
from pyspark import SparkContext
from pyspark.sql import SparkSession

from analytics.source import StreamshopKafkaSource
from kit.jvm import ClassData, class_data

__all__ = ["PROJECT_ROOT", "spark_session", "stop_spark_session"]

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
    archive_options: tuple[str, ...] = ()
    if SparkContext._gateway is None and (archive := _driver_class_data(conf or {})) is not None:
        _DRIVER["archive"] = archive  # this call starts the JVM: with the archive
        archive_options = archive.options
    driver_options = " ".join([log4j, java_options, *archive_options]).strip()
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


# The archive part of the driver JVM this process started, settled when it stops.
_DRIVER: dict[str, ClassData] = {}


def _driver_class_data(conf: Mapping[str, str]) -> ClassData | None:
    """The driver's archive: Spark's launcher runs $JAVA_HOME/bin/java, else java on PATH, with
    the wheel's jars and any `spark.jars` on the class path."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if java is None:
        return None
    jars = [Path(pyspark.__file__).parent / "jars"]
    jars += [Path(j) for j in conf.get("spark.jars", "").split(",") if j.strip()]
    return class_data("spark-driver", java, jars)


def stop_spark_session(session: SparkSession, timeout: float = 120) -> None:
    """Stop the session and its JVM, and keep the class-data archive the JVM wrote as it exited.
    `stop()` alone leaves the JVM running until this Python process exits."""
    session.stop()
    gateway = SparkContext._gateway
    archive = _DRIVER.pop("archive", None)
    if gateway is None:
        return
    gateway.shutdown()
    proc = getattr(gateway, "proc", None)
    status = None
    if proc is not None:
        proc.stdin.close()  # the launcher's JVM exits when its stdin closes
        status = proc.wait(timeout=timeout)
    SparkContext._gateway = None
    SparkContext._jvm = None
    if archive is not None:
        archive.settle(status)
