"""The compaction process's lifecycle: a build given up on (cancelled, as when the broker stops
mid-pass) kills the child, and `stop` reaps it and closes its pipes, so the broker's loop closes
with nothing left open (uvloop refuses to close a loop with a live handle: EBUSY)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
import uvloop

from broker.log.cleaner import BuildSpec
from broker.log.cleaner_worker import CleanerProcess


def _spec(directory: Path, paths: list[Path]) -> BuildSpec:
    n = len(paths)
    return BuildSpec(
        directory=directory,
        paths=paths,
        base_offsets=[0] * n,
        next_offsets=[0] * n,
        max_timestamps=[0] * n,
        now=0,
        delete_retention_ms=0,
        segment_bytes=1 << 20,
        index_interval_bytes=4096,
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_build_cancelled_midway_leaves_no_child_and_no_pipe_after_stop(tmp_path: Path) -> None:
    # A FIFO nobody writes: the child blocks opening it, so the build is surely under way when cancelled.
    fifo = tmp_path / "00000000000000000000.log"
    os.mkfifo(fifo)
    loop = uvloop.new_event_loop()

    async def body() -> int:
        cleaner = CleanerProcess()
        built = await cleaner.build(_spec(tmp_path, []))  # the child is up and answering
        assert built.groups == []
        stuck = asyncio.ensure_future(cleaner.build(_spec(tmp_path, [fifo])))
        await asyncio.sleep(0.2)
        assert not stuck.done()
        pid = cleaner._proc.pid if cleaner._proc is not None else -1
        stuck.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stuck
        await cleaner.stop()
        return pid

    try:
        pid = loop.run_until_complete(body())
    finally:
        loop.close()  # raises OSError(EBUSY) if a process or pipe handle were left open
    assert pid > 0
    assert not _alive(pid)
