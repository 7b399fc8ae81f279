"""Group commit: one fsync round serves every acks=all request that arrived before it.

Requests append on the event loop (the bytes reach the OS immediately), then await
`sync(logs)`.  A single task takes all pending segments, fsyncs them in a worker thread
while the loop keeps appending, and wakes every waiter of that round.  Throughput stays
high because concurrent producers share fsyncs instead of queuing for one each.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:
    from broker.log.partition_log import PartitionLog

log = structlog.get_logger(__name__)


class Flusher:
    def __init__(self) -> None:
        self._pending_fds: dict[int, int] = {}  # id(segment) -> dup'ed fd
        self._pending_dirs: set[Path] = set()
        self._waiters: list[asyncio.Future[None]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.rounds = 0
        self.fsyncs = 0
        self.seconds = 0.0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="flusher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        for fd in self._pending_fds.values():
            os.close(fd)
        self._pending_fds.clear()

    def _collect(self, logs: Iterable[PartitionLog]) -> None:
        for plog in logs:
            for segment in plog.dirty_segments():
                # dup() so a segment closed by retention mid-flush cannot hand its fd
                # number to another file under the worker thread.
                if id(segment) not in self._pending_fds:
                    self._pending_fds[id(segment)] = os.dup(segment.fd)
                segment.dirty = False
            if plog.dir_dirty:
                self._pending_dirs.add(plog.directory)
                self._pending_dirs.add(plog.directory.parent)
                plog.dir_dirty = False

    async def sync(self, logs: Iterable[PartitionLog]) -> None:
        """Return once everything appended to `logs` so far is on disk."""
        self._collect(logs)
        if not self._pending_fds and not self._pending_dirs:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        self._wake.set()
        await future

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            fds, self._pending_fds = list(self._pending_fds.values()), {}
            dirs, self._pending_dirs = list(self._pending_dirs), set()
            waiters, self._waiters = self._waiters, []
            started = time.perf_counter()
            try:
                await asyncio.to_thread(_fsync_all, fds, dirs)
            except OSError as e:
                log.error("fsync failed", error=str(e))
                for w in waiters:
                    if not w.done():
                        w.set_exception(e)
                continue
            self.rounds += 1
            self.fsyncs += len(fds)
            self.seconds += time.perf_counter() - started
            for w in waiters:
                if not w.done():
                    w.set_result(None)


def _fsync_all(fds: list[int], dirs: list[Path]) -> None:
    try:
        for fd in fds:
            os.fdatasync(fd)
        for directory in dirs:
            try:
                dfd = os.open(directory, os.O_RDONLY)
            except FileNotFoundError:
                continue  # deleted meanwhile: nothing left to make durable
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
    finally:
        for fd in fds:
            os.close(fd)
