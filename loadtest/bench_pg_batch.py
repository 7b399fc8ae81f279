"""What one failing write costs a group-committed batch on PostgreSQL (services.common.db_postgres).

    python -m loadtest.bench_pg_batch [--writes 100] [--rounds 5]

A PostgreSQL server of its own (`streamshop postgres`, Debian's package) in a temporary
directory.  `--writes` writes queue behind one held write and commit as one batch; each is an
order-like function (an `execute`, then an `insert` sent with the batch's other rows).  The
batch runs twice: with no failing write, then with the middle one hitting a unique key.  For
each: the transactions begun and committed, the driver calls (round trips: an `executemany`
is one) and the time from the held write's release to the last answer, best of `--rounds`.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg

from services.common.db import Session
from services.common.db_postgres import PostgresDatabase
from streamshop import postgres

_calls: Counter[str] = Counter()


def _count(cls: Any, name: str) -> None:
    original = getattr(cls, name)

    async def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        _calls[name] += 1
        return await original(self, *args, **kwargs)

    setattr(cls, name, counted)


async def _batch(url: str, writes: int, failing: set[int]) -> dict[str, Any]:
    db = await PostgresDatabase(url, pool_max=2, write_batches=1, max_batch=writes).open()
    try:
        await db.execute("DROP TABLE IF EXISTS t")
        await db.execute("CREATE TABLE t (n BIGINT PRIMARY KEY, note TEXT)")
        await db.execute("INSERT INTO t (n) VALUES (-1)")

        def write(n: int) -> Callable[[Session], Awaitable[int]]:
            async def fn(s: Session) -> int:
                await s.execute("INSERT INTO t (n, note) VALUES (?, 'a')", (n,))
                await s.insert("INSERT INTO t (n) VALUES (?)", (-1 if n in failing else 1_000_000 + n,))
                return n

            return fn

        release = asyncio.Event()

        async def holding(s: Session) -> None:
            await release.wait()

        held = asyncio.create_task(db.write(holding))
        await asyncio.sleep(0)
        queued = [asyncio.create_task(db.write(write(n))) for n in range(writes)]
        await asyncio.sleep(0.05)
        _calls.clear()
        before = db.transactions
        began = time.perf_counter()
        release.set()
        await held
        outcomes = await asyncio.gather(*queued, return_exceptions=True)
        elapsed_ms = (time.perf_counter() - began) * 1000
        return {
            "begun": _calls["start"],
            "committed": db.transactions - before - 1,  # not the held write's
            "round_trips": sum(v for k, v in _calls.items() if k not in ("start", "commit", "rollback")),
            "failed": sum(isinstance(o, Exception) for o in outcomes),
            "ms": round(elapsed_ms, 1),
        }
    finally:
        await db.close()


async def _run(server: postgres.Server, writes: int, rounds: int) -> None:
    url = postgres.database_url(server, postgres.DATABASE)
    for label, failing in (("no failing write", set()), ("one failing write", {writes // 2})):
        best: dict[str, Any] | None = None
        for _ in range(rounds):
            got = await _batch(url, writes, failing)
            if best is None or got["ms"] < best["ms"]:
                best = got
        assert best is not None
        print(f"{label:18} " + "  ".join(f"{k}={v}" for k, v in best.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--writes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    for name in ("execute", "executemany", "fetch", "fetchrow", "fetchval"):
        _count(asyncpg.connection.Connection, name)
    for name in ("start", "commit", "rollback"):
        _count(asyncpg.transaction.Transaction, name)
    with tempfile.TemporaryDirectory(prefix="bench-pg-batch-") as directory:
        server = postgres.start(Path(directory), timeout=120)
        try:
            asyncio.run(_run(server, args.writes, args.rounds))
        finally:
            postgres.stop(Path(directory))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
