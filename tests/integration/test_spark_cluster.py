"""`streamshop spark-cluster` and the analytics job on it: a real Spark standalone master and two
workers from the PySpark wheel, executors in the workers' processes, a real broker and registry.
The job's totals must be as exact, and its bad records as quarantined, as in local mode."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from analytics.results import read_quarantine
from kit.pids import pid_alive
from schemas.serde import frame
from streamshop.spark_cluster import SparkCluster, master_state
from tests.support.analytics import (
    Producer,
    create_topics,
    expected_metrics,
    group_lag,
    parquet_values,
    produce_events,
)
from tests.support.harness import REPO, ThreadBroker
from tests.support.registry import ThreadRegistry

pytestmark = pytest.mark.spark

WORKERS = 2


def streamshop(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamshop.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    directory = tmp_path_factory.mktemp("spark-cluster")
    started = streamshop("spark-cluster", "start", "--dir", str(directory), "--workers", str(WORKERS))
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        running = SparkCluster.load(directory)
        assert started.stdout.startswith(f"Spark standalone: master {running.master_url}, web UI {running.web_url}")
        yield running
    finally:
        pids = [m.pid for m in [*SparkCluster.load(directory).workers, SparkCluster.load(directory).master]]
        stopped = streamshop("spark-cluster", "stop", "--dir", str(directory))
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert not [pid for pid in pids if pid_alive(pid)]


def test_status_lists_the_master_and_every_worker_alive(cluster: SparkCluster) -> None:
    done = streamshop("spark-cluster", "status", "--dir", str(cluster.directory), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["master_url"] == cluster.master_url
    assert [m["alive"] for m in report["members"]] == [True] * (1 + WORKERS)
    assert [(w["state"], w["cores"], w["memory"]) for w in report["workers"]] == [("ALIVE", 1, 1024)] * WORKERS


def test_the_job_on_the_cluster_counts_exactly_and_quarantines_a_poison_record(
    cluster: SparkCluster, tmp_path: Path
) -> None:
    broker = ThreadBroker(tmp_path / "broker").start()
    registry = ThreadRegistry(broker.bootstrap)
    try:
        create_topics(broker.bootstrap)
        producer = Producer(broker.bootstrap, registry.url)
        produced = produce_events(producer, orders=40)
        poison = producer.send_raw("orders", b'{"order_id": "not avro"}')
        truncated = producer.send_raw("orders", frame(producer.schema_id("orders", "OrderCreated"), b"\x02"))
        data_dir = tmp_path / "data"
        done = streamshop(
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
    apps = [a for a in master_state(cluster)["completedapps"] if a["name"] == "streamshop-analytics"]
    assert [a["state"] for a in apps] == ["FINISHED"]
    for worker in cluster.workers:
        assert list((cluster.home(worker) / "work" / apps[-1]["id"]).glob("*/stderr")), worker.name
