"""Child processes that announce readiness with one stdout line (`streamshop broker`,
`streamshop registry`): start, wait for the line, stop cleanly.  Used by `streamshop roundtrip`."""

from __future__ import annotations

import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Generic, TypeVar

from streamshop.clients import CommandError

Ready = TypeVar("Ready")


class ChildProcess(Generic[Ready]):
    """A child whose stdout is drained by a thread; `ready` is what its ready line said."""

    def __init__(self, name: str, proc: subprocess.Popen[str], log_path: Path) -> None:
        self.name = name
        self.proc = proc
        self.log_path = log_path
        self._lines: queue.Queue[str | None] = queue.Queue()
        assert proc.stdout is not None
        threading.Thread(target=self._drain, args=(proc.stdout,), daemon=True, name=f"{name}-stdout").start()

    @classmethod
    def start(
        cls, name: str, cmd: list[str], log_path: Path, parse: Callable[[str], Ready | None], timeout: float = 60
    ) -> tuple[ChildProcess[Ready], Ready]:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("a") as log:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
        child: ChildProcess[Ready] = cls(name, proc, log_path)
        return child, child._wait_ready(parse, timeout)

    def _drain(self, stream: IO[str]) -> None:
        for line in stream:
            self._lines.put(line)
        self._lines.put(None)

    def _wait_ready(self, parse: Callable[[str], Ready | None], timeout: float) -> Ready:
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                line = self._lines.get(timeout=remaining)
            except queue.Empty:
                break
            if line is None:
                raise CommandError(f"the {self.name} exited with status {self.proc.wait()}; see {self.log_path}")
            ready = parse(line)
            if ready is not None:
                return ready
        self.stop()
        raise CommandError(f"the {self.name} did not report ready within {timeout:g} s; see {self.log_path}")

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM (a clean shutdown) and wait; SIGKILL if it hangs."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()
