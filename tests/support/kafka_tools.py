"""Apache Kafka's own command-line tools (streamshop.kafka_tools) run to completion, as
clients of whichever broker a test runs."""

from __future__ import annotations

import subprocess

from streamshop import kafka_tools


def _run(name: str, args: tuple[str, ...], stdin: str | None, timeout: float) -> subprocess.CompletedProcess[str]:
    return kafka_tools.run(name, *args, stdin=stdin or "", timeout=timeout)


def run(name: str, *args: str, stdin: str | None = None, timeout: float = 120) -> str:
    """Run one tool (by its script name) and return its stdout; a failure shows the tool's own words."""
    done = _run(name, args, stdin, timeout)
    if done.returncode != 0:
        raise AssertionError(f"{name} {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def fails(name: str, *args: str, timeout: float = 120) -> str:
    """Run one tool that must exit non-zero; its stdout and stderr."""
    done = _run(name, args, None, timeout)
    assert done.returncode != 0, f"{name} {' '.join(args)} succeeded:\n{done.stdout}"
    return done.stdout + done.stderr
