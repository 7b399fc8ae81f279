"""Several registries on one broker: one elected primary writes, the others forward to it, a
deposed primary is fenced, a killed one is replaced, and nothing ever makes the broker create
`_schemas` with its defaults. The invariant throughout: no id is ever served for two schemas."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from registry.election import Primary
from registry.errors import FORWARDING_ERROR, RegistryError
from registry.schema_text import parse_avro
from registry.store import SchemaStore
from registry.writer import CLOSE_SECONDS
from tests.support.harness import ThreadBroker
from tests.support.registry import Api, RegistryProcess, config, http_json, registry


def record(name: str) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": [{"name": "x", "type": "string"}]}


async def role(api: Api) -> str:
    return str((await api.get("/readyz")).json.get("role"))


async def test_two_registries_elect_one_primary_and_the_secondary_forwards_every_write(broker: ThreadBroker) -> None:
    async with (
        registry(broker.bootstrap) as first,
        registry(broker.bootstrap) as second,
        aiohttp.ClientSession() as session,
    ):
        a, b = Api(session, first.url), Api(session, second.url)
        assert (await a.put("/config", {"compatibility": "NONE"})).status == 200
        # The second to join makes the first rejoin: no role while that rebalance runs.
        for _ in range(200):
            roles = [await role(a), await role(b)]
            if sorted(roles) == ["primary", "secondary"]:
                break
            await asyncio.sleep(0.05)
        assert sorted(roles) == ["primary", "secondary"]
        primary, secondary = (first, second) if roles[0] == "primary" else (second, first)

        calls = []
        for i in range(12):
            for api in (a, b):
                calls.append((api, "shared", json.dumps(record(f"S{i}{api is a}"))))
                calls.append((api, f"own-{i % 3}", json.dumps(record(f"Common{i}"))))

        async def register(api: Api, subject: str, schema: str) -> tuple[str, str, int]:
            reply = await api.post(f"/subjects/{subject}/versions", {"schema": schema})
            assert reply.status == 200, reply
            return subject, schema, int(reply.json["id"])

        answers = await asyncio.gather(*(register(*call) for call in calls))
        assert secondary.store._writer is None, "the secondary never wrote"
        assert primary.store.fenced == 0

        ids: dict[int, str] = {}
        for subject, schema, schema_id in answers:
            identity = parse_avro(schema).identity
            assert ids.setdefault(schema_id, identity) == identity, "one id, two schemas"
            for api in (a, b):
                found = await api.post(f"/subjects/{subject}", {"schema": schema})
                assert found.json["id"] == schema_id, "a client was told an id the registries do not serve"
        assert len(set(ids.values())) == len(ids) == 36
        for api in (a, b):
            versions = (await api.get("/subjects/shared/versions")).json
            assert versions == list(range(1, 25)), "versions 1..n, no gap, no version twice"
        # Deletes and settings are forwarded too, with the primary's answer relayed.
        assert (await b.delete("/subjects/own-0/versions/1")).json == 1
        assert (await b.delete("/subjects/own-0/versions/1")).error_code == 40406
        assert (await b.put("/config/shared", {"compatibility": "FULL"})).json == {"compatibility": "FULL"}
        assert (await a.get("/config/shared")).json == {"compatibilityLevel": "FULL"}
        # A client reads its own writes back from the instance it wrote through, at once.
        through = b if roles[1] == "secondary" else a
        for i in range(20):
            version = await through.post("/subjects/back/versions", {"schema": json.dumps(record(f"Back{i}"))})
            assert (await through.get("/subjects/back/versions/latest")).json["id"] == version.json["id"]
            assert (await through.delete("/subjects/back")).status == 200
            ready = (await through.get("/readyz")).json
            assert ready["position"] == ready["end"], "answered before its write was read back"
            assert (await through.get("/subjects/back/versions")).status == 404
            level = ("NONE", "FULL")[i % 2]
            assert (await through.put("/config/shared", {"compatibility": level})).status == 200
            assert (await through.get("/config/shared")).json == {"compatibilityLevel": level}


async def test_an_instance_joining_the_group_never_takes_the_role_from_the_primary(broker: ThreadBroker) -> None:
    """The joiner's URL sorts first, so only the primary's claim to the role (made as it rejoins
    for the joiner's rebalance) keeps it where it is."""
    async with registry(broker.bootstrap) as first, aiohttp.ClientSession() as session:
        a = Api(session, first.url)
        await a.register("s", record("A"))  # as the primary: it holds the role
        async with registry(broker.bootstrap, advertised_url="http://127.0.0.1:1") as second:
            b = Api(session, second.url)
            deadline = time.monotonic() + 30
            while (roles := [await role(a), await role(b)]) != ["primary", "secondary"]:
                assert roles != ["secondary", "primary"], "the joiner took the role"
                assert time.monotonic() < deadline, roles
                await asyncio.sleep(0.05)
            await b.register("t", record("B"))  # forwarded to the primary, which writes
            assert first.store.fenced == 0


async def test_a_deposed_primary_is_fenced_and_its_write_never_applies(broker: ThreadBroker) -> None:
    """The old primary has not heard it was replaced: its next commit fails, and neither
    store ever applies the record it tried."""
    old, new = SchemaStore(config(broker.bootstrap)), SchemaStore(config(broker.bootstrap))
    await old.start()
    await new.start()
    try:
        old.follow(Primary("old", "http://127.0.0.1:1", 1, True))
        first_id, _ = await old.register("s", parse_avro(json.dumps(record("A"))))
        new.follow(Primary("new", "http://127.0.0.1:2", 2, True))
        await asyncio.wait_for(new._writable.wait(), 15)
        with pytest.raises(RegistryError) as refused:
            await old.register("t", parse_avro(json.dumps(record("B"))))
        assert refused.value.code == FORWARDING_ERROR
        assert old.fenced == 1
        assert old._writer is None, "a fenced primary waits for the election, never takes the role back"
        second_id, _ = await new.register("u", parse_avro(json.dumps(record("C"))))
        assert second_id == first_id + 1
        await old.sync()
        for store in (old, new):
            assert sorted(store.state.subjects) == ["s", "u"], "the fenced write was aborted"
            assert store.state.schemas[second_id].identity == parse_avro(json.dumps(record("C"))).identity
    finally:
        await old.stop()
        await new.stop()


async def test_a_fenced_primary_writes_again_only_once_a_heartbeat_sent_after_the_fence_confirms_it(
    broker: ThreadBroker,
) -> None:
    """Fenced with nobody else elected (the broker aborted its timed-out transaction, or a stray
    producer took the id): a heartbeat of the same generation, sent after the fence, proves no
    one else holds the role, and only such a one lets it open a new writer."""
    old, stray = SchemaStore(config(broker.bootstrap)), SchemaStore(config(broker.bootstrap))
    await old.start()
    await stray.start()
    try:
        role = Primary("old", "http://127.0.0.1:1", 1, True)
        old.follow(role)
        await old.register("s", parse_avro(json.dumps(record("A"))))
        before_fence = time.monotonic()
        stray.follow(Primary("stray", "http://127.0.0.1:2", 1, True))
        await asyncio.wait_for(stray._writable.wait(), 15)
        await stray.stop()  # fenced the old writer, then went away
        with pytest.raises(RegistryError) as refused:
            await old.register("t", parse_avro(json.dumps(record("B"))))
        assert refused.value.code == FORWARDING_ERROR
        assert refused.value.status == 503
        assert "Retry-After" in refused.value.headers
        old.confirmed(role, before_fence)  # sent before the fence: proves nothing
        assert old._suspended_in == role.generation, "an old heartbeat let it take the role back"
        assert old._writer is None
        old.confirmed(role, time.monotonic())
        await asyncio.wait_for(old._writable.wait(), 15)
        schema_id, _ = await old.register("t", parse_avro(json.dumps(record("B"))))
        assert schema_id == 2
    finally:
        await old.stop()
        await stray.stop()


def _group_settings() -> dict[str, str]:
    return {"REGISTRY_SESSION_TIMEOUT_MS": "2000", "REGISTRY_HEARTBEAT_INTERVAL_MS": "300"}


async def _readyz(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with session.get(url + "/readyz") as response:
        return dict(await response.json())


@pytest.mark.slow  # three registry processes, a broker, a failover after a session timeout
async def test_three_registry_processes_survive_a_sigkill_of_the_primary_mid_writes(
    broker_factory: Callable[..., ThreadBroker], tmp_path: Path
) -> None:
    broker = broker_factory(settings={"group.min.session.timeout.ms": "1000"})
    processes = [
        RegistryProcess(broker.bootstrap, tmp_path / f"registry-{i}.log", _group_settings()).start() for i in range(3)
    ]
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=40)) as session:
            apis = [Api(session, p.url) for p in processes]
            assert (await apis[2].put("/config", {"compatibility": "NONE"})).status == 200
            states = [await _readyz(session, p.url) for p in processes]
            assert sorted(str(s.get("role")) for s in states) == ["primary", "secondary", "secondary"]
            [victim] = [p for p, s in zip(processes, states, strict=True) if s["role"] == "primary"]

            acknowledged: dict[tuple[str, str], int] = {}
            refused = 0

            async def writer(n: int) -> None:
                nonlocal refused
                for i in range(30):
                    subject, schema = f"subject-{i % 4}", json.dumps(record(f"W{n}x{i}"))
                    for _attempt in range(60):  # a client retries a write it was not told the outcome of
                        api = apis[(n + _attempt) % 3]
                        try:
                            reply = await api.post(f"/subjects/{subject}/versions", {"schema": schema})
                        except (aiohttp.ClientError, TimeoutError):
                            reply = None
                        if reply is not None and reply.status == 200:
                            acknowledged[(subject, schema)] = int(reply.json["id"])
                            break
                        refused += 1
                        await asyncio.sleep(0.1)
                    else:
                        raise AssertionError(f"{subject} never registered")

            writers = [asyncio.create_task(writer(n)) for n in range(3)]
            while len(acknowledged) < 20:
                await asyncio.sleep(0.01)
            victim.kill()  # SIGKILL, mid-writes
            killed_at = time.monotonic()
            await asyncio.gather(*writers)
            survivors = [p for p in processes if p is not victim]
            roles = sorted([str((await _readyz(session, p.url)).get("role")) for p in survivors])
            assert roles == ["primary", "secondary"], "a survivor took the role over"
            assert time.monotonic() - killed_at < 30

            ids: dict[int, str] = {}
            for p in survivors:
                api = Api(session, p.url)
                for (subject, schema), schema_id in acknowledged.items():
                    found = await api.post(f"/subjects/{subject}", {"schema": schema})
                    assert found.json["id"] == schema_id, "an acknowledged id is not what the registry serves"
                for subject in {s for s, _ in acknowledged}:
                    versions = (await api.get(f"/subjects/{subject}/versions")).json
                    assert versions == list(range(1, len(versions) + 1))
                    for v in versions:
                        each = (await api.get(f"/subjects/{subject}/versions/{v}")).json
                        identity = parse_avro(each["schema"]).identity
                        assert ids.setdefault(each["id"], identity) == identity, "one id served for two schemas"
            assert len(acknowledged) == 90
            assert refused > 0, "the writes did not meet the failover: this test proves nothing"
    finally:
        for p in processes:
            p.kill()


