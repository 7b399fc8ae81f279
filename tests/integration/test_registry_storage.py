"""Where the registry keeps its state: the compacted `_schemas` topic of a real broker.
Restarts (of the registry, of the broker) keep ids and versions; two registries on one
broker agree; `streamshop registry` runs it as a process. (Several instances, the primary and
its failover: test_registry_primary.)"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from registry.config import RegistryConfig
from registry.store import StoreUnavailable
from schemas.client import WRITE_TIMEOUT, RegistryClient
from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import create_topic
from tests.support.registry import Api, RegistryProcess, http_json, registry


def record(name: str, *fields: str) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": [{"name": f, "type": "string"} for f in fields]}


@asynccontextmanager
async def api_for(bootstrap: str) -> AsyncIterator[Api]:
    async with registry(bootstrap) as running, aiohttp.ClientSession() as session:
        yield Api(session, running.url)


async def snapshot(api: Api) -> dict[str, Any]:
    """Everything a client can read: subjects, every version (deleted too), configs, modes."""
    out: dict[str, Any] = {
        "subjects": (await api.get("/subjects?deleted=true")).json,
        "live": (await api.get("/subjects")).json,
        "config": (await api.get("/config")).json,
        "mode": (await api.get("/mode")).json,
    }
    for subject in out["subjects"]:
        versions = (await api.get(f"/subjects/{subject}/versions?deleted=true")).json
        out[subject] = {
            "versions": versions,
            "live": (await api.get(f"/subjects/{subject}/versions")).json,
            "config": (await api.get(f"/config/{subject}")).json,
            "mode": (await api.get(f"/mode/{subject}")).json,
            "each": [(await api.get(f"/subjects/{subject}/versions/{v}?deleted=true")).json for v in versions],
        }
    return out


async def populate(api: Api) -> None:
    await api.register("orders-value", record("Order", "id"))
    with_note = record("Order", "id", "note")
    with_note["fields"][1]["default"] = ""
    await api.register("orders-value", with_note)
    await api.register("users-value", record("User", "id"))
    await api.register("audit-value", record("User", "id"))
    await api.register("gone-value", record("Gone", "x"))
    await api.put("/config/users-value", {"compatibility": "FULL"})
    await api.put("/config", {"compatibility": "FORWARD"})
    await api.put("/mode/audit-value", {"mode": "READONLY"})
    await api.delete("/subjects/orders-value/versions/1")
    await api.delete("/subjects/gone-value")


async def test_ids_versions_configs_modes_and_deletes_survive_a_registry_restart(broker: ThreadBroker) -> None:
    async with api_for(broker.bootstrap) as first:
        await populate(first)
        before = await snapshot(first)
    assert before["orders-value"]["versions"] == [1, 2]
    assert before["orders-value"]["live"] == [2]
    async with api_for(broker.bootstrap) as second:
        assert await snapshot(second) == before
        assert await second.register("new-value", record("New", "x")) == 5, "ids continue after the highest"


async def test_the_state_survives_a_restart_of_the_broker_and_the_registry(broker: ThreadBroker) -> None:
    async with api_for(broker.bootstrap) as first:
        await populate(first)
        before = await snapshot(first)
    await asyncio.to_thread(broker.restart)
    async with api_for(broker.bootstrap) as second:
        assert await snapshot(second) == before
        assert await second.register("new-value", record("New", "x")) == 5


async def test_a_running_registry_rides_out_a_broker_restart(broker: ThreadBroker) -> None:
    """While the broker is down the registry is not ready but still serves what it knows;
    once the broker is back it is ready again and accepts writes."""
    async with api_for(broker.bootstrap) as api:
        first_id = await api.register("a-value", record("A", "x"))
        await asyncio.to_thread(broker.stop)
        assert (await api.get("/readyz")).status == 503
        assert (await api.get(f"/schemas/ids/{first_id}")).status == 200
        await asyncio.to_thread(broker.start)
        for _ in range(100):
            if (await api.get("/readyz")).status == 200:
                break
            await asyncio.sleep(0.2)
        assert (await api.get("/readyz")).status == 200
        assert await api.register("b-value", record("B", "x")) == first_id + 1


async def consume_all(bootstrap: str, topic: str = "_schemas") -> list[tuple[Any, Any]]:
    """Every record of the topic as (key, value) JSON, in log order."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        out: list[tuple[Any, Any]] = []
        while await consumer.position(tp) < end:
            for records in (await consumer.getmany(tp, timeout_ms=500)).values():
                for r in records:
                    out.append((json.loads(r.key or b"null"), None if r.value is None else json.loads(r.value)))
        return out
    finally:
        await consumer.stop()


