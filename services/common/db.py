"""SQLite for asyncio services: one connection, one worker thread, explicit transactions.

Each `Database` owns a single `sqlite3` connection living in a single worker thread; every
statement runs there (`loop.run_in_executor`), so the event loop never blocks on disk I/O or on
a lock held by another process.  The connection is in WAL mode (readers don't block the writer),
with a busy timeout (another process holding the write lock is waited for, not failed) and
foreign keys on.

Transactions::

    async with db.transaction() as tx:          # BEGIN IMMEDIATE (takes the write lock up front)
        await tx.execute("UPDATE ...", (...,))
        await outbox.add(tx, ...)               # same transaction: both or neither
    # COMMIT here; ROLLBACK if the body raised

The body runs on the event loop; each `tx.*` call is one hop to the worker thread.  An
`asyncio.Lock` is held for the whole transaction, so no other coroutine's statement can slip into
it; other coroutines' database calls wait until it ends.  Calling `db.*` (instead of `tx.*`) from
inside a transaction would wait for itself: it raises `RuntimeError` instead.  For a hot path that
runs many statements, `tx.run(fn)` runs a plain function on the connection in one hop.

Hot write paths (an HTTP request's state change plus its outbox row) use `db.write(fn)`: `fn`
is a plain function of the connection that runs as its own transaction in one hop, and writes
queued meanwhile are **group-committed**: they share one BEGIN IMMEDIATE ... COMMIT, each inside a
SAVEPOINT, so a `fn` that raises rolls back its own statements only and its caller gets the
exception.  Under load a multi-hop transaction holds the lock while the busy event loop gets
around to each hop; `write` holds it for one hop per batch, which is what lets one process take
a thousand orders a second.

Migrations are versioned per *component* (`"outbox"`, `"consumer"`, `"orders"`...), so the kit's
tables and a service's tables evolve independently: `await db.migrate("orders", [step1, step2])`
applies the steps not yet recorded in `schema_migrations`, each atomically with its record.
Steps are append-only: never edit or reorder an applied step, add a new one.

The database work is logged under this module's logger, whose name ends in ``.db``, so the log
shipper sends it to ``logs.db``: each open and close, each migration applied, and every
transaction or group-committed batch of writes that held the write lock longer than `slow_ms`
(a warning: everything else of the process waits on that lock).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import re
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

from kit.logging import get_logger

__all__ = ["Database", "ExecResult", "Migration", "Transaction"]

T = TypeVar("T")
Params = Sequence[Any] | dict[str, Any]
Migration = str | Callable[[sqlite3.Connection], None]
"""A migration step: an SQL script (several statements allowed) or a function of the connection."""

log = get_logger(__name__)

_COMPONENT = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_in_transaction: contextvars.ContextVar[Database | None] = contextvars.ContextVar("in_transaction", default=None)


@dataclass(frozen=True, slots=True)
class ExecResult:
    rowcount: int
    lastrowid: int | None


class Database:
    """One SQLite database file, used from asyncio.  `await db.open()` / `await db.close()`, or
    `async with Database(path) as db:`."""

    def __init__(
        self, path: str | Path, *, busy_timeout_ms: int = 5000, synchronous: str = "NORMAL", slow_ms: float = 250.0
    ) -> None:
        self.path = Path(path)
        self.slow_ms = slow_ms
        self._busy_timeout_ms = busy_timeout_ms
        if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, got {synchronous!r}")
        self._synchronous = synchronous.upper()
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None
        self._lock = asyncio.Lock()
        self._writes: list[tuple[Callable[[sqlite3.Connection], Any], asyncio.Future[Any]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def open(self) -> Self:
        if self._executor is not None:
            return self
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"sqlite-{self.path.name}")
        self._conn = await self._submit(self._connect)
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
        return conn

    async def close(self) -> None:
        if self._writer is not None and not self._writer.done():
            await asyncio.wait([self._writer])  # queued writes finish (or fail) before the connection closes
        executor, self._executor = self._executor, None
        if executor is None:
            return
        async with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                await asyncio.get_running_loop().run_in_executor(executor, conn.close)
        executor.shutdown(wait=True)
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
        """Run `fn(connection)` in the worker thread, outside any transaction (autocommit)."""
        self._check_not_in_transaction()
        async with self._lock:
            conn = self._connection()
            return await self._submit(lambda: fn(conn))

    async def execute(self, sql: str, params: Params = ()) -> ExecResult:
        """One statement in autocommit mode."""
        return await self.run(lambda c: _exec(c, sql, params))

    async def fetchall(self, sql: str, params: Params = ()) -> list[sqlite3.Row]:
        return await self.run(lambda c: c.execute(sql, params).fetchall())

    async def fetchone(self, sql: str, params: Params = ()) -> sqlite3.Row | None:
        row: sqlite3.Row | None = await self.run(lambda c: c.execute(sql, params).fetchone())
        return row

    async def ping(self) -> bool:
        """True when the database answers a query (for readiness checks)."""
        try:
            await self.fetchone("SELECT 1")
        except (sqlite3.Error, RuntimeError):
            return False
        return True

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        """`BEGIN IMMEDIATE`; commit when the body ends, roll back when it raises (or is cancelled)."""
        self._check_not_in_transaction()
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

    async def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn(connection)` as one transaction in the worker thread, group-committed with the
        writes queued at the same time (see the module doc); its result, or its exception after
        its statements were rolled back.  A caller cancelled meanwhile does not undo the write."""
        self._check_not_in_transaction()
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._writes.append((fn, future))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_batches(), name=f"sqlite-writes-{self.path.name}")
        return await future

    async def _write_batches(self) -> None:
        while self._writes:
            async with self._lock:
                batch, self._writes = self._writes, []
                began = time.perf_counter()
                try:
                    # Inside the try: on a closed database the batch's callers get the RuntimeError
                    # (as `run` raises it) instead of waiting forever on futures of a dead task.
                    work = functools.partial(_run_batch, self._connection(), [fn for fn, _ in batch])
                    outcomes = await asyncio.shield(self._submit(work))
                except Exception as e:  # not open, or BEGIN or COMMIT failed: nothing of the batch was written
                    outcomes = [(False, e)] * len(batch)
                    log.warning("write batch failed", path=str(self.path), writes=len(batch), error=repr(e))
                except asyncio.CancelledError:
                    for _, future in batch:
                        future.cancel()
                    raise
                else:
                    self._note_slow("slow write batch", began, writes=len(batch))
            for (_, future), (ok, value) in zip(batch, outcomes, strict=True):
                if future.done():
                    continue
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)

    async def migrate(self, component: str, steps: Sequence[Migration]) -> int:
        """Apply the steps of `component` not applied yet, in order; returns how many were applied.

        Step N (1-based) is version N; each runs in its own transaction with its version record, so
        a crash leaves the database at a whole version.
        """
        if not _COMPONENT.fullmatch(component):
            raise ValueError(f"invalid migration component name {component!r}")
        applied = await self.run(lambda c: _migrate(c, component, steps))
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


