"""A bounded run of the differential fuzz target on produce-time validation's record walk
(`python -m loadtest.fuzz_record_walk` runs it for as long as wanted): the compiled walk must
accept exactly what the Python walk accepts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.harness import REPO

pytestmark = pytest.mark.fuzz

RUNS = 100_000  # bounded by inputs (about 5 s on an idle core; `-runs=` more for a longer search)


def test_the_compiled_walk_agrees_with_the_python_walk_over_a_bounded_coverage_guided_run(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "loadtest.fuzz_record_walk",
            f"-runs={RUNS}",
            f"-artifact_prefix={tmp_path}/",
            "-seed=20261127",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    done = [line for line in result.stderr.splitlines() if line.startswith("Done ")]
    assert done, result.stderr[-3000:]
    assert int(done[0].split()[1]) == RUNS  # it ran them all
