"""Where the registry keeps its state: the compacted `_schemas` topic of a real broker.
Restarts (of the registry, of the broker) keep ids and versions; two registries on one
broker agree, including when they race; `streamshop registry` runs it as a process."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from registry.store import StoreUnavailable
from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import create_topic
from tests.support.registry import V1, Api, RegistryProcess, registry


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


async def test_racing_registries_never_give_one_id_two_schemas_or_one_version_two_schemas(
    broker: ThreadBroker,
) -> None:
    """Both registries register at once: into shared subjects, and the same schemas under
    subjects of their own. Whatever each one answered is what both finally serve: ids and
    schemas are one-to-one, every subject's versions are 1..n without a gap."""
    async with (
        registry(broker.bootstrap) as registry_a,
        registry(broker.bootstrap) as registry_b,
        aiohttp.ClientSession() as session,
    ):
        a, b = Api(session, registry_a.url), Api(session, registry_b.url)
        await a.put("/config", {"compatibility": "NONE"})
        await wait_equal(b, await snapshot(a))

        async def register(api: Api, subject: str, schema: dict[str, Any]) -> tuple[str, str, int]:
            return subject, json.dumps(schema), await api.register(subject, schema)

        calls = []
        for i in range(12):
            calls.append(register(a, "shared", record(f"A{i}", "x")))
            calls.append(register(b, "shared", record(f"B{i}", "x")))
            calls.append(register(a, f"a-{i % 3}", record(f"Common{i}", "x")))
            calls.append(register(b, f"b-{i % 3}", record(f"Common{i}", "x")))
        answers = await asyncio.gather(*calls)
        lost = registry_a.store.conflicts + registry_b.store.conflicts
        assert lost > 0, "the registries did not race: this test proves nothing"

        final = await snapshot(a)
        assert await wait_equal(b, final) == final
        ids: dict[int, str] = {}
        for subject in final["subjects"]:
            versions = final[subject]["versions"]
            assert versions == list(range(1, len(versions) + 1)), subject
            for version in final[subject]["each"]:
                canonical = json.dumps(json.loads(version["schema"]), sort_keys=True)
                assert ids.setdefault(version["id"], canonical) == canonical, "one id, two schemas"
        assert len(set(ids.values())) == len(ids), "one schema, two ids"
        assert len(ids) == 36
        for subject, schema, schema_id in answers:
            looked_up = await b.post(f"/subjects/{subject}", {"schema": schema})
            assert looked_up.json["id"] == schema_id, "a client was told an id the log does not hold"


async def test_the_first_record_in_the_log_wins_and_the_loser_is_healed(broker: ThreadBroker) -> None:
    """Records as two racing registries leave them: id 1 claimed for two schemas, version
    2 of `a` claimed twice. Every registry keeps the first claim, rewrites the losing keys
    (so compaction cannot resurrect a loser) and hands out the next free id afterwards."""
    await asyncio.to_thread(create_topic, broker.bootstrap, "_schemas", 1, {"cleanup.policy": "compact"})

    def key(subject: str, version: int) -> bytes:
        return json.dumps({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1}).encode()

    def value(subject: str, version: int, schema_id: int, schema: dict[str, Any]) -> bytes:
        return json.dumps(
            {"subject": subject, "version": version, "id": schema_id, "schema": json.dumps(schema), "deleted": False}
        ).encode()

    x, y, z, w = record("X", "a"), record("Y", "a"), record("Z", "a"), record("W", "a")
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
    await producer.start()
    try:
        for k, v in [
            (key("a", 1), value("a", 1, 1, x)),
            (key("b", 1), value("b", 1, 1, y)),  # loses: id 1 is X's
            (key("a", 2), value("a", 2, 2, z)),
            (key("a", 2), value("a", 2, 3, w)),  # loses: a/2 is Z
        ]:
            await producer.send_and_wait("_schemas", v, key=k, partition=0)
    finally:
        await producer.stop()

    async with api_for(broker.bootstrap) as first:
        expected = await snapshot(first)
        assert expected["subjects"] == ["a"]
        assert [(v["version"], v["id"], json.loads(v["schema"])) for v in expected["a"]["each"]] == [
            (1, 1, x),
            (2, 2, z),
        ]
        assert (await first.get("/schemas/ids/3")).error_code == 40403
        log = await consume_all(broker.bootstrap)
        last = {json.dumps(k, sort_keys=True): v for k, v in log}
        assert last[json.dumps(json.loads(key("b", 1)), sort_keys=True)] is None, "loser healed with a tombstone"
        assert last[json.dumps(json.loads(key("a", 2)), sort_keys=True)]["id"] == 2, "loser healed with the winner"
        async with api_for(broker.bootstrap) as second:
            assert await snapshot(second) == expected
        assert await first.register("b", y) == 3


def http_json(method: str, url: str, payload: Any = None) -> Any:
    data = json.dumps(payload).encode() if payload is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": V1})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


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
