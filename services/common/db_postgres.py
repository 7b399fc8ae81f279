"""PostgreSQL for asyncio services, on asyncpg (docs/adr/010-postgresql.md): the interface of
`services.common.db`, for several instances of a service sharing one database.

- **A bounded pool** (`pool_max` connections, `pool_min` kept open).  A request waiting longer
  than `acquire_timeout_s` for a connection gets `DatabaseUnavailable` (HTTP 503), not a queue
  that grows without bound.
- **Statement timeouts**: every connection is opened with ``statement_timeout``; a statement
  that runs longer is cancelled by the server (also `DatabaseUnavailable`: the database is
  overloaded now).
- **Reconnect**: the pool replaces a connection the server closed.  A transaction that failed
  because its connection was lost *before* COMMIT was sent is run once more on a fresh
  connection (the server rolled it back: nothing of it happened); a loss during COMMIT is
  reported (`DatabaseUnavailable`), since it may or may not have committed.
- **SQL**: the stores write ``?`` placeholders (SQLite's); they are numbered (``$1``...) here,
  once per distinct statement, and asyncpg prepares and caches each statement per connection.
- **Group commit**: `write(fn)` calls made while `write_batches` transactions are already
  running wait, and the next free slot runs all of them (at most `max_batch`) as one transaction:
  one BEGIN and one COMMIT (one WAL flush) for many, as SQLite's writer does.  At most
  `max_queued_writes` wait; past that `write` raises `DatabaseUnavailable` at once (HTTP 503
  with Retry-After, as for an outage): a server that has stopped keeping up must not turn into
  a queue, and memory, that grow without bound.  A batch runs first without a savepoint per
  function (two round trips each).  When one of them raises (its own error, a constraint, a
  deadlock with another instance), that transaction is rolled back and the batch runs once
  more, each function in a savepoint with its inserts sent inside it: two transactions for the
  batch whatever fails in it, each caller gets its own outcome and nothing of a failed function
  is kept.  A function that lost a deadlock or a serialization conflict there is run again
  alone after the batch commits (the conflict was the timing's, not the function's).  One
  write at a time (little load) is one transaction, as before.
- **Locks**: `Session.lock(*keys)` takes ``pg_advisory_xact_lock`` on a 64-bit hash of each key,
  in sorted order; `leadership(name)` holds a session-level advisory lock on a connection of its
  own, so that exactly one instance does `name` while it lives (the outbox relay), and another
  takes over within `retry_s` of its death (the server drops a dead client's locks with its
  connection).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractContextManager, asynccontextmanager
from typing import Any, Self, TypeVar

import asyncpg
from opentelemetry.trace import Span

from kit.health import Check
from kit.logging import get_logger
from kit.tracing import db_span, sql_verb
from services.common.db import (
    DatabaseUnavailable,
    Migration,
    Params,
    Row,
    Session,
    Step,
    check_version,
    postgres_target,
)

__all__ = ["PostgresDatabase", "numbered", "postgres_check"]

T = TypeVar("T")

log = get_logger("services.common.db")

# What "the database cannot be reached now" looks like from asyncpg: the connection refused or
# lost, the server starting or shutting down, a statement cancelled by its timeout.
_UNAVAILABLE: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.exceptions.PostgresConnectionError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    asyncpg.exceptions.TooManyConnectionsError,
    asyncpg.exceptions.QueryCanceledError,
    asyncpg.exceptions.InterfaceError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
)
# Lost connections, after which a transaction that never reached COMMIT may run again.
_LOST: tuple[type[BaseException], ...] = (
    ConnectionError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.InterfaceError,
)
_MIGRATIONS_LOCK = "streamshop.schema_migrations"


@functools.lru_cache(maxsize=1024)
def numbered(sql: str) -> str:
    """``?`` placeholders as ``$1``, ``$2``... (outside quoted strings and identifiers)."""
    out: list[str] = []
    n = 0
    quote: str | None = None
    for ch in sql:
        if quote is not None:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "?":
            n += 1
            out.append(f"${n}")
            continue
        out.append(ch)
    return "".join(out)


def _rows_changed(status: str) -> int:
    """The row count of a command tag (``UPDATE 3``, ``INSERT 0 1``, ``DELETE 0``)."""
    last = status.rpartition(" ")[2]
    return int(last) if last.isdigit() else 0


class _Pending:
    """The rows given to `Session.insert` in one transaction and not sent yet, in groups: one
    statement's rows each, sent with one `executemany` (one round trip for all of them).

    Groups are sent in the order they were opened.  A session's row joins the newest group of its
    statement only if that does not put it before a row the same session queued earlier; else it
    opens a group at the end.  So each function's inserts reach the server in the order it made
    them (a foreign key to its own earlier row holds), while the same INSERT of many functions of
    a batch travels together.
    """

    def __init__(self) -> None:
        self.groups: list[tuple[str, list[tuple[Any, ...]]]] = []
        self.newest: dict[str, int] = {}  # statement -> index of its newest group
        self.flushes = 0  # a session's floor from before the last flush no longer applies

    def add(self, sql: str, params: Params, floor: int) -> int:
        """Queue one row after group `floor` (-1: anywhere); the index of the group it joined."""
        at = self.newest.get(sql)
        if at is None or at < floor:
            self.groups.append((sql, []))
            at = self.newest[sql] = len(self.groups) - 1
        self.groups[at][1].append(tuple(params))
        return at

    async def flush(self, conn: asyncpg.Connection) -> None:
        if not self.groups:
            return
        groups, self.groups, self.newest = self.groups, [], {}
        self.flushes += 1
        for sql, rows in groups:
            if len(rows) == 1:
                await conn.execute(numbered(sql), *rows[0])
            else:
                await conn.executemany(numbered(sql), rows)


class PgSession:
    """The statements of one transaction on one pooled connection (`pending`: the queued inserts
    of that transaction, shared by the functions group-committed in it)."""

    dialect = "postgresql"

    def __init__(self, conn: asyncpg.Connection, pending: _Pending | None = None) -> None:
        self._conn = conn
        self._pending = pending if pending is not None else _Pending()
        self._floor = (0, -1)  # (flushes, group): the newest group this session queued a row in
        self.commit_callbacks: list[Callable[[], None]] = []

    async def flush(self) -> None:
        """Send the queued inserts (before any other statement, and before COMMIT)."""
        await self._pending.flush(self._conn)

    async def insert(self, sql: str, params: Params = ()) -> None:
        flushes, group = self._floor
        floor = group if flushes == self._pending.flushes else -1
        self._floor = (self._pending.flushes, self._pending.add(sql, params, floor))

    async def execute(self, sql: str, params: Params = ()) -> int:
        await self.flush()
        return _rows_changed(await self._conn.execute(numbered(sql), *params))

    async def executemany(self, sql: str, rows: Iterable[Params]) -> None:
        await self.flush()
        await self._conn.executemany(numbered(sql), [tuple(r) for r in rows])

    async def fetchone(self, sql: str, params: Params = ()) -> Row | None:
        await self.flush()
        row: Row | None = await self._conn.fetchrow(numbered(sql), *params)
        return row

    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        await self.flush()
        rows: list[Row] = await self._conn.fetch(numbered(sql), *params)
        return rows

    async def lock(self, *keys: str) -> None:
        await self.flush()
        for key in sorted(set(keys)):  # one order for everyone: no deadlock between two lockers
            await self._conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", key)

    def on_commit(self, callback: Callable[[], None]) -> None:
        self.commit_callbacks.append(callback)


class PostgresDatabase:
    """A PostgreSQL database used through a bounded asyncpg pool."""

    dialect = "postgresql"

    def __init__(
        self,
        url: str,
        *,
        pool_min: int = 1,
        pool_max: int = 10,
        statement_timeout_ms: int = 5000,
        connect_timeout_s: float = 5.0,
        acquire_timeout_s: float = 5.0,
        application_name: str = "streamshop",
        slow_ms: float = 250.0,
        write_batches: int = 2,
        max_batch: int = 100,
        max_queued_writes: int = 1000,
    ) -> None:
        self.url = url
        self.target = postgres_target(url)
        self.pool_min = pool_min
        self.pool_max = pool_max
        self.statement_timeout_ms = statement_timeout_ms
        self.connect_timeout_s = connect_timeout_s
        self.acquire_timeout_s = acquire_timeout_s
        self.application_name = application_name
        self.slow_ms = slow_ms
        self.write_batches = max(1, write_batches)
        self.max_batch = max(1, max_batch)
        self.max_queued_writes = max(0, max_queued_writes)
        self._pool: asyncpg.Pool | None = None
        self._writes: list[tuple[Callable[[Session], Awaitable[Any]], asyncio.Future[Any]]] = []
        self._writers: set[asyncio.Task[None]] = set()
        self._running_writes = 0
        self.transactions = 0  # committed by write(): with group commit, fewer than the writes
        self.rolled_back_batches = 0  # batches whose first run failed and ran again with savepoints
        self.refused_writes = 0  # refused because `max_queued_writes` were waiting

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _connect_options(self) -> dict[str, Any]:
        return {
            "dsn": self.url,
            "timeout": self.connect_timeout_s,
            "server_settings": {
                "statement_timeout": str(self.statement_timeout_ms),
                "application_name": self.application_name[:63],
            },
        }

    async def open(self) -> Self:
        """Connect (`pool_min` connections); `DatabaseUnavailable` naming the server when it cannot
        be reached or refuses the login."""
        if self._pool is not None:
            return self
        try:
            self._pool = await asyncpg.create_pool(
                min_size=min(self.pool_min, self.pool_max),
                max_size=self.pool_max,
                reset=_keep_session,
                **self._connect_options(),
            )
        except (*_UNAVAILABLE, asyncpg.exceptions.PostgresError) as e:
            raise DatabaseUnavailable(f"cannot connect to PostgreSQL at {self.target}: {_reason(e)}") from None
        log.info(
            "database opened",
            target=self.target,
            pool_max=self.pool_max,
            statement_timeout_ms=self.statement_timeout_ms,
        )
        return self

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        try:
            await asyncio.wait_for(pool.close(), 10)
        except TimeoutError:
            pool.terminate()
        log.info("database closed", target=self.target)

    @property
    def is_open(self) -> bool:
        return self._pool is not None

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[asyncpg.Connection]:
        if self._pool is None:
            raise RuntimeError(f"database {self.target} is not open")
        try:
            async with self._pool.acquire(timeout=self.acquire_timeout_s) as conn:
                yield conn
        except _UNAVAILABLE as e:
            raise DatabaseUnavailable(f"PostgreSQL at {self.target}: {_reason(e)}") from e

    async def _run(self, fn: Callable[[Session], Awaitable[T]], *, readonly: bool) -> T:
        for attempt in (1, 2):
            began = time.perf_counter()
            session: PgSession | None = None
            committing = False
            try:
                async with self._connection() as conn:
                    session = PgSession(conn)
                    tx = conn.transaction(
                        isolation="repeatable_read" if readonly else "read_committed", readonly=readonly
                    )
                    await tx.start()
                    try:
                        result = await fn(session)
                        await session.flush()
                    except BaseException:
                        with contextlib.suppress(*_UNAVAILABLE):
                            await tx.rollback()
                        raise
                    committing = True
                    await tx.commit()
            except DatabaseUnavailable as e:
                lost = isinstance(e.__cause__, _LOST)
                if attempt == 1 and lost and not committing:
                    log.info("database connection lost; running the transaction again", target=self.target)
                    continue
                raise
            held_ms = (time.perf_counter() - began) * 1000
            if held_ms > self.slow_ms:
                log.warning("slow transaction", target=self.target, held_ms=round(held_ms, 1), slow_ms=self.slow_ms)
            for callback in session.commit_callbacks:
                callback()
            return result
        raise AssertionError("unreachable")

    async def write(self, fn: Callable[[Session], Awaitable[T]]) -> T:
        """Run `fn(session)` as one transaction (group-committed under load: see the module doc);
        its result, or its exception with nothing of it written; `DatabaseUnavailable` at once
        when `max_queued_writes` writes already wait.  A caller cancelled while its write waits
        in a batch does not undo it (the batch is everyone's)."""
        with self._span("write"):
            return await self._write(fn)

    async def _write(self, fn: Callable[[Session], Awaitable[T]]) -> T:
        if self._running_writes < self.write_batches:
            self._running_writes += 1
            try:
                result = await self._run(fn, readonly=False)
                self.transactions += 1
                return result
            finally:
                self._running_writes -= 1
                self._start_writer()
        if len(self._writes) >= self.max_queued_writes:
            self.refused_writes += 1
            if self.refused_writes == 1 or self.refused_writes % 1000 == 0:
                log.warning(
                    "write queue full", target=self.target, queued=len(self._writes), refused=self.refused_writes
                )
            raise DatabaseUnavailable(
                f"PostgreSQL at {self.target}: {len(self._writes)} writes already wait for a transaction"
            )
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._writes.append((fn, future))
        self._start_writer()
        return await future

    def _start_writer(self) -> None:
        if self._writes and self._running_writes < self.write_batches:
            self._running_writes += 1
            task = asyncio.create_task(self._write_batches(), name=f"postgres-writes-{self.target}")
            self._writers.add(task)
            task.add_done_callback(self._writers.discard)

    async def _write_batches(self) -> None:
        try:
            while self._writes:
                batch = self._writes[: self.max_batch]
                del self._writes[: self.max_batch]
                try:
                    await self._commit_batch(batch)
                except asyncio.CancelledError:
                    for _, future in batch:
                        future.cancel()
                    raise
        finally:
            self._running_writes -= 1

    async def _commit_batch(self, batch: list[tuple[Callable[[Session], Awaitable[Any]], asyncio.Future[Any]]]) -> None:
        alone = batch
        if len(batch) > 1:
            try:
                outcomes = await self._run_together([fn for fn, _ in batch])
            except _RunApart:
                pass  # a constraint deferred to COMMIT: which function broke it is unknown
            except Exception as e:  # no connection, closed, or lost during COMMIT: the same for all
                for _, future in batch:
                    if not future.done():
                        future.set_exception(e)
                return
            else:
                self.transactions += 1
                alone = []
                for (fn, future), (ok, value, callbacks) in zip(batch, outcomes, strict=True):
                    if not ok and isinstance(value, _CONFLICTS):
                        alone.append((fn, future))  # lost a deadlock or a serialization conflict: again
                        continue
                    for callback in callbacks:
                        callback()
                    if future.done():
                        continue
                    if ok:
                        future.set_result(value)
                    else:
                        future.set_exception(value)
        for fn, future in alone:
            try:
                result = await self._run(fn, readonly=False)
            except Exception as e:
                if not future.done():
                    future.set_exception(e)
            else:
                self.transactions += 1
                if not future.done():
                    future.set_result(result)

    async def _run_together(self, fns: list[Callable[[Session], Awaitable[Any]]]) -> list[_Outcome]:
        """All of `fns` in one transaction: each one's (True, result, commit callbacks) or
        (False, exception, []).  Run first without savepoints; when one raised, rolled back and
        run again with a savepoint per function.  A connection lost before COMMIT runs the batch
        once more; `DatabaseUnavailable` when no connection could be had or it was lost during
        COMMIT (or twice); `_RunApart` when COMMIT itself refused the batch."""
        began = time.perf_counter()
        careful = False
        lost = False
        while True:
            try:
                outcomes = await self._attempt_together(fns, careful=careful)
                break
            except _FirstRunFailed:
                self.rolled_back_batches += 1
                careful = True
            except _LostBeforeCommit as e:
                if lost:
                    raise DatabaseUnavailable(str(e)) from e.__cause__
                lost = True
                log.info("database connection lost; running the write batch again", target=self.target)
        held_ms = (time.perf_counter() - began) * 1000
        if held_ms > self.slow_ms:
            log.warning(
                "slow write batch", target=self.target, held_ms=round(held_ms, 1), slow_ms=self.slow_ms, writes=len(fns)
            )
        return outcomes

    async def _attempt_together(
        self, fns: list[Callable[[Session], Awaitable[Any]]], *, careful: bool
    ) -> list[_Outcome]:
        outcomes: list[_Outcome] = []
        committing = False
        try:
            async with self._connection() as conn:
                tx = conn.transaction()
                pending = _Pending()
                try:
                    await tx.start()
                    if careful:
                        outcomes.extend([await self._in_savepoint(conn, fn) for fn in fns])
                    else:
                        for fn in fns:
                            session = PgSession(conn, pending)
                            outcomes.append((True, await fn(session), session.commit_callbacks))
                        await pending.flush(conn)
                except BaseException as e:
                    with contextlib.suppress(*_UNAVAILABLE, asyncpg.exceptions.PostgresError):
                        await tx.rollback()
                    if not careful and isinstance(e, Exception) and not isinstance(e, _LOST):
                        raise _FirstRunFailed from e
                    raise
                committing = True
                try:
                    await tx.commit()
                except asyncpg.exceptions.PostgresError as e:
                    if isinstance(e, _UNAVAILABLE):
                        raise
                    raise _RunApart from e
        except DatabaseUnavailable as e:
            if not committing and isinstance(e.__cause__, _LOST):
                raise _LostBeforeCommit(str(e)) from e.__cause__
            raise
        return outcomes

    async def _in_savepoint(self, conn: asyncpg.Connection, fn: Callable[[Session], Awaitable[Any]]) -> _Outcome:
        """`fn` in a savepoint of its own, its inserts sent inside it: its outcome, and nothing
        of it kept when it raised (or left its savepoint failed by catching a statement's error)."""
        await conn.execute("SAVEPOINT write")
        session = PgSession(conn)
        try:
            result = await fn(session)
            await session.flush()
            await conn.execute("RELEASE SAVEPOINT write")
        except Exception as e:
            if isinstance(e, _LOST):
                raise  # the transaction is gone with its connection: nothing to roll back to
            await conn.execute("ROLLBACK TO SAVEPOINT write; RELEASE SAVEPOINT write")  # simple protocol: one trip
            if isinstance(e, _UNAVAILABLE):  # a statement timeout: the caller sees a 503, as alone
                return (False, DatabaseUnavailable(f"PostgreSQL at {self.target}: {_reason(e)}"), [])
            return (False, e, [])
        return (True, result, session.commit_callbacks)

    async def read(self, fn: Callable[[Session], Awaitable[T]]) -> T:
        """`fn(session)` in a read-only REPEATABLE READ transaction: one snapshot for all its reads."""
        with self._span("read"):
            return await self._run(fn, readonly=True)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Session]:
        with self._span("transaction"):
            async with self._connection() as conn:
                session = PgSession(conn)
                async with conn.transaction():
                    yield session
                    await session.flush()
        for callback in session.commit_callbacks:
            callback()

    async def execute(self, sql: str, params: Params = ()) -> int:
        with self._span(sql_verb(sql)):
            async with self._connection() as conn:
                return _rows_changed(await conn.execute(numbered(sql), *params))

    async def fetchone(self, sql: str, params: Params = ()) -> Row | None:
        with self._span(sql_verb(sql)):
            async with self._connection() as conn:
                row: Row | None = await conn.fetchrow(numbered(sql), *params)
                return row

    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        with self._span(sql_verb(sql)):
            async with self._connection() as conn:
                rows: list[Row] = await conn.fetch(numbered(sql), *params)
                return rows

    def _span(self, operation: str) -> AbstractContextManager[Span]:
        return db_span(self.dialect, self.target.rsplit("/", 1)[-1] or "postgres", operation)

    async def ping(self) -> bool:
        try:
            await asyncio.wait_for(self.fetchone("SELECT 1"), self.acquire_timeout_s)
        except (DatabaseUnavailable, RuntimeError, TimeoutError):
            return False
        return True

    async def migrate(self, component: str, steps: Sequence[Migration]) -> int:
        """Apply the steps not applied yet, under an advisory lock: instances starting together
        wait for the first one's migration instead of racing it."""
        check_version(self.target, component, 0, len(steps))
        applied = 0
        async with self._connection() as conn:
            await conn.execute("SELECT pg_advisory_lock(hashtextextended($1, 0))", _MIGRATIONS_LOCK)
            try:
                await conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations ("
                    " component TEXT NOT NULL, version INTEGER NOT NULL, applied_at BIGINT NOT NULL,"
                    " PRIMARY KEY (component, version))"
                )
                recorded = await conn.fetchval(
                    "SELECT COALESCE(MAX(version), 0) FROM schema_migrations WHERE component = $1", component
                )
                check_version(self.target, component, int(recorded), len(steps))
                for version, step in enumerate(steps, start=1):
                    if version <= recorded:
                        continue
                    async with conn.transaction():
                        await conn.execute(step.postgresql if isinstance(step, Step) else step)
                        await conn.execute(
                            "INSERT INTO schema_migrations (component, version, applied_at) VALUES ($1, $2, $3)",
                            component,
                            version,
                            int(time.time() * 1000),
                        )
                    applied += 1
            finally:
                with contextlib.suppress(*_UNAVAILABLE):
                    await conn.execute("SELECT pg_advisory_unlock(hashtextextended($1, 0))", _MIGRATIONS_LOCK)
        if applied:
            log.info("database migrated", target=self.target, component=component, steps=applied, version=len(steps))
        return applied

    async def applied_version(self, component: str) -> int:
        row = await self.fetchone(
            "SELECT COALESCE(MAX(version), 0) FROM schema_migrations WHERE component = ?", (component,)
        )
        return int(row[0]) if row is not None else 0

    @asynccontextmanager
    async def leadership(self, name: str, *, retry_s: float = 1.0) -> AsyncIterator[PgLeadership]:
        lead = PgLeadership(self, name, retry_s)
        lead.start()
        try:
            yield lead
        finally:
            await lead.stop()


