"""The logs service finds the lines of one trace: GET /logs?trace_id= and the live tail's
trace_id on a real broker, registry, SQLite file and HTTP server; a malformed trace id is a 422
naming it; the filter is served from an index added by a migration of its own, on SQLite and on
PostgreSQL (a database of the previous schema version gains it at start-up)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from aiokafka import AIOKafkaProducer

from services.common.db import Database, Session
from services.common.db_postgres import PostgresDatabase
from services.common.db_sqlite import SqliteDatabase
from services.logs.store import MIGRATIONS, LogEntry, LogQuery, LogStore
from streamshop import postgres
from tests.integration.test_logs_service import get_json, producer, ship, start_logs, wait_for_total
from tests.support.postgres import fresh_database
from tests.support.sse import read_sse

__all__ = ["producer", "start_logs"]  # the fixtures, used by name

Client = TestClient[web.Request, web.Application]

TRACE_A = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACE_B = "0af7651916cd43dd8448eb211c80319c"


async def test_search_and_tail_by_trace_id_return_only_that_traces_lines(
    producer: AIOKafkaProducer, start_logs: Callable[..., Any]
) -> None:
    """Lines of two services in trace A, one in trace B and one outside any trace: trace_id=A
    finds A's two, newest first, alone or with another filter; the tail's backlog and live lines
    keep to the trace too."""
    client: Client = await start_logs()
    await ship(producer, "orders", [{"event": "order created", "trace_id": TRACE_A}, {"event": "no trace"}])
    await ship(producer, "otp", [{"event": "otp sent", "trace_id": TRACE_B}])
    await ship(producer, "notify", [{"event": "order mail sent", "trace_id": TRACE_A}])
    await wait_for_total(client, 4)

    found = (await get_json(client, f"/logs?trace_id={TRACE_A}"))["items"]
    assert [(i["service"], i["event"], i["trace_id"]) for i in found] == [
        ("notify", "order mail sent", TRACE_A),
        ("orders", "order created", TRACE_A),
    ]
    assert [i["event"] for i in (await get_json(client, f"/logs?trace_id={TRACE_A}&service=orders"))["items"]] == [
        "order created"
    ]
    assert [i["event"] for i in (await get_json(client, f"/logs?trace_id={TRACE_B}"))["items"]] == ["otp sent"]
    assert (await get_json(client, f"/logs?trace_id={'1' * 32}"))["items"] == []

    response = await client.get(f"/logs/tail?trace_id={TRACE_A}&backlog=10")
    assert response.status == 200
    backlog = await read_sse(response, 2)  # in the order they were indexed: either, from two partitions
    assert sorted(e["data"]["event"] for e in backlog) == ["order created", "order mail sent"]
    await ship(producer, "orders", [{"event": "other trace", "trace_id": TRACE_B}])
    await ship(producer, "orders", [{"event": "order paid", "trace_id": TRACE_A}])
    assert [e["data"]["event"] for e in await read_sse(response, 1)] == ["order paid"]
    response.close()


_MALFORMED = (
    "4BF92F3577B34DA6A3CE929D0E0E4736",  # upper case: never what a line carries
    TRACE_A[:-1],
    TRACE_A + "0",
    "4bf92f3577b34da6a3ce929d0e0e473g",
    "00-" + TRACE_A + "-00f067aa0ba902b7-01",  # a whole traceparent
    "",
    "' OR 1=1 --",
)


async def test_a_malformed_trace_id_is_a_422_naming_it(start_logs: Callable[..., Any]) -> None:
    client: Client = await start_logs()
    for bad in _MALFORMED:
        for path in ("/logs", "/logs/tail"):
            response = await client.get(path, params={"trace_id": bad})
            assert response.status == 422, (bad, path)
            body = await response.json()
            assert body["error"] == "validation_failed"
            assert body["details"]["fields"] == {"trace_id": "must be a trace id: 32 lowercase hexadecimal digits"}
    twice = await get_json(client, f"/logs?trace_id={TRACE_A}&trace_id={TRACE_B}", 422)
    assert twice["details"]["fields"] == {"trace_id": "must be given at most once"}


def _entry(n: int, trace_id: str | None) -> LogEntry:
    return LogEntry(
        f"e{n}", "logs.app", 0, n, "orders", "i1", "info", f"line {n}", "orders.api", 1_000 + n, trace_id, None, {}
    )


async def _open(backend: str, pg_server: postgres.Server, tmp_path: Path) -> Database:
    if backend == "sqlite":
        return await SqliteDatabase(tmp_path / "logs.db").open()
    return await PostgresDatabase(fresh_database(pg_server)).open()


async def _uses_trace_index(db: Database) -> bool:
    """Whether the trace filter is served by the logs_trace_ts index: SQLite's plan says so; a
    small PostgreSQL table is scanned whatever the indexes, so there the index must exist."""
    if db.dialect == "sqlite":
        plan = await db.fetchall(
            "EXPLAIN QUERY PLAN SELECT id FROM logs WHERE trace_id = ? ORDER BY ts DESC, id DESC LIMIT 50", (TRACE_A,)
        )
        return any("logs_trace_ts" in str(row[3]) for row in plan)
    row = await db.fetchone("SELECT indexdef FROM pg_indexes WHERE tablename = 'logs' AND indexname = 'logs_trace_ts'")
    return row is not None and "(trace_id, ts, id)" in str(row[0])


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_a_database_of_the_previous_version_gains_the_trace_index_and_its_lines_are_found(
    backend: str, pg_server: postgres.Server, tmp_path: Path
) -> None:
    """A logs database created by the first migration (lines indexed before the trace filter
    existed) is migrated once at start-up; its old lines and new ones are found by trace."""
    db = await _open(backend, pg_server, tmp_path)
    try:
        assert await db.migrate("logs", MIGRATIONS[:1]) == 1
        old = LogStore(db, max_records=100)

        async def index_old(s: Session) -> None:
            await old.insert_many(s, [_entry(0, TRACE_A), _entry(1, None), _entry(2, TRACE_B)])

        await db.write(index_old)
        assert not await _uses_trace_index(db)

        store = LogStore(db, max_records=100)
        await store.setup()
        assert await db.applied_version("logs") == len(MIGRATIONS) == 2
        assert await _uses_trace_index(db)

        async def index_new(s: Session) -> None:
            await store.insert_many(s, [_entry(3, TRACE_A), _entry(4, None)])

        await db.write(index_new)
        assert [i["event"] for i in await store.search(LogQuery(trace_id=TRACE_A))] == ["line 3", "line 0"]
        assert [i["event"] for i in await store.search(LogQuery(trace_id=TRACE_B))] == ["line 2"]
        assert [i["event"] for i in await store.after(LogQuery(trace_id=TRACE_A), after_id=1)] == ["line 3"]
        assert len(await store.search(LogQuery())) == 5  # no trace filter: every line
    finally:
        await db.close()
