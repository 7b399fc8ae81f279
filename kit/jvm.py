"""Class-data archives (AppCDS) for the JVMs streamshop starts: Kafka's tools, the Spark driver.

A JVM spends most of a short run loading and verifying the same classes from the same jars.
Java can instead map them from an archive that an earlier run wrote as it exited
(`-XX:ArchiveClassesAtExit`, then `-XX:SharedArchiveFile`): a Kafka tool then starts with half
the CPU (about 1.2 s to 0.7 s) and a Spark driver reaches its first query with half (about 11 s
to 6 s).

An archive is only valid for the JVM build and the class path it was written with, and Java 17
does not survive a damaged one (a truncated archive is a SIGBUS at start, not a warning). So:

- each archive's file name carries a digest of the java binary and every jar of its class
  path: a new Java or other jars select another file, never a stale one;
- a JVM writes its archive under a name of its own, and the file is moved into place (an atomic
  rename) only once that JVM has exited with status 0, which it does after writing it; a JVM
  killed or failing leaves nothing in place;
- a run that finds no archive writes one, so the first use costs a few seconds more and every
  later one less; while one JVM is writing it (a claim file names the process that will move it
  into place), the others start without.

`STREAMSHOP_JVM_CACHE` names the directory (default `~/.cache/streamshop/jvm`); set it empty to
start JVMs without archives.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from kit.pids import pid_alive

__all__ = ["CACHE_ENV", "ClassData", "being_written", "cache_directory", "class_data"]

CACHE_ENV = "STREAMSHOP_JVM_CACHE"
_SUFFIX = ".jsa"


def cache_directory() -> Path | None:
    """Where archives are kept, or None when they are turned off (`STREAMSHOP_JVM_CACHE=`)."""
    value = os.environ.get(CACHE_ENV)
    if value is None:
        return Path.home() / ".cache" / "streamshop" / "jvm"
    return Path(value) if value.strip() else None


@dataclass(frozen=True)
class ClassData:
    """One JVM start's part in an archive: `options` go on its command line, before the main
    class; `settle(status)` once it has exited keeps the archive it wrote, if it wrote one."""

    options: tuple[str, ...]
    archive: Path | None = None
    writing: Path | None = None

    def settle(self, status: int | None) -> None:
        if self.writing is None or self.archive is None:
            return
        if status == 0 and self.writing.exists():
            os.replace(self.writing, self.archive)
            family = _family(self.archive)
            for old in self.archive.parent.glob(f"{family}-*{_SUFFIX}"):
                if old != self.archive and _family(old) == family:  # of an earlier Java or earlier jars
                    with contextlib.suppress(OSError):
                        old.unlink()
        else:
            with contextlib.suppress(OSError):
                self.writing.unlink()
        with contextlib.suppress(OSError):
            _claim(self.archive).unlink()


def class_data(
    name: str, java: str, classpath: Iterable[Path], directory: Path | None = None, *, write: bool = True
) -> ClassData:
    """The archive options of one start of `java` with `classpath` (jar files or directories of
    jars), under the family `name` (one archive per family and digest). `write=False`: map the
    archive if there is one, else start without (`archive` still names the file)."""
    directory = directory if directory is not None else cache_directory()
    if directory is None:
        return ClassData(())
    archive = directory / f"{name}-{_digest(java, classpath)}{_SUFFIX}"
    # Java reports on archives on stdout, which tools print their answers on: writing one lists
    # every class it leaves out, and a mismatch would be a warning. Neither is the tool's.
    quiet = ("-Xlog:cds*=off",)
    if archive.exists():
        return ClassData((*quiet, f"-XX:SharedArchiveFile={archive}"), archive)
    if not write:
        return ClassData((), archive)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        _drop_abandoned(directory)
        if not _take_claim(archive):
            return ClassData(())  # another process's JVM is writing it: this one runs without
    except OSError:
        return ClassData(())
    writing = archive.with_name(f"{archive.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.part")
    return ClassData((*quiet, f"-XX:ArchiveClassesAtExit={writing}"), archive, writing)


def being_written(archive: Path) -> bool:
    """Whether a live process has claimed the writing of `archive`."""
    return pid_alive(_pid_in(_claim(archive)))


def _claim(archive: Path) -> Path:
    return archive.with_name(archive.name + ".claim")


def _take_claim(archive: Path) -> bool:
    """One writer at a time (writing a Spark driver's archive costs seconds at its exit): the
    claim names the process that will settle it, and a claim whose process is gone is taken
    over. Two writers are still safe, each writing a file of its own."""
    claim = _claim(archive)
    for _ in range(2):
        try:
            fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            if pid_alive(_pid_in(claim)):
                return False
            with contextlib.suppress(OSError):
                claim.unlink()
            continue
        with os.fdopen(fd, "w") as f:
            f.write(f"{os.getpid()}\n")
        return True
    return False


def _pid_in(claim: Path) -> int | None:
    try:
        return int(claim.read_text().strip() or "0") or None
    except (OSError, ValueError):
        return None


def _drop_abandoned(directory: Path, age_s: float = 3600) -> None:
    """Remove what a JVM wrote for a process that never settled it (that process ended first)."""
    now = time.time()
    for part in directory.glob(f"*{_SUFFIX}.*.part"):
        with contextlib.suppress(OSError):
            if now - part.stat().st_mtime > age_s:
                part.unlink()


def _family(archive: Path) -> str:
    """`kafka-tools` of `kafka-tools-<digest>.jsa`."""
    return archive.name.removesuffix(_SUFFIX).rsplit("-", 1)[0]


def _digest(java: str, classpath: Iterable[Path]) -> str:
    """What the archive depends on: the JVM build (its binary and libjvm) and each jar's name,
    size and modification time, in class-path order."""
    h = hashlib.sha256()
    binary = Path(java).resolve()
    home = binary.parent.parent
    for part in (binary, home / "lib" / "server" / "libjvm.so"):
        h.update(_stamp(part))
    for entry in classpath:
        jars = sorted(entry.glob("*.jar")) if entry.is_dir() else [entry]
        for jar in jars:
            h.update(_stamp(jar))
    return h.hexdigest()[:16]


def _stamp(path: Path) -> bytes:
    try:
        st = path.stat()
    except OSError:
        return f"{path}:missing\n".encode()
    return f"{path}:{st.st_size}:{st.st_mtime_ns}\n".encode()
