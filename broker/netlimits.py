"""Limits shared by every client connection, with Kafka's names.

- `queued.max.request.bytes`: memory for requests being read.  Each connection reads into a
  small base buffer; growing it for a larger request draws on this pool.  As in Kafka's
  network memory pool, a reservation succeeds while the pool is not used up (so one request
  of `socket.request.max.bytes` always fits), and a connection that cannot grow stops
  reading until memory is released.
- `queued.max.response.bytes`: memory for responses not yet sent: queued, or handed to a
  transport whose client has not taken them.  Record data is not in it: a Fetch answer larger
  than a few KiB is read from its segment file as the socket drains, a chunk at a time, and the
  chunk shrinks to `MIN_CHUNK` while the pool is used up.  While it is, a connection that still
  holds a response stops reading requests until that one is sent, so the pool is exceeded by
  at most one response and one chunk per connection.
- `max.connections`, `max.connections.per.ip` and `.overrides`: counted on accept.
- Warnings about hostile clients are rate-limited: one bad client must not fill the log.
"""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Callable, Mapping
from typing import Any

CHUNK = 256 * 1024  # bytes of a streamed file read per step while the response pool has room
MIN_CHUNK = 16 * 1024  # ... and once it is used up


class MemoryPool:
    """A byte budget shared by every connection (<= 0 capacity: unbounded)."""

    def __init__(self, capacity: int, on_change: Callable[[int], None] | None = None) -> None:
        self.capacity = capacity  # <= 0: unbounded
        self.used = 0
        self._on_change = on_change
        self._waiting: collections.deque[Callable[[], None]] = collections.deque()

    @property
    def exhausted(self) -> bool:
        return 0 < self.capacity <= self.used

    def chunk(self) -> int:
        """How much of a streamed file to read next."""
        if self.capacity <= 0:
            return CHUNK
        return max(MIN_CHUNK, min(CHUNK, self.capacity - self.used))

    def reserve(self, n: int) -> bool:
        if self.capacity > 0 and self.used >= self.capacity:
            return False
        self.used += n
        self._changed()
        return True

    def take(self, n: int) -> None:
        """Reserve even when used up (a bounded amount the caller cannot wait for)."""
        self.used += n
        self._changed()

    def release(self, n: int) -> None:
        self.used -= n
        self._changed()
        # Wake waiters while memory is left; each one reserves what it needs (or waits again).
        while self._waiting and (self.capacity <= 0 or self.used < self.capacity):
            self._waiting.popleft()()

    def wait(self, callback: Callable[[], None]) -> None:
        self._waiting.append(callback)

    def forget(self, callback: Callable[[], None]) -> None:
        with contextlib.suppress(ValueError):
            self._waiting.remove(callback)

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(self.used)


class ConnectionCounts:
    """Open connections in total and per client address."""

    def __init__(self, max_total: int, max_per_ip: int, overrides: Mapping[str, int]) -> None:
        self.max_total = max_total
        self.max_per_ip = max_per_ip
        self.overrides = overrides
        self.total = 0
        self.by_host: collections.Counter[str] = collections.Counter()

    def admit(self, host: str) -> str | None:
        """Count a new connection, or say why it is refused."""
        if self.total >= self.max_total:
            return "max.connections"
        if self.by_host[host] >= self.overrides.get(host, self.max_per_ip):
            return "max.connections.per.ip"
        self.total += 1
        self.by_host[host] += 1
        return None

    def release(self, host: str) -> None:
        self.total -= 1
        self.by_host[host] -= 1
        if self.by_host[host] <= 0:
            del self.by_host[host]


class ThrottledLog:
    """At most `burst` lines per `interval` seconds for one kind of event; the rest are
    counted and reported in one line when the next interval starts."""

    def __init__(self, logger: Any, burst: int = 20, interval: float = 10.0) -> None:
        self._log = logger
        self._burst = burst
        self._interval = interval
        self._window = 0.0
        self._count = 0
        self._suppressed: collections.Counter[str] = collections.Counter()

    def warning(self, event: str, **fields: Any) -> None:
        now = time.monotonic()
        if now - self._window >= self._interval:
            for kind, count in self._suppressed.items():
                self._log.warning("similar warnings suppressed", event_kind=kind, count=count)
            self._suppressed.clear()
            self._window = now
            self._count = 0
        if self._count < self._burst:
            self._count += 1
            self._log.warning(event, **fields)
        else:
            self._suppressed[event] += 1
