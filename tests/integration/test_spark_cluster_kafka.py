"""The analytics job on a Spark standalone cluster reading the run's 3-node Apache Kafka cluster:
the failures of the bundled broker's cluster test (tests/integration/test_spark_cluster.py) with
Kafka as the source, and the totals as exact."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from streamshop import spark_cluster
from streamshop.kafka_cluster import Cluster, alive
from streamshop.spark_cluster import SparkCluster, wait_ready
from tests.support.analytics import Producer, expected_metrics, parquet_values, produce_events
from tests.support.analytics_job import BATCH, Job, kill_after_batches, orders_only, wait_until_committed
from tests.support.registry import ThreadRegistry
from tests.support.spark import committed
from tests.support.spark_cluster import kill_group, started_cluster

# The conftest puts kafka-marked tests on the worker of the run's Kafka cluster; this module
# starts a Spark cluster of its own there.
pytestmark = [pytest.mark.spark, pytest.mark.kafka]

GROUP = "analytics-spark-cluster"  # the stack's jobs on this Kafka cluster commit as `analytics`
# Every Kafka node stopped (SIGSTOP) this long: connections hang and nothing answers, for longer
# than the source's requests wait (30 s), so they time out and the job must wait it out.
FROZEN_S = 35.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    with started_cluster(tmp_path_factory.mktemp("spark-cluster")) as running:
        yield running


# What the job reads and writes on the cluster: the stacks of other tests use the same names.
TOPICS = ("orders", "analytics.metrics")


@pytest.fixture
def topics_of_its_own(apache_kafka: Cluster) -> Iterator[None]:
    """`orders` with 3 partitions on every node and no `analytics.metrics`, without what other
    tests of the run wrote to them; afterwards neither is left for the tests after."""
    admin = AdminClient({"bootstrap.servers": apache_kafka.bootstrap, **apache_kafka.client_config()})
    _delete(admin, TOPICS)
    admin.create_topics([NewTopic("orders", 3, 3)], operation_timeout=30)["orders"].result(60)
    try:
        yield
    finally:
        _delete(admin, TOPICS)


def _delete(admin: AdminClient, names: tuple[str, ...], within: float = 60) -> None:
    """Delete the topics among `names` and wait until no broker lists them."""
    present = [n for n in names if n in admin.list_topics(timeout=30).topics]
    if present:
        for future in admin.delete_topics(present, operation_timeout=30).values():
            future.result(60)
    deadline = time.monotonic() + within
    while set(names) & set(admin.list_topics(timeout=30).topics):
        assert time.monotonic() < deadline, f"{names} still listed {within:.0f} s after their deletion"
        time.sleep(0.2)


@contextlib.contextmanager
def frozen(kafka: Cluster) -> Iterator[None]:
    # The nodes as they run now: a test of the run that stopped one started it again, with a new pid.
    nodes = Cluster.load(kafka.directory).nodes
    pids = [n.pid for n in nodes if n.pid is not None and alive(n.pid)]
    assert len(pids) == len(nodes), nodes
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


@pytest.mark.usefixtures("topics_of_its_own")
def test_on_apache_kafka_a_lost_worker_a_killed_driver_and_a_frozen_cluster_cost_no_record(
    cluster: SparkCluster, apache_kafka: Cluster, tmp_path: Path
) -> None:
    """As on the bundled broker: a worker's process group SIGKILLed while batches run, then the
    driver, then the job started again; then all three Kafka nodes frozen for longer than the
    source's requests wait, which the job waits out. The totals stay exact and the group's
    offsets end where the data does."""
    bootstrap = apache_kafka.bootstrap
    registry = ThreadRegistry(bootstrap)
    victim = cluster.workers[0]
    jobs: list[Job] = []
    data = tmp_path / "data"

    def job() -> Job:
        args = ("--trigger", "0.5", "--spark-master", cluster.master_url, "--group", GROUP)
        jobs.append(Job(bootstrap, registry.url, data, *args))
        return jobs[-1]

    try:
        producer = Producer(bootstrap, registry.url)
        produced = produce_events(producer, orders=160)
        tps = [("orders", p) for p in range(3)]
        total = len(produced.orders) + len(produced.status_changes)
        generation = data / "state" / "orders" / "g0001"
        first = job()
        kill_after_batches(first, generation, 2, kill=lambda: kill_group(victim.pid))
        kill_after_batches(first, generation, 4)  # the driver, on the one worker left
        at_driver_kill = sum(committed(bootstrap, GROUP, tps).values())
        assert at_driver_kill < total - BATCH, f"not killed mid-stream: {at_driver_kill} of {total}"
        restarted = job()
        wait_until_committed(restarted, bootstrap, tps, total, group=GROUP)

        with frozen(apache_kafka):
            thawed = time.monotonic() + FROZEN_S
            while time.monotonic() < thawed:  # the job must live through it
                assert restarted.proc.poll() is None, restarted.output()
                time.sleep(0.5)
        more = produce_events(producer, orders=60, start=160, older_writers=False)
        produced += more
        total += len(more.orders) + len(more.status_changes)
        wait_until_committed(restarted, bootstrap, tps, total, group=GROUP)
        restarted.proc.send_signal(signal.SIGTERM)
        assert restarted.wait(60) == 0, restarted.output()
        assert sum(committed(bootstrap, GROUP, tps).values()) == total
    finally:
        for j in jobs:
            if j.proc.poll() is None:
                j.kill()
        # Its Kafka clients leave their group and end their producer once the cluster, thawed,
        # answers again: that has taken over 30 s on a loaded host.
        registry.close(timeout=180)
        if not spark_cluster.alive(victim.pid):
            cluster.launch(victim)
    assert parquet_values(data) == orders_only(expected_metrics(produced))
    wait_ready(cluster, 120)
