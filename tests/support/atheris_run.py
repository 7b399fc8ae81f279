"""A bounded run of one of the project's atheris fuzz targets (`python -m loadtest.<target>`),
as a test runs it: a fixed seed, findings written under a scratch directory, and a check that
it exited cleanly after running every input it was asked for."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.harness import REPO

__all__ = ["fuzz_bounded"]


def fuzz_bounded(target: str, runs: int, seed: int, artifacts: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            f"loadtest.{target}",
            f"-runs={runs}",
            f"-artifact_prefix={artifacts}/",
            f"-seed={seed}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    done = [line for line in result.stderr.splitlines() if line.startswith("Done ")]
    assert done, result.stderr[-3000:]
    assert int(done[0].split()[1]) == runs  # it ran them all
