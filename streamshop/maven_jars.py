"""Jars from Maven Central, copied once into a cache directory: `copy_dependencies` runs
`mvn dependency:copy-dependencies` on one of the project's poms (apache-kafka/pom.xml,
spark-connectors/pom.xml) into a scratch directory and renames it into place only when Maven
succeeded and copied what was asked, so an interrupted fetch is never taken for a complete one."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

from streamshop.clients import CommandError

__all__ = ["complete", "copy_dependencies"]

COMPLETE = ".complete"  # written last: its presence means the directory is whole


def complete(pom: Path, lib: Path) -> bool:
    """Whether `lib` holds what `pom` asks for now (a changed pom is fetched again)."""
    marker = lib / COMPLETE
    return marker.exists() and marker.read_text().strip() == _digest(pom)


def copy_dependencies(pom: Path, lib: Path, *, expect: str, what: str, quiet: bool = True) -> Path:
    """`lib`, holding the jars of `pom` and their dependencies; Maven copies them the first time.
    `expect` is a glob one of the jars must match; `what` names them in errors."""
    if complete(pom, lib):
        return lib
    mvn = shutil.which("mvn")
    if mvn is None:
        raise CommandError(f"Maven (mvn) is needed to fetch {what}: apt-get install maven")
    lib.parent.mkdir(parents=True, exist_ok=True)
    # A scratch directory of this process's own: two processes may fetch at once.
    partial = Path(tempfile.mkdtemp(prefix=lib.name + ".partial-", dir=lib.parent))
    partial.chmod(0o755)  # as a plain directory would be: images copy the jars for other users
    command = [mvn, "-B", "-f", str(pom), "dependency:copy-dependencies", f"-DoutputDirectory={partial}"]
    if quiet:
        command.insert(1, "-q")
    try:
        done = subprocess.run(command, capture_output=quiet, text=True, check=False)
        if done.returncode != 0:
            tail = (done.stdout or "")[-2000:] + (done.stderr or "")[-2000:]
            raise CommandError(f"mvn could not resolve {what}:\n{tail}")
        if not any(partial.glob(expect)):
            raise CommandError(f"mvn copied no {expect}")
        (partial / COMPLETE).write_text(_digest(pom) + "\n")
        if complete(pom, lib):  # another process got there first
            return lib
        shutil.rmtree(lib, ignore_errors=True)
        partial.rename(lib)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return lib


def _digest(pom: Path) -> str:
    return hashlib.sha256(pom.read_bytes()).hexdigest()
