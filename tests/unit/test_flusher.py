"""Group commit: a waiter is released only when every byte it appended is fsynced."""

from __future__ import annotations

import asyncio
import errno
import os
import random
import threading
import time
from pathlib import Path

import pytest

from broker.clock import ManualClock
from broker.config import BrokerConfig, LogConfig
from broker.log.flusher import Flusher
from broker.log.log_dir import LogDir, LogDirOffline
from broker.log.partition_log import PartitionLog
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import Record, build_batch


def _log(path: Path, clock: ManualClock, log_dir: LogDir | None = None) -> PartitionLog:
    defaults = BrokerConfig(data_dir=path).topic_defaults()
    config = LogConfig.from_strings({**defaults, "segment.bytes": "4096"})
    return PartitionLog(path, "t", 0, config, clock, recover=False, log_dir=log_dir)


async def test_every_waiter_is_released_only_after_its_appends_are_durable(tmp_path: Path) -> None:
    clock = ManualClock()
    logs = [_log(tmp_path / f"p{i}", clock) for i in range(3)]
    flusher = Flusher()
    flusher.start()
    violations: list[str] = []

    async def producer(worker: int) -> None:
        rng = random.Random(worker)
        for i in range(40):
            plog = rng.choice(logs)
            plog.append(build_batch([Record(0, clock.now_ms(), b"k", f"{worker}-{i}".encode())]))
            wanted = [(seg, seg.write_seq) for seg in plog.segments if seg.write_seq]
            await flusher.sync([plog])
            for seg, seq in wanted:
                if seg.durable_seq < seq and not seg.closed:
                    violations.append(f"worker {worker} released before fsync of segment {seg.base_offset}")
            if rng.random() < 0.3:
                await asyncio.sleep(0)

    try:
        await asyncio.gather(*(producer(w) for w in range(8)))
    finally:
        await flusher.stop()
    assert violations == []
    # Rounds are shared: far fewer rounds than the 320 acks=all appends.
    assert 0 < flusher.rounds < 320
    for plog in logs:
        assert all(not seg.dirty for seg in plog.segments)
        plog.close(clean=True)


async def test_sync_with_nothing_written_returns_at_once(tmp_path: Path) -> None:
    plog = _log(tmp_path / "p", ManualClock())
    flusher = Flusher()
    flusher.start()
    try:
        await asyncio.wait_for(flusher.sync([plog]), 1)
        assert flusher.rounds == 0
    finally:
        await flusher.stop()
        plog.close(clean=True)


