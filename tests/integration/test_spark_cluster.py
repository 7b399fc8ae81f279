"""`streamshop spark-cluster` and the analytics job on it: a real Spark standalone master and two
workers from the PySpark wheel, executors in the workers' processes, a real broker and registry.
The job's totals must be as exact, and its bad records as quarantined, as in local mode, whether
the executors' Python is a packed environment shipped with the job (`streamshop analytics pack`,
`--python-env`) or the driver's own interpreter and checkout."""

from __future__ import annotations

import json
import marshal
import os
import signal
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from analytics.results import read_quarantine
from analytics.spark import PACKED_ENV
from schemas.serde import frame
from streamshop.spark_cluster import SparkCluster, alive, master_state, wait_ready
from tests.support.analytics import (
    Producer,
    create_topics,
    expected_metrics,
    group_lag,
    parquet_values,
    produce_events,
)
from tests.support.analytics_job import BATCH, Job, kill_after_batches, orders_only, wait_until_committed
from tests.support.harness import REPO, ThreadBroker, streamshop_cli
from tests.support.registry import ThreadRegistry
from tests.support.spark import committed
from tests.support.spark_cluster import WORKERS, ended, kill_group, started_cluster
from tests.support.stack import running_stack

# One cluster for the module, its stack test too, on a worker of its own: beside the analytics
# jobs' tests rather than queued behind them.
pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark-cluster")]

OUTAGE_S = 35.0  # how long the broker is unreachable: longer than the source's client timeouts (30 s)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    # The executors' Python writes the bytecode of what it imports beside the source, whatever
    # the environment running the suite says: the packed environment's test reads in it which
    # files an executor imported.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with started_cluster(tmp_path_factory.mktemp("spark-cluster"), env=env) as running:
        yield running


