"""`streamshop up --ephemeral-ports` as a real process tree for tests: `running_stack()` starts it
in a directory and yields a `Stack` (its stack.json, child lookups, waits); on exit it kills
whatever is left, so a failed test leaves no process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support import processes
from tests.support.harness import REPO

__all__ = ["Stack", "alive", "http", "running_stack"]


@dataclass
class Stack:
    proc: subprocess.Popen[bytes]
    data: Path
    output: Path
    pids: set[int] = field(default_factory=set)  # every child pid seen, for the final checks
    kafka: Any = None  # the Apache Kafka cluster (streamshop.kafka_cluster.Cluster) it runs on, if any

    def document(self) -> dict[str, Any]:
        document: dict[str, Any] = json.loads((self.data / "stack.json").read_text())
        self.pids.update(c["pid"] for c in document["children"].values() if c["pid"])
        return document

    def child(self, name: str) -> dict[str, Any]:
        child: dict[str, Any] = self.document()["children"][name]
        return child

    def wait_for(self, what: str, check: Callable[[dict[str, Any]], bool], within: float) -> dict[str, Any]:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if (self.data / "stack.json").exists():
                document = self.document()
                if check(document):
                    return document
            assert self.proc.poll() is None, f"up exited ({self.proc.returncode}):\n{self.output.read_text()[-5000:]}"
            time.sleep(0.1)
        raise AssertionError(f"no {what} within {within} s:\n{self.output.read_text()[-5000:]}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def http(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


@contextmanager
def running_stack(
    data: Path,
    env: Mapping[str, str] | None = None,
    within: float = 300,
    without: Sequence[str] = ("analytics",),
    bootstrap: str | None = None,
    *,
    secure: bool = False,
    args: Sequence[str] = (),
) -> Iterator[Stack]:
    """`streamshop up --ephemeral-ports --data-dir data --without ...`, running; its output goes to
    a file beside `data`.  Spark is left out unless asked for: its JVM would cost every stack
    test twenty seconds of both cores.  `bootstrap`: on that Kafka cluster (`up --bootstrap`);
    `secure`: `up --secure`; `args`: more options of `up`."""
    output = data.parent / f"{data.name}-up.out"
    with output.open("wb") as out:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "streamshop.cli", "up", "--ephemeral-ports", "--data-dir", str(data)),
                # Beside the suite's JVMs on a slow host a service has taken over a minute to be ready.
                *("--start-timeout", "240"),
                *(arg for child in without for arg in ("--without", child)),
                *(("--bootstrap", bootstrap) if bootstrap else ()),
                *(("--secure",) if secure else ()),
                *args,
            ],
            cwd=REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    running = Stack(proc, data, output)
    try:
        # The stack serves before the analytics job is ready (it is optional): the tests that
        # look at what the job does wait for it themselves, meanwhile the others run. The bound
        # only ends a stack that hangs: idle, one is ready in ~5 s; beside the suite's JVMs on
        # 2 cores, its children have taken 10-20 s each.
        running.wait_for("running stack", lambda d: d["state"] == "running", within=within)
        yield running
    finally:
        # A clean stop first: each child stops its own processes (the analytics job its JVM,
        # which stops the Python processes Spark started); SIGKILL only what hangs.
        processes.stop(proc)
        running.document()  # the children's latest pids (a restart changes them)
        for pid in running.pids:  # only after a failure or a kill: a clean stop leaves none
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
