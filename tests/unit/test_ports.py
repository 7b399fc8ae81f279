"""kit.ports: ports for a server another process binds later, chosen outside the range the
kernel draws connections' local ports from."""

from __future__ import annotations

import socket
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
