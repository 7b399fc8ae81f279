"""Whether a process id names a live process (a pid file's, a claim file's)."""

from __future__ import annotations

import os

__all__ = ["pid_alive"]


def pid_alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True
