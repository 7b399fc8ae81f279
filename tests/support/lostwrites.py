"""Power loss, and fsyncs that fail and lose their pages, for a real broker process.

The broker runs with `lostwrites.c` preloaded: each successful fsync of a file under its data
directory copies the file to a shadow tree, which is what the device holds.  `power_loss()`
SIGKILLs the broker and resets every file to its shadow copy (emptied if never synced): all
that the OS had but no fsync covered is gone, as after a machine crash.  `fail_fsync()` makes
fsyncs fail with EIO and take no copy, as a failed writeback whose pages the kernel dropped.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from tests.support.harness import BrokerProcess

_SOURCE = Path(__file__).with_name("lostwrites.c")


def library(build_dir: Path) -> Path:
    """The shim, compiled with the machine's C compiler (once per content of the source)."""
    digest = hashlib.sha256(_SOURCE.read_bytes()).hexdigest()[:16]
    built = build_dir / f"lostwrites-{digest}.so"
    if not built.exists():
        build_dir.mkdir(parents=True, exist_ok=True)
        partial = built.with_suffix(f".{os.getpid()}.tmp")
        compiler = shutil.which("cc") or shutil.which("gcc") or "cc"
        subprocess.run(
            [compiler, "-shared", "-fPIC", "-O2", "-Wall", "-o", str(partial), str(_SOURCE), "-ldl"],
            check=True,
            capture_output=True,
            timeout=120,
        )
        partial.replace(built)
    return built


class Disk:
    """The device under one broker's data directory."""

    def __init__(self, proc: BrokerProcess, build_dir: Path) -> None:
        self.proc = proc
        self.data = proc.data_dir.resolve()
        self.data.mkdir(parents=True, exist_ok=True)
        self.shadow = self.data.parent / f"{self.data.name}.device"
        self.shadow.mkdir(exist_ok=True)
        self.lib = library(build_dir)

    def env(self) -> dict[str, str]:
        """What the broker process needs in its environment to run on this disk."""
        return {
            "LD_PRELOAD": str(self.lib),
            "LOSTWRITES_DIR": str(self.data),
            "LOSTWRITES_SHADOW": str(self.shadow),
        }

    def fail_fsync(self, failing: bool = True) -> None:
        flag = self.shadow / ".fail-fsync"
        if failing:
            flag.touch()
        else:
            flag.unlink(missing_ok=True)

    def power_loss(self) -> tuple[int, int]:
        """SIGKILL the broker, then drop every write no fsync covered.  Returns (files reset to
        their last synced content, files emptied because never synced)."""
        self.proc.kill()
        self.fail_fsync(False)
        reset = emptied = 0
        for path in self.data.rglob("*"):
            if not path.is_file():
                continue
            kept = self.shadow / path.relative_to(self.data)
            if kept.is_file():
                if kept.read_bytes() != path.read_bytes():
                    shutil.copyfile(kept, path)
                    reset += 1
            elif path.stat().st_size:
                os.truncate(path, 0)
                emptied += 1
        return reset, emptied
