"""How `make demo` (`streamshop up --demo`) comes up on a busy machine, run after run: the time
until the stack serves, until the analytics job is ready and until it has committed the demo's
orders, and how Ctrl-C goes (the stop's length and how many children needed SIGKILL); and where
the analytics job's start goes, from the phases it prints before its ready line
(`streamshop analytics start: python 0.3 s, imports 2.1 s, ...`, kit.start_phases).

    python -m loadtest.bench_demo_start [--runs 10] [--busy 2]

`--busy N` runs N CPU-bound processes beside the stack for the whole run (a laptop that is
also running something else). Each run starts from an empty data directory on ephemeral ports.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from analytics.runner import START_LINE
from kit.start_phases import format_line, last_line

REPO = Path(__file__).resolve().parents[1]
DEMO_ORDERS = 20


@dataclass
class Run:
    serving_s: float | None = None
    analytics_ready_s: float | None = None
    committed_s: float | None = None
    stop_s: float | None = None
    killed: int = 0
    restarts: int = 0
    connect_back: int = 0  # Spark's "Python worker failed to connect back" in the job's log
    phases: dict[str, float] = field(default_factory=dict)  # the job's start, as it printed it

    @property
    def ok(self) -> bool:
        return None not in (self.serving_s, self.analytics_ready_s, self.committed_s) and self.killed == 0


def _document(data: Path) -> dict[str, object] | None:
    try:
        document: dict[str, object] = json.loads((data / "stack.json").read_text())
    except (OSError, ValueError):
        return None
    return document


def _committed(bootstrap: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = [ConsumerGroupTopicPartitions("analytics", [TopicPartition("orders", p) for p in range(3)])]
    try:
        result = next(iter(admin.list_consumer_group_offsets(request).values())).result(timeout=10)
    except Exception:
        return 0
    return sum(max(tp.offset, 0) for tp in result.topic_partitions)


def one_run(limit: float) -> Run:
    run = Run()
    with tempfile.TemporaryDirectory(prefix="demo-start-") as scratch:
        data = Path(scratch) / "stack"
        out = (Path(scratch) / "up.out").open("wb")
        command = [sys.executable, "-m", "streamshop.cli", "up", "--demo", "--ephemeral-ports", "--data-dir", str(data)]
        command += ["--demo-orders", str(DEMO_ORDERS), "--demo-otp", "2"]
        began = time.monotonic()
        up = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            while time.monotonic() - began < limit and up.poll() is None:
                document = _document(data)
                children = document["children"] if document else {}
                assert isinstance(children, dict)
                now = time.monotonic() - began
                if run.serving_s is None and document and document["state"] == "running":
                    run.serving_s = now
                if run.analytics_ready_s is None and children.get("analytics", {}).get("state") == "ready":
                    run.analytics_ready_s = now
                if run.analytics_ready_s is not None and run.committed_s is None:
                    bootstrap = children["broker"]["urls"]["bootstrap"]
                    if _committed(bootstrap) >= DEMO_ORDERS:
                        run.committed_s = time.monotonic() - began
                        run.restarts = sum(int(c["restarts"]) for c in children.values())
                        break
                time.sleep(0.5)
            stopping = time.monotonic()
            os.killpg(up.pid, signal.SIGINT)  # Ctrl-C in its terminal
            up.wait(120)
            run.stop_s = time.monotonic() - stopping
        finally:
            if up.poll() is None:
                os.killpg(up.pid, signal.SIGKILL)
                up.wait()
            out.close()
        text = (Path(scratch) / "up.out").read_text()
        run.killed = len(re.findall(r"did not stop within", text))
        job_log = data / "output" / "analytics.log"
        if job_log.exists():
            text = job_log.read_text(errors="replace")
            run.connect_back = text.count("failed to connect back")
            run.phases = last_line(START_LINE, text) or {}
    return run


def _figure(values: list[float | None]) -> str:
    known = [v for v in values if v is not None]
    if not known:
        return "-"
    return f"median {statistics.median(known):6.1f} s, max {max(known):6.1f} s ({len(known)}/{len(values)})"


def _phase_figures(runs: list[Run]) -> list[str]:
    """One line per phase of the analytics job's start (in the order the runs printed them): its
    median and max over the runs that printed it."""
    names = list(dict.fromkeys(name for r in runs for name in r.phases))
    width = max((len(n) for n in names), default=0)
    return [f"  {name:<{width}}  {_figure([r.phases.get(name) for r in runs])}" for name in names]


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.bench_demo_start", description=__doc__)
    parser.add_argument("--runs", type=int, default=10, help="runs, one after the other (default 10)")
    parser.add_argument("--busy", type=int, default=2, help="CPU-bound processes beside the stack (default 2)")
    parser.add_argument("--limit", type=float, default=300.0, help="seconds a run may take to commit (300)")
    args = parser.parse_args()
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    runs: list[Run] = []
    try:
        for i in range(args.runs):
            run = one_run(args.limit)
            runs.append(run)
            print(
                f"run {i + 1}: serving {run.serving_s or float('nan'):.1f} s, analytics ready "
                f"{run.analytics_ready_s or float('nan'):.1f} s, committed {run.committed_s or float('nan'):.1f} s, "
                f"stop {run.stop_s or float('nan'):.1f} s, SIGKILLs {run.killed}, restarts {run.restarts}, "
                f"connect-back failures {run.connect_back}",
                flush=True,
            )
            if run.phases:
                print(f"  {format_line(START_LINE, run.phases)}", flush=True)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    print(f"\n{args.runs} runs of `streamshop up --demo` beside {args.busy} busy processes, {os.cpu_count()} cores")
    print(f"stack serving       {_figure([r.serving_s for r in runs])}")
    print(f"analytics ready     {_figure([r.analytics_ready_s for r in runs])}")
    print(f"analytics committed {_figure([r.committed_s for r in runs])}")
    print(f"Ctrl-C to stopped   {_figure([r.stop_s for r in runs])}")
    print(f"children SIGKILLed  {sum(r.killed for r in runs)}; child restarts {sum(r.restarts for r in runs)}")
    print(f"Spark connect-back failures {sum(r.connect_back for r in runs)}")
    print(f"runs complete       {sum(r.ok for r in runs)}/{len(runs)}")
    print("analytics job's start, by phase (from its own process start):")
    print("\n".join(_phase_figures(runs)) or "  - (no start line in the job's log)")
    return 0 if all(r.ok for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
