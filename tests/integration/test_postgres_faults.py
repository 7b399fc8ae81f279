"""The PostgreSQL backend under faults, on a real server: writes held up by another
connection's lock fill the bounded write queue and what comes next is answered 503 with
Retry-After over real HTTP (nothing answered 2xx is lost); a batch in which one function fails
costs two transactions, not one per function, and every function gets its own outcome."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest

from registry.app import RunningRegistry
from services.common.db import Session
from services.common.db_postgres import PostgresDatabase
from services.orders.app import create_app
from services.orders.config import OrdersConfig
from streamshop import postgres
from tests.support.harness import ThreadBroker
from tests.support.postgres import fresh_database
from tests.support.services import serve_app

ORDER = {"customer_id": "cust-1", "currency": "EUR", "items": [{"sku": "sku-1", "quantity": 1, "unit_price": "2.50"}]}


async def _post_order(session: aiohttp.ClientSession, url: str) -> tuple[int, dict[str, Any], str | None]:
    async with session.post(url + "/orders", json=ORDER, timeout=aiohttp.ClientTimeout(total=120)) as r:
        return r.status, await r.json(), r.headers.get("Retry-After")


async def test_a_full_write_queue_answers_503_with_retry_after_and_keeps_every_2xx(
    tmp_path: Path, broker: ThreadBroker, running_registry: RunningRegistry, pg_server: postgres.Server
) -> None:
    """Another connection holds a lock on `orders`: the service's writes wait on it, the queue
    fills up to ORDERS_DATABASE_WRITE_QUEUE, and from then on POST /orders is answered 503 with
    Retry-After at once (long before the statement timeout), as when the database is down.
    Once the lock goes, the writes that waited commit: every order answered 201 is in the
    database."""
    url = fresh_database(pg_server)
    queue = 4
    config = OrdersConfig(
        bootstrap_servers=broker.bootstrap,
        registry_url=running_registry.url,
        database_path=tmp_path / "unused.db",
        database_url=url,
        database_write_queue=queue,
        database_statement_timeout_ms=120_000,  # held writes wait on the lock, not on a timeout
        relay_poll_interval=0.2,
        log_shipping=False,
    )
    async with serve_app(create_app(config)) as (base, session):
        status, _, _ = await _post_order(session, base)  # the tables exist
        assert status == 201
        holder = await asyncpg.connect(url)
        try:
            tx = holder.transaction()
            await tx.start()
            await holder.execute("LOCK TABLE orders IN EXCLUSIVE MODE")  # reads go on, writes wait
            requests = [asyncio.create_task(_post_order(session, base)) for _ in range(queue * 5)]
            deadline = time.monotonic() + 60
            while not any(r.done() for r in requests):
                assert time.monotonic() < deadline, "no request was answered while the writes were held up"
                await asyncio.sleep(0.05)
            answered_while_held = [r.result() for r in requests if r.done()]
            await tx.commit()
        finally:
            await holder.close()
        answers = await asyncio.gather(*requests)
    refused = [a for a in answered_while_held if a[0] == 503]
    assert refused, answered_while_held
    assert all(a[0] == 503 for a in answered_while_held), answered_while_held  # nothing else got through
    for _, body, retry_after in refused:
        assert body["error"] == "database_unavailable"
        assert retry_after is not None
        assert int(retry_after) > 0
    accepted = [body["order_id"] for status, body, _ in answers if status == 201]
    assert accepted, Counter(a[0] for a in answers)
    assert {a[0] for a in answers} <= {201, 503}
    conn = await asyncpg.connect(url)
    try:
        stored = {r["id"] for r in await conn.fetch("SELECT id FROM orders")}
    finally:
        await conn.close()
    assert set(accepted) <= stored


def _recording(
    calls: Counter[str], name: str, fn: Callable[[Session], Awaitable[Any]]
) -> Callable[[Session], Awaitable[Any]]:
    async def run(s: Session) -> Any:
        calls[name] += 1
        return await fn(s)

    return run


async def _queued_behind_one(db: PostgresDatabase, fns: list[Callable[[Session], Awaitable[Any]]]) -> list[Any]:
    """`fns` written while the one write slot is busy: they commit as one batch."""
    release = asyncio.Event()

    async def holding(s: Session) -> None:
        await release.wait()

    held = asyncio.create_task(db.write(holding))
    await asyncio.sleep(0)
    queued = [asyncio.create_task(db.write(fn)) for fn in fns]
    await asyncio.sleep(0.05)
    release.set()
    await held
    return await asyncio.gather(*queued, return_exceptions=True)


@pytest.mark.parametrize("deferred", [False, True], ids=["execute", "insert"])
async def test_one_conflict_in_a_batch_costs_one_more_transaction_not_one_per_write(
    pg_server: postgres.Server, deferred: bool
) -> None:
    """A batch of 40 writes, one of which hits a unique key (through `execute`, or through an
    `insert` sent with the batch's other rows): the batch commits in one transaction after one
    rollback (before, every write ran again alone: 40 transactions); the one gets its own
    UniqueViolationError with nothing of it kept, every other write its own result, and commit
    callbacks run for those only."""
    url = fresh_database(pg_server)
    db = await PostgresDatabase(url, pool_max=2, write_batches=1, max_batch=100).open()
    try:
        await db.execute("CREATE TABLE t (n BIGINT PRIMARY KEY, note TEXT)")
        await db.execute("INSERT INTO t (n) VALUES (1000)")
        calls: Counter[str] = Counter()
        committed: list[int] = []

        def write(n: int) -> Callable[[Session], Awaitable[int]]:
            async def fn(s: Session) -> int:
                await s.execute("INSERT INTO t (n, note) VALUES (?, 'first')", (n,))
                key = 1000 if n == 17 else 2000 + n  # 17 conflicts with the row already there
                if deferred:
                    await s.insert("INSERT INTO t (n) VALUES (?)", (key,))
                else:
                    await s.execute("INSERT INTO t (n) VALUES (?)", (key,))
                s.on_commit(lambda: committed.append(n))
                return n * 10

            return fn

        before = db.transactions
        outcomes = await _queued_behind_one(db, [_recording(calls, str(n), write(n)) for n in range(40)])
        assert isinstance(outcomes[17], asyncpg.exceptions.UniqueViolationError)
        assert [o for i, o in enumerate(outcomes) if i != 17] == [n * 10 for n in range(40) if n != 17]
        assert db.transactions - before == 2  # the held write, then the batch: once
        assert db.rolled_back_batches == 1
        assert max(calls.values()) == 2  # each write ran at most twice: the batch, then with savepoints
        rows = {int(r["n"]) for r in await db.fetchall("SELECT n FROM t")}
        assert rows == {1000} | {n for n in range(40) if n != 17} | {2000 + n for n in range(40) if n != 17}
        assert sorted(committed) == [n for n in range(40) if n != 17]
    finally:
        await db.close()


async def test_a_write_that_loses_a_deadlock_in_a_batch_is_run_again_alone(pg_server: postgres.Server) -> None:
    """A real deadlock with another connection, in the batch's run with savepoints: the server
    aborts the batch's side, only that write is run again (alone, after the batch commits) and
    succeeds; the batch's other writes commit once."""
    url = fresh_database(pg_server)
    db = await PostgresDatabase(url, pool_max=3, write_batches=1, max_batch=100).open()
    other = await asyncpg.connect(url)
    watcher = await asyncpg.connect(url)
    try:
        await db.execute("CREATE TABLE t (n BIGINT PRIMARY KEY)")
        await db.execute("INSERT INTO t (n) VALUES (1000)")
        calls: Counter[str] = Counter()
        # The other side never runs the deadlock check (PostgreSQL checks a waiter once, after its
        # deadlock_timeout): it waits first, so the batch's wait closes the cycle and the batch's
        # own check, a second later, finds it however loaded the machine is.
        await other.execute("SET deadlock_timeout = '10min'")
        other_tx = other.transaction()
        await other_tx.start()
        await other.execute("SELECT pg_advisory_xact_lock(2)")
        blocked: asyncio.Task[Any] | None = None

        async def conflicting(s: Session) -> str:
            nonlocal blocked
            await s.execute("SELECT pg_advisory_xact_lock(1)")
            if calls["deadlocked"] == 1:  # the run with savepoints (the first run stopped before it)
                blocked = asyncio.create_task(other.execute("SELECT pg_advisory_xact_lock(1)"))
                deadline = time.monotonic() + 60
                while not await watcher.fetchval(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                ):
                    assert time.monotonic() < deadline, "the other connection never waited for lock 1"
                    await asyncio.sleep(0.02)
            await s.execute("SELECT pg_advisory_xact_lock(2)")
            return "done"

        async def failing(s: Session) -> None:
            await s.execute("INSERT INTO t (n) VALUES (1000)")  # makes the batch run with savepoints

        def plain(n: int) -> Callable[[Session], Awaitable[int]]:
            async def fn(s: Session) -> int:
                await s.execute("INSERT INTO t (n) VALUES (?)", (n,))
                return n

            return fn

        fns = [_recording(calls, "failing", failing), _recording(calls, "deadlocked", conflicting)]
        fns += [_recording(calls, str(n), plain(n)) for n in range(5)]
        before = db.transactions
        gathered = asyncio.ensure_future(_queued_behind_one(db, fns))
        deadline = time.monotonic() + 60
        while blocked is None or not blocked.done():  # the server broke the cycle on our side
            assert time.monotonic() < deadline, "the deadlock was never resolved"
            assert not gathered.done(), gathered.result()
            await asyncio.sleep(0.05)
        assert blocked.exception() is None  # the other side was never the one aborted
        await other_tx.commit()  # lets the write that lost run again
        outcomes = await gathered
        assert isinstance(outcomes[0], asyncpg.exceptions.UniqueViolationError)
        assert outcomes[1:] == ["done", 0, 1, 2, 3, 4]
        assert calls["deadlocked"] == 2  # in the batch with savepoints, then alone
        assert [calls[str(n)] for n in range(5)] == [1] * 5  # the first run stopped before them
        assert calls["failing"] == 2
        assert db.transactions - before == 3  # the held write, the batch, the write that lost alone
    finally:
        await other.close()
        await watcher.close()
        await db.close()
