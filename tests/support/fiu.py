"""libfiu (Debian's fiu-utils): real failures of libc calls in a real process.

`fiu-run -x` starts a program with libfiu's POSIX preload, whose wrappers of `fdatasync` and
other libc calls fail on demand (not `pwritev2`, which CPython's `os.pwritev` calls);
`fiu-ctrl` switches a failure point on or off in the running process through the named
pipes the preload opened for its pid.
"""

from __future__ import annotations

import errno
import shutil
import subprocess

import pytest

FDATASYNC = "posix/io/sync/fdatasync"


def fiu_run() -> list[str]:
    """The wrapper that runs a program under libfiu's POSIX preload (fails the test when absent:
    `make faults` installs it)."""
    if shutil.which("fiu-run") is None or shutil.which("fiu-ctrl") is None:
        pytest.fail("fiu-run/fiu-ctrl are missing: `make faults` installs Debian's fiu-utils")
    return ["fiu-run", "-x"]


def enable(pid: int, point: str, error: int = errno.EIO) -> None:
    """Every call through `point` in process `pid` fails with `error` from now on."""
    _ctrl(pid, f"enable name={point},failinfo={error}")


def disable(pid: int, point: str) -> None:
    _ctrl(pid, f"disable name={point}")


def _ctrl(pid: int, command: str) -> None:
    subprocess.run(["fiu-ctrl", "-c", command, str(pid)], check=True, timeout=30, capture_output=True)
