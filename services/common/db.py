"""A service's database: SQLite (one file, the embedded default) or PostgreSQL (shared by
several instances of the service), behind one interface the stores are written against.

    db = config.open_database()       # services.common.config: from <PREFIX>_DATABASE_URL or _PATH
    await db.open()

Store code is written once, as async functions of a `Session` (the statements of one open
transaction), with ``?`` placeholders and SQL both backends accept::

    async def create(s: Session) -> int:
        await s.lock(f"order:{order_id}")              # serialise with other instances on this key
        row = await s.fetchone("SELECT status FROM orders WHERE id = ?", (order_id,))
        ...
        return await s.execute("UPDATE orders SET status = ? WHERE id = ?", (status, order_id))

    changed = await db.write(create)      # one transaction: committed, or rolled back if it raised
    order = await db.read(load)           # reads, outside any write transaction

How each backend runs it:

- **SQLite** (`services.common.db_sqlite`): one connection.  `write` runs the whole function at
  once and *group-commits* the writes queued meanwhile (one BEGIN IMMEDIATE ... COMMIT, each
  write in a SAVEPOINT): on the event loop when the commit does not fsync (WAL, `synchronous`
  NORMAL), else in a worker thread.  The function must therefore await only its session: the
  session's methods complete without suspending, so the coroutine is driven to its end in one
  go (`drive`).  `lock` is a no-op: the transaction holds the file's write lock.
- **PostgreSQL** (`services.common.db_postgres`, asyncpg): a bounded connection pool; the same
  function runs on the event loop, one round trip per statement, inside `BEGIN ... COMMIT` on a
  pooled connection, group-committed with the writes that queued while others ran.  `insert`
  queues an INSERT nobody reads, sent with the batch's other rows of that statement.  `lock`
  takes transaction-scoped advisory locks (sorted within a function); with it, N instances
  enforce a limit exactly as one does.

`db.transaction()` gives the same `Session` for code that interleaves other awaits (network I/O
must not happen inside it: on SQLite everything else of the process waits for the write lock).

Migrations are versioned per *component* (`"outbox"`, `"orders"`...) in `schema_migrations`;
`await db.migrate("orders", STEPS)` applies the steps not yet recorded, each atomically with its
record.  A step is portable SQL (one string) or a `Step` with each backend's text.  On PostgreSQL
the whole run holds an advisory lock, so instances starting at the same moment migrate once.  A
database whose recorded version is newer than the code's steps refuses to open (`SchemaTooNew`):
old code must not write into a schema it does not know.  Steps are append-only.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol, Self, TypeVar

from kit.errors import ServiceUnavailable
from kit.health import postgres_target
from kit.process import StartupError

__all__ = [
    "Database",
    "DatabaseUnavailable",
    "Leadership",
    "Migration",
    "Params",
    "Row",
    "SchemaTooNew",
    "Session",
    "Step",
    "check_version",
    "drive",
    "in_chunks",
    "open_for_service",
    "postgres_target",
    "row_chunks",
]

T = TypeVar("T")
Params = Sequence[Any]


class Row(Protocol):
    """A result row: by column name or position (`sqlite3.Row` and `asyncpg.Record` both are)."""

    def __getitem__(self, key: str | int, /) -> Any: ...


class Session(Protocol):
    """The statements of one open transaction."""

    dialect: str  # "sqlite" or "postgresql"

    async def execute(self, sql: str, params: Params = ()) -> int:
        """Run one statement; the number of rows it changed."""
        ...

    async def executemany(self, sql: str, rows: Iterable[Params]) -> None: ...

    async def insert(self, sql: str, params: Params = ()) -> None:
        """An INSERT whose outcome this function does not read.  SQLite runs it at once; on
        PostgreSQL it may be sent later in this transaction, with the other rows of the same
        statement (of this function and of the others group-committed with it), and always before
        this session's next statement and before COMMIT: so a function reads its own rows, and an
        error of the insert (a constraint) still fails the function, but surfaces at that later
        point.  Catch errors around `execute`, not around `insert`."""
        ...

    async def fetchone(self, sql: str, params: Params = ()) -> Row | None: ...

    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]: ...

    async def lock(self, *keys: str) -> None:
        """Until this transaction ends, no other transaction holding one of `keys` runs."""
        ...

    def on_commit(self, callback: Callable[[], None]) -> None:
        """Call `callback` on the event loop after the commit (never on rollback)."""
        ...


class Database(Protocol):
    dialect: str
    target: str  # where it is, for logs and errors: a path, or host:port/name (never a password)

    async def open(self) -> Self: ...

    async def close(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc: object) -> None: ...

    @property
    def is_open(self) -> bool: ...

    async def write(self, fn: Callable[[Session], Awaitable[T]]) -> T:
        """`fn(session)` as one transaction; its result, or its exception after a rollback."""
        ...

    async def read(self, fn: Callable[[Session], Awaitable[T]]) -> T:
        """`fn(session)` for reads, outside any write transaction."""
        ...

    def transaction(self) -> AbstractAsyncContextManager[Session]: ...

    async def execute(self, sql: str, params: Params = ()) -> int: ...

    async def fetchone(self, sql: str, params: Params = ()) -> Row | None: ...

    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]: ...

    async def ping(self) -> bool: ...

    async def migrate(self, component: str, steps: Sequence[Migration]) -> int: ...

    async def applied_version(self, component: str) -> int: ...

    def leadership(self, name: str) -> AbstractAsyncContextManager[Leadership]: ...


class Leadership(Protocol):
    """Held while this process is the one instance doing `name` (the outbox relay)."""

    @property
    def held(self) -> bool: ...

    async def wait(self) -> None:
        """Until held (returns at once on SQLite: one process owns the file)."""
        ...


@dataclass(frozen=True, slots=True)
class Step:
    """A migration step whose text differs between the backends.  `sqlite` may also be a function
    of the `sqlite3.Connection` (for a step that probes what the library supports)."""

    sqlite: str | Callable[[Any], None]
    postgresql: str


Migration = str | Step


class DatabaseUnavailable(ServiceUnavailable):
    """The database cannot be reached now (down, restarting, the pool exhausted past its
    timeout, a statement past its timeout): the request may succeed later.  HTTP answers 503
    with Retry-After and a body that says only that; `str()` is the reason, for the logs."""

    code = "database_unavailable"
    default_message = "the database is unavailable; retry later"
    retry_after_s = 2

    def __init__(self, reason: str) -> None:
        super().__init__()
        self.reason = reason

    def __str__(self) -> str:
        return self.reason

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}


class SchemaTooNew(StartupError):
    """The database was migrated by newer code than this process's: it must not start."""


