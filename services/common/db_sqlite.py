"""SQLite for asyncio services: one connection, one worker thread, explicit transactions.

Each `SqliteDatabase` owns a single `sqlite3` connection.  Statements that may wait on the disk
or on another process run in a single worker thread (`loop.run_in_executor`).  The connection is
in WAL mode (readers don't block the writer), with a busy timeout (another process holding the
write lock is waited for, not failed) and foreign keys on.  The interface is
`services.common.db`'s.

`db.write(fn)` runs `fn(session)` as its own transaction, and the writes queued meanwhile are
**group-committed**: they share one BEGIN IMMEDIATE ... COMMIT, each inside a SAVEPOINT, so a
`fn` that raises rolls back its own statements only and its caller gets the exception.  With
``synchronous`` OFF or NORMAL (the default) a WAL commit does not wait for the disk: it appends
to the WAL in the page cache, a fraction of a millisecond for a batch.  Such a batch runs on the
event loop itself, between two callbacks.  The hop to a thread and back cost more than the
batch: the thread waits for a core and for the GIL while the loop runs (batches of two writes
took 8 to 14 ms to come back), and at a thousand orders a second that wait, not the work, made
the latency (p99 74-117 ms in the thread, 43-45 ms on the loop).  What does wait for the disk stays
off the loop: the WAL checkpoint (copying the WAL into the database and fsyncing it) runs about
once a second, PASSIVE (it never takes the write lock nor waits for a writer), on a connection
and a thread of its own (automatic checkpoints at commit are off).  Not in the worker thread:
a checkpoint of a large WAL takes as long as its copy and fsync, and every transaction, read
and fsyncing batch queued behind it there waited that long (a `db.transaction()` write stalled
for the whole checkpoint of a 64 MB WAL; docs/adr/010-postgresql.md).  Batches run in the worker
thread with FULL or EXTRA, whose every commit fsyncs, and when another process holds the
file's write lock.

`db.transaction()` (BEGIN IMMEDIATE; commit when the body ends, roll back when it raises) runs
each statement as one hop.  An `asyncio.Lock` is held for the whole transaction, so no other
coroutine's statement can slip into it; calling `db.*` from inside it would wait for itself: it
raises `RuntimeError` instead.

The database work is logged under the logger ``services.common.db``, which the log shipper sends
to ``logs.db``: each open and close, each migration applied, and every
transaction or group-committed batch of writes that held the write lock longer than `slow_ms`
(a warning: everything else of the process waits on that lock).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, Self, TypeVar

from opentelemetry.trace import Span

from kit.logging import get_logger
from kit.tracing import db_span, sql_verb
from services.common.db import Migration, Params, Row, Session, Step, check_version, drive

__all__ = ["SqliteDatabase"]

T = TypeVar("T")

log = get_logger("services.common.db")

_in_transaction: contextvars.ContextVar[SqliteDatabase | None] = contextvars.ContextVar("in_transaction", default=None)


class SqliteDatabase:
    """One SQLite database file, used from asyncio.  `await db.open()` / `await db.close()`, or
    `async with SqliteDatabase(path) as db:`."""

    dialect = "sqlite"

    def __init__(
        self, path: str | Path, *, busy_timeout_ms: int = 5000, synchronous: str = "NORMAL", slow_ms: float = 250.0
    ) -> None:
        self.path = Path(path)
        self.target = str(self.path)
        self.slow_ms = slow_ms
        self._busy_timeout_ms = busy_timeout_ms
        if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, got {synchronous!r}")
        self._synchronous = synchronous.upper()
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None
        self._lock = asyncio.Lock()
        self._writes: list[tuple[Callable[[Session], Coroutine[Any, Any, Any]], asyncio.Future[Any]]] = []
        self._writer: asyncio.Task[None] | None = None
        # A commit that does not fsync runs on the loop (see the module doc).
        self._inline = self._synchronous in ("OFF", "NORMAL")
        self._checkpointer: sqlite3.Connection | None = None
        self._checkpoints: ThreadPoolExecutor | None = None  # the checkpointer's own thread
        self._checkpoint: asyncio.Future[None] | None = None
        self._checkpointed = 0.0

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> Self:
        if self._executor is not None:
            return self
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"sqlite-{self.path.name}")
        self._conn = await self._submit(self._connect)
        if self._inline:
            self._checkpoints = ThreadPoolExecutor(
                max_workers=1, thread_name_prefix=f"sqlite-checkpoint-{self.path.name}"
            )
            self._checkpointer = await self._submit(self._connect)
        size = self.path.stat().st_size if self.path.exists() else 0
        log.info("database opened", path=str(self.path), size_bytes=size, synchronous=self._synchronous)
        return self

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: autocommit, transactions are explicit (BEGIN IMMEDIATE ... COMMIT).
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            conn.close()
            raise sqlite3.OperationalError(f"{self.path}: could not switch to WAL mode (got {mode})")
        conn.execute(f"PRAGMA synchronous = {self._synchronous}")
        conn.execute("PRAGMA foreign_keys = ON")
        if self._inline:
            conn.execute("PRAGMA wal_autocheckpoint = 0")  # `_checkpoint_soon` does it, off the loop
        return conn

    async def close(self) -> None:
        if self._writer is not None and not self._writer.done():
            await asyncio.wait([self._writer])  # queued writes finish (or fail) before the connection closes
        if self._checkpoint is not None:
            await asyncio.wait([self._checkpoint])
        executor, self._executor = self._executor, None
        if executor is None:
            return
        async with self._lock:
            conn, self._conn = self._conn, None
            checkpointer, self._checkpointer = self._checkpointer, None
            for each in (checkpointer, conn):  # the last to close checkpoints what is left
                if each is not None:
                    await asyncio.get_running_loop().run_in_executor(executor, each.close)
        executor.shutdown(wait=True)
        checkpoints, self._checkpoints = self._checkpoints, None
        if checkpoints is not None:
            checkpoints.shutdown(wait=True)
        log.info("database closed", path=str(self.path))

    @property
    def is_open(self) -> bool:
        return self._conn is not None

    # -- running work on the connection's thread ------------------------------------------------

    async def _submit(self, fn: Callable[[], T]) -> T:
        if self._executor is None:
            raise RuntimeError(f"database {self.path} is not open")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError(f"database {self.path} is not open")
        return self._conn

    def _check_not_in_transaction(self) -> None:
        if _in_transaction.get() is self:
            raise RuntimeError("inside `async with db.transaction() as tx`, use tx.* (db.* would wait for itself)")

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn(connection)` in the worker thread, outside any transaction (autocommit): for
        what only SQLite has (PRAGMAs, a trace callback)."""
        self._check_not_in_transaction()
        async with self._lock:
            conn = self._connection()
            return await self._submit(lambda: fn(conn))

    async def read(self, fn: Callable[[Session], Awaitable[T]]) -> T:
        """`fn(session)` in the worker thread in one hop, outside any transaction."""
        with self._span("read"):
            return await self.run(lambda conn: drive(fn(ThreadSession(conn))))  # type: ignore[arg-type]

    async def execute(self, sql: str, params: Params = ()) -> int:
        """One statement in autocommit mode; the rows it changed."""
        with self._span(sql_verb(sql)):
            return await self.run(lambda c: c.execute(sql, params).rowcount)

    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        with self._span(sql_verb(sql)):
            rows: list[Row] = await self.run(lambda c: c.execute(sql, params).fetchall())
        return rows

    async def fetchone(self, sql: str, params: Params = ()) -> Row | None:
        with self._span(sql_verb(sql)):
            row: Row | None = await self.run(lambda c: c.execute(sql, params).fetchone())
        return row

    def _span(self, operation: str) -> AbstractContextManager[Span]:
        return db_span(self.dialect, self.path.name, operation)

    async def ping(self) -> bool:
        """True when the database answers a query (for readiness checks)."""
        try:
            await self.fetchone("SELECT 1")
        except (sqlite3.Error, RuntimeError):
            return False
        return True

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Session]:
        """`BEGIN IMMEDIATE`; commit when the body ends, roll back when it raises (or is cancelled)."""
        self._check_not_in_transaction()
        with self._span("transaction"):
            async with self._transaction() as tx:
                yield tx

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[Session]:
        async with self._lock:
            conn = self._connection()
            try:
                await self._submit(lambda: conn.execute("BEGIN IMMEDIATE"))
            except asyncio.CancelledError:
                # Cancelling the await does not stop a BEGIN already running in the worker thread
                # (it may be waiting out the busy timeout for another process's lock).  Undo it
                # before the lock is released: left open, it would swallow the next autocommit
                # statements (lost at the next rollback) and fail the next group commit.
                await asyncio.shield(self._submit(_rollback_if_open(conn)))
                raise
            began = time.perf_counter()
            tx = Transaction(self, conn)
            token = _in_transaction.set(self)
            try:
                yield tx
            except BaseException:
                tx.closed = True
                # Shielded: the rollback must reach the connection even when we are being cancelled.
                await asyncio.shield(self._submit(conn.rollback))
                raise
            finally:
                _in_transaction.reset(token)
            tx.closed = True
            try:
                await asyncio.shield(self._submit(conn.commit))
            except BaseException:
                await asyncio.shield(self._submit(_rollback_if_open(conn)))
                raise
            self._note_slow("slow transaction", began)
        for callback in tx.commit_callbacks:
            callback()

    async def write(self, fn: Callable[[Session], Awaitable[T]]) -> T:
        """Run `fn(session)` as one transaction in the worker thread, group-committed with the
        writes queued at the same time (see the module doc); its result, or its exception after
        its statements were rolled back.  A caller cancelled meanwhile does not undo the write."""
        self._check_not_in_transaction()
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._writes.append((fn, future))  # type: ignore[arg-type]
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_batches(), name=f"sqlite-writes-{self.path.name}")
        with self._span("write"):
            return await future

    async def _write_batches(self) -> None:
        while self._writes:
            async with self._lock:
                batch, self._writes = self._writes, []
                began = time.perf_counter()
                try:
                    # Inside the try: on a closed database the batch's callers get the RuntimeError
                    # (as `run` raises it) instead of waiting forever on futures of a dead task.
                    conn = self._connection()
                    fns = [fn for fn, _ in batch]
                    if self._inline and _begin_now(conn, self._busy_timeout_ms):
                        outcomes = _run_batch(conn, fns, begun=True)
                        self._checkpoint_soon()
                    else:  # a commit that fsyncs, or another process holds the lock: wait off the loop
                        outcomes = await asyncio.shield(self._submit(functools.partial(_run_batch, conn, fns)))
                except Exception as e:  # not open, or BEGIN or COMMIT failed: nothing of the batch was written
                    outcomes = [(False, e, [])] * len(batch)
                    log.warning("write batch failed", path=str(self.path), writes=len(batch), error=repr(e))
                except asyncio.CancelledError:
                    for _, future in batch:
                        future.cancel()
                    raise
                else:
                    self._note_slow("slow write batch", began, writes=len(batch))
            for (_, future), (ok, value, callbacks) in zip(batch, outcomes, strict=True):
                for callback in callbacks:
                    callback()
                if future.done():
                    continue
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)

    def _checkpoint_soon(self) -> None:
        """Start a PASSIVE checkpoint in the checkpointer's thread if none ran in the last second."""
        now = time.monotonic()
        if (self._checkpoint is not None and not self._checkpoint.done()) or now - self._checkpointed < 1.0:
            return
        checkpointer, checkpoints = self._checkpointer, self._checkpoints
        if checkpointer is None or checkpoints is None:
            return
        self._checkpointed = now
        self._checkpoint = asyncio.get_running_loop().run_in_executor(
            checkpoints, _checkpoint, checkpointer, self.target
        )

    async def migrate(self, component: str, steps: Sequence[Migration]) -> int:
        """Apply the steps of `component` not applied yet, in order; returns how many were applied.

        Step N (1-based) is version N; each runs in its own transaction with its version record, so
        a crash leaves the database at a whole version.
        """
        check_version(self.target, component, 0, len(steps))
        applied = await self.run(lambda c: _migrate(c, self.target, component, steps))
        if applied:
            log.info("database migrated", path=str(self.path), component=component, steps=applied, version=len(steps))
        return applied

    def _note_slow(self, what: str, began: float, **fields: Any) -> None:
        held_ms = (time.perf_counter() - began) * 1000
        if held_ms > self.slow_ms:
            log.warning(what, path=str(self.path), held_ms=round(held_ms, 1), slow_ms=self.slow_ms, **fields)

    async def applied_version(self, component: str) -> int:
        row = await self.fetchone(
            "SELECT COALESCE(MAX(version), 0) FROM schema_migrations WHERE component = ?", (component,)
        )
        return int(row[0]) if row is not None else 0

    @asynccontextmanager
    async def leadership(self, name: str) -> AsyncIterator[_Always]:
        """Always held: the process that opened the file is its only writer."""
        yield _Always()


