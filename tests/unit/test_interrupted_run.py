"""A run ended by SIGTERM (a cancelled CI job, `timeout`) still stops what its fixtures started:
a process in a session of its own, as Kafka's JVMs and the brokers are, is not left behind."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.harness import REPO

_INNER = """
import os, subprocess, time
from pathlib import Path
import pytest

@pytest.fixture(scope="session")
def child():
    proc = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()

def test_waits(child):
    Path(os.environ["CHILD_PID_FILE"]).write_text(str(child.pid))
    time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow  # a pytest run of its own started, then ended by SIGTERM
def test_a_sigterm_to_the_run_tears_its_session_fixtures_down(tmp_path: Path) -> None:
    (tmp_path / "test_inner.py").write_text(_INNER)
    pid_file = tmp_path / "child.pid"
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"}
    env |= {"CHILD_PID_FILE": str(pid_file), "PYTHONPATH": str(REPO)}
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest", "test_inner.py"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    child = 0
    sibling = subprocess.Popen(["sleep", "600"], start_new_session=True)  # carries this run's mark
    try:
        while not pid_file.exists() or not pid_file.read_text():
            assert run.poll() is None, run.communicate()[0]
            time.sleep(0.05)
        child = int(pid_file.read_text())
        assert _alive(child)

        run.send_signal(signal.SIGTERM)
        output = run.communicate(timeout=120)[0]

        assert not _alive(child), output
        assert "KeyboardInterrupt" in output
        # The inner run marked its processes with a mark of its own: its end-of-run check spared
        # this run's (with the inherited mark it killed the other workers of a parallel run).
        assert _alive(sibling.pid), output
    finally:
        sibling.kill()
        sibling.wait()
        if run.poll() is None:
            run.kill()
            run.wait()
        if child and _alive(child):
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
