"""kit.pids: a live process, a reaped one and a zombie, with real child processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from kit.pids import StartedProcesses, pid_alive


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


def test_started_processes_reaps_a_child_once_it_has_ended_and_looks_up_any_other_pid() -> None:
    started = StartedProcesses()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    started.add(child)
    try:
        assert started.alive(child.pid)
        os.kill(child.pid, 9)  # ended by someone else: left for this process to reap
        deadline = time.monotonic() + 30
        while started.alive(child.pid):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert child.returncode == -9  # its exit status collected, so no zombie is left
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert started.alive(os.getpid())  # not a child of its own: looked up
    assert not started.alive(None)


def test_reap_collects_every_ended_child() -> None:
    started = StartedProcesses()
    children = [subprocess.Popen([sys.executable, "-c", "pass"]) for _ in range(3)]
    for child in children:
        started.add(child)
    deadline = time.monotonic() + 30
    while any(child.returncode is None for child in children):
        assert time.monotonic() < deadline
        started.reap()
        time.sleep(0.01)
    assert [child.returncode for child in children] == [0, 0, 0]
