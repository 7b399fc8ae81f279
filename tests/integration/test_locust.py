"""`python -m loadtest.load` (what `make load` runs): a short headless Locust run against a real
`streamshop up`, its reports, and the threshold verdict.  Locust monkey-patches its process with
gevent, so it only ever runs in a child process, never in pytest's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from loadtest.load import AGGREGATED, Row, judge, read_stats, stats_file
from tests.support.harness import REPO
from tests.support.stack import running_stack


def load(*args: object, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadtest.load", *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.mark.stack
def test_a_short_run_reports_all_three_user_classes_and_fails_an_impossible_threshold(tmp_path: Path) -> None:
    out = tmp_path / "report"
    with running_stack(tmp_path / "stack") as stack:
        run = load(
            "--stack", stack.data, "--users", 5, "--spawn-rate", 5, "--run-time", "12s", "--out", out,
            "--max-failure-ratio", 0.02, "--max-p95-ms", 5000, "--max-p95-ms", "sms delivered=10000",
        )  # fmt: skip
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "result: OK" in run.stdout

    html = (out / "report.html").read_text()
    assert "Locust" in html
    assert "produce-ack" in html
    for name in ("locust_stats.csv", "locust_stats_final.csv", "locust_failures.csv", "locust_stats_history.csv"):
        assert (out / name).is_file(), name

    rows = {(r.kind, r.name): r for r in read_stats(stats_file(out / "locust"))}
    made = [
        ("POST", "POST /orders"),  # OrdersUser
        ("POST", "POST /orders/[id]/status"),
        ("POST", "POST /otp"),  # OtpUser
        ("OTP", "sms delivered"),
        ("POST", "POST /otp/verify"),
        ("KAFKA", "produce-ack"),  # KafkaUser
        ("KAFKA", "end-to-end"),
    ]
    for key in made:
        assert key in rows, f"no {key} in {sorted(rows)}"
        assert rows[key].requests > 0, key
        assert rows[key].failures == 0, key
    # every record produced and acknowledged before the run ended was read back, bar the last in flight
    assert rows["KAFKA", "end-to-end"].requests >= rows["KAFKA", "produce-ack"].requests - 5

    impossible = load("--check", out / "locust", "--max-p95-ms", 0.001)
    assert impossible.returncode == 1, impossible.stdout + impossible.stderr
    assert "result: FAILED" in impossible.stdout
    assert "p95" in impossible.stdout
    generous = load("--check", out / "locust", "--max-p95-ms", 60_000, "--max-failure-ratio", 0.5)
    assert generous.returncode == 0, generous.stdout + generous.stderr


def row(name: str, requests: int, failures: int, p95: float | None, kind: str = "GET") -> Row:
    return Row(kind, name, requests, failures, p95, p95, p95, p95)


def test_the_failure_ratio_is_judged_over_all_requests() -> None:
    rows = [row("a", 3, 1, 5), row("b", 97, 0, 5), row(AGGREGATED, 100, 1, 5, "")]
    assert judge(rows, 0.01, {None: 10}).ok  # 1 % overall, although 33 % of "a"
    verdict = judge(rows, 0.005, {None: 10})
    assert not verdict.ok
    assert verdict.problems == ["failure ratio 0.0100 (1/100) > 0.005"]


def test_the_p95_is_judged_per_request_type_with_per_name_limits() -> None:
    rows = [row("fast", 1000, 0, 5), row("slow", 10, 0, 900), row(AGGREGATED, 1010, 0, 6, "")]
    verdict = judge(rows, 0.01, {None: 500})
    assert verdict.problems == ["slow [GET]: p95 900 ms > 500 ms"], "a slow endpoint hides behind the aggregate"
    assert judge(rows, 0.01, {None: 500, "slow": 1000}).ok


def test_a_run_without_requests_fails() -> None:
    assert judge([row(AGGREGATED, 0, 0, None, "")], 1.0, {}).problems == ["no request was made"]
    assert judge([], 1.0, {}).problems == ["no request was made"]


def test_judging_a_run_does_not_load_locust_into_this_process() -> None:
    """Importing locust monkey-patches sockets and threads with gevent, under pytest's asyncio."""
    assert "locust" not in sys.modules
    assert "gevent" not in sys.modules
