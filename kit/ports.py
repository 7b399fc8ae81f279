"""Free loopback ports for a server another process will bind later (a Kafka node, PostgreSQL).

A port the kernel hands out for `bind(0)` comes from its ephemeral range, the range it also
draws every outgoing connection's local port from: between choosing it and the child binding
it (seconds, for a JVM on a busy host) any client connection may take it, and the child then
fails to start. Ports chosen below that range are only ever taken by an explicit bind.

Two processes choosing at once (two stacks, parallel test workers) could still pick the same
free port and the later bind would fail a minute on. So a chosen port is also reserved: a file
named after it, written under a lock in a directory every chooser of this user shares, which
other choosers skip until it is `RESERVED_FOR` seconds old. By then the server has bound the
port (and the bind check skips it) or has given up on it.
"""

from __future__ import annotations

import fcntl
import os
import random
import socket
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["RESERVED_FOR", "free_port", "free_ports"]

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# Above the registered ports most services listen on; below Linux's default ephemeral range.
_LOWEST = 20000
_DEFAULT_EPHEMERAL = (32768, 60999)
# Longer than the slowest start a chooser waits for (a JVM's, five minutes).
RESERVED_FOR = 600.0


def _candidates() -> range:
    try:
        low, _ = (int(v) for v in _RANGE_FILE.read_text().split())
    except (OSError, ValueError):
        low = _DEFAULT_EPHEMERAL[0]
    if low - _LOWEST >= 1000:
        return range(_LOWEST, low)
    # An ephemeral range that starts low leaves no room below it: above it, then.
    return range(max(_DEFAULT_EPHEMERAL[1] + 1, 61000), 65536)


def _reservations() -> Path:
    path = Path(tempfile.gettempdir()) / f"streamshop-ports-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def _reserve(directory: Path, host: str, port: int) -> bool:
    """Whether `port` on `host` is now ours: no other chooser reserved it within RESERVED_FOR.
    Called under the directory's lock."""
    entry = directory / f"{host}-{port}"
    try:
        if time.time() - entry.stat().st_mtime < RESERVED_FOR:
            return False
    except FileNotFoundError:
        pass
    entry.touch()  # an expired entry's time is renewed
    return True


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct ports on `host` that nothing listens on now and no other chooser picked
    in the last RESERVED_FOR seconds, outside the ephemeral range."""
    pool = _candidates()
    directory = _reservations()
    with (directory / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        return _choose(pool, directory, count, host)


def _choose(pool: Sequence[int], directory: Path, count: int, host: str) -> list[int]:
    chosen: list[int] = []
    for port in random.sample(pool, min(len(pool), 50 * count + 100)):
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue  # in use
        if not _reserve(directory, host, port):
            continue
        chosen.append(port)
        if len(chosen) == count:
            return chosen
    raise OSError(f"no {count} free ports on {host} in {min(pool)}-{max(pool)}")


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(1, host)[0]
