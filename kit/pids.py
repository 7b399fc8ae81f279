"""Whether a process id names a live process (a pid file's, a claim file's)."""

from __future__ import annotations

import os

__all__ = ["pid_alive"]


def pid_alive(pid: object) -> bool:
    """A zombie (exited, not yet reaped by its parent) is not alive: it holds no port or file, and
    only its parent can make it go away."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False  # no /proc (or gone meanwhile): kill(0) is all there is
    # pid (comm) state ...: comm may hold spaces and parentheses, the state follows the last ')'.
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] == b"Z"
