"""The layers of docs/adr/008-layers.md are held by `make lint` (lint-imports, with the contracts
in pyproject.toml): the tree as it is keeps them, and a copy of it with one forbidden import
added fails, naming the contract it breaks."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.harness import REPO

PACKAGES = ("contracts", "kit", "schemas", "broker", "registry", "services", "analytics", "streamshop", "loadtest")
LINT = str(Path(sys.executable).with_name("lint-imports"))


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LINT, "--no-cache"],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the project's packages and pyproject.toml."""
    root = tmp_path_factory.mktemp("tree")
    for package in PACKAGES:
        shutil.copytree(REPO / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


def test_the_tree_keeps_every_contract() -> None:
    done = lint(REPO)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "BROKEN" not in done.stdout


@pytest.mark.slow  # a lint run for each, 17 in all: `make test-fast` keeps the run over the tree
@pytest.mark.parametrize(
    ("module", "source", "contract"),
    [
        ("contracts/_forbidden.py", "import kit.settings\n", "Layers"),
        ("kit/_forbidden.py", "import services.common.db\n", "Layers"),
        ("broker/_forbidden.py", "import registry.state\n", "Layers"),
        ("services/orders/_forbidden.py", "import services.otp.domain\n", "Services"),
        ("broker/log/_forbidden.py", "import broker.server\n", "never import the server"),
        # even for typing only: a handler takes the protocol of the services it uses
        (
            "broker/handlers/_forbidden.py",
            "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from broker.core import Broker\n",
            "never import the broker's hub",
        ),
        ("broker/_forbidden.py", "import aiokafka\n", "no Kafka client library"),
        ("services/common/_forbidden.py", "import pyspark\n", "Only the analytics job loads Spark"),
        ("streamshop/_forbidden.py", "import streamshop.cli\n", "No import circles"),
        # One Kafka client per role (docs/adr/020-one-kafka-client-per-role.md).
        ("services/orders/_forbidden.py", "import confluent_kafka\n", "the services use aiokafka"),
        ("services/common/_forbidden.py", "import kafka\n", "the services use aiokafka"),
        ("registry/_forbidden.py", "from kafka.admin import KafkaAdminClient\n", "the registry uses confluent-kafka"),
        ("registry/_forbidden.py", "import aiokafka\n", "the registry uses confluent-kafka"),
        ("analytics/_forbidden.py", "import aiokafka\n", "the analytics job uses confluent-kafka alone"),
        ("streamshop/_forbidden.py", "import kafka\n", "the CLI uses confluent-kafka"),
        (
            "streamshop/_forbidden.py",
            "from aiokafka.admin import AIOKafkaAdminClient\n",
            "the CLI uses confluent-kafka",
        ),
        ("kit/_forbidden.py", "import confluent_kafka\n", "the shared layers"),
    ],
)
def test_a_forbidden_import_fails_the_lint_naming_the_contract(
    tree: Path, module: str, source: str, contract: str
) -> None:
    path = tree / module
    path.write_text('"""A forbidden import, added by the test."""\n\n' + source)
    if contract == "No import circles":
        # a circle: the command line's entry point imports the module back
        (tree / "streamshop/cli.py").write_text(
            (REPO / "streamshop/cli.py").read_text() + "\nimport streamshop._forbidden\n"
        )
    try:
        done = lint(tree)
    finally:
        path.unlink()
        shutil.copy(REPO / "streamshop/cli.py", tree / "streamshop/cli.py")
    assert done.returncode != 0, done.stdout[-3000:]
    report = " ".join(done.stdout.split("Broken contracts")[-1].split())  # lint-imports wraps long names
    assert contract in report, done.stdout[-3000:]
