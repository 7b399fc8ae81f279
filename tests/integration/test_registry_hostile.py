"""The registry under hostile input: bodies that used to be 500s are 4xx in Confluent's
error format, and a record in `_schemas` that does not parse is skipped (counted) without
costing the records after it, so every acknowledged registration survives a restart."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
from aiokafka import AIOKafkaProducer

from tests.integration.test_registry_storage import api_for, record
from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import create_topic
from tests.support.registry import V1


async def _post_raw(url: str, body: bytes) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers={"Content-Type": V1}) as response,
    ):
        return response.status, json.loads(await response.text())


async def test_bodies_that_used_to_be_server_errors_are_client_errors(broker: ThreadBroker) -> None:
    async with api_for(broker.bootstrap) as api:
        url = f"{api.url}/subjects/s-value/versions"
        surrogate = b'{"schema": "{\\"type\\": \\"enum\\", \\"name\\": \\"E\\", \\"symbols\\": [\\"\\\\ud800\\"]}"}'
        lone_in_body = b'{"schema": "\\ud800"}'
        deep = b"[" * 100_000 + b"]" * 100_000
        deep_schema = json.dumps({"schema": "[" * 5_000 + "]" * 5_000}).encode()
        huge_number = b'{"schema": "\\"string\\"", "version": ' + b"9" * 5_000 + b"}"
        for body in (surrogate, lone_in_body, deep, deep_schema, huge_number):
            status, reply = await _post_raw(url, body)
            assert status in (400, 422), (body[:60], status, reply)
            assert isinstance(reply["error_code"], int)
            assert reply["message"]
        assert (await api.register("s-value", record("Fine", "a"))) == 1  # and it still serves


async def test_a_poison_record_in_schemas_costs_no_acknowledged_registration(broker: ThreadBroker) -> None:
    await asyncio.to_thread(create_topic, broker.bootstrap, "_schemas", 1, {"cleanup.policy": "compact"})
    async with api_for(broker.bootstrap) as api:
        assert await api.register("first-value", record("First", "a")) == 1
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        await producer.start()
        try:  # what a hostile client with write access to the topic can put there
            for key, value in [
                (b"[" * 50_000 + b"]" * 50_000, b"{}"),
                (json.dumps({"keytype": "SCHEMA", "subject": "x", "version": 1, "magic": 1}).encode(), b"9" * 5_000),
                (b'{"keytype": "SCHEMA", "subject": "\\ud800", "version": 1}', b"{}"),
                (b"\xff\xfe not json", b"\x00"),
            ]:
                await producer.send_and_wait("_schemas", value, key=key, partition=0)
        finally:
            await producer.stop()
        ids = [await api.register(f"after-{i}-value", record(f"After{i}", "a")) for i in range(5)]
        assert ids == [2, 3, 4, 5, 6]
    async with api_for(broker.bootstrap) as restarted:
        subjects = (await restarted.get("/subjects")).json
        assert subjects == sorted(["first-value", *(f"after-{i}-value" for i in range(5))])
        for i, schema_id in enumerate(ids):
            got = (await restarted.get(f"/subjects/after-{i}-value/versions/1")).json
            assert got["id"] == schema_id
