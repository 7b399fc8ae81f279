"""analytics.spark.worker_python: the launcher Spark's Python processes run, with a real
interpreter: PySpark from site-packages (compiled), not from the zips Spark puts first."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pyspark
import pytest

from analytics.spark import worker_python

ZIPS = Path(pyspark.__file__).parent / "python" / "lib"


def test_the_launcher_drops_the_wheels_zips_and_keeps_every_other_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    launcher = worker_python()
    assert Path(launcher).parent == tmp_path / "cache" / "streamshop"
    zips = sorted(str(z) for z in ZIPS.glob("*.zip"))
    assert len(zips) == 2  # pyspark.zip and Py4J's
    kept = [str(tmp_path / "with space"), str(tmp_path / "other.zip")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([zips[0], kept[0], zips[1], kept[1]])}
    done = subprocess.run(
        [launcher, "-c", "import json, sys, pyspark; print(json.dumps([sys.path, pyspark.__file__]))"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    path, imported = json.loads(done.stdout)
    assert not set(zips) & set(path)
    assert [p for p in path if p in kept] == kept
    assert imported == pyspark.__file__


def test_the_launcher_is_written_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = worker_python()
    assert worker_python() == first
    assert [p.name for p in (tmp_path / "streamshop").iterdir()] == [Path(first).name]
    assert os.access(first, os.X_OK)
