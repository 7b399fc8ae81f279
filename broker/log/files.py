"""A bounded cache of open segment files.

Kafka keeps every segment open and asks for a high descriptor limit; a broker with many
partitions then fails with EMFILE, at creation or on every later start.  Here a segment's
file is opened when it is used and closed again when more than `capacity` are open, least
recently used first, so the number of partitions is bounded by disk, not by `ulimit -n`.

A descriptor is pinned while it is used (`with FILES.use(segment) as fd`): the cache is
shared by the event loop and the worker threads, and an evicted descriptor's number can be
reused by the next `open`, so only unpinned files are ever closed.
"""

from __future__ import annotations

import os
import resource
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

DEFAULT_CAPACITY = 1000


class CachedFile(Protocol):
    log_path: Path
    _fd: int
    _pins: int


def capacity_for(setting: int) -> int:
    """The configured capacity, but never more than half the soft descriptor limit:
    sockets, indexes being written and fsync duplicates need the rest."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return max(setting, 16)
    return max(16, min(setting, soft // 2))


class OpenFiles:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        self._lru: OrderedDict[int, CachedFile] = OrderedDict()
        self.opened = 0  # files opened so far (a miss each)
        self.evicted = 0

    def configure(self, capacity: int) -> None:
        with self._lock:
            self.capacity = max(1, capacity)
            self._evict()

    def open_count(self) -> int:
        return len(self._lru)

    @contextmanager
    def use(self, file: CachedFile) -> Iterator[int]:
        with self._lock:
            fd = file._fd
            if fd < 0:
                fd = os.open(file.log_path, os.O_RDWR | os.O_CREAT, 0o644)
                file._fd = fd
                self._lru[id(file)] = file
                self.opened += 1
                file._pins += 1
                self._evict()
            else:
                self._lru.move_to_end(id(file))
                file._pins += 1
        try:
            yield fd
        finally:
            with self._lock:
                file._pins -= 1

    def release(self, file: CachedFile) -> None:
        """Close `file` now (segment closed or deleted); it must not be in use."""
        with self._lock:
            if file._fd >= 0:
                self._lru.pop(id(file), None)
                os.close(file._fd)
                file._fd = -1

    def _evict(self) -> None:
        if len(self._lru) <= self.capacity:
            return
        for key in list(self._lru):
            if len(self._lru) <= self.capacity:
                return
            victim = self._lru[key]
            if victim._pins:
                continue  # in use: over capacity briefly rather than close it under a reader
            del self._lru[key]
            os.close(victim._fd)
            victim._fd = -1
            self.evicted += 1


# One cache per process: the descriptor limit is the process's.
FILES = OpenFiles()
