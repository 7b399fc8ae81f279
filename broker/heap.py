"""Giving freed heap memory back to the OS after a burst of closed connections.

Python frees a connection's buffers, SSL object and answer chunks when its client leaves, but
glibc's malloc keeps the freed pages for reuse: after 1,000 slow TLS readers left, the broker's
resident memory stayed about 180 MiB above where it started although the objects were gone
(tracemalloc back to where it was).  `malloc_trim(0)` returns free pages from anywhere in the
heap, not only its top.  It walks the heap, so it runs once many connections have closed, at
most once per sweep (a second); elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

CLOSES_PER_TRIM = 100  # connections closed since the last trim before the next one


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


class HeapTrimmer:
    """Counts closed connections; `maybe_trim` trims once `CLOSES_PER_TRIM` have closed."""

    def __init__(self, closes_per_trim: int = CLOSES_PER_TRIM) -> None:
        self.closes_per_trim = closes_per_trim
        self.closed = 0
        self.trims = 0
        self._trim = _malloc_trim()

    def connection_closed(self) -> None:
        self.closed += 1

    def maybe_trim(self) -> bool:
        if self.closed < self.closes_per_trim or self._trim is None:
            return False
        self.closed = 0
        self._trim(0)
        self.trims += 1
        return True
