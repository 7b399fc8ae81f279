"""Every process a test run starts carries the run's mark in its environment (children inherit
it: brokers, stacks, Kafka's and Spark's JVMs, Chromium).  At the end of the run `leftovers`
finds those still alive, so that a fixture that leaks one fails the run instead of leaving it
behind, and `kill` stops them."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

__all__ = ["RUN_MARK", "interrupt_on_sigterm", "kill", "leftovers", "mark_run", "stop"]

RUN_MARK = "STREAMSHOP_TEST_RUN"


def mark_run() -> str:
    """The run's mark, set in this process's environment.  The workers of a parallel run keep
    their controller's; any other pytest, one a test starts among them, makes its own: with the
    inherited mark its end-of-run check would kill the outer run's processes (its workers)."""
    if os.environ.get("PYTEST_XDIST_WORKER") and RUN_MARK in os.environ:
        return os.environ[RUN_MARK]
    os.environ[RUN_MARK] = uuid.uuid4().hex
    return os.environ[RUN_MARK]


def interrupt_on_sigterm() -> None:
    """SIGTERM ends the run as Ctrl-C does: with KeyboardInterrupt, so that pytest still tears
    the fixtures down and the end-of-run check kills what they left.  By default SIGTERM ends
    the process at once, and the children started in sessions of their own (Kafka's JVMs, the
    brokers) outlive an interrupted run (a CI job cancelled, `timeout`, a terminal closed)."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)


def _marked(pid: int, needle: bytes) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:  # gone, or a zombie
        return False
    return needle in environ.split(b"\0")


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return "?"


def leftovers(mark: str, spare: set[int], settle: float = 10.0) -> dict[int, str]:
    """Processes carrying `mark` other than `spare` (this process and its ancestors), given
    `settle` seconds to finish exiting; pid -> command line."""
    needle = f"{RUN_MARK}={mark}".encode()
    deadline = time.monotonic() + settle
    while True:
        found = {
            pid: _command(pid)
            for pid in (int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit())
            if pid not in spare and _marked(pid, needle)
        }
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.2)


def stop(proc: subprocess.Popen[Any], grace: float = 60.0) -> None:
    """SIGTERM (the process's clean stop), SIGKILL if it is still running after `grace` s."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def kill(pids: set[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def ancestors() -> set[int]:
    """This process and every process above it."""
    out = set()
    pid = os.getpid()
    while pid > 1:
        out.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return out
