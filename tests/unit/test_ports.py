"""kit.ports: ports for a server another process binds later, chosen outside the range the
kernel draws connections' local ports from."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from kit import ports


def test_the_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    chosen = ports.free_ports(20)
    assert len(set(chosen)) == 20
    assert all(20000 <= p < low for p in chosen)
    for port in chosen:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_listening_port_is_never_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        monkeypatch.setattr(ports, "_candidates", lambda: range(busy, busy + 1))
        with pytest.raises(OSError, match=f"no 1 free ports on 127.0.0.1 in {busy}-{busy}"):
            ports.free_ports(1)


def test_a_port_another_process_chose_is_not_chosen_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two choosers at once (parallel stacks) get different ports even though neither binds
    its port yet: the first's reservation, in the shared temporary directory, holds it."""
    pool = ports.free_ports(2)  # two ports nothing listens on, for a pool of exactly those
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    low, high = sorted(pool)
    monkeypatch.setattr(ports, "_candidates", lambda: [low, high])
    code = f"from kit import ports; ports._candidates = lambda: [{low}, {high}]; print(ports.free_port())"
    first = int(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout)
    second = ports.free_port()
    assert {first, second} == {low, high}
    with pytest.raises(OSError, match="no 1 free ports"):
        ports.free_port()


def test_a_reservation_expires(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "_reservations", lambda: tmp_path)
    (port,) = ports.free_ports(1)
    monkeypatch.setattr(ports, "_candidates", lambda: [port])
    with pytest.raises(OSError):
        ports.free_port()
    old = time.time() - ports.RESERVED_FOR - 1
    os.utime(tmp_path / f"127.0.0.1-{port}", (old, old))
    assert ports.free_port() == port