@pytest.fixture(scope="module")
def packed_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`streamshop analytics pack`: the project and its runtime requirements, without pyspark."""
    pack = tmp_path_factory.mktemp("pack") / "analytics-env.tar.gz"
    done = streamshop_cli("analytics", "pack", "--output", str(pack), timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"packed the executors' environment into {pack}: "), done.stdout
    with tarfile.open(pack) as archive:
        names = archive.getnames()
    site = next(n for n in names if n.endswith("/site-packages/analytics/source.py")).rsplit("/", 2)[0]
    installed = {n.removeprefix(site).split("/")[1] for n in names if n.startswith(f"{site}/")}
    assert {"analytics", "schemas", "contracts", "kit", "pyarrow", "confluent_kafka", "fastavro"} <= installed
    assert not {"pyspark", "py4j"} & installed  # Spark's own zips, on every Python worker's path
    assert [n for n in names if n.startswith(f"{site}/analytics/_avrovm.") and n.endswith(".so")]  # the decoder
    assert not [n for n in names if n.endswith(".pyc")]  # each executor's Python compiles what it imports
    return pack


def imported_from(pyc: Path) -> Path:
    """The source file a bytecode cache was compiled from, as the interpreter that wrote it found it."""
    return Path(marshal.loads(pyc.read_bytes()[16:]).co_filename)  # after the 16-byte header (PEP 552)


def test_status_lists_the_master_and_every_worker_alive(cluster: SparkCluster) -> None:
    done = streamshop_cli("spark-cluster", "status", "--dir", str(cluster.directory), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["master_url"] == cluster.master_url
    assert [m["alive"] for m in report["members"]] == [True] * (1 + WORKERS)
    assert [(w["state"], w["cores"], w["memory"]) for w in report["workers"]] == [("ALIVE", 1, 1024)] * WORKERS


def test_the_job_with_a_packed_environment_counts_exactly_and_its_executors_import_the_pack(
    cluster: SparkCluster, packed_env: Path, tmp_path: Path
) -> None:
    """The job run with `--python-env PACK`: Spark unpacks the pack into each executor's working
    directory, and the executors' Python workers run its interpreter and import the project from
    its site-packages, not from the checkout; the totals are exact and a poison record is
    quarantined, as in local mode. (The other tests of this module run the executors on the
    driver's own interpreter and checkout.)"""
    broker = ThreadBroker(tmp_path / "broker").start()
    registry = ThreadRegistry(broker.bootstrap)
    try:
        create_topics(broker.bootstrap)
        producer = Producer(broker.bootstrap, registry.url)
        produced = produce_events(producer, orders=40)
        poison = producer.send_raw("orders", b'{"order_id": "not avro"}')
        truncated = producer.send_raw("orders", frame(producer.schema_id("orders", "OrderCreated"), b"\x02"))
        data_dir = tmp_path / "data"
        done = streamshop_cli(
            "analytics",
            "run",
            "--once",
            "--spark-master",
            cluster.master_url,
            "--bootstrap",
            broker.bootstrap,
            "--registry-url",
            registry.url,
            "--data-dir",
            str(data_dir),
            "--max-records-per-trigger",
            "50",
            "--lateness",
            "600",
            "--python-env",
            str(packed_env),
            timeout=600,  # a driver and two executors starting on a busy host
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        lag = group_lag(broker.bootstrap, "analytics")
    finally:
        registry.close()
        broker.close()

    assert parquet_values(data_dir) == expected_metrics(produced)
    quarantined = [(q.topic, q.partition, q.offset) for q in read_quarantine(data_dir)]
    assert quarantined == sorted(("orders", r.partition() or 0, r.offset() or 0) for r in (poison, truncated))
    assert set(lag.values()) == {0}
    # The work ran in the workers' executors, one per worker, not in the driver.
    apps = ended(cluster, lambda a: a["name"] == "streamshop-analytics")
    assert [a["state"] for a in apps] == ["FINISHED"]
    for worker in cluster.workers:
        assert list((cluster.home(worker) / "work" / apps[-1]["id"]).glob("*/stderr")), worker.name
    # Each executor unpacked the pack, and the Python workers of those that ran the source's reads
    # imported it from there (an executor that registered late may have run none: a small job's
    # tasks go to the executors there are): an interpreter finds a venv's site-packages only when
    # run as that venv's bin/python, and the bytecode it wrote names the file it compiled, in that
    # executor's copy of the pack.  A worker the master lost for a minute (no heartbeat on a busy
    # host) comes back with a new executor beside the first, which unpacks the pack again.
    compiled = []
    for worker in cluster.workers:
        executors = list((cluster.home(worker) / "work" / apps[-1]["id"]).glob(f"*/{PACKED_ENV}/bin/python"))
        assert executors, worker.name
        for python in executors:
            site_packages = python.parents[1] / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
            compiled += (site_packages / "site-packages" / "analytics" / "__pycache__").glob("source.*.pyc")
    assert compiled, "no executor imported analytics.source from its pack"
    for pyc in compiled:
        source = imported_from(pyc)
        assert source == pyc.parents[1] / "source.py"
        assert not source.is_relative_to(REPO)


@pytest.mark.stack
def test_up_with_spark_cluster_runs_the_stacks_job_on_the_cluster(cluster: SparkCluster, tmp_path: Path) -> None:
    """`streamshop up --spark-cluster DIR`: the stack's analytics job is an application of the
    cluster's master, its executors on the workers, until the stack stops."""
    services = ("catcher", "orders", "otp", "logs", "sms-sender", "email-sender", "dashboard")
    with running_stack(tmp_path / "stack", without=services, args=("--spark-cluster", str(cluster.directory))) as stack:
        stack.wait_for("analytics ready", lambda d: d["children"]["analytics"]["state"] == "ready", within=300)
        apps = [a for a in master_state(cluster)["activeapps"] if a["name"] == "streamshop-analytics"]
        assert [a["cores"] for a in apps] == [WORKERS]
        # The console's table says where the job runs: the cluster's master and the job's web UI.
        urls = stack.document()["children"]["analytics"]["urls"]
        assert urls["master"] == cluster.master_url
        assert urls["ui"].startswith("http://")
    finished = ended(cluster, lambda a: a["id"] == apps[0]["id"])
    assert [a["state"] for a in finished] == ["FINISHED"]


def test_a_lost_worker_a_killed_driver_and_an_unreachable_broker_cost_no_record_and_no_double_count(
    cluster: SparkCluster, tmp_path: Path
) -> None:
    """While batches run on the cluster: SIGKILL of a worker's process group (the worker, its
    executor and that executor's Python workers: a machine lost), and Spark runs the lost tasks on
    the other worker; then SIGKILL of the driver, and the job started again resumes from its
    checkpoint; then the broker stopped for longer than the clients' timeouts, which the job waits
    out. The totals stay exact and the group's offsets end where the data does; the worker,
    started again, registers anew."""
    broker = ThreadBroker(tmp_path / "broker").start()
    registry = ThreadRegistry(broker.bootstrap)
    victim = cluster.workers[0]
    jobs: list[Job] = []

    def job() -> Job:
        jobs.append(Job(broker.bootstrap, registry.url, data, "--trigger", "0.5", "--spark-master", cluster.master_url))
        return jobs[-1]

    try:
        create_topics(broker.bootstrap)
        producer = Producer(broker.bootstrap, registry.url)
        produced = produce_events(producer, orders=160)
        tps = [("orders", p) for p in range(3)]
        total = len(produced.orders) + len(produced.status_changes)
        data = tmp_path / "data"
        generation = data / "state" / "orders" / "g0001"
        first = job()
        kill_after_batches(first, generation, 2, kill=lambda: kill_group(victim.pid))
        at_worker_kill = sum(committed(broker.bootstrap, "analytics", tps).values())
        kill_after_batches(first, generation, 4)  # the driver, on the one worker left
        at_driver_kill = sum(committed(broker.bootstrap, "analytics", tps).values())
        assert at_worker_kill <= at_driver_kill < total - BATCH, f"not killed mid-stream: {at_driver_kill} of {total}"
        restarted = job()
        wait_until_committed(restarted, broker.bootstrap, tps, total)

        broker.stop()
        outage = time.monotonic() + OUTAGE_S
        while time.monotonic() < outage:  # the outage itself: the job must live through it
            assert restarted.proc.poll() is None, restarted.output()
            time.sleep(0.5)
        broker.start()
        more = produce_events(producer, orders=60, start=160, older_writers=False)
        produced += more
        total += len(more.orders) + len(more.status_changes)
        wait_until_committed(restarted, broker.bootstrap, tps, total)
        restarted.proc.send_signal(signal.SIGTERM)
        assert restarted.wait(60) == 0, restarted.output()
        assert sum(committed(broker.bootstrap, "analytics", tps).values()) == total
    finally:
        for j in jobs:
            if j.proc.poll() is None:
                j.kill()
        registry.close()
        broker.close()
        if not alive(victim.pid):
            cluster.launch(victim)
    assert parquet_values(data) == orders_only(expected_metrics(produced))
    wait_ready(cluster, 120)  # the worker, started again, is one of the master's again