class _Always:
    held = True

    async def wait(self) -> None:
        return None


class ThreadSession:
    """A session whose statements run at once on the calling thread: inside `write`'s batch, on
    the event loop or in the connection's worker thread (see `services.common.db.drive`)."""

    dialect = "sqlite"

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.commit_callbacks: list[Callable[[], None]] = []

    async def execute(self, sql: str, params: Params = ()) -> int:
        return self._conn.execute(sql, params).rowcount

    async def executemany(self, sql: str, rows: Iterable[Params]) -> None:
        self._conn.executemany(sql, rows)

    async def insert(self, sql: str, params: Params = ()) -> None:
        self._conn.execute(sql, params)  # in the writer's thread already: nothing to save by waiting

    async def fetchone(self, sql: str, params: Params = ()) -> Row | None:
        row: Row | None = self._conn.execute(sql, params).fetchone()
        return row

    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        rows: list[Row] = self._conn.execute(sql, params).fetchall()
        return rows

    async def lock(self, *keys: str) -> None:
        return None  # BEGIN IMMEDIATE took the file's write lock: transactions run one at a time

    def on_commit(self, callback: Callable[[], None]) -> None:
        self.commit_callbacks.append(callback)


class Transaction:
    """Statements of one open `SqliteDatabase.transaction`, each one hop to the worker thread."""

    dialect = "sqlite"

    def __init__(self, db: SqliteDatabase, conn: sqlite3.Connection) -> None:
        self._db = db
        self._session = ThreadSession(conn)
        self.closed = False

    @property
    def commit_callbacks(self) -> list[Callable[[], None]]:
        return self._session.commit_callbacks

    async def _hop(self, work: Coroutine[Any, Any, T]) -> T:
        if self.closed:
            work.close()
            raise RuntimeError("transaction is already finished")
        return await self._db._submit(lambda: drive(work))

    async def execute(self, sql: str, params: Params = ()) -> int:
        return await self._hop(self._session.execute(sql, params))

    async def executemany(self, sql: str, rows: Iterable[Params]) -> None:
        await self._hop(self._session.executemany(sql, list(rows)))

    async def insert(self, sql: str, params: Params = ()) -> None:
        await self._hop(self._session.insert(sql, params))

    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        return await self._hop(self._session.fetchall(sql, params))

    async def fetchone(self, sql: str, params: Params = ()) -> Row | None:
        return await self._hop(self._session.fetchone(sql, params))

    async def lock(self, *keys: str) -> None:
        return None

    def on_commit(self, callback: Callable[[], None]) -> None:
        self._session.on_commit(callback)


