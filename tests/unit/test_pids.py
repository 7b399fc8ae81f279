"""kit.pids: a live process, a reaped one and a zombie, with real child processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from kit.pids import pid_alive


def test_a_running_child_is_alive_and_a_reaped_one_is_not() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert pid_alive(child.pid)
    finally:
        child.kill()
        child.wait()
    assert not pid_alive(child.pid)


def test_an_exited_child_its_parent_has_not_reaped_is_not_alive() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:  # exited, left unreaped
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert not pid_alive(child.pid)
    child.wait()


def test_what_is_not_a_pid_is_not_alive() -> None:
    assert not pid_alive(None)
    assert not pid_alive(0)
    assert not pid_alive("123")