async def test_the_schemas_topic_is_compacted_and_holds_confluent_style_records(broker: ThreadBroker) -> None:
    async with api_for(broker.bootstrap) as api:
        schema_id = await api.register("users-value", record("User", "id"))
        await api.put("/config/users-value", {"compatibility": "NONE"})
        await api.put("/mode", {"mode": "READWRITE"})
        await api.delete("/subjects/users-value")
        await api.delete("/subjects/users-value?permanent=true")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    metadata = admin.list_topics(timeout=10)
    assert len(metadata.topics["_schemas"].partitions) == 1
    [configs] = admin.describe_configs([ConfigResource("topic", "_schemas")]).values()
    assert configs.result(10)["cleanup.policy"].value == "compact"

    log = await consume_all(broker.bootstrap)
    schema_key = {"keytype": "SCHEMA", "subject": "users-value", "version": 1, "magic": 1}
    subject_config_key = {"keytype": "CONFIG", "subject": "users-value", "magic": 0}
    assert log == [
        (
            schema_key,
            {
                "subject": "users-value",
                "version": 1,
                "id": schema_id,
                "schema": json.dumps(record("User", "id"), separators=(",", ":")),
                "deleted": False,
            },
        ),
        (subject_config_key, {"compatibilityLevel": "NONE"}),
        ({"keytype": "MODE", "subject": None, "magic": 0}, {"mode": "READWRITE"}),
        (schema_key, {**log[0][1], "deleted": True}),
        ({"keytype": "DELETE_SUBJECT", "subject": "users-value", "magic": 0}, {"subject": "users-value", "version": 1}),
        (schema_key, None),  # permanent deletion: tombstones
        ({"keytype": "DELETE_SUBJECT", "subject": "users-value", "magic": 0}, None),
        (subject_config_key, None),
    ]


async def test_a_schemas_topic_that_is_not_compacted_is_refused(broker: ThreadBroker) -> None:
    """Deleting old records would lose schemas: like Confluent, the registry will not start."""
    await asyncio.to_thread(create_topic, broker.bootstrap, "_schemas", 1, {"cleanup.policy": "delete"})
    with pytest.raises(StoreUnavailable, match="compact"):
        async with registry(broker.bootstrap):
            pass


async def test_two_registries_on_one_broker_agree_on_ids_and_versions(broker: ThreadBroker) -> None:
    async with api_for(broker.bootstrap) as a, api_for(broker.bootstrap) as b:
        order_id = await a.register("orders-value", record("Order", "id"))
        # b answers at once: a miss makes it catch up with the log before it says 404.
        assert (await b.post("/subjects/orders-value", {"schema": json.dumps(record("Order", "id"))})).json[
            "id"
        ] == order_id
        assert (await b.get(f"/schemas/ids/{order_id}")).status == 200
        assert await b.register("copy-value", record("Order", "id")) == order_id
        user_id = await b.register("users-value", record("User", "id"))
        assert user_id == order_id + 1
        assert (await a.get("/subjects/users-value/versions/latest")).json["id"] == user_id
        await a.put("/config", {"compatibility": "NONE"})
        await a.delete("/subjects/copy-value")
        expected = await snapshot(a)
        assert expected["config"] == {"compatibilityLevel": "NONE"}
        assert await wait_equal(b, expected) == expected