def _begin_now(conn: sqlite3.Connection, busy_timeout_ms: int) -> bool:
    """BEGIN IMMEDIATE if the file's write lock is free; False, without waiting, when another
    process holds it (the event loop must not sit out the busy timeout)."""
    conn.execute("PRAGMA busy_timeout = 0")
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as e:
        if e.sqlite_errorcode == sqlite3.SQLITE_BUSY:
            return False
        raise
    finally:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    return True


def _run_batch(
    conn: sqlite3.Connection, fns: Sequence[Callable[[Session], Coroutine[Any, Any, Any]]], *, begun: bool = False
) -> list[tuple[bool, Any, list[Callable[[], None]]]]:
    """One transaction for all `fns`, each in a savepoint: (True, result, commit callbacks) or
    (False, exception, []).  `begun`: BEGIN IMMEDIATE was run already."""
    outcomes: list[tuple[bool, Any, list[Callable[[], None]]]] = []
    if not begun:
        conn.execute("BEGIN IMMEDIATE")
    try:
        for fn in fns:
            conn.execute("SAVEPOINT write")
            session = ThreadSession(conn)
            try:
                outcomes.append((True, drive(fn(session)), session.commit_callbacks))
            except Exception as e:
                conn.execute("ROLLBACK TO write")
                outcomes.append((False, e, []))
            conn.execute("RELEASE write")
        conn.commit()
    except BaseException:
        _rollback_if_open(conn)()
        raise
    return outcomes


