"""`streamshop analytics pack`: the Python environment of a Spark cluster's executors, packed.

On a cluster each executor starts Python workers that read the `streamshop-kafka` source: they
unpickle its reader, so they import the project (analytics, schemas, contracts) and what it
imports (pyarrow, confluent-kafka, fastavro, aiohttp). Across machines that environment travels
with the application, as PySpark's "Python Package Management" describes: a virtualenv packed
with venv-pack into a .tar.gz, which `streamshop analytics run --python-env PACK` gives Spark as
`spark.archives=PACK#environment`, and which Spark unpacks into each executor's working
directory (analytics.spark).

The environment is built fresh in a temporary directory, from the checkout:
- a virtualenv of this interpreter (`uv venv`);
- the runtime requirements of the analytics component, the project's base dependencies and its
  `analytics` extra, resolved within requirements-image.lock (the runtime lock) and installed
  from its entries with their hashes (`uv pip --require-hashes`, as `make setup` installs: the
  same files, from uv's cache);
- never pyspark, nor the py4j it brings: Spark puts its own pyspark.zip and Py4J zip first on the
  PYTHONPATH of every Python worker it starts, so a worker's PySpark is always the cluster's;
- the project from a wheel built from a copy of the checkout (not editable: venv-pack refuses
  an environment that points back into a checkout), with its optional C extensions: the source's
  Avro decoder is one (the broker's record walk, the other, is never loaded there); without a C
  compiler the wheel is pure Python and the executors decode with the generated Python.
Then the packed interpreter must import the job's source with Spark's zips alone, as an executor
will, before venv-pack packs it. The environment holds no bytecode: each executor's Python
compiles what it imports, once.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamshop.clients import CommandError

__all__ = [
    "DEFAULT_OUTPUT",
    "SUPPLIED_BY_SPARK",
    "Pack",
    "build",
    "canonical",
    "lock_entries",
    "locked_subset",
    "main",
    "name_of",
    "pinned",
    "requirements",
]

PROJECT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = Path("data/analytics-env.tar.gz")
LOCK = "requirements-image.lock"
EXTRA = "analytics"
# On every Python worker's PYTHONPATH from Spark itself (SPARK_HOME/python/lib), in the cluster's
# version: a copy in the pack would only be shadowed by them.
SUPPLIED_BY_SPARK = frozenset({"pyspark", "py4j"})
# What an executor's Python worker imports first: unpickling the source's reader imports it,
# and it imports the rest.
ENTRY_MODULE = "analytics.source"
# Seconds each step may take: an install from a cold cache downloads pyarrow (~45 MB).
STEP_TIMEOUT = 600.0

_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


@dataclass(frozen=True)
class Pack:
    path: Path
    size: int  # bytes
    seconds: float  # to build and pack
    packages: tuple[str, ...]  # name==version of everything installed, the project included
    compiled: bool  # the executors decode Avro with the compiled decoder (analytics/_avrovm.c)


def canonical(name: str) -> str:
    """A distribution's name as PEP 503 compares them: `Confluent_Kafka` is `confluent-kafka`."""
    return re.sub(r"[-_.]+", "-", name).lower()


def name_of(requirement: str) -> str:
    """The distribution a requirement names, canonical: `PySpark[connect]>=4.0` is `pyspark`."""
    name = _NAME.match(requirement)
    if name is None:
        raise CommandError(f"pyproject.toml: cannot read the requirement {requirement!r}")
    return canonical(name.group(1))


def requirements(pyproject: Mapping[str, Any], extra: str = EXTRA) -> list[str]:
    """What the executors' Python needs, as pyproject.toml declares it: the project's base
    dependencies and `extra`, less what Spark supplies."""
    project = pyproject["project"]
    declared = [*project.get("dependencies", []), *project.get("optional-dependencies", {}).get(extra, [])]
    return [r for r in declared if name_of(r) not in SUPPLIED_BY_SPARK]


def pinned(compiled: str) -> list[str]:
    """The names of the `name==version` lines of a resolution (`uv pip compile`'s output)."""
    return [canonical(m.group(1)) for line in compiled.splitlines() if (m := _PIN.match(line.strip()))]


def lock_entries(lock: str) -> dict[str, str]:
    """The entries of a hashed lock, by name: each `name==version \\` line with its `--hash` lines."""
    entries: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in lock.splitlines():
        if (m := _PIN.match(line)) is not None:
            current = entries.setdefault(canonical(m.group(1)), [])
            current.append(line)
        elif current is not None and line.startswith((" ", "\t")):
            current.append(line)
        else:
            current = None  # a comment or a blank line ends an entry
    return {name: "\n".join(lines) for name, lines in entries.items()}


def locked_subset(lock: str, names: Iterable[str]) -> str:
    """The lock's entries of `names`, hashes included, as a requirements file: what
    `--require-hashes` installs. Every name must be in the lock and none supplied by Spark."""
    wanted = sorted({canonical(n) for n in names})
    spark = [n for n in wanted if n in SUPPLIED_BY_SPARK]
    if spark:
        raise CommandError(f"the executors' requirements would bring {', '.join(spark)}, which Spark supplies")
    entries = lock_entries(lock)
    missing = [n for n in wanted if n not in entries]
    if missing:
        raise CommandError(f"{LOCK} does not pin {', '.join(missing)}: `make lock` refreshes it")
    return "".join(entries[n] + "\n" for n in wanted)


