"""Each image's lock runs what the image offers: a venv built from requirements-image.lock alone
(the application image) answers every console command's --help and has every package any module
of the application imports, even inside a function; one from requirements-broker.lock (the
broker's image: no Spark, no Kafka client) runs the broker's commands and says which extra to
install for the others.  The project is installed as the Dockerfile installs it, without its
dependencies, so the lock alone must carry them."""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamshop.cli import build_parser
from tests.support.harness import REPO

pytestmark = pytest.mark.slow

APPLICATION = ("contracts", "kit", "schemas", "broker", "registry", "services", "analytics", "streamshop")
BROKER = ("contracts", "kit", "broker")
# What Locust runs in the application image (the rest of loadtest/ is benchmarks, run from a checkout).
LOCUST = ("loadtest/locustfile.py", "loadtest/targets.py", "loadtest/load.py")


UV = str(Path(sys.executable).with_name("uv"))


def venv(root: Path, lock: str) -> Path:
    """A virtualenv with `lock` (hashes required) and the project without its dependencies, as
    the Dockerfile installs them (uv for speed: it installs the same hashed files pip would)."""
    subprocess.run([UV, "venv", "--quiet", "--python", sys.executable, str(root)], check=True)
    install = [UV, "pip", "install", "--quiet", "--python", str(root / "bin" / "python")]
    subprocess.run([*install, "--require-hashes", "-r", str(REPO / lock)], check=True)
    subprocess.run([*install, "--no-deps", str(project_source(root))], check=True, cwd=root)
    # Each hashed install of an sdist leaves a new build in uv's cache (pyspark's: 1.9 GiB) and
    # never drops the old one: without this, every run of the suite would grow it by that much.
    subprocess.run([UV, "cache", "prune", "--quiet"], check=True)
    return root


def project_source(root: Path) -> Path:
    """A copy of what the image copies, in `root`/src: a build leaves build/ and *.egg-info where
    it runs."""
    source = root / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for package in APPLICATION:
        shutil.copytree(REPO / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    return source


def environment(root: Path) -> dict[str, str]:
    """The environment of a command of the venv at `root`: nothing of the suite's own venv."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    return {**env, "PATH": f"{root / 'bin'}:/usr/bin:/bin"}


def run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(root / "bin" / "streamshop"), *args],
        cwd=root,
        env=environment(root),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def command_paths(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from command_paths(sub, (*path, name))


def third_party_imports(files: list[Path]) -> set[str]:
    """The top-level packages imported anywhere in `files`, functions included, but the
    standard library's and the project's."""
    found: set[str] = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module.split(".")[0])
    own = {*APPLICATION, "loadtest", "tests"}
    return {name for name in found if name not in sys.stdlib_module_names and name not in own}


def importable(root: Path, names: set[str]) -> subprocess.CompletedProcess[str]:
    """Import each of `names` in the venv at `root`."""
    check = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    return subprocess.run(
        [str(root / "bin" / "python"), "-c", check, *sorted(names)], capture_output=True, text=True, check=False
    )


def sources(packages: tuple[str, ...]) -> list[Path]:
    return [path for package in packages for path in sorted((REPO / package).rglob("*.py"))]


# Every command's --help in one process of the venv (one interpreter start, not one per command).
_EVERY_HELP = """
import contextlib, io, json, sys
from streamshop.cli import main
failed = []
for path in json.loads(sys.argv[1]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main([*path, "--help"])
    if not out.getvalue().startswith("usage: streamshop"):
        failed.append(path)
print(json.dumps(failed))
"""


def test_the_application_image_lock_runs_every_command(tmp_path: Path) -> None:
    root = venv(tmp_path / "app", "requirements-image.lock")
    assert run(root, "--help").stdout.startswith("usage: streamshop")  # the console script itself
    paths = [list(path) for path in command_paths(build_parser()) if path]
    done = subprocess.run(
        [str(root / "bin" / "python"), "-c", _EVERY_HELP, json.dumps(paths)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == [], done.stdout[-2000:]
    needed = third_party_imports(sources(APPLICATION) + [REPO / p for p in LOCUST])
    done = importable(root, needed)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_broker_image_lock_runs_the_broker_and_names_the_extra_of_the_rest(tmp_path: Path) -> None:
    root = venv(tmp_path / "broker", "requirements-broker.lock")
    for path in (("broker",), ("broker", "verify"), ("broker", "users"), ("probe",), ("settings",)):
        done = run(root, *path, "--help")
        assert done.returncode == 0, (path, done.stderr[-2000:])
    assert run(root, "settings", "broker").returncode == 0
    data = tmp_path / "data"
    data.mkdir()
    assert run(root, "broker", "verify", "--data-dir", str(data)).returncode == 0
    needed = third_party_imports(sources(BROKER))
    done = importable(root, needed)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not {"pyspark", "confluent_kafka", "aiokafka", "kafka"} & needed
    for command, extra in (("orders", "services"), ("analytics", "analytics")):
        args = (command, "run", "--once") if command == "analytics" else (command,)
        done = run(root, *args)
        assert done.returncode == 2, (command, done.stderr[-2000:])
        assert f"pip install 'streamshop[{extra}]'" in done.stderr, done.stderr[-2000:]
        assert "Traceback" not in done.stderr