def _checkpoint(conn: sqlite3.Connection, target: str) -> None:
    """Copy the WAL into the database (PASSIVE: never waits for the writer, which keeps
    appending meanwhile); a failure is logged, and the next one tries again."""
    try:
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    except sqlite3.Error as e:
        log.warning("wal checkpoint failed", path=target, error=repr(e))


def _rollback_if_open(conn: sqlite3.Connection) -> Callable[[], None]:
    def rollback() -> None:
        if conn.in_transaction:
            conn.rollback()

    return rollback


def _migrate(conn: sqlite3.Connection, target: str, component: str, steps: Sequence[Migration]) -> int:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " component TEXT NOT NULL, version INTEGER NOT NULL, applied_at INTEGER NOT NULL,"
        " PRIMARY KEY (component, version)) WITHOUT ROWID"
    )
    (recorded,) = conn.execute(
        "SELECT COALESCE(MAX(version), 0) FROM schema_migrations WHERE component = ?", (component,)
    ).fetchone()
    check_version(target, component, int(recorded), len(steps))
    applied = 0
    for version, step in enumerate(steps, start=1):
        conn.execute("BEGIN IMMEDIATE")
        try:
            done = conn.execute(
                "SELECT 1 FROM schema_migrations WHERE component = ? AND version = ?", (component, version)
            ).fetchone()
            if done is None:
                text = step.sqlite if isinstance(step, Step) else step
                if callable(text):
                    text(conn)
                else:
                    _run_script(conn, text)
                conn.execute(
                    "INSERT INTO schema_migrations (component, version, applied_at) VALUES (?, ?, ?)",
                    (component, version, int(time.time() * 1000)),
                )
                applied += 1
            conn.commit()
        except BaseException:
            if conn.in_transaction:
                conn.rollback()
            raise
    return applied


def _run_script(conn: sqlite3.Connection, script: str) -> None:
    """Run several statements inside the open transaction (`executescript` would commit first)."""
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            conn.execute(buffer)
            buffer = ""
    if buffer.strip():
        conn.execute(buffer)
