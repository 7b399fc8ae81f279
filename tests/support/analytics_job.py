"""`streamshop analytics run` as a child process, as the crash tests run it, and what they wait on."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

from loadtest.bench_analytics import job_command
from tests.support.harness import REPO
from tests.support.spark import committed

__all__ = ["BATCH", "JOB_TIMEOUT", "Job", "kill_after_batches", "orders_only", "wait_until_committed"]

BATCH = 30  # records per micro-batch of the crash tests' jobs (--max-records-per-trigger)
# How long a job may take to reach a point (a bound, not a sleep): a Spark driver starting beside
# other JVMs on 2 cores has taken a minute to start and half a minute for its first batch.
JOB_TIMEOUT = 300.0


class Job:
    """`streamshop analytics run` as a child process in its own process group (the Python
    driver, Spark's JVM and its Python workers: killing the group kills the whole driver)."""

    def __init__(self, bootstrap: str, registry_url: str, data_dir: Path, *args: str) -> None:
        self.log = data_dir.parent / f"job-{time.monotonic_ns()}.log"
        args = ("--max-records-per-trigger", str(BATCH), "--lateness", "600", *args)
        cmd = job_command(bootstrap, registry_url, data_dir, *args)
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait(self, timeout: float = JOB_TIMEOUT) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the job did not finish: {self.output()}") from None

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def output(self) -> str:
        return self.log.read_text()


def kill_after_batches(
    job: Job, generation: Path, batches: int, timeout: float = JOB_TIMEOUT, kill: Callable[[], None] | None = None
) -> None:
    """SIGKILL the job (or do `kill`) as soon as the sink has recorded `batches` batches in this
    generation: most likely before Spark has committed the last one, which is then read again."""
    deadline = time.monotonic() + timeout
    while len(list(generation.glob("b*.json"))) < batches:
        assert job.proc.poll() is None, job.output()
        assert time.monotonic() < deadline, job.output()
        time.sleep(0.005)
    (kill or job.kill)()


def wait_until_committed(
    job: Job,
    bootstrap: str,
    tps: list[tuple[str, int]],
    total: int,
    *,
    stall: float = JOB_TIMEOUT,
    group: str = "analytics",
) -> None:
    """Wait until `group` has committed `total` records, failing if the job exits
    or the group's offsets stop advancing for `stall` seconds (a JVM's start counts as a stall:
    a loaded machine makes the pace, not a fixed deadline)."""
    seen = -1
    deadline = time.monotonic() + stall
    while (now := sum(committed(bootstrap, group, tps).values())) < total:
        assert job.proc.poll() is None, job.output()
        if now > seen:
            seen, deadline = now, time.monotonic() + stall
        assert time.monotonic() < deadline, f"{now} of {total} committed, no progress in {stall:.0f} s\n{job.output()}"
        time.sleep(0.2)


def orders_only(values: dict[str, tuple[Decimal, int]]) -> dict[str, tuple[Decimal, int]]:
    return {k: v for k, v in values.items() if k.startswith("orders.")}