class Transaction:
    """Statements of one open transaction (see `Database.transaction`)."""

    def __init__(self, db: Database, conn: sqlite3.Connection) -> None:
        self._db = db
        self._conn = conn
        self.closed = False
        self.commit_callbacks: list[Callable[[], None]] = []

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn(connection)` in the worker thread, inside this transaction (one hop)."""
        if self.closed:
            raise RuntimeError("transaction is already finished")
        conn = self._conn
        return await self._db._submit(lambda: fn(conn))

    async def execute(self, sql: str, params: Params = ()) -> ExecResult:
        return await self.run(lambda c: _exec(c, sql, params))

    async def executemany(self, sql: str, rows: Iterable[Params]) -> int:
        rows = list(rows)
        return await self.run(lambda c: c.executemany(sql, rows).rowcount)

    async def fetchall(self, sql: str, params: Params = ()) -> list[sqlite3.Row]:
        return await self.run(lambda c: c.execute(sql, params).fetchall())

    async def fetchone(self, sql: str, params: Params = ()) -> sqlite3.Row | None:
        row: sqlite3.Row | None = await self.run(lambda c: c.execute(sql, params).fetchone())
        return row

    def on_commit(self, callback: Callable[[], None]) -> None:
        """Call `callback` on the event loop after this transaction committed (never on rollback)."""
        self.commit_callbacks.append(callback)


def _exec(conn: sqlite3.Connection, sql: str, params: Params) -> ExecResult:
    cursor = conn.execute(sql, params)
    return ExecResult(cursor.rowcount, cursor.lastrowid)


def _run_batch(conn: sqlite3.Connection, fns: Sequence[Callable[[sqlite3.Connection], Any]]) -> list[tuple[bool, Any]]:
    """One transaction for all `fns`, each in a savepoint: (True, result) or (False, exception)."""
    outcomes: list[tuple[bool, Any]] = []
    conn.execute("BEGIN IMMEDIATE")
    try:
        for fn in fns:
            conn.execute("SAVEPOINT write")
            try:
                outcomes.append((True, fn(conn)))
            except Exception as e:
                conn.execute("ROLLBACK TO write")
                outcomes.append((False, e))
            conn.execute("RELEASE write")
        conn.commit()
    except BaseException:
        _rollback_if_open(conn)()
        raise
    return outcomes


def _rollback_if_open(conn: sqlite3.Connection) -> Callable[[], None]:
    def rollback() -> None:
        if conn.in_transaction:
            conn.rollback()

    return rollback


def _migrate(conn: sqlite3.Connection, component: str, steps: Sequence[Migration]) -> int:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " component TEXT NOT NULL, version INTEGER NOT NULL, applied_at INTEGER NOT NULL,"
        " PRIMARY KEY (component, version)) WITHOUT ROWID"
    )
    applied = 0
    for version, step in enumerate(steps, start=1):
        conn.execute("BEGIN IMMEDIATE")
        try:
            done = conn.execute(
                "SELECT 1 FROM schema_migrations WHERE component = ? AND version = ?", (component, version)
            ).fetchone()
            if done is None:
                if callable(step):
                    step(conn)
                else:
                    _run_script(conn, step)
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
