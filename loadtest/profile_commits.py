"""The bundled broker's CPU time per OffsetCommit, and where it goes.

    python -m loadtest.profile_commits [--commits N (default 2,000)] [--runs K (default 3)]
                                       [--durability page-cache|fsync] [--baseline REF]
                                       [--profile] [--top T (default 25)]

Each run starts a fresh broker (loadtest.brokers; page-cache durability by default, so that
fsync does not dominate), creates a 12-partition topic and has one confluent-kafka consumer
outside the group protocol commit offsets for all 12 partitions synchronously, N times; the
broker's CPU time (user + system of all its threads, /proc) over those N commits, per commit,
is printed for each run, then the median of the K runs.  CPU time, unlike throughput, hardly
moves with the load of a shared machine; the clock of /proc counts in 10 ms ticks, so N = 2,000
reads it to within 0.005 ms per commit.

With --baseline REF the broker of that git commit runs too, alternating with this checkout's
(run 1 on each, then run 2...).  With --profile one more run of this checkout's broker is made
under cProfile (loadtest/profiled_broker.py: only the N commits are profiled), and the top T
functions by cumulative and by own time are printed in ms per commit (the profiler about
doubles the times; their proportions are what it tells).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pstats
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from loadtest.brokers import (
    BrokerProcess,
    baseline_tree,
    child_process,
    cpu_seconds,
    create_topic,
    streamshop_broker,
    wait_idle,
)
from streamshop.broker_process import broker_command, parse_ready_line

PARTITIONS = 12
TOPIC = "profiled-commits"
GROUP = "profiled-committer"
STARTUP_TIMEOUT = 60.0


def commit_loop(bootstrap: str, commits: int, pid: int, profile_out: Path | None = None) -> float:
    """Commit N times after a first commit (it finds the coordinator and creates the offsets
    topic), with the broker idle before; returns the broker's CPU seconds over the N.  With
    `profile_out`, the broker (loadtest/profiled_broker.py) profiles the N and writes it there."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})

    def commit(offset: int) -> None:
        answer = consumer.commit(
            offsets=[TopicPartition(TOPIC, p, offset) for p in range(PARTITIONS)], asynchronous=False
        )
        failed = [tp for tp in answer or [] if tp.error is not None]
        if failed:
            raise RuntimeError(f"commit refused: {failed[0].error}")

    try:
        commit(0)
        wait_idle(pid)
        before = cpu_seconds(pid)
        if profile_out is not None:
            os.kill(pid, signal.SIGUSR1)
        for i in range(1, commits + 1):
            commit(i)
        used = cpu_seconds(pid) - before
        if profile_out is not None:
            os.kill(pid, signal.SIGUSR2)
            _wait_written(profile_out)
        stored = consumer.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=10)
    finally:
        consumer.close()
    wrong = [tp.partition for tp in stored if tp.offset != commits]
    if wrong:
        raise RuntimeError(f"partitions {wrong} do not hold the last offset committed, {commits}")
    return used


def _wait_written(path: Path, timeout: float = 30) -> None:
    """Until the profile's file exists and has stopped growing."""
    deadline = time.monotonic() + timeout
    size = -1
    while time.monotonic() < deadline:
        now = path.stat().st_size if path.exists() else -1
        if now > 0 and now == size:
            return
        size = now
        time.sleep(0.2)
    raise TimeoutError(f"no profile written to {path}")


@contextlib.contextmanager
def profiled_broker(workdir: Path, durability: str, out: Path) -> Iterator[BrokerProcess]:
    """This checkout's broker under loadtest/profiled_broker.py."""
    cmd = broker_command(workdir / "data", "127.0.0.1:0", durability=durability)
    cmd[1:3] = ["-m", "loadtest.profiled_broker", str(out), "--"]  # in place of `-m streamshop.cli`
    log_path = workdir / "broker.log"
    with child_process(cmd, log_path) as proc:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            ready = next(filter(None, map(parse_ready_line, log_path.read_text(errors="replace").splitlines())), None)
            if ready is not None:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the profiled broker did not start: {log_path.read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)
        yield BrokerProcess("profiled", f"127.0.0.1:{ready.port}", proc, log_path=log_path)


def measure(source: Path | None, commits: int, durability: str) -> float:
    """One run: ms of broker CPU per commit."""
    with (
        tempfile.TemporaryDirectory(prefix="profile-commits-") as tmp,
        streamshop_broker(Path(tmp), source, durability=durability) as broker,
    ):
        create_topic(broker.bootstrap, TOPIC, PARTITIONS)
        return commit_loop(broker.bootstrap, commits, broker.pid) / commits * 1000


def profile(commits: int, durability: str, top: int) -> None:
    with tempfile.TemporaryDirectory(prefix="profile-commits-") as tmp:
        out = Path(tmp) / "commits.prof"
        with profiled_broker(Path(tmp), durability, out) as broker:
            create_topic(broker.bootstrap, TOPIC, PARTITIONS)
            commit_loop(broker.bootstrap, commits, broker.pid, out)
        stats = pstats.Stats(str(out))
    entries = stats.stats  # type: ignore[attr-defined]  # pstats keeps them undocumented
    for title, column in (("cumulative", 3), ("own", 2)):
        print(f"\ntop {top} by {title} time, ms per commit under the profiler (and calls):")
        ranked = sorted(entries.items(), key=lambda kv: kv[1][column], reverse=True)[:top]
        for (path, line, name), row in ranked:
            where = f"{_short(path)}:{line}({name})" if line else name
            print(f"  {row[column] / commits * 1000:7.3f}  {row[1]:>8}  {where}")


def _short(path: str) -> str:
    root = str(Path(__file__).resolve().parents[1]) + os.sep
    return path.removeprefix(root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--durability", default="page-cache", choices=("page-cache", "fsync"))
    parser.add_argument("--baseline", metavar="REF", help="also run the broker of this git commit")
    parser.add_argument("--profile", action="store_true", help="one more run under cProfile")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        trees: dict[str, Path | None] = {"streamshop": None}
        if args.baseline:
            trees["baseline"] = stack.enter_context(baseline_tree(args.baseline))
        results: dict[str, list[float]] = {name: [] for name in trees}
        for run in range(1, args.runs + 1):
            for name, source in trees.items():
                ms = measure(source, args.commits, args.durability)
                results[name].append(ms)
                print(f"run {run} {name}: {ms:.3f} ms of broker CPU per commit", flush=True)
    for name, runs in results.items():
        print(
            f"{name}: median {statistics.median(runs):.3f} ms per commit of {PARTITIONS} offsets "
            f"({args.runs} runs of {args.commits}, {args.durability})"
        )
    if args.profile:
        profile(args.commits, args.durability, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
