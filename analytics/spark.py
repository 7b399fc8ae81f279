"""A local SparkSession set up for streamshop's jobs, with the `streamshop-kafka` source registered;
its driver's classes mapped from a class-data archive (kit.jvm), which `stop_spark_session` keeps
when the run wrote one."""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import pyspark
from pyspark import SparkContext
from pyspark.sql import DataFrame, SparkSession

from analytics.source import StreamshopKafkaSource
from kit.jvm import ClassData, being_written, class_data

__all__ = [
    "DRIVER_ARCHIVE",
    "PACKED_ENV",
    "PROJECT_ROOT",
    "driver_class_data",
    "driver_inputs",
    "jvm_start_times",
    "spark_session",
    "stop_spark_session",
    "worker_python",
    "write_driver_archive",
]

PROJECT_ROOT = Path(__file__).resolve().parents[1]
_LOG4J = Path(__file__).resolve().with_name("log4j2.properties")
# Where Spark unpacks a packed environment (`streamshop analytics pack`) in each executor's working
# directory: the fragment of its `spark.archives` entry.
PACKED_ENV = "environment"


def spark_session(
    app_name: str,
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
    java_options: str = "",
    *,
    archive: ClassData | None = None,
    python_env: Path | None = None,
) -> SparkSession:
    """Start (or return the running) SparkSession for a streamshop job.

    The environment is set before the JVM starts, because Spark's Python workers inherit it:
    `SPARK_LOCAL_IP` (the hostname resolves to loopback here, Spark warns and may pick a wrong
    interface), `PYSPARK_PYTHON` (this interpreter, not whatever `python3` is on PATH) and
    `PYTHONPATH` (workers unpickle the source's classes, so they must import this project).
    `java_options` go to the driver's JVM as it starts (in local mode the executors are in it; on
    a cluster, to the executors' JVMs too), with the options of `archive` (default:
    `driver_class_data(conf)`). `python_env`: a packed environment (`streamshop analytics pack`)
    that the executors' Python workers run instead of this interpreter and this checkout.
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", worker_python())
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if str(PROJECT_ROOT) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(PROJECT_ROOT), *[p for p in paths if p]])
    # Errors only from the JVM; the file is absent from a wheel built without package data.
    log4j = f"-Dlog4j2.configurationFile=file:{_LOG4J}" if _LOG4J.exists() else ""
    archive_options: tuple[str, ...] = ()
    if archive is None and SparkContext._gateway is None:
        archive = driver_class_data(conf or {})
    if SparkContext._gateway is None and archive is not None:  # this call starts the JVM
        _DRIVER["archive"] = archive
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
        # How long a Python process Spark starts (a stream source's planner, a reader) has to
        # connect back to its JVM and log in: the 15 s default fails the whole query when the
        # host's CPUs are saturated for a moment.
        .config("spark.python.authenticate.socketTimeout", "60s")
        # On a cluster the executors are JVMs of their own, started for each application.
        .config(
            "spark.executor.extraJavaOptions",
            log4j if master.startswith("local") else f"{log4j} {java_options}".strip(),
        )
    )
    if python_env is not None:
        # The executors' Python workers run the packed environment, which Spark unpacks as
        # ./environment in each executor's working directory (where it starts them): the project
        # and its dependencies come from its site-packages, PySpark from the zips Spark puts on
        # their PYTHONPATH; nothing of this host's paths is needed there. Not PYSPARK_PYTHON, as
        # PySpark's documentation has it: that path also runs the Python processes the driver
        # starts for a Python data source (its planner, a stream's offsets), which find no
        # ./environment where they run. SQL's Python runners, the data source's readers among
        # them, take theirs from this setting; an RDD's Python function would still get the
        # driver's interpreter (the jobs have none).
        builder = builder.config("spark.archives", f"{python_env.resolve().as_uri()}#{PACKED_ENV}")
        builder = builder.config("spark.sql.execution.pyspark.python", f"./{PACKED_ENV}/bin/python")
    elif not master.startswith("local"):
        # Executors in processes of their own (a standalone cluster's workers start them): their
        # Python workers import this project, as the driver's do, from this host's paths.
        builder = builder.config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(StreamshopKafkaSource)
    return spark


# Spark puts the wheel's python/lib/pyspark.zip (and Py4J's zip) first on the PYTHONPATH of every
# Python process it starts. A zip holds no compiled bytecode, so each process compiles the
# PySpark modules it imports (0.7 CPU-s where the installed package's bytecode takes 0.35), and
# the process that serves a streaming query's offsets must connect back within Spark's fixed
# ten seconds: on a saturated host that difference decides whether the query starts.
_LAUNCHER = """#!/bin/sh
# Written by streamshop (analytics.spark): {python} for Spark's Python processes, with PySpark
# and Py4J imported from its site-packages (compiled) rather than the zips Spark puts first.
kept=
IFS=:
for entry in $PYTHONPATH; do
  case $entry in
    {zips}/*.zip) ;;
    *) kept=${{kept:+$kept:}}$entry ;;
  esac
done
unset IFS
PYTHONPATH=$kept exec {python} "$@"
"""


def worker_python() -> str:
    """What Spark runs for its Python processes: this interpreter, through a launcher (in the
    user's cache) that drops the wheel's zips from PYTHONPATH, since this interpreter has the
    same PySpark installed. This interpreter itself when the launcher cannot be written."""
    zips = Path(pyspark.__file__).parent / "python" / "lib"
    text = _LAUNCHER.format(python=shlex.quote(sys.executable), zips=shlex.quote(str(zips)))
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "streamshop"
    launcher = cache / f"spark-python-{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    try:
        if not launcher.exists():
            cache.mkdir(parents=True, exist_ok=True)
            part = launcher.with_name(f"{launcher.name}.{os.getpid()}.part")
            part.write_text(text)
            part.chmod(0o755)
            os.replace(part, launcher)  # whole or absent, whoever writes it at once
    except OSError:
        return sys.executable
    return str(launcher)


DRIVER_ARCHIVE = "spark-driver"
# The archive part of the driver JVM this process started, settled when it stops; the archive
# writer it started, if any.
_DRIVER: dict[str, ClassData] = {}
_WRITERS: list[subprocess.Popen[bytes]] = []


def driver_inputs(conf: Mapping[str, str]) -> tuple[str, list[Path]] | None:
    """What the driver JVM runs: Spark's launcher uses $JAVA_HOME/bin/java, else java on PATH,
    with the wheel's jars and any `spark.jars` on the class path."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if java is None:
        return None
    jars = [Path(pyspark.__file__).parent / "jars"]
    jars += [Path(j) for j in conf.get("spark.jars", "").split(",") if j.strip()]
    return java, jars


def driver_family(classpath: list[Path]) -> str:
    """The archive family of a driver: one per set of extra jars, since a new archive of a family
    replaces the old one, and a session with other jars must not replace the jobs' archive."""
    extra = sorted(p.name for p in classpath[1:])
    if not extra:
        return DRIVER_ARCHIVE
    return f"{DRIVER_ARCHIVE}_{hashlib.sha256(' '.join(extra).encode()).hexdigest()[:8]}"


def driver_class_data(conf: Mapping[str, str]) -> ClassData | None:
    """The driver's archive options when there is an archive. When there is none, a process of
    its own writes it (`python -m analytics.spark`), in the background: an archive is written as
    a JVM exits, and a job's driver may run for days, so the job's own JVM would not."""
    inputs = driver_inputs(conf)
    if inputs is None:
        return None
    data = class_data(driver_family(inputs[1]), *inputs, write=False)
    _WRITERS[:] = [w for w in _WRITERS if w.poll() is None]
    if not data.options and data.archive is not None and not being_written(data.archive) and not _WRITERS:
        writer = subprocess.Popen(
            [sys.executable, "-m", "analytics.spark", *(f"--jar={j}" for j in inputs[1][1:])],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env=dict(os.environ),  # spark_session put this project on PYTHONPATH
        )
        _WRITERS.append(writer)  # reaped by a later call, or when this process exits
    return data


# Seconds a driver JVM that writes its class-data archive as it exits may take to exit: the dump
# of ~185 MB took 40 s on an idle 2-core host and takes minutes on a saturated one.
ARCHIVE_EXIT_WAIT = 600.0


def jvm_start_times(session: SparkSession) -> tuple[float, float]:
    """When (epoch seconds) the driver's JVM started and when its SparkContext began, as the JVM
    recorded them: two Py4J calls, no Spark job."""
    context = session.sparkContext
    jvm = context._jvm
    assert jvm is not None
    runtime = jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    return int(runtime.getStartTime()) / 1000, int(context.startTime) / 1000


def stop_spark_session(session: SparkSession, timeout: float = 120) -> None:
    """Stop the session and its JVM, and keep the class-data archive the JVM wrote as it exited.
    `stop()` alone leaves the JVM running until this Python process exits."""
    session.stop()
    _WRITERS[:] = [w for w in _WRITERS if w.poll() is None]
    gateway = SparkContext._gateway
    archive = _DRIVER.pop("archive", None)
    if gateway is None:
        return
    gateway.shutdown()
    proc = getattr(gateway, "proc", None)
    status = None
    if proc is not None:
        proc.stdin.close()  # the launcher's JVM exits when its stdin closes
        writing = archive is not None and archive.writing is not None
        status = proc.wait(timeout=max(timeout, ARCHIVE_EXIT_WAIT) if writing else timeout)
    SparkContext._gateway = None
    SparkContext._jvm = None
    if archive is not None:
        archive.settle(status)


def write_driver_archive(extra_jars: list[str]) -> int:
    """Write the driver's archive from a short run of the kinds of work the jobs do: SQL
    aggregates, Parquet, a streaming query with a Python `foreachBatch`. 0 also when another
    process is writing it or it exists."""
    conf = {"spark.jars": ",".join(extra_jars)} if extra_jars else {}
    inputs = driver_inputs(conf)
    if inputs is None:
        return 0
    data = class_data(driver_family(inputs[1]), *inputs)
    if data.writing is None:
        return 0
    spark = spark_session("streamshop-class-data", conf=conf, archive=data)
    try:
        with tempfile.TemporaryDirectory(prefix="streamshop-class-data-") as tmp:
            rows = spark.range(20_000).selectExpr("id % 7 AS k", "id AS v")
            rows.groupBy("k").agg({"v": "sum"}).collect()
            rows.write.parquet(f"{tmp}/rows")
            spark.read.parquet(f"{tmp}/rows").count()
            query = (
                spark.readStream.format("rate")
                .option("rowsPerSecond", 100)
                .load()
                .writeStream.foreachBatch(_count)
                .option("checkpointLocation", f"{tmp}/checkpoint")
                .start()
            )
            deadline = time.monotonic() + 120
            while query.lastProgress is None and query.isActive and time.monotonic() < deadline:
                time.sleep(0.2)
            query.stop()
    finally:
        stop_spark_session(spark)
    return 0


def _count(batch: DataFrame, _: int) -> None:
    batch.count()


if __name__ == "__main__":
    sys.exit(write_driver_archive([a.removeprefix("--jar=") for a in sys.argv[1:]]))
