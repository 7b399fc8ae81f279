"""Group commit: one fsync round serves every acks=all request that arrived before it.

Requests append on the event loop (the bytes reach the OS at once), then await
`sync(logs)`.  Each segment counts its appends (`write_seq`) and remembers how far an
fsync has covered (`durable_seq`).  A waiter records the write_seq of every segment it
touched and is released once each one's durable_seq has caught up.  A single task runs
rounds: it captures the write_seq of every pending segment, fsyncs them in a worker
thread while the loop keeps appending, then advances durable_seq and wakes whoever is
covered.  Concurrent producers share rounds instead of queuing for one fsync each, and a
request whose bytes landed just after a round started simply waits for the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:
    from broker.log.partition_log import PartitionLog
    from broker.log.segment import LogSegment

log = structlog.get_logger(__name__)

_ROUND_FILES = 256


class _Waiter:
    __slots__ = ("future", "targets")

    def __init__(self, future: asyncio.Future[None], targets: list[tuple[LogSegment, int]]) -> None:
        self.future = future
        self.targets = targets

    def covered(self) -> bool:
        return all(seg.durable_seq >= seq or seg.closed for seg, seq in self.targets)


class Flusher:
    def __init__(self, on_round: Callable[[int, float], None] | None = None) -> None:
        self._on_round = on_round  # metrics hook: (files synced, seconds)
        self._pending: dict[int, LogSegment] = {}
        self._waiters: list[_Waiter] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="fsync")
        self.rounds = 0
        self.fsyncs = 0
        self.seconds = 0.0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="flusher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._pool.shutdown(wait=True)

    async def sync(self, logs: Iterable[PartitionLog]) -> None:
        """Return once everything appended to `logs` so far is on disk."""
        targets = []
        for plog in logs:
            for segment in plog.segments:
                if segment.durable_seq < segment.write_seq and not segment.closed:
                    targets.append((segment, segment.write_seq))
                    self._pending[id(segment)] = segment
        if not targets:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(_Waiter(future, targets))
        self._wake.set()
        await future

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            # A round takes at most _ROUND_FILES segments: each needs a descriptor of its own.
            pending = iter(self._pending.items())
            taken = dict(itertools.islice(pending, _ROUND_FILES))
            self._pending = dict(pending)
            # Capture how far each segment has been written, and dup() its fd so a
            # segment closed by retention (or its descriptor evicted) mid-round cannot hand
            # its fd number to another file under the worker thread.
            work = [(seg, seg.write_seq, seg.dup_fd()) for seg in taken.values() if not seg.closed]
            started = time.perf_counter()
            try:
                await self._fsync_all([fd for _, _, fd in work])
            except OSError as e:
                log.exception("fsync failed", error=str(e))
                self._fail(e)
                continue
            for seg, seq, _ in work:
                seg.durable_seq = max(seg.durable_seq, seq)
            elapsed = time.perf_counter() - started
            self.rounds += 1
            self.fsyncs += len(work)
            self.seconds += elapsed
            if self._on_round is not None:
                self._on_round(len(work), elapsed)
            still_waiting = []
            for waiter in self._waiters:
                if waiter.future.done():
                    continue
                if waiter.covered():
                    waiter.future.set_result(None)
                else:
                    still_waiting.append(waiter)
                    for seg, _ in waiter.targets:
                        if seg.durable_seq < seg.write_seq and not seg.closed:
                            self._pending[id(seg)] = seg
            self._waiters = still_waiting
            if self._pending:
                self._wake.set()

    async def _fsync_all(self, fds: list[int]) -> None:
        """fdatasync every file on its own thread: the disk serves them concurrently
        (measured: a round over 6 files took a median 0.8-6 ms instead of 6-15 ms)."""
        loop = asyncio.get_running_loop()
        try:
            results = await asyncio.gather(
                *(loop.run_in_executor(self._pool, os.fdatasync, fd) for fd in fds), return_exceptions=True
            )
        finally:
            for fd in fds:
                os.close(fd)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    def _fail(self, error: OSError) -> None:
        for waiter in self._waiters:
            if not waiter.future.done():
                waiter.future.set_exception(error)
        self._waiters = []