async def test_a_failed_fsync_takes_the_directory_offline_and_nothing_after_it_is_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a failed fdatasync the kernel may have dropped the pages it could not write, so a
    later fsync that succeeds proves nothing about them: nothing is retried or acknowledged."""
    clock = ManualClock()
    log_dir = LogDir(tmp_path)
    plog = _log(tmp_path / "p", clock, log_dir)
    flusher = Flusher(log_dir=log_dir)
    flusher.start()
    real = os.fdatasync

    def broken(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    try:
        monkeypatch.setattr(os, "fdatasync", broken)
        plog.append(build_batch([Record(0, clock.now_ms(), b"k", b"lost")]))
        with pytest.raises(LogDirOffline, match="Input/output error"):
            await asyncio.wait_for(flusher.sync([plog]), 5)
        assert log_dir.offline
        monkeypatch.setattr(os, "fdatasync", real)  # the disk "works" again: it changes nothing
        with pytest.raises(KafkaError) as refused:
            plog.append(build_batch([Record(0, clock.now_ms(), b"k", b"retry")]))
        assert refused.value.code == ErrorCode.kafka_storage_error
        with pytest.raises(LogDirOffline):
            plog.append_internal(build_batch([Record(0, clock.now_ms(), b"k", b"internal")]))
        with pytest.raises(LogDirOffline):
            await asyncio.wait_for(flusher.sync([plog]), 5)
        with pytest.raises(KafkaError) as unread:
            plog.read_for_fetch(0, 1 << 20)
        assert unread.value.code == ErrorCode.kafka_storage_error
        assert plog.segments[-1].dirty  # never declared durable
        assert flusher.rounds == 0
    finally:
        await flusher.stop()
        plog.close(clean=True)


async def test_a_waiter_is_failed_when_a_write_elsewhere_takes_the_directory_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round in flight finishes for what it covered; whoever waits for the next one is
    failed at once instead of waiting for a round that will never run."""
    clock = ManualClock()
    log_dir = LogDir(tmp_path)
    first, second = _log(tmp_path / "a", clock, log_dir), _log(tmp_path / "b", clock, log_dir)
    flusher = Flusher(log_dir=log_dir)
    flusher.start()
    real = os.fdatasync
    started, go_on = threading.Event(), threading.Event()

    def held(fd: int) -> None:
        started.set()
        go_on.wait(5)
        real(fd)

    try:
        monkeypatch.setattr(os, "fdatasync", held)
        first.append(build_batch([Record(0, clock.now_ms(), b"k", b"a")]))
        covered = asyncio.ensure_future(flusher.sync([first]))
        assert await asyncio.to_thread(started.wait, 5)
        second.append(build_batch([Record(0, clock.now_ms(), b"k", b"b")]))
        waiting = asyncio.ensure_future(flusher.sync([second]))  # due in the next round
        await asyncio.sleep(0)
        log_dir.fail(OSError(errno.EIO, "Input/output error"), "write")
        go_on.set()
        await asyncio.wait_for(covered, 5)  # its fsync succeeded before the failure was known
        with pytest.raises(LogDirOffline):
            await asyncio.wait_for(waiting, 5)
        assert second.segments[-1].dirty
    finally:
        go_on.set()
        await flusher.stop()
        first.close(clean=True)
        second.close(clean=True)


def test_a_write_refused_for_room_leaves_the_directory_online(tmp_path: Path) -> None:
    log_dir = LogDir(tmp_path)
    assert not log_dir.failed_write(OSError(errno.ENOSPC, "No space left on device"), "write")
    assert not log_dir.failed_write(OSError(errno.EFBIG, "File too large"), "write")
    assert not log_dir.offline
    assert log_dir.failed_write(OSError(errno.EIO, "Input/output error"), "write")
    assert log_dir.offline
    assert "write: Input/output error" in (log_dir.error or "")


async def test_stop_waits_for_the_round_in_flight(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = ManualClock()
    plog = _log(tmp_path / "p", clock)
    flusher = Flusher()
    flusher.start()
    real = os.fdatasync
    started = threading.Event()

    def slow(fd: int) -> None:
        started.set()
        time.sleep(0.3)  # a slow disk: stop() is called while the worker thread syncs
        real(fd)

    monkeypatch.setattr(os, "fdatasync", slow)
    plog.append(build_batch([Record(0, clock.now_ms(), b"k", b"v")]))
    waiter = asyncio.ensure_future(flusher.sync([plog]))
    assert await asyncio.to_thread(started.wait, 5)
    await flusher.stop()  # returns once the worker thread gave its descriptor back
    assert not plog.segments[-1].dirty
    await asyncio.wait_for(waiter, 1)
    plog.close(clean=True)


async def test_a_round_whose_files_all_closed_goes_on_with_the_files_left_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A round takes at most _ROUND_FILES segments; when every one it took was closed meanwhile
    # (retention, a deleted topic), the segments beyond them still get their round.
    monkeypatch.setattr("broker.log.flusher._ROUND_FILES", 1)
    clock = ManualClock()
    first, second = _log(tmp_path / "a", clock), _log(tmp_path / "b", clock)
    flusher = Flusher()
    flusher.start()
    for plog in (first, second):
        plog.append(build_batch([Record(0, clock.now_ms(), b"k", b"v")]))
    waiter = asyncio.ensure_future(flusher.sync([first, second]))
    await asyncio.sleep(0)  # the waiter is registered; its round starts after this step
    first.close(clean=True)
    try:
        await asyncio.wait_for(waiter, 2)
        assert not second.segments[-1].dirty
    finally:
        await flusher.stop()
        second.close(clean=True)
