"""The PostgreSQL backend on a real server (Debian's, started by `streamshop postgres`): the
stores' code unchanged, migrations run once when instances start together, limits and per-key
order held across instances (each instance its own pool), one relay leading at a time, clear
errors for a server that cannot be reached, recovery after the server restarts."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from schemas.catalog import default_catalog
from services.common.consumer import IdempotentHandler
from services.common.db import Database, DatabaseUnavailable, SchemaTooNew, Session, Step
from services.common.db_postgres import PostgresDatabase, _Pending, numbered
from services.common.db_sqlite import SqliteDatabase
from services.common.outbox import Outbox
from services.logs.store import LogEntry, LogQuery, LogStore
from services.orders.domain import LineItem, NewOrder, OrderStatus
from services.orders.store import OrderStore
from services.otp.domain import Channel, NewOtpRequest, RateLimited
from services.otp.store import OtpPolicy, OtpStore
from streamshop import postgres
from tests.support.postgres import fresh_database

CATALOG = default_catalog()


def _order() -> NewOrder:
    return NewOrder("customer-1", "EUR", (LineItem("sku-1", 2, Decimal("9.99")),))


async def _orders(url: str, instance: str) -> tuple[PostgresDatabase, OrderStore]:
    db = await PostgresDatabase(url, pool_max=4).open()
    store = OrderStore(db, Outbox(db, CATALOG.schema), topic="orders", service="orders", instance=instance)
    await store.setup()
    return db, store


def test_placeholders_are_numbered_outside_quotes() -> None:
    assert numbered("SELECT ? , '?', \"a?\" FROM t WHERE a = ? AND b = ?") == (
        "SELECT $1 , '?', \"a?\" FROM t WHERE a = $2 AND b = $3"
    )


async def test_instances_starting_together_migrate_once(pg_server: postgres.Server) -> None:
    url = fresh_database(pg_server)
    dbs = [PostgresDatabase(url, pool_max=2) for _ in range(4)]
    for db in dbs:
        await db.open()
    try:
        steps = [
            "CREATE TABLE a (id BIGINT PRIMARY KEY)",
            Step(sqlite="CREATE TABLE b (id INTEGER)", postgresql="CREATE TABLE b (id BIGINT)"),
        ]
        applied = await asyncio.gather(*(db.migrate("race", steps) for db in dbs))
        assert sorted(applied) == [0, 0, 0, 2]
        assert await dbs[0].applied_version("race") == 2
        with pytest.raises(SchemaTooNew, match="version 2, newer than this code's 1"):
            await dbs[1].migrate("race", steps[:1])
    finally:
        for db in dbs:
            await db.close()


async def test_concurrent_writes_are_group_committed_and_one_that_raises_loses_only_itself(
    pg_server: postgres.Server,
) -> None:
    """200 writes at once take far fewer than 200 transactions; in a batch where one raises, the
    others are still committed (the batch run again with a savepoint each), the raiser gets its own exception with
    none of its rows kept, and commit callbacks run only for what was committed."""
    url = fresh_database(pg_server)
    db = await PostgresDatabase(url, pool_max=4, write_batches=2, max_batch=50).open()
    try:
        await db.execute("CREATE TABLE t (n BIGINT PRIMARY KEY)")
        committed: list[int] = []

        def insert(n: int) -> Callable[[Session], Awaitable[int]]:
            async def fn(s: Session) -> int:
                await s.execute("INSERT INTO t (n) VALUES (?)", (n,))
                s.on_commit(lambda: committed.append(n))
                if n == 77:
                    raise ValueError("seventy-seven")
                await s.execute("INSERT INTO t (n) VALUES (?)", (n + 1_000,))
                return n

            return fn

        before = db.transactions
        outcomes = await asyncio.gather(*(db.write(insert(n)) for n in range(200)), return_exceptions=True)
        assert [o for o in outcomes if isinstance(o, BaseException)] == [outcomes[77]]
        assert isinstance(outcomes[77], ValueError)
        assert [o for o in outcomes if not isinstance(o, BaseException)] == [n for n in range(200) if n != 77]
        rows = {int(r["n"]) for r in await db.fetchall("SELECT n FROM t")}
        assert rows == {n for n in range(200) if n != 77} | {n + 1_000 for n in range(200) if n != 77}
        assert sorted(committed) == [n for n in range(200) if n != 77]
        # Two run at once as they came; 198 waited: four batches, three committed, the one with
        # 77 run again with savepoints: committed once too.
        transactions = db.transactions - before
        assert transactions <= 2 + 4, f"{transactions} transactions for 200 writes"

        # One at a time, each write is its own transaction, as without group commit.
        before = db.transactions
        for n in range(300, 305):
            assert await db.write(insert(n)) == n
        assert db.transactions - before == 5
    finally:
        await db.close()


def test_queued_inserts_travel_by_statement_and_keep_each_functions_own_order() -> None:
    """`Session.insert` rows of a batch: one group per statement while that keeps each session's
    order; a session whose earlier row sits in a later group opens a new group after it."""
    pending = _Pending()
    a = pending.add("child", (1,), -1)  # A: a child of an existing parent
    b1 = pending.add("parent", (2,), -1)  # B: a parent, then its child
    b2 = pending.add("child", (2,), b1)
    c1 = pending.add("parent", (3,), -1)  # C: as B, after it
    c2 = pending.add("child", (3,), c1)
    assert (a, b1, b2, c1, c2) == (0, 1, 2, 1, 2)
    assert pending.groups == [("child", [(1,)]), ("parent", [(2,), (3,)]), ("child", [(2,), (3,)])]


async def test_a_batch_of_inserts_keeps_foreign_keys_and_commits_once(pg_server: postgres.Server) -> None:
    """Functions queued behind a running write commit as one batch; a function's child row whose
    statement another function used first still follows its own parent."""
    url = fresh_database(pg_server)
    db = await PostgresDatabase(url, pool_max=2, write_batches=1).open()
    try:
        await db.execute("CREATE TABLE parent (id BIGINT PRIMARY KEY)")
        await db.execute("CREATE TABLE child (parent BIGINT NOT NULL REFERENCES parent (id))")
        await db.execute("INSERT INTO parent (id) VALUES (1)")
        release = asyncio.Event()

        async def holding(s: Session) -> None:
            await release.wait()  # the one slot is busy: what comes meanwhile is queued

        async def child_of_one(s: Session) -> None:
            await s.insert("INSERT INTO child (parent) VALUES (?)", (1,))

        def family(n: int) -> Callable[[Session], Awaitable[None]]:
            async def fn(s: Session) -> None:
                await s.insert("INSERT INTO parent (id) VALUES (?)", (n,))
                await s.insert("INSERT INTO child (parent) VALUES (?)", (n,))

            return fn

        before = db.transactions
        held = asyncio.create_task(db.write(holding))
        await asyncio.sleep(0)
        queued = [asyncio.create_task(db.write(fn)) for fn in (child_of_one, family(2), family(3))]
        await asyncio.sleep(0.05)
        release.set()
        await asyncio.gather(held, *queued)
        assert db.transactions - before == 2  # the held write, then one batch of three
        rows = await db.fetchall("SELECT parent FROM child ORDER BY parent")
        assert [int(r["parent"]) for r in rows] == [1, 2, 3]
    finally:
        await db.close()


async def test_orders_on_postgres_keep_each_orders_events_in_the_order_they_happened(
    pg_server: postgres.Server,
) -> None:
    url = fresh_database(pg_server)
    (db1, one), (db2, two) = await _orders(url, "a"), await _orders(url, "b")
    try:
        order, created = await one.create(_order(), idempotency_key="key-1")
        assert created
        again, created = await two.create(_order(), idempotency_key="key-1")
        assert not created
        assert again.id == order.id
        # Two instances race each transition of one order: exactly one of each pair wins.
        path = [OrderStatus.PAID, OrderStatus.SHIPPED, OrderStatus.DELIVERED]
        for status in path:
            results = await asyncio.gather(
                one.change_status(order.id, status, None),
                two.change_status(order.id, status, None),
                return_exceptions=True,
            )
            assert sum(1 for r in results if not isinstance(r, BaseException)) == 1, results
        loaded = await two.get(order.id)
        assert loaded is not None
        assert [h.to_status for h in loaded.history] == [OrderStatus.CREATED, *path]
        pending = await one.outbox.pending()
        names = [(r.event_name, r.key) for r in pending]
        assert names == [("OrderCreated", order.id)] + [("OrderStatusChanged", order.id)] * 3
        assert [r.id for r in pending] == sorted(r.id for r in pending)
    finally:
        await db1.close()
        await db2.close()


async def test_four_instances_limit_one_destination_as_one_instance_does(pg_server: postgres.Server) -> None:
    url = fresh_database(pg_server)
    policy = OtpPolicy(
        hash_key=b"k" * 32,
        ttl=timedelta(minutes=5),
        max_attempts=3,
        rate_limit_max=5,
        rate_limit_window=timedelta(minutes=10),
        destination_limit_max=5,
        client_limit_max=0,
    )
    instances = []
    for n in range(4):
        db = await PostgresDatabase(url, pool_max=5).open()
        store = OtpStore(db, Outbox(db, CATALOG.schema), policy, topic="otp", service="otp", instance=f"i{n}")
        await store.setup()
        instances.append((db, store))
    try:
        requests = [NewOtpRequest(f"user-{i % 20}", ((Channel.SMS, "+15550100"),)) for i in range(40)]
        results = await asyncio.gather(
            *(instances[i % 4][1].request(r) for i, r in enumerate(requests)), return_exceptions=True
        )
        accepted = [r for r in results if not isinstance(r, BaseException)]
        limited = [r for r in results if isinstance(r, RateLimited)]
        assert len(accepted) == policy.destination_limit_max
        assert len(limited) == 40 - policy.destination_limit_max
    finally:
        for db, _ in instances:
            await db.close()


async def test_one_relay_leads_and_another_takes_over_when_it_goes(pg_server: postgres.Server) -> None:
    url = fresh_database(pg_server)
    first, second = PostgresDatabase(url), PostgresDatabase(url)
    await first.open()
    await second.open()
    try:
        async with first.leadership("relay") as a:
            await asyncio.wait_for(a.wait(), 10)
            async with second.leadership("relay", retry_s=0.2) as b:
                await asyncio.sleep(0.6)
                assert a.held
                assert not b.held
                await first.close()
                lead_a = a
                await lead_a.stop()  # its connection closed: the server releases the lock
                await asyncio.wait_for(b.wait(), 10)
                assert b.held
    finally:
        await first.close()
        await second.close()


async def test_the_log_search_uses_full_text_search_with_the_same_query_syntax(pg_server: postgres.Server) -> None:
    url = fresh_database(pg_server)
    db = await PostgresDatabase(url).open()
    try:
        store = LogStore(db, max_records=3)
        await store.setup()
        assert store.full_text

        def entry(n: int, event: str) -> LogEntry:
            return LogEntry(
                f"e{n}", "logs.app", 0, n, "orders", "i1", "info", event, "orders.handlers", 1_000 + n, None, None, {}
            )

        async def index(s: Session) -> None:
            for n, text in enumerate(["order created", "payment failed: card declined", "order shipped", "x"]):
                await store.insert(s, entry(n, text))

        await db.write(index)
        assert await store.count() == 3  # retention: the oldest went
        found = await store.search(LogQuery(q="order"))
        assert [f["event"] for f in found] == ["order shipped"]
        assert [f["event"] for f in await store.search(LogQuery(q="DECLINED card"))] == [
            "payment failed: card declined"
        ]
        assert await store.search(LogQuery(q="'); DROP TABLE logs; --")) == []
        assert await store.search(LogQuery(q="!!!")) == []  # no word: a substring match, as on SQLite
        seen = await store.instances(since_ms=0)
        assert [(i["service"], i["instance"], i["lines"], i["requests"], i["errors"]) for i in seen] == [
            ("orders", "i1", 3, 0, 0)
        ]
        assert seen[0]["last_seen"] == "1970-01-01T00:00:01.003Z"
        assert await store.instances(since_ms=1_004) == []
    finally:
        await db.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_a_batch_of_log_lines_is_claimed_and_indexed_once_per_event_id(
    backend: str, pg_server: postgres.Server, tmp_path: Path
) -> None:
    db: Database = (
        await SqliteDatabase(tmp_path / "logs.db").open()
        if backend == "sqlite"
        else await PostgresDatabase(fresh_database(pg_server)).open()
    )
    try:
        store = LogStore(db, max_records=100)
        handler = IdempotentHandler(db, "log-indexer", _no_effect)
        await handler.setup()
        await store.setup()
        ids = [f"e{n}" for n in range(150)] + ["e7"]  # more than one chunk, and one id twice
        await db.write(lambda s: handler.claim_many(s, ["e0", "e1", "e2"]))

        async def index(s: Session) -> tuple[set[str], int]:
            claimed = await handler.claim_many(s, ids)
            fresh = [
                LogEntry(i, "logs.app", 0, n, "orders", "i1", "info", f"line {i}", "orders", n, None, None, {})
                for n, i in enumerate(ids[:150])
                if i in claimed
            ]
            return claimed, await store.insert_many(s, fresh)

        claimed, indexed = await db.write(index)
        assert claimed == {f"e{n}" for n in range(3, 150)}
        assert indexed == 147
        assert await store.count() == 100  # retention applied once, to the newest 100
        assert [f["event"] for f in await store.search(LogQuery(q="e149"))] == ["line e149"]
        assert await store.search(LogQuery(q="e49")) == []
        assert await db.write(lambda s: handler.claim_many(s, ids)) == set()
    finally:
        await db.close()


async def _no_effect(s: Session, message: object) -> None:
    raise AssertionError("not called")


async def test_an_unreachable_server_is_named_without_the_password() -> None:
    db = PostgresDatabase("postgresql://user:s3cret-pw@127.0.0.1:1/nowhere", connect_timeout_s=2)
    with pytest.raises(DatabaseUnavailable) as raised:
        await db.open()
    assert "127.0.0.1:1/nowhere" in str(raised.value)
    assert "s3cret-pw" not in str(raised.value)


async def test_a_wrong_password_is_refused_clearly(pg_server: postgres.Server) -> None:
    url = fresh_database(pg_server).replace(pg_server.password, "wrong-password")
    with pytest.raises(DatabaseUnavailable, match="password authentication failed") as raised:
        await PostgresDatabase(url).open()
    assert "wrong-password" not in str(raised.value)


def _service(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamshop.cli", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_service_with_an_unreachable_database_exits_naming_the_server_never_the_password() -> None:
    done = _service(
        "orders", "--port", "0", env={"ORDERS_DATABASE_URL": "postgresql://shop:pw-s3cret@127.0.0.1:1/shop"}
    )
    assert done.returncode == 1, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert "cannot connect to PostgreSQL at 127.0.0.1:1/shop" in last
    assert "pw-s3cret" not in done.stderr + done.stdout


def test_a_database_url_that_is_not_postgresql_is_a_configuration_error() -> None:
    done = _service("orders", "--port", "0", env={"ORDERS_DATABASE_URL": "mysql://u:p@127.0.0.1/x"})
    assert done.returncode == 2
    assert "ORDERS_DATABASE_URL: must be a postgresql://" in done.stderr


def test_a_service_refuses_a_schema_newer_than_its_code(pg_server: postgres.Server) -> None:
    url = fresh_database(pg_server)

    async def migrate_ahead() -> None:
        async with PostgresDatabase(url) as db:
            await db.migrate("orders", ["SELECT 1"] * 5)

    asyncio.run(migrate_ahead())
    done = _service("orders", "--port", "0", env={"ORDERS_DATABASE_URL": url})
    assert done.returncode == 1, done.stderr[-2000:]
    assert "the 'orders' schema is at version 5, newer than this code's 1" in done.stderr
