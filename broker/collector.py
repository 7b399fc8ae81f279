"""Python's cyclic garbage collector held back while large requests are in flight.

A request of 100,000 entries decodes into several hundred thousand objects that live until it
is answered.  They survive the young generations, and the collector then runs full passes over
the whole heap while the request is served: 150 to 200 ms each, with the interpreter lock held,
so every client waits, several times per request.  Those objects form no reference cycles
(kio's entities are immutable trees) and reference counting frees them once the answer is
encoded, so the collector is disabled from the first large request's start to the last one's
end.  Cyclic garbage made meanwhile waits: if large requests keep it disabled for longer than
`MAX_PAUSE`, the next large request to start runs one full collection first, so a client that
sends nothing but large requests cannot make garbage pile up without bound.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager

MAX_PAUSE = 10.0  # seconds the collector may stay held back before a full collection runs


class CollectorPause:
    """Counts large requests in flight; the collector is off while there is one."""

    def __init__(self, max_pause: float = MAX_PAUSE) -> None:
        self.max_pause = max_pause
        self.in_flight = 0
        self.forced = 0  # full collections run because the pause lasted too long
        self._since = 0.0
        self._ours = False  # whether this pause disabled the collector (not someone else)

    @contextmanager
    def held(self) -> Iterator[None]:
        self._enter()
        try:
            yield
        finally:
            self._leave()

    def _enter(self) -> None:
        now = time.monotonic()
        if self.in_flight == 0:
            self._ours = gc.isenabled()
            gc.disable()
            self._since = now
        elif self._ours and now - self._since > self.max_pause:
            gc.collect()
            self.forced += 1
            self._since = now
        self.in_flight += 1

    def _leave(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0 and self._ours:
            gc.enable()
