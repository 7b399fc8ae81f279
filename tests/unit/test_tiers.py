"""`make test` runs every tier even when one fails, and ends with one summary of them all."""

from __future__ import annotations

import subprocess
import sys

from tests.support.harness import REPO


def _tiers(*specs: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.tiers", *specs], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )


def test_every_tier_runs_after_a_failing_one_and_the_summary_counts_them_all() -> None:
    done = _tiers(
        "lint=echo linted; exit 3",
        "suite=echo '......F'; echo '6 passed, 1 failed, 2 skipped in 4.20s (0:00:04)'; exit 1",
        "compose=echo '3 passed in 100.00s (0:01:40)'",
    )
    assert done.returncode == 1
    out = done.stdout
    assert out.index("=== tier lint") < out.index("=== tier suite") < out.index("=== tier compose")
    summary = out[out.index("=== summary of the tiers") :].splitlines()
    assert summary[1].split()[:3] == ["lint", "FAILED", "(exit"]
    for found in ("6 passed", "1 failed", "2 skipped"):
        assert found in summary[2]
    assert summary[3].split()[:2] == ["compose", "passed"]
    assert "3 passed" in summary[3]
    assert summary[-1] == "9 passed, 1 failed"  # the closing line CI reads


def test_a_run_whose_tiers_all_pass_exits_zero() -> None:
    done = _tiers("one=echo '2 passed in 0.10s'", "two=true")
    assert done.returncode == 0, done.stdout
    assert done.stdout.splitlines()[-1] == "2 passed, 0 failed"


def test_a_malformed_tier_is_refused() -> None:
    assert _tiers("no-command").returncode == 2
