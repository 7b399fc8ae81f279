"""streamshop.analytics_pack's pure parts: what goes into the executors' environment (the
project's base dependencies and its analytics extra, never what Spark supplies) and the hashed
entries of the lock it is installed from. The build itself runs in
tests/integration/test_spark_cluster.py, on a real cluster."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from streamshop.analytics_pack import (
    LOCK,
    SUPPLIED_BY_SPARK,
    build,
    canonical,
    lock_entries,
    locked_subset,
    name_of,
    pinned,
    requirements,
)
from streamshop.clients import CommandError
from tests.support.harness import REPO

LOCK_TEXT = """\
# Resolved by `make lock` from the lower bounds in pyproject.toml, with hashes; do not edit.
confluent-kafka==2.16.1 \\
    --hash=sha256:aaaa \\
    --hash=sha256:bbbb
py4j==0.10.9.9 \\
    --hash=sha256:cccc
pyarrow==26.0.1 \\
    --hash=sha256:dddd
pyspark==4.3.0 \\
    --hash=sha256:eeee
typing-extensions==4.16.0 \\
    --hash=sha256:ffff
"""


def test_the_requirements_are_the_base_and_the_extra_without_what_spark_supplies() -> None:
    pyproject = {
        "project": {
            "dependencies": ["structlog>=26.1", "uvloop>=0.21; sys_platform != 'win32'"],
            "optional-dependencies": {
                "analytics": ["PySpark[connect]>=4.0", "pyarrow>=18", "Py4J==0.10.9.9", "confluent_kafka>=2.16"],
                "services": ["aiokafka>=0.14"],
            },
        }
    }
    assert requirements(pyproject) == [
        "structlog>=26.1",
        "uvloop>=0.21; sys_platform != 'win32'",
        "pyarrow>=18",
        "confluent_kafka>=2.16",
    ]


def test_the_projects_own_requirements_hold_what_an_executor_imports_and_no_spark() -> None:
    declared = requirements(tomllib.loads((REPO / "pyproject.toml").read_text()))
    names = {name_of(r) for r in declared}
    assert {"pyarrow", "confluent-kafka", "fastavro", "aiohttp"} <= names  # analytics.source's imports
    assert not names & SUPPLIED_BY_SPARK


def test_names_compare_as_pep_503_says() -> None:
    assert canonical("Confluent_Kafka") == canonical("confluent.kafka") == "confluent-kafka"
    assert name_of("PySpark[connect]>=4.0") == "pyspark"
    assert name_of("uvloop>=0.21; sys_platform != 'win32'") == "uvloop"
    assert name_of("Typing_Extensions") == "typing-extensions"


def test_a_resolution_is_read_for_its_pinned_names() -> None:
    compiled = "aiohttp==3.14.5\n    # via streamshop\nTyping_Extensions==4.16.0\n\n"
    assert pinned(compiled) == ["aiohttp", "typing-extensions"]


def test_the_lock_is_read_entry_by_entry_with_its_hashes() -> None:
    entries = lock_entries(LOCK_TEXT)
    assert sorted(entries) == ["confluent-kafka", "py4j", "pyarrow", "pyspark", "typing-extensions"]
    assert entries["confluent-kafka"] == "confluent-kafka==2.16.1 \\\n    --hash=sha256:aaaa \\\n    --hash=sha256:bbbb"


def test_the_subset_holds_exactly_the_names_asked_for_with_their_hashes() -> None:
    subset = locked_subset(LOCK_TEXT, ["typing_extensions", "pyarrow", "pyarrow"])
    assert subset.splitlines() == [
        "pyarrow==26.0.1 \\",
        "    --hash=sha256:dddd",
        "typing-extensions==4.16.0 \\",
        "    --hash=sha256:ffff",
    ]
    assert subset.endswith("\n")


def test_a_name_the_lock_does_not_pin_is_an_error() -> None:
    with pytest.raises(CommandError, match="does not pin numpy"):
        locked_subset(LOCK_TEXT, ["pyarrow", "numpy"])


@pytest.mark.parametrize("name", ["pyspark", "py4j"])
def test_what_spark_supplies_never_enters_the_pack(name: str) -> None:
    with pytest.raises(CommandError, match="which Spark supplies"):
        locked_subset(LOCK_TEXT, ["pyarrow", name])


def test_the_runtime_lock_pins_every_requirement_of_the_pack() -> None:
    """What the pack's resolution may ask for is pinned, with hashes, in requirements-image.lock."""
    declared = requirements(tomllib.loads((REPO / "pyproject.toml").read_text()))
    entries = lock_entries((REPO / LOCK).read_text())
    for name in map(name_of, declared):
        assert "--hash=sha256:" in entries[name], name


def test_the_output_must_be_a_tar_gz_spark_can_unpack(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match=r"is a \.tar\.gz"):
        build(tmp_path / "environment.zip")
    assert not list(tmp_path.iterdir())
