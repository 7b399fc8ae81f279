"""A bounded run of the coverage-guided fuzz target on the request decoding path
(`python -m loadtest.fuzz_decode` runs it for as long as wanted): no input may raise anything
but the refusal the server turns into a closed connection, nor abort the process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.harness import REPO

pytestmark = pytest.mark.fuzz

RUNS = 300_000  # bounded by inputs (about 20 s here): the same work on a fast or a busy machine


def test_the_decoding_path_survives_a_bounded_coverage_guided_run(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "loadtest.fuzz_decode",
            f"-runs={RUNS}",
            f"-artifact_prefix={tmp_path}/",
            "-seed=20261125",
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
