"""A service's database calls as OpenTelemetry CLIENT spans, on both backends (SQLite in a temporary
file, PostgreSQL on the suite's real server): one span per transaction, a child of the request it
serves even when its writes are group-committed with other requests' on a task of the database's;
none outside a recorded trace, so a background loop's polls start no traces."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, StatusCode, TraceFlags

from services.common.db import Database, Session
from services.common.db_postgres import PostgresDatabase
from services.common.db_sqlite import SqliteDatabase
from streamshop import postgres
from tests.support.postgres import fresh_database
from tests.support.spans import recorder

_tracer = trace.get_tracer("tests")


@pytest.fixture(params=["sqlite", "postgresql"])
def target(request: pytest.FixtureRequest, tmp_path: Path, pg_server: postgres.Server) -> tuple[str, str]:
    """Which backend, and its file or URL (a new database made outside any event loop)."""
    if request.param == "sqlite":
        return "sqlite", str(tmp_path / "spans.db")
    return "postgresql", fresh_database(pg_server)


@pytest.fixture
async def database(target: tuple[str, str]) -> AsyncIterator[tuple[Database, str]]:
    """The database, open with a table ``t``, and its ``db.namespace``."""
    kind, where = target
    db: Database = SqliteDatabase(where) if kind == "sqlite" else PostgresDatabase(where, pool_max=4)
    await db.open()
    try:
        await db.execute("CREATE TABLE t (n INTEGER PRIMARY KEY)")
        yield db, where.rsplit("/", 1)[-1]
    finally:
        await db.close()


def _insert(n: int, *, fail: bool = False) -> object:
    async def fn(s: Session) -> int:
        await s.execute("INSERT INTO t (n) VALUES (?)", (n,))
        if fail:
            raise ValueError("refused")
        return n

    return fn


def _database_spans(spans: tuple[ReadableSpan, ...]) -> list[ReadableSpan]:
    return [s for s in spans if s.attributes and "db.system.name" in s.attributes]


async def test_each_requests_write_is_its_own_child_span_though_the_writes_share_a_commit(
    database: tuple[Database, str],
) -> None:
    db, namespace = database
    spans = recorder()
    requests = 20

    async def request(n: int) -> int:
        with _tracer.start_as_current_span(f"request {n}"):
            result: int = await db.write(_insert(n))  # type: ignore[arg-type]
            return result

    assert await asyncio.gather(*(request(n) for n in range(requests))) == list(range(requests))
    finished = spans.get_finished_spans()
    parents = {s.name: s for s in finished if s.name.startswith("request ")}
    writes = [s for s in finished if s.name == f"write {namespace}"]
    assert len(writes) == requests
    for write in writes:
        assert write.kind == SpanKind.CLIENT
        assert write.parent is not None
        assert write.attributes is not None
        assert write.attributes["db.system.name"] == db.dialect
        assert write.attributes["db.namespace"] == namespace
        assert write.attributes["db.operation.name"] == "write"
    # Every request has its own write span, however the writes were batched.
    assert {w.parent.span_id for w in writes if w.parent} == {p.context.span_id for p in parents.values() if p.context}


async def test_a_failed_write_reads_and_statements_are_spans_too(database: tuple[Database, str]) -> None:
    db, namespace = database
    spans = recorder()
    with _tracer.start_as_current_span("request"):
        with pytest.raises(ValueError, match="refused"):
            await db.write(_insert(1, fail=True))  # type: ignore[arg-type]
        assert await db.fetchone("SELECT COUNT(*) FROM t") is not None
        async with db.transaction() as tx:
            await tx.execute("INSERT INTO t (n) VALUES (?)", (2,))
    by_name = {s.name: s for s in _database_spans(spans.get_finished_spans())}
    assert set(by_name) == {f"write {namespace}", f"SELECT {namespace}", f"transaction {namespace}"}
    assert by_name[f"write {namespace}"].status.status_code == StatusCode.ERROR
    select = by_name[f"SELECT {namespace}"].attributes
    assert select is not None
    assert select["db.operation.name"] == "SELECT"


async def test_no_span_outside_a_recorded_trace(database: tuple[Database, str]) -> None:
    """A background poll makes no trace of its own; an unsampled request's calls cost no span."""
    db, _ = database
    spans = recorder()
    await db.write(_insert(1))  # type: ignore[arg-type]
    await db.fetchall("SELECT n FROM t")
    unsampled = SpanContext(0x1234, 0x5678, is_remote=True, trace_flags=TraceFlags(TraceFlags.DEFAULT))
    with trace.use_span(NonRecordingSpan(unsampled)):
        await db.write(_insert(2))  # type: ignore[arg-type]
        await db.fetchone("SELECT n FROM t WHERE n = ?", (2,))
    assert _database_spans(spans.get_finished_spans()) == []


async def test_what_a_transaction_causes_stays_the_requests_child(database: tuple[Database, str]) -> None:
    """The database span is not current: an outbox row written in a transaction stores the
    request's context, so the relay's send is the request's child, beside the database call."""
    db, namespace = database
    spans = recorder()
    with _tracer.start_as_current_span("request") as request:
        async with db.transaction() as tx:
            inside = trace.get_current_span()
            await tx.execute("INSERT INTO t (n) VALUES (?)", (3,))
    assert inside is request
    (call,) = _database_spans(spans.get_finished_spans())
    assert call.name == f"transaction {namespace}"
    assert call.parent is not None
    assert call.parent.span_id == request.get_span_context().span_id
