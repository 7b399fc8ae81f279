"""Whether a process id names a live process (a pid file's, a claim file's), and the processes
this one started, kept until they are reaped."""

from __future__ import annotations

import os
import subprocess
from typing import Any

__all__ = ["StartedProcesses", "pid_alive"]


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


class StartedProcesses:
    """The child processes a process started (a cluster's JVMs, say), each Popen kept until its
    exit is collected: a Popen dropped while its process runs warns, its exit status is lost,
    and an exited child stays a zombie until reaped."""

    def __init__(self) -> None:
        self._procs: dict[int, subprocess.Popen[Any]] = {}

    def add(self, proc: subprocess.Popen[Any]) -> None:
        self._procs[proc.pid] = proc

    def alive(self, pid: int | None) -> bool:
        """Whether `pid` runs: a child of this process is asked (and reaped once it has
        exited), any other process looked up."""
        if pid is None:
            return False
        child = self._procs.get(pid)
        if child is None:
            return pid_alive(pid)
        if child.poll() is None:
            return True
        del self._procs[pid]
        return False

    def reap(self) -> None:
        """Collect the exit status of every child that has ended (killed by another process,
        say)."""
        for pid in list(self._procs):
            self.alive(pid)
