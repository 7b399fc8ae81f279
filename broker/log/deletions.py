"""file.delete.delay.ms: a segment the log no longer holds (retention, DeleteRecords, a
compacted replacement) is renamed `*.deleted` at once and removed that much later, as in
Kafka, so that a Fetch answering from it (a region of the file sent as the client's socket
drains) still finds its bytes.  One queue per broker, reaped by a background task."""

from __future__ import annotations

import heapq
import itertools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.log.segment import LogSegment


class DeferredDeletes:
    def __init__(self) -> None:
        self._due: list[tuple[int, int, LogSegment]] = []
        self._order = itertools.count()  # ties in due time never compare segments

    def __len__(self) -> int:
        return len(self._due)

    def add(self, segment: LogSegment, due_ms: int) -> None:
        heapq.heappush(self._due, (due_ms, next(self._order), segment))

    def reap(self, now_ms: int) -> int:
        """Remove the files of every segment due by `now_ms`; how many segments."""
        reaped = 0
        while self._due and self._due[0][0] <= now_ms:
            _, _, segment = heapq.heappop(self._due)
            segment.delete()
            reaped += 1
        return reaped