class PgLeadership:
    """A session-level advisory lock on `name`, held on a connection outside the pool, retried
    every `retry_s` while another instance holds it; `held` turns False the moment that
    connection is found lost (checked every `retry_s`)."""

    def __init__(self, db: PostgresDatabase, name: str, retry_s: float) -> None:
        self._db = db
        self.name = name
        self.retry_s = retry_s
        self._held = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def held(self) -> bool:
        return self._held.is_set()

    async def wait(self) -> None:
        await self._held.wait()

    def start(self) -> None:
        self._task = asyncio.create_task(self._keep(), name=f"leadership-{self.name}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._held.clear()

    async def _keep(self) -> None:
        while True:
            conn: asyncpg.Connection | None = None
            try:
                conn = await asyncpg.connect(**self._db._connect_options())
                # Polled: the server tells no one when another session's lock is released.
                while not await conn.fetchval("SELECT pg_try_advisory_lock(hashtextextended($1, 0))", self.name):  # noqa: ASYNC110
                    await asyncio.sleep(self.retry_s)
                self._held.set()
                log.info("leadership taken", name=self.name, target=self._db.target)
                while True:  # the lock lives as long as this connection: watch it
                    await asyncio.sleep(self.retry_s)
                    await asyncio.wait_for(conn.fetchval("SELECT 1"), self.retry_s * 5)
            except asyncio.CancelledError:
                raise
            except (*_UNAVAILABLE, asyncpg.exceptions.PostgresError) as e:
                if self._held.is_set():
                    log.warning("leadership lost", name=self.name, target=self._db.target, error=_reason(e))
                self._held.clear()
                await asyncio.sleep(self.retry_s)
            finally:
                self._held.clear()
                if conn is not None:
                    # Closing ends the session: the server releases the lock for the next instance.
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(conn.close(), 2)


def postgres_check(url: str, timeout: float = 3.0) -> Check:
    """Readiness: a new connection to the server logs in and answers ``SELECT 1``.  The error
    names the server, never the password."""

    async def check() -> None:
        try:
            conn = await asyncpg.connect(url, timeout=timeout)
        except Exception as e:
            raise ConnectionError(f"PostgreSQL at {postgres_target(url)}: {_reason(e)}") from None
        try:
            await asyncio.wait_for(conn.fetchval("SELECT 1"), timeout)
        finally:
            await conn.close()

    return check


class _RunApart(Exception):
    """COMMIT refused a group-committed batch (a deferred constraint): run its functions one by one."""


class _FirstRunFailed(Exception):
    """A function of a batch run without savepoints raised: the batch runs again with them."""


class _LostBeforeCommit(Exception):
    """The connection of a batch was lost before COMMIT was sent: nothing of it happened."""


# (True, result, commit callbacks) or (False, exception, []): one function's outcome in a batch.
_Outcome = tuple[bool, Any, list[Callable[[], None]]]
# Errors that say only that another transaction got in the way: worth one more run, alone.
_CONFLICTS = (asyncpg.exceptions.DeadlockDetectedError, asyncpg.exceptions.SerializationError)


async def _keep_session(conn: asyncpg.Connection) -> None:
    """The pool's reset of a released connection: nothing beyond the rollback of an open
    transaction that asyncpg always does.  asyncpg's default (RESET ALL, CLOSE ALL, UNLISTEN,
    unlocking advisory locks) is a round trip per transaction, for session state the stores
    never set: they use transactions and transaction-scoped locks only."""


def _reason(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return f"{type(error).__name__}: {text}" if text != type(error).__name__ else text