async def wait_equal(api: Api, expected: dict[str, Any]) -> dict[str, Any]:
    """The snapshot of `api` once it equals `expected` (a registry applies the other's
    records a few milliseconds after they are written), or the last one after 5 s."""
    got = await snapshot(api)
    for _ in range(50):
        if got == expected:
            break
        await asyncio.sleep(0.1)
        got = await snapshot(api)
    return got


def test_the_cli_serves_prints_its_ready_line_and_keeps_ids_across_restarts(
    broker: ThreadBroker, tmp_path: Path
) -> None:
    schema = json.dumps(record("Cli", "x"))
    process = RegistryProcess(broker.bootstrap, tmp_path / "registry.log").start()
    try:
        assert process.url.startswith("http://127.0.0.1:")
        registered = http_json("POST", f"{process.url}/subjects/cli-value/versions", {"schema": schema})
    finally:
        assert process.stop() == 0
    # The same command configured by environment variables instead of flags.
    env = {"STREAMSHOP_REGISTRY_BOOTSTRAP": broker.bootstrap, "STREAMSHOP_REGISTRY_LISTEN": "127.0.0.1:0"}
    again = RegistryProcess(broker.bootstrap, tmp_path / "registry.log", env).start(args=[])
    try:
        found = http_json("POST", f"{again.url}/subjects/cli-value", {"schema": schema})
        assert (found["id"], found["version"]) == (registered["id"], 1)
    finally:
        assert again.stop() == 0


def test_the_cli_exits_with_an_error_when_the_broker_is_unreachable(tmp_path: Path) -> None:
    env = {"STREAMSHOP_REGISTRY_STARTUP_TIMEOUT": "1"}
    process = RegistryProcess("127.0.0.1:1", tmp_path / "registry.log", env)
    with pytest.raises(RuntimeError, match="exited with 1"):
        process.start()
    assert "unreachable" in (tmp_path / "registry.log").read_text()


def _delete_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer: a dropped client fails it
    admin.delete_topics([topic], operation_timeout=10)[topic].result(15)


async def test_a_schemas_topic_that_lost_its_history_is_refused_while_its_ids_are_in_use(broker: ThreadBroker) -> None:
    """Deleting `_schemas` would let a registry hand out id 1 again, and records written with the
    old ids would decode against other schemas.  The highest id handed out is kept outside the
    topic (`_schemas_ids`): a registry refuses to start on a topic that lost its history, and
    starts afresh once the mark is deleted too."""
    async with api_for(broker.bootstrap) as api:
        assert await api.register("users-value", record("User", "id")) == 1
        assert await api.register("orders-value", record("Order", "id")) == 2
    await asyncio.to_thread(_delete_topic, broker.bootstrap, "_schemas")
    with pytest.raises(StoreUnavailable, match="lost its history") as refused:
        async with registry(broker.bootstrap):
            pass
    assert "ids up to 2" in str(refused.value)
    # the refusal holds on every start, not only the first (which created the topic again)
    with pytest.raises(StoreUnavailable, match="lost its history"):
        async with registry(broker.bootstrap):
            pass
    await asyncio.to_thread(_delete_topic, broker.bootstrap, "_schemas_ids")
    async with api_for(broker.bootstrap) as fresh:
        assert await fresh.register("users-value", record("User", "id")) == 1


async def test_a_registration_outlasts_the_read_timeout_while_the_registry_waits_for_its_broker(
    broker: ThreadBroker,
) -> None:
    """The services' client waits for a registration as long as the registry may take to
    complete it, not just its read timeout: a registry whose broker is down for longer than
    the read timeout answers once the broker is back, and the client takes that answer."""
    async with registry(broker.bootstrap) as running, RegistryClient(running.url, timeout=1.0) as client:
        first = await client.register("a-value", json.dumps(record("A", "x")))
        await asyncio.to_thread(broker.stop)
        pending = asyncio.create_task(client.register("b-value", json.dumps(record("B", "x"))))
        await asyncio.sleep(2.0)  # twice the read timeout
        assert not pending.done(), pending
        await asyncio.to_thread(broker.start)
        assert await pending == first + 1
    assert 3 * RegistryConfig().write_timeout < WRITE_TIMEOUT  # a forwarded write's bound, and the wait for a primary
