"""`SqliteDatabase.write`: one hop per write, group commit of concurrent writes, each write isolated in
its savepoint (a failing one rolls back alone), on a real SQLite file."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from services.common.db import Session
from services.common.db_sqlite import SqliteDatabase


class Boom(Exception):
    pass


async def open_db(tmp_path: Path) -> SqliteDatabase:
    db = await SqliteDatabase(tmp_path / "t.db").open()
    await db.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER NOT NULL)")
    return db


def insert(k: str, v: int) -> Callable[[Session], Awaitable[int]]:
    async def write(s: Session) -> int:
        row = await s.fetchone("INSERT INTO t (k, v) VALUES (?, ?) RETURNING rowid", (k, v))
        assert row is not None
        return int(row[0])

    return write


async def test_concurrent_writes_are_group_committed_and_each_gets_its_result(tmp_path: Path) -> None:
    db = await open_db(tmp_path)
    statements: list[str] = []
    await db.run(lambda c: c.set_trace_callback(statements.append))
    rowids = await asyncio.gather(*(db.write(insert(f"k{i}", i)) for i in range(100)))
    await db.run(lambda c: c.set_trace_callback(None))
    assert sorted(rowids) == list(range(1, 101))
    rows = await db.fetchall("SELECT k, v FROM t ORDER BY v")
    assert [(r["k"], r["v"]) for r in rows] == [(f"k{i}", i) for i in range(100)]
    commits = sum(1 for s in statements if s.upper().startswith("COMMIT"))
    assert 1 <= commits < 10  # 100 writes queued together share a handful of transactions
    await db.close()


async def test_a_failing_write_rolls_back_alone_and_its_caller_gets_the_exception(tmp_path: Path) -> None:
    db = await open_db(tmp_path)

    async def half_then_boom(s: Session) -> None:
        await s.execute("INSERT INTO t (k, v) VALUES ('bad', 1)")
        raise Boom("after a statement")

    results = await asyncio.gather(
        db.write(insert("a", 1)),
        db.write(half_then_boom),
        db.write(insert("a", 2)),  # duplicate key: sqlite3.IntegrityError
        db.write(insert("b", 3)),
        return_exceptions=True,
    )
    assert isinstance(results[1], Boom)
    assert isinstance(results[2], sqlite3.IntegrityError)
    rows = await db.fetchall("SELECT k, v FROM t ORDER BY k")
    assert [(r["k"], r["v"]) for r in rows] == [("a", 1), ("b", 3)]
    await db.close()


async def test_write_inside_a_transaction_is_refused_and_close_waits_for_queued_writes(tmp_path: Path) -> None:
    db = await open_db(tmp_path)
    async with db.transaction():
        with pytest.raises(RuntimeError, match=r"use tx\.\*"):
            await db.write(insert("x", 1))
    pending = [asyncio.ensure_future(db.write(insert(f"q{i}", i))) for i in range(20)]
    await asyncio.sleep(0)  # queued, the writer task started
    await db.close()
    assert all(f.done() and not f.exception() for f in pending)
    db = await SqliteDatabase(tmp_path / "t.db").open()
    assert (await db.fetchone("SELECT COUNT(*) FROM t"))[0] == 20  # type: ignore[index]
    await db.close()


async def test_a_write_after_close_raises_instead_of_waiting_forever(tmp_path: Path) -> None:
    """`run` on a closed database raises at once; `write` must too, not leave its caller waiting
    on a future nobody resolves (its writer task died on the missing connection)."""
    db = await open_db(tmp_path)
    await db.close()
    with pytest.raises(RuntimeError, match="not open"):
        await asyncio.wait_for(db.write(insert("late", 1)), 5)


async def test_a_transaction_cancelled_while_begin_runs_leaves_no_transaction_open(tmp_path: Path) -> None:
    """Cancelled while BEGIN IMMEDIATE waits in the worker thread for another process's write lock,
    `transaction()` must not leave that BEGIN open on the connection: the next autocommit
    statement would silently join it and be lost, and the next group commit would fail."""
    db = await open_db(tmp_path)
    other = sqlite3.connect(tmp_path / "t.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another writer holds the lock: our BEGIN waits (busy timeout)

    async def body() -> None:
        async with db.transaction() as tx:
            await tx.execute("INSERT INTO t (k, v) VALUES ('never', 0)")

    task = asyncio.create_task(body())
    await asyncio.sleep(0.3)  # BEGIN IMMEDIATE is now running in the worker thread
    task.cancel()
    await asyncio.sleep(0.1)
    other.rollback()  # the lock is free: the worker's BEGIN goes through now, after the cancel
    other.close()
    with pytest.raises(asyncio.CancelledError):
        await task

    await db.execute("INSERT INTO t (k, v) VALUES ('autocommit', 1)")
    await db.write(insert("grouped", 2))
    await db.close()
    db = await SqliteDatabase(tmp_path / "t.db").open()
    rows = await db.fetchall("SELECT k FROM t ORDER BY v")
    assert [r["k"] for r in rows] == ["autocommit", "grouped"]
    await db.close()


def on_thread(seen: list[int]) -> Callable[[Session], Awaitable[None]]:
    async def write(s: Session) -> None:
        seen.append(threading.get_ident())
        await s.execute("INSERT INTO t (k, v) VALUES (?, ?)", (f"k{len(seen)}", len(seen)))

    return write


async def test_a_commit_that_does_not_fsync_runs_on_the_loop_and_one_that_does_in_the_thread(
    tmp_path: Path,
) -> None:
    seen: list[int] = []
    db = await open_db(tmp_path)  # synchronous NORMAL
    await db.write(on_thread(seen))
    await db.close()
    full = await SqliteDatabase(tmp_path / "t.db", synchronous="FULL").open()
    await full.write(on_thread(seen))
    await full.close()
    assert seen[0] == threading.get_ident()
    assert seen[1] != threading.get_ident()


async def test_a_write_lock_held_by_another_process_is_waited_for_off_the_loop(tmp_path: Path) -> None:
    db = await open_db(tmp_path)
    other = sqlite3.connect(tmp_path / "t.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    seen: list[int] = []
    write = asyncio.create_task(db.write(on_thread(seen)))
    began = time.monotonic()
    for _ in range(10):  # the loop keeps running while the write waits (busy timeout: 5 s)
        await asyncio.sleep(0.02)
    assert time.monotonic() - began < 2
    assert not write.done()
    other.rollback()
    other.close()
    await asyncio.wait_for(write, 5)
    assert len(seen) == 1
    assert seen[0] != threading.get_ident()
    rows = await db.fetchall("SELECT k FROM t")
    assert [r["k"] for r in rows] == ["k1"]
    await db.close()


async def test_the_wal_is_checkpointed_in_the_background_not_at_commit(tmp_path: Path) -> None:
    db = await open_db(tmp_path)
    path = tmp_path / "t.db"
    before = path.stat().st_size
    await asyncio.gather(*(db.write(insert(f"a{i}", i)) for i in range(2000)))
    assert (await db.fetchone("PRAGMA wal_autocheckpoint"))[0] == 0  # type: ignore[index]
    await asyncio.sleep(1.1)  # the next batch starts a checkpoint: one a second at most
    await db.write(insert("b", -1))
    deadline = time.monotonic() + 10
    while path.stat().st_size <= before + 50_000 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert path.stat().st_size > before + 50_000  # the rows reached the database file
    await db.close()


@pytest.mark.slow
async def test_a_checkpoint_of_a_large_wal_holds_up_no_writer(tmp_path: Path) -> None:
    """A PASSIVE checkpoint of a 64 MB WAL (its copy into the database and the fsync) runs while
    `db.transaction()` writes and reads go on: none of them waits for it.  The control is the
    checkpoint itself, timed in the same test: the longest wait of any of them is well under
    its duration (when it ran in the worker thread, the first write waited all of it)."""
    db = await open_db(tmp_path)
    path = tmp_path / "t.db"
    try:
        await db.execute("CREATE TABLE blobs (id INTEGER PRIMARY KEY, data BLOB NOT NULL)")
        await db.write(insert("start", 0))  # the first batch's checkpoint: of a small WAL
        await asyncio.sleep(0)

        async def fill(s: Session) -> None:
            await s.executemany("INSERT INTO blobs (data) VALUES (randomblob(65536))", [()] * 1024)

        await db.write(fill)  # 64 MB into the WAL, not checkpointed: one checkpoint a second
        size_before = path.stat().st_size
        await asyncio.sleep(1.1)
        began = time.perf_counter()
        await db.write(insert("trigger", 1))  # this batch starts the checkpoint of the large WAL
        checkpoint = db._checkpoint
        assert checkpoint is not None
        waits: list[float] = []
        n = 0
        while not checkpoint.done():
            n += 1
            asked = time.perf_counter()
            async with db.transaction() as tx:
                await tx.execute("INSERT INTO t (k, v) VALUES (?, ?)", (f"during-{n}", n))
            await db.fetchone("SELECT v FROM t WHERE k = ?", (f"during-{n}",))
            waits.append(time.perf_counter() - asked)
        took = time.perf_counter() - began
        assert path.stat().st_size >= size_before + 64 * 1024 * 1024  # it did copy the WAL over
        assert waits, "the checkpoint ended before the first write"
        assert max(waits) < took / 2, f"longest wait {max(waits) * 1000:.1f} ms, checkpoint {took * 1000:.1f} ms"
    finally:
        await db.close()
