"""The benchmarks' durable floor (loadtest.floor) against a real broker, and the PostgreSQL
schema the `tansu-pg` peer is given (loadtest.tansu_build) on a real PostgreSQL server."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import asyncpg
from confluent_kafka.admin import AdminClient, ConfigResource

from loadtest import brokers, floor, tansu_build
from streamshop import postgres
from tests.support.harness import ThreadBroker
from tests.support.postgres import fresh_database

# Two tables in the SQLite dialect and layout of tansu-storage's src/ddl: the first file
# references a table of the second (SQLite takes that; PostgreSQL needs the other first).
_HEADER = """-- a licence header
create table if not exists header (
    topition integer,
    offset_id integer,
    k blob,
    last_updated datetime default current_timestamp not null,
    foreign key (topition, offset_id) references record (topition, offset_id) on delete cascade
);
"""
_RECORD = """create table if not exists record (
    topition integer,
    offset_id integer not null,
    attributes integer,
    producer_id integer,
    producer_epoch integer,
    timestamp integer,
    v blob,
    primary key (topition, offset_id)
);
create table if not exists topic (
    id integer primary key autoincrement,
    uuid text not null,
    is_internal int default false not null
);
"""


def test_heartbeat_round_trip_reads_each_whole_answer(broker: ThreadBroker, tmp_path: Path) -> None:
    """Each Heartbeat is answered (an error for a group that does not exist) on one connection:
    a wrong size or a misread answer would raise or desynchronise the correlation ids."""
    probes = tmp_path / "probes"
    probes.mkdir()
    measured = floor.measure(broker.bootstrap, probes)
    assert measured.heartbeat_ms > 0
    assert measured.fdatasync_ms > 0
    assert measured.times(measured.ms * 3) == "3.0x floor"
    assert not list(probes.iterdir())  # the probe file is gone


def test_tansu_schema_is_created_by_postgresql_with_the_kafka_types(pg_server: postgres.Server, tmp_path: Path) -> None:
    (tmp_path / "040-header.sql").write_text(_HEADER)
    (tmp_path / "040-record.sql").write_text(_RECORD)
    schema = tmp_path / "schema.sql"
    schema.write_text(tansu_build.postgres_schema(tmp_path))
    url = fresh_database(pg_server, "tansu")
    tansu_build.apply_schema(url, schema)
    tansu_build.apply_schema(url, schema)  # again: every table `if not exists`

    async def column_types() -> dict[tuple[str, str], str]:
        conn = await asyncpg.connect(url)
        try:
            rows = await conn.fetch(
                "SELECT table_name, column_name, udt_name FROM information_schema.columns WHERE table_schema = 'public'"
            )
        finally:
            await conn.close()
        return {(r["table_name"], r["column_name"]): r["udt_name"] for r in rows}

    types = asyncio.run(column_types())
    assert types[("record", "offset_id")] == "int8"
    assert types[("record", "producer_id")] == "int8"
    assert types[("record", "producer_epoch")] == "int2"
    assert types[("record", "attributes")] == "int2"
    assert types[("record", "timestamp")] == "timestamp"
    assert types[("record", "v")] == "bytea"
    assert types[("record", "transaction_id")] == "xid8"  # the PostgreSQL engine's fetch reads it
    assert types[("header", "offset_id")] == "int8"
    assert types[("header", "last_updated")] == "timestamp"
    assert types[("topic", "id")] == "int4"
    assert types[("topic", "uuid")] == "uuid"
    assert types[("topic", "is_internal")] == "bool"


def test_the_benchmarks_durability_option_starts_the_broker_in_that_mode(tmp_path: Path) -> None:
    """`--durability page-cache` reaches the broker the benchmarks start: its DescribeConfigs
    says so, and a broker started without it keeps the default."""
    parser = argparse.ArgumentParser()
    brokers.add_durability_option(parser)
    for argv, expected in ((["--durability", "page-cache"], "page-cache"), ([], "fsync")):
        durability = parser.parse_args(argv).durability
        with brokers.started_brokers(["streamshop"], Path("unused"), durability=durability) as (broker,):
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            resource = ConfigResource(ConfigResource.Type.BROKER, "1")
            described = admin.describe_configs([resource])[resource].result(30)
            assert described["log.durability"].value == expected
