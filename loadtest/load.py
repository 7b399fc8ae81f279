"""`make load`: a bounded, headless Locust run against `streamshop up`, judged by thresholds.

    python -m loadtest.load [--stack DIR] [--users 20] [--spawn-rate 5] [--run-time 60s]
                            [--max-failure-ratio 0.01] [--max-p95-ms 500] [--max-p95-ms 'NAME=MS' ...]
                            [--out loadtest/results]
    python -m loadtest.load --check loadtest/results/locust [--max-failure-ratio R] [--max-p95-ms MS]

Without ``--stack`` a fresh `streamshop up --ephemeral-ports` is started in a temporary directory
for the run and stopped afterwards; with ``--stack DIR`` the stack already running from DIR is
used.  Locust (`loadtest/locustfile.py`, all three user classes) runs headless in a child process
for ``--run-time`` and writes Locust's CSV report ``OUT/locust_stats.csv`` (with ``_failures``,
``_exceptions`` and ``_stats_history``), its HTML report ``OUT/report.html``, and
``OUT/locust_stats_final.csv``: the same columns as ``_stats.csv``, written by the locustfile
once the users have stopped (Locust rewrites ``_stats.csv`` once a second, so it misses the last
second).  The verdict reads the final file.  ``--check PREFIX`` judges an existing report
(``PREFIX_stats_final.csv``, else ``PREFIX_stats.csv``) without running anything.

The thresholds (the defaults: failure ratio 0.01, p95 500 ms):

- failure ratio — over all requests (Locust's ``Aggregated`` row): failures / requests must not
  exceed ``--max-failure-ratio``.  Aggregated because a ratio needs volume: one failure among three
  OTP replays says little;
- p95 — for each request type (each row but ``Aggregated``): its 95th percentile must not exceed
  ``--max-p95-ms``, so a slow endpoint cannot hide behind many fast ones.  ``--max-p95-ms NAME=MS``
  sets the limit of one request name, e.g. ``'sms delivered=2000'`` for the OTP fan-out path;
- a run that made no request fails.

Exit status: 0 within the thresholds, 1 a threshold exceeded, 2 the run could not be made.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from loadtest.bench_services import Stack  # `streamshop up --ephemeral-ports` in a directory, until stop()
from loadtest.targets import FINAL_STATS_SUFFIX, STACK_ENV
from streamshop.clients import table
from streamshop.stack.state import running_stack

REPO = Path(__file__).resolve().parent.parent
LOCUSTFILE = REPO / "loadtest" / "locustfile.py"
AGGREGATED = "Aggregated"
_DURATION = re.compile(r"(\d+)\s*(h|m|s)")


def seconds(duration: str) -> int:
    """Locust's run time syntax (``90``, ``45s``, ``2m``, ``1h30m``) in seconds."""
    text = duration.strip()
    if text.isdigit():
        return int(text)
    parts = _DURATION.findall(text)
    if not parts or _DURATION.sub("", text).strip():
        raise argparse.ArgumentTypeError(f"{duration!r} is not a duration such as 45s, 2m or 1h30m")
    return sum(int(n) * {"h": 3600, "m": 60, "s": 1}[unit] for n, unit in parts)


def p95_limit(value: str) -> tuple[str | None, float]:
    """``MS`` (every request type) or ``NAME=MS`` (one request name)."""
    name, sep, limit = value.rpartition("=")
    try:
        return (name.strip() if sep else None), float(limit)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not MS or NAME=MS") from None


@dataclass(frozen=True)
class Row:
    """One row of Locust's ``*_stats.csv``; latencies in ms, None when it made no request."""

    kind: str
    name: str
    requests: int
    failures: int
    p50: float | None
    p95: float | None
    p99: float | None
    max: float | None

    @property
    def failure_ratio(self) -> float:
        return self.failures / self.requests if self.requests else 0.0


def stats_file(prefix: Path) -> Path:
    """The locustfile's final ``PREFIX_stats_final.csv``, else Locust's ``PREFIX_stats.csv``
    (rewritten once a second while Locust runs, so without the run's last second)."""
    final = Path(f"{prefix}{FINAL_STATS_SUFFIX}")
    return final if final.exists() else Path(f"{prefix}_stats.csv")


def read_stats(path: Path) -> list[Row]:
    """The rows of a Locust stats CSV, the ``Aggregated`` one last."""

    def ms(value: str) -> float | None:
        return None if value in ("", "N/A") else float(value)

    with path.open(newline="") as f:
        return [
            Row(
                kind=line["Type"],
                name=line["Name"],
                requests=int(line["Request Count"]),
                failures=int(line["Failure Count"]),
                p50=ms(line["50%"]),
                p95=ms(line["95%"]),
                p99=ms(line["99%"]),
                max=ms(line["Max Response Time"]),
            )
            for line in csv.DictReader(f)
        ]


