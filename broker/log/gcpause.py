"""Hold off Python's cyclic garbage collector while a worker builds many short-lived objects.

A full collection walks every tracked object while holding the interpreter lock, so it stops
the event loop too; bulk work that only makes acyclic objects (decoded records, key maps)
does not need it, refcounting frees them.  Nested and concurrent users are counted: the
collector runs again once the last one is done.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class _Pause:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holders = 0
        self.restore = False  # whether the collector was on when the first holder came


_PAUSE = _Pause()


@contextmanager
def collector_paused() -> Iterator[None]:
    with _PAUSE.lock:
        if _PAUSE.holders == 0:
            _PAUSE.restore = gc.isenabled()
            gc.disable()
        _PAUSE.holders += 1
    try:
        yield
    finally:
        with _PAUSE.lock:
            _PAUSE.holders -= 1
            if _PAUSE.holders == 0 and _PAUSE.restore:
                gc.enable()