@pytest.mark.slow  # a registry process started twice, stopping within its topic check interval
def test_a_deleted_schemas_topic_is_never_created_again_by_the_registry_which_stops(
    broker: ThreadBroker, tmp_path: Path
) -> None:
    """On a broker that creates topics on first use, deleting `_schemas` under a running
    registry must not leave a topic with the broker's defaults: the registry stops and says
    why; started again, it creates the topic properly, but will not serve on it while the ids
    it handed out are in use (registry.id_mark), until `_schemas_ids` is deleted too."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    log = tmp_path / "registry.log"
    process = RegistryProcess(broker.bootstrap, log).start()
    try:
        registered = http_json("POST", f"{process.url}/subjects/s/versions", {"schema": json.dumps(record("A"))})
        assert registered["id"] == 1
        admin.delete_topics(["_schemas"])["_schemas"].result(10)
        assert process.proc is not None
        code = process.proc.wait(30)
        assert code == 1
        assert "the schemas topic _schemas no longer exists" in log.read_text()
        assert "_schemas" not in admin.list_topics(timeout=10).topics, "a client re-created the topic"
    finally:
        process.kill()
    with pytest.raises(RuntimeError, match="registry exited with 1"):
        RegistryProcess(broker.bootstrap, log).start()
    assert "the schemas topic _schemas lost its history" in log.read_text()
    metadata = admin.list_topics(timeout=10).topics["_schemas"]
    assert len(metadata.partitions) == 1
    [configs] = admin.describe_configs([ConfigResource("topic", "_schemas")]).values()
    assert configs.result(10)["cleanup.policy"].value == "compact"
    admin.delete_topics(["_schemas_ids"])["_schemas_ids"].result(10)
    again = RegistryProcess(broker.bootstrap, log).start()
    try:
        assert http_json("GET", f"{again.url}/subjects") == []
    finally:
        assert again.stop() == 0


async def test_a_store_whose_consumer_never_closes_still_stops_and_closes_the_other(broker: ThreadBroker) -> None:
    """A stop ends even when a Kafka consumer's close hangs: it waits a bounded time, says which
    consumer did not close, and closes the rest."""
    store = SchemaStore(config(broker.bootstrap))
    await store.start()
    tail, offsets = store._consumer, store._offsets
    assert tail is not None
    assert offsets is not None
    closed_for_real = tail.close

    async def hangs() -> None:
        await asyncio.Event().wait()

    tail.close = hangs  # type: ignore[method-assign]
    started = time.monotonic()
    try:
        await asyncio.wait_for(store.stop(), CLOSE_SECONDS * 4)
        assert time.monotonic() - started >= CLOSE_SECONDS  # it did wait for the close
        assert store._consumer is None
        assert store._offsets is None
        with pytest.raises(RuntimeError):  # the other consumer was closed
            await offsets.poll(0.1)
    finally:
        await closed_for_real()