@dataclass(frozen=True)
class Verdict:
    problems: list[str]
    lines: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def judge(rows: Sequence[Row], max_failure_ratio: float, p95_limits: dict[str | None, float]) -> Verdict:
    """Apply the thresholds (see the module docstring); `p95_limits` maps a request name, or None
    for every other one, to its limit in ms (no entry: no p95 limit)."""
    problems: list[str] = []
    total = next((r for r in rows if r.name == AGGREGATED), None)
    per_type = [r for r in rows if r.name != AGGREGATED]
    if total is None or total.requests == 0:
        problems.append("no request was made")
    elif total.failure_ratio > max_failure_ratio:
        problems.append(
            f"failure ratio {total.failure_ratio:.4f} ({total.failures}/{total.requests}) > {max_failure_ratio:g}"
        )
    verdicts = []
    for row in per_type:
        limit = p95_limits.get(row.name, p95_limits.get(None, math.inf))
        if row.p95 is not None and row.p95 > limit:
            problems.append(f"{row.name} [{row.kind}]: p95 {row.p95:g} ms > {limit:g} ms")
            verdicts.append("p95 too high")
        else:
            verdicts.append("ok")

    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:g}"

    body = [
        (r.kind, r.name, r.requests, r.failures, f"{r.failure_ratio:.2%}", cell(r.p50), cell(r.p95), cell(r.p99), v)
        for r, v in zip(per_type, verdicts, strict=True)
    ]
    if total is not None:
        result = "failed" if problems else "ok"
        ratio = f"{total.failure_ratio:.2%}"
        body.append(
            (
                "",
                AGGREGATED,
                total.requests,
                total.failures,
                ratio,
                cell(total.p50),
                cell(total.p95),
                cell(total.p99),
                result,
            )
        )
    lines = table(("TYPE", "NAME", "REQUESTS", "FAILURES", "FAIL%", "P50 MS", "P95 MS", "P99 MS", "RESULT"), body)
    out = lines.splitlines()
    limits = ", ".join(f"{name or 'each'} <= {ms:g} ms" for name, ms in p95_limits.items()) or "none"
    out.append(f"thresholds: failure ratio <= {max_failure_ratio:g} overall; p95 {limits}")
    out += ["result: OK"] if not problems else ["result: FAILED", *(f"  - {p}" for p in problems)]
    return Verdict(problems, out)


def locust_command(args: argparse.Namespace, prefix: Path, html: Path, host: str | None) -> list[str]:
    command = [sys.executable, "-m", "locust", "-f", str(args.locustfile), "--headless"]
    command += ["--users", str(args.users), "--spawn-rate", str(args.spawn_rate), "--run-time", args.run_time]
    command += ["--csv", str(prefix), "--html", str(html), "--only-summary", "--exit-code-on-error", "0"]
    return command + (["--host", host] if host else [])


def run_locust(args: argparse.Namespace, stack_dir: Path, prefix: Path, html: Path) -> int:
    document = running_stack(stack_dir)
    if document is None:
        print(f"load: no `streamshop up` runs from {stack_dir}", file=sys.stderr)
        return 2
    host = document["children"].get("orders", {}).get("urls", {}).get("http")
    env = {**os.environ, STACK_ENV: str(stack_dir)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    command = locust_command(args, prefix, html, host)
    print("load: " + " ".join(command), flush=True)
    try:
        # Locust stops by itself after --run-time; the margin covers its start and the report.
        done = subprocess.run(command, cwd=REPO, env=env, timeout=seconds(args.run_time) + 120, check=False)
    except subprocess.TimeoutExpired:
        print("load: locust did not stop in time", file=sys.stderr)
        return 2
    if done.returncode != 0:
        print(f"load: locust exited with status {done.returncode}", file=sys.stderr)
        return 2
    return 0


def start_stack(data_dir: Path) -> Stack:
    stack = Stack(data_dir)
    try:
        stack.wait_ready()
    except RuntimeError:
        stack.stop()
        raise
    return stack


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtest.load", description=__doc__.split("\n\n")[0])
    p.add_argument("--stack", type=Path, metavar="DIR", help="use the `streamshop up` running from DIR")
    p.add_argument("--users", "-u", type=int, default=20, help="concurrent users (default 20)")
    p.add_argument("--spawn-rate", "-r", type=float, default=5.0, help="users started per second (default 5)")
    p.add_argument("--run-time", "-t", default="60s", help="how long to run, e.g. 45s, 2m (default 60s)")
    p.add_argument("--out", type=Path, default=REPO / "loadtest" / "results", help="report directory")
    p.add_argument("--locustfile", type=Path, default=LOCUSTFILE, help=argparse.SUPPRESS)
    p.add_argument(
        "--max-failure-ratio", type=float, default=0.01, metavar="R", help="over all requests (default 0.01)"
    )
    p.add_argument(
        "--max-p95-ms",
        type=p95_limit,
        action="append",
        default=[],
        metavar="MS|NAME=MS",
        help="p95 limit of each request type, or of one name (repeatable; default 500)",
    )
    p.add_argument("--check", type=Path, metavar="PREFIX", help="only judge the report PREFIX_stats.csv")
    args = p.parse_args(argv)
    seconds(args.run_time)  # refuse a bad duration before starting anything
    if args.users < 1 or args.spawn_rate <= 0:
        p.error("--users and --spawn-rate must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    limits: dict[str | None, float] = {None: 500.0}
    limits.update(args.max_p95_ms)
    if args.check is not None:
        prefix = args.check
    else:
        args.out.mkdir(parents=True, exist_ok=True)
        prefix, html = args.out / "locust", args.out / "report.html"
        if args.stack is not None:
            status = run_locust(args, args.stack.resolve(), prefix, html)
        else:
            with tempfile.TemporaryDirectory(prefix="streamshop-load-") as tmp:
                try:
                    stack = start_stack(Path(tmp))
                except RuntimeError as e:
                    print(f"load: {e}", file=sys.stderr)
                    return 2
                try:
                    status = run_locust(args, Path(tmp), prefix, html)
                finally:
                    stack.stop()
        if status:
            return status
        print(f"load: report {html}, stats {stats_file(prefix)}")
    path = stats_file(prefix)
    try:
        rows = read_stats(path)
    except (OSError, KeyError, ValueError) as e:
        print(f"load: cannot read {path}: {e}", file=sys.stderr)
        return 2
    verdict = judge(rows, args.max_failure_ratio, limits)
    print("\n".join(verdict.lines))
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