def build(output: Path, *, project: Path = PROJECT, timeout: float = STEP_TIMEOUT) -> Pack:
    """Build the executors' environment and pack it into `output` (whole or not at all)."""
    started = time.monotonic()
    if not output.name.endswith((".tar.gz", ".tgz")):
        # Spark unpacks an archive by the extension of its name.
        raise CommandError(f"{output}: the pack is a .tar.gz, and Spark tells archives by their names' extension")
    uv = Path(sys.executable).with_name("uv")
    if not uv.exists():
        raise CommandError(f"uv is not installed beside {sys.executable}: `make setup` installs it (dev extra)")
    if importlib.util.find_spec("venv_pack") is None:
        raise CommandError("venv-pack is not installed: `make setup` installs it (dev extra)")
    try:
        pyproject = tomllib.loads((project / "pyproject.toml").read_text())
        lock = (project / LOCK).read_text()
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise CommandError(f"the pack is built from a checkout of streamshop, with its {LOCK}: {e}") from None
    output = output.resolve()
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="streamshop-pack-") as scratch:
        tmp = Path(scratch)
        env = tmp / "environment"
        python = env / "bin" / "python"
        _run([str(uv), "venv", "--quiet", "--python", sys.executable, str(env)], "uv venv", timeout)
        roots = tmp / "requirements.in"
        roots.write_text("".join(r + "\n" for r in requirements(pyproject)))
        # uv resolves the closure (markers for this interpreter); the lock gives versions and hashes.
        resolve = [str(uv), "pip", "compile", "--quiet", "--no-header", "--no-annotate", "--python", str(python)]
        compiled = _run([*resolve, "--constraint", str(project / LOCK), str(roots)], "uv pip compile", timeout)
        locked = tmp / "requirements.txt"
        locked.write_text(locked_subset(lock, pinned(compiled)))
        install = [str(uv), "pip", "install", "--quiet", "--python", str(python)]
        _run([*install, "--require-hashes", "-r", str(locked)], f"installing from {LOCK}", timeout)
        source = _project_copy(project, pyproject, tmp / "source")
        _run([*install, "--no-deps", str(source)], "building and installing the project's wheel", timeout)
        compiled_decoder = _check(python, tmp, timeout)
        listed = _run([str(uv), "pip", "list", "--python", str(python), "--format", "json"], "uv pip list", timeout)
        packages = tuple(f"{p['name']}=={p['version']}" for p in json.loads(listed))
        partial = output.with_name(f".{output.name}.{os.getpid()}.part")
        try:
            pack = [sys.executable, "-m", "venv_pack", "--prefix", str(env), "--output", str(partial)]
            pack += ["--format", "tar.gz", "--quiet"]
            _run(pack, "venv-pack", timeout)
            partial.chmod(0o644)  # venv-pack writes 0600; the pack is copied to other hosts and users
            os.replace(partial, output)
        finally:
            partial.unlink(missing_ok=True)
    return Pack(output, output.stat().st_size, time.monotonic() - started, packages, compiled_decoder)


def _project_copy(project: Path, pyproject: Mapping[str, Any], into: Path) -> Path:
    """What a wheel of the project is built from: its packages and metadata, copied, since a build
    writes build/ and *.egg-info where it runs; setup.py builds the C extensions from their sources."""
    into.mkdir()
    for name in ("pyproject.toml", "README.md", "setup.py"):
        shutil.copy(project / name, into / name)
    patterns = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    tops = {p.split(".")[0].rstrip("*") for p in patterns}
    for top in sorted(tops):
        shutil.copytree(project / top, into / top, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"))
    return into


def _check(python: Path, cwd: Path, timeout: float) -> bool:
    """The packed interpreter imports the job's source with PySpark from Spark's zips alone, in a
    directory away from the checkout: what an executor's Python worker does first.  Whether its
    Avro decoder is the compiled one."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise CommandError("pyspark is not installed: its zips are what the executors import PySpark from")
    zips = sorted(str(z) for z in (Path(spec.origin).parent / "python" / "lib").glob("*.zip"))
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": os.pathsep.join(zips),
        "PYTHONDONTWRITEBYTECODE": "1",  # no bytecode of the build's paths in the pack
        "PYTHONNOUSERSITE": "1",
    }
    code = f"import {ENTRY_MODULE}; from analytics.avro_columns import COMPILED; print(COMPILED)"
    out = _run([str(python), "-c", code], f"the packed environment importing {ENTRY_MODULE}", timeout, cwd=cwd, env=env)
    return out.strip() == "True"


def _run(
    command: Sequence[str], what: str, timeout: float, *, cwd: Path | None = None, env: Mapping[str, str] | None = None
) -> str:
    """`command`'s output; a `CommandError` naming `what` when it fails or outlasts `timeout`
    (then it is killed with whatever it started: a wheel's build backend, say)."""
    try:
        proc = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
            env=None if env is None else dict(env),
            start_new_session=True,
        )
    except OSError as e:
        raise CommandError(f"{what}: {e}") from None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise CommandError(f"{what} did not finish within {timeout:g} s") from None
    if proc.returncode != 0:
        detail = (err or out).strip()[-2000:]
        raise CommandError(f"{what} failed (exit status {proc.returncode}):\n{detail}")
    return out


def main(args: argparse.Namespace) -> int:
    """`streamshop analytics pack`."""
    pack = build(args.output)
    project = next((p for p in pack.packages if p.startswith("streamshop==")), "streamshop")
    print(
        f"packed the executors' environment into {args.output}: {pack.size / 2**20:.1f} MiB, "
        f"{project.replace('==', ' ')} and {len(pack.packages) - 1} packages (no pyspark: Spark's own), "
        f"in {pack.seconds:.1f} s",
        flush=True,
    )
    if not pack.compiled:
        print("no C compiler built the Avro decoder: the executors decode with the generated Python, slower")
    print(f"run the job with it: streamshop analytics run --spark-master spark://HOST:PORT --python-env {args.output}")
    return 0
