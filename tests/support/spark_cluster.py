"""A Spark standalone cluster for a test module, started and stopped through the CLI as a user
would (`streamshop spark-cluster start|stop`), and what the tests of the job on it share."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from kit.pids import pid_alive
from streamshop.spark_cluster import SparkCluster, master_state, reap
from tests.support.harness import streamshop_cli

WORKERS = 2


@contextlib.contextmanager
def started_cluster(
    directory: Path, workers: int = WORKERS, env: Mapping[str, str] | None = None
) -> Iterator[SparkCluster]:
    """A master and `workers` workers in `directory`, started in `env` (default: this process's
    environment), which their executors inherit; afterwards none of their processes is left."""
    started = streamshop_cli(
        "spark-cluster", "start", "--dir", str(directory), "--workers", str(workers), timeout=600, env=env
    )
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        running = SparkCluster.load(directory)
        assert started.stdout.startswith(f"Spark standalone: master {running.master_url}, web UI {running.web_url}")
        yield running
    finally:
        pids = [m.pid for m in [*SparkCluster.load(directory).workers, SparkCluster.load(directory).master]]
        stopped = streamshop_cli("spark-cluster", "stop", "--dir", str(directory))
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert not [pid for pid in pids if pid_alive(pid)]
        reap()  # a worker this process started again, stopped by the command's process


def ended(cluster: SparkCluster, which: Callable[[dict[str, Any]], bool], within: float = 60) -> list[dict[str, Any]]:
    """The master's completed applications that `which` picks, once there is one: the master
    records an application's end when the driver's message reaches it."""
    deadline = time.monotonic() + within
    while not (apps := [a for a in master_state(cluster)["completedapps"] if which(a)]):
        assert time.monotonic() < deadline, "no such application ended on the master"
        time.sleep(0.2)
    return apps


def kill_group(pid: int | None) -> None:
    """SIGKILL a cluster member's process group: the worker, its executors and their Python
    workers, as when its machine is lost."""
    assert pid is not None
    os.killpg(pid, signal.SIGKILL)
