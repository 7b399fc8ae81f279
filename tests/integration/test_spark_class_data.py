"""The Spark driver's class-data archive (analytics.spark on kit.jvm) with real JVMs: written by
a short run of its own, then mapped by a driver that is not allowed to start without it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from analytics.spark import DRIVER_ARCHIVE, PROJECT_ROOT, driver_inputs
from kit.jvm import being_written, class_data

pytestmark = pytest.mark.spark

_DRIVER = textwrap.dedent(
    """
    from analytics.spark import spark_session, stop_spark_session
    spark = spark_session("class-data-check", java_options="-Xshare:on")
    runtime = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    print(spark.range(1000).selectExpr("sum(id)").collect()[0][0])
    print(" ".join(str(a) for a in runtime.getInputArguments()))
    stop_spark_session(spark)
    """
)


@pytest.mark.timeout(1800)  # two writers and a driver, each minutes on a saturated host
def test_the_writer_leaves_an_archive_that_a_driver_maps() -> None:
    """The archive of the run's cache (`~/.cache/streamshop/jvm` unless STREAMSHOP_JVM_CACHE says
    otherwise, as for every driver the suite starts): written now if missing, or by the writer a
    driver of the run already started. `-Xshare:on` makes the driver's JVM refuse to start
    unless it maps it."""
    inputs = driver_inputs({})
    assert inputs is not None
    archive = class_data(DRIVER_ARCHIVE, *inputs, write=False).archive
    assert archive is not None
    # Twice at most: a writer finding another at work leaves the archive to it, and that one (a
    # driver's background writer) may have been stopped before it settled.
    for _ in range(2):
        writer = subprocess.run(
            [sys.executable, "-m", "analytics.spark"],
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        assert writer.returncode == 0, writer.stderr[-3000:]
        deadline = time.monotonic() + 900
        while being_written(archive) and time.monotonic() < deadline:
            time.sleep(0.5)
        if archive.exists():
            break
    assert archive.exists()

    driver = subprocess.run(
        [sys.executable, "-c", _DRIVER], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600, check=False
    )
    assert driver.returncode == 0, driver.stderr[-3000:]
    total, arguments = driver.stdout.strip().splitlines()[-2:]
    assert total == str(sum(range(1000)))
    assert f"-XX:SharedArchiveFile={archive}" in arguments.split()
    assert "-Xshare:on" in arguments.split()
