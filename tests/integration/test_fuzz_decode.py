"""A bounded run of the coverage-guided fuzz target on the request decoding path
(`python -m loadtest.fuzz_decode` runs it for as long as wanted): no input may raise anything
but the refusal the server turns into a closed connection, nor abort the process."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.atheris_run import fuzz_bounded

pytestmark = pytest.mark.fuzz

RUNS = 150_000  # bounded by inputs (about 10 s on 2 idle cores): the same work on a fast or a busy machine


def test_the_decoding_path_survives_a_bounded_coverage_guided_run(tmp_path: Path) -> None:
    fuzz_bounded("fuzz_decode", RUNS, 20261125, tmp_path)
