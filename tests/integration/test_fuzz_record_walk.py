"""A bounded run of the differential fuzz target on produce-time validation's record walk
(`python -m loadtest.fuzz_record_walk` runs it for as long as wanted): the compiled walk must
accept exactly what the Python walk accepts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.atheris_run import fuzz_bounded

pytestmark = pytest.mark.fuzz

RUNS = 100_000  # bounded by inputs (about 5 s on an idle core; `-runs=` more for a longer search)


def test_the_compiled_walk_agrees_with_the_python_walk_over_a_bounded_coverage_guided_run(tmp_path: Path) -> None:
    fuzz_bounded("fuzz_record_walk", RUNS, 20261127, tmp_path)
