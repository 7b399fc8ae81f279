"""Free loopback ports for a server another process will bind later (a Kafka node, PostgreSQL).

A port the kernel hands out for `bind(0)` comes from its ephemeral range, the range it also
draws every outgoing connection's local port from: between choosing it and the child binding
it (seconds, for a JVM on a busy host) any client connection may take it, and the child then
fails to start. Ports chosen below that range are only ever taken by an explicit bind.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["free_port", "free_ports"]

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# Above the registered ports most services listen on; below Linux's default ephemeral range.
_LOWEST = 20000
_DEFAULT_EPHEMERAL = (32768, 60999)


def _candidates() -> range:
    try:
        low, _ = (int(v) for v in _RANGE_FILE.read_text().split())
    except (OSError, ValueError):
        low = _DEFAULT_EPHEMERAL[0]
    if low - _LOWEST >= 1000:
        return range(_LOWEST, low)
    # An ephemeral range that starts low leaves no room below it: above it, then.
    return range(max(_DEFAULT_EPHEMERAL[1] + 1, 61000), 65536)


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct ports on `host` that nothing listens on now, outside the ephemeral range."""
    pool = _candidates()
    chosen: list[int] = []
    for port in random.sample(pool, min(len(pool), 50 * count + 100)):
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue  # in use
        chosen.append(port)
        if len(chosen) == count:
            return chosen
    raise OSError(f"no {count} free ports on {host} in {pool.start}-{pool.stop - 1}")


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(1, host)[0]