async def open_for_service(db: Database, setup: Callable[[], Awaitable[None]]) -> Database:
    """`db` opened and `setup` (the store's migrations) run; a database that cannot be reached
    at start is a `StartupError` (one line naming the server, exit status 1)."""
    try:
        await db.open()
        await setup()
    except DatabaseUnavailable as e:
        await db.close()
        raise StartupError(str(e)) from None
    except BaseException:
        await db.close()
        raise
    return db


_COMPONENT = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def check_version(target: str, component: str, recorded: int, known: int) -> None:
    if not _COMPONENT.fullmatch(component):
        raise ValueError(f"invalid migration component name {component!r}")
    if recorded > known:
        raise SchemaTooNew(
            f"{target}: the {component!r} schema is at version {recorded}, newer than this code's "
            f"{known}: run the newer release (or restore a backup), never an older one on it"
        )


def _slices(count: int, largest: int) -> Iterator[slice]:
    """Consecutive slices of power-of-two lengths up to `largest`, covering `count` items."""
    start = 0
    while start < count:
        size = largest
        while size > count - start:
            size //= 2
        yield slice(start, start + size)
        start += size


def row_chunks(rows: Sequence[Params], largest: int = 64) -> Iterator[tuple[str, list[Any]]]:
    """`rows` as multi-row VALUES lists: (``"(?, ?), (?, ?)"``, their parameters flat) per chunk.

    One INSERT of many rows costs the server a fraction of one INSERT per row: indexing log lines
    on PostgreSQL took a seventh of the server's CPU in chunks of 50.  Chunks have power-of-two
    sizes up to `largest`, so a statement has few distinct texts and each stays prepared in the
    driver's cache; both backends' parameter limits (32,766) bound `largest` * columns."""
    for part in _slices(len(rows), largest):
        chunk = rows[part]
        one = "(" + ", ".join("?" * len(chunk[0])) + ")"
        yield ", ".join([one] * len(chunk)), [value for row in chunk for value in row]


def in_chunks(values: Sequence[Any], largest: int = 64) -> Iterator[tuple[str, list[Any]]]:
    """`values` as ``IN (...)`` lists: (``"?, ?, ?"``, those values) per chunk, sized as
    `row_chunks`'s: one UPDATE or DELETE for many rows instead of one per row."""
    for part in _slices(len(values), largest):
        chunk = list(values[part])
        yield ", ".join("?" * len(chunk)), chunk


def drive(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends to its end, synchronously (a store function on SQLite's
    session, wherever its batch runs)."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("a database function awaited something other than its session (network I/O in a transaction?)")
