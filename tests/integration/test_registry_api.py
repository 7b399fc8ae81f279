"""The schema registry's REST API (Confluent Schema Registry's, for Avro) over real HTTP,
backed by a real broker: every endpoint, and Confluent's status, error code and media type
for bad input.

The tests share one registry (and its broker) per module, each in subjects of its own, leaving
the global config and mode as they found them; a test of the global config, mode, ids, listings
or readiness gets a registry of its own (`fresh_api`: its own topic and group on that broker)."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

from tests.support.harness import ThreadBroker
from tests.support.registry import V1, Api, ThreadRegistry, registry

USER_V1: dict[str, Any] = {
    "type": "record",
    "name": "User",
    "namespace": "test",
    "fields": [{"name": "id", "type": "long"}],
}
# Adds an optional field with a default: BACKWARD, FORWARD and FULL compatible with V1.
USER_V2: dict[str, Any] = {
    **USER_V1,
    "fields": [*USER_V1["fields"], {"name": "email", "type": ["null", "string"], "default": None}],
}
# Adds a required field: the new schema cannot read V1 data (not BACKWARD compatible).
USER_REQUIRED_AGE: dict[str, Any] = {**USER_V1, "fields": [*USER_V1["fields"], {"name": "age", "type": "int"}]}
ORDER: dict[str, Any] = {"type": "record", "name": "Order", "fields": [{"name": "total", "type": "double"}]}


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadBroker]:
    broker = ThreadBroker(tmp_path_factory.mktemp("registry-api-broker")).start()
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture(scope="module")
def module_registry(module_broker: ThreadBroker) -> Iterator[ThreadRegistry]:
    """The registry the module's tests share, on a loop of its own (the tests' loops come and go)."""
    with ThreadRegistry(module_broker.bootstrap) as running:
        yield running


@pytest.fixture
async def api(module_registry: ThreadRegistry) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession() as session:
        yield Api(session, module_registry.url)


_stores = itertools.count()


@pytest.fixture
async def fresh_api(module_broker: ThreadBroker) -> AsyncIterator[Api]:
    """A registry of the test's own: an empty store (its own topic) and its own election (group)."""
    n = next(_stores)
    async with (
        registry(module_broker.bootstrap, topic=f"_schemas-{n}", group_id=f"schema-registry-{n}") as running,
        aiohttp.ClientSession() as session,
    ):
        yield Api(session, running.url)


def body(schema: Any, **extra: Any) -> dict[str, Any]:
    return {"schema": json.dumps(schema), **extra}


# ----------------------------------------------------------------------------------------------
# Registering and reading


async def test_registering_returns_an_id_and_the_same_schema_again_returns_the_same_id(api: Api) -> None:
    first = await api.post("/subjects/again-value/versions", body(USER_V1))
    assert first.status == 200
    assert first.content_type == V1
    again = await api.post("/subjects/again-value/versions", body(USER_V1))
    assert again.json == first.json
    assert (await api.get("/subjects/again-value/versions")).json == [1]


async def test_one_schema_under_two_subjects_has_one_global_id_and_a_version_per_subject(fresh_api: Api) -> None:
    order_id = await fresh_api.register("orders-value", ORDER)
    v1_id = await fresh_api.register("users-value", USER_V1)
    v2_id = await fresh_api.register("users-value", USER_V2)
    same_id = await fresh_api.register("archive-value", USER_V2)
    assert len({order_id, v1_id, v2_id}) == 3
    assert same_id == v2_id
    assert (await fresh_api.get("/subjects/users-value/versions/2")).json["id"] == v2_id
    assert (await fresh_api.get("/subjects/archive-value/versions/1")).json["id"] == v2_id
    assert (await fresh_api.get(f"/schemas/ids/{v2_id}/subjects")).json == ["archive-value", "users-value"]


async def test_equivalent_spellings_of_a_schema_are_the_same_schema(api: Api) -> None:
    """Layout, key order, `{"type": "long"}` for `"long"` and a namespace written into the
    name do not make a new schema: same id, no new version."""
    schema_id = await api.register("respelled-value", USER_V1)
    respelled = (
        '{ "fields" : [ { "type" : {"type": "long"}, "name" : "id" } ],\n  "name" : "test.User", "type" : "record" }'
    )
    reply = await api.post("/subjects/respelled-value/versions", {"schema": respelled})
    assert reply.json == {"id": schema_id}
    assert (await api.get("/subjects/respelled-value/versions")).json == [1]
    lookup = await api.post("/subjects/respelled-value", {"schema": respelled})
    assert lookup.json["version"] == 1


async def test_a_version_is_read_by_number_by_latest_and_as_the_raw_schema(api: Api) -> None:
    await api.register("read-value", USER_V1)
    v2_id = await api.register("read-value", USER_V2)
    v1 = (await api.get("/subjects/read-value/versions/1")).json
    assert v1["subject"] == "read-value"
    assert v1["version"] == 1
    assert json.loads(v1["schema"]) == USER_V1
    latest = (await api.get("/subjects/read-value/versions/latest")).json
    assert latest == {**(await api.get("/subjects/read-value/versions/-1")).json}
    assert (latest["version"], latest["id"]) == (2, v2_id)
    raw = await api.get("/subjects/read-value/versions/2/schema")
    assert raw.status == 200
    assert json.loads(raw.text) == USER_V2
    assert (await api.get("/subjects/read-value/versions/2/referencedby")).json == []


async def test_lookup_returns_subject_id_version_and_schema_or_confluents_not_found_codes(api: Api) -> None:
    schema_id = await api.register("lookup-value", USER_V1)
    found = await api.post("/subjects/lookup-value", body(USER_V1))
    assert found.status == 200
    assert found.json["subject"] == "lookup-value"
    assert found.json["id"] == schema_id
    assert found.json["version"] == 1
    assert json.loads(found.json["schema"]) == USER_V1
    missing_schema = await api.post("/subjects/lookup-value", body(ORDER))
    assert (missing_schema.status, missing_schema.error_code) == (404, 40403)
    missing_subject = await api.post("/subjects/lookup-nobody", body(USER_V1))
    assert (missing_subject.status, missing_subject.error_code) == (404, 40401)


async def test_schemas_by_id_give_the_schema_its_versions_and_its_subjects(fresh_api: Api) -> None:
    schema_id = await fresh_api.register("a-value", ORDER)
    await fresh_api.register("b-value", ORDER)
    assert json.loads((await fresh_api.get(f"/schemas/ids/{schema_id}")).json["schema"]) == ORDER
    assert json.loads((await fresh_api.get(f"/schemas/ids/{schema_id}/schema")).text) == ORDER
    assert (await fresh_api.get(f"/schemas/ids/{schema_id}/versions")).json == [
        {"subject": "a-value", "version": 1},
        {"subject": "b-value", "version": 1},
    ]
    assert (await fresh_api.get(f"/schemas/ids/{schema_id}/subjects")).json == ["a-value", "b-value"]
    listed = (await fresh_api.get("/schemas")).json
    assert [(s["subject"], s["id"]) for s in listed] == [("a-value", schema_id), ("b-value", schema_id)]
    for path in ("", "/schema", "/versions", "/subjects"):
        unknown = await fresh_api.get(f"/schemas/ids/{schema_id + 100}{path}")
        assert (unknown.status, unknown.error_code) == (404, 40403), path
    not_a_number = await fresh_api.get("/schemas/ids/abc")
    assert (not_a_number.status, not_a_number.error_code) == (404, 404)


async def test_schema_types_are_avro_only_and_other_types_are_invalid_schemas(api: Api) -> None:
    assert (await api.get("/schemas/types")).json == ["AVRO"]
    explicit = await api.post("/subjects/types-a/versions", body(ORDER, schemaType="AVRO"))
    assert explicit.status == 200
    for schema_type in ("JSON", "PROTOBUF", "XML"):
        reply = await api.post("/subjects/types-a/versions", body({"type": "object"}, schemaType=schema_type))
        assert (reply.status, reply.error_code) == (422, 42201), schema_type


async def test_root_answers_an_empty_object(api: Api) -> None:
    assert (await api.get("/")).json == {}


# ----------------------------------------------------------------------------------------------
# Deleting


async def test_a_version_is_soft_deleted_then_permanently_deleted_as_confluent_requires(fresh_api: Api) -> None:
    await fresh_api.register("users-value", USER_V1)
    v2_id = await fresh_api.register("users-value", USER_V2)
    too_early = await fresh_api.delete("/subjects/users-value/versions/2?permanent=true")
    assert (too_early.status, too_early.error_code) == (404, 40407)
    assert (await fresh_api.delete("/subjects/users-value/versions/2")).json == 2
    again = await fresh_api.delete("/subjects/users-value/versions/2")
    assert (again.status, again.error_code) == (404, 40406)
    assert (await fresh_api.get("/subjects/users-value/versions")).json == [1]
    assert (await fresh_api.get("/subjects/users-value/versions?deleted=true")).json == [1, 2]
    hidden = await fresh_api.get("/subjects/users-value/versions/2")
    assert (hidden.status, hidden.error_code) == (404, 40402)
    assert (await fresh_api.get("/subjects/users-value/versions/2?deleted=true")).json["id"] == v2_id
    assert (await fresh_api.get(f"/schemas/ids/{v2_id}")).status == 200, "a soft-deleted schema is still readable by id"
    assert (await fresh_api.get("/subjects/users-value/versions/latest")).json["version"] == 1
    assert (await fresh_api.delete("/subjects/users-value/versions/2?permanent=true")).json == 2
    assert (await fresh_api.get("/subjects/users-value/versions?deleted=true")).json == [1]
    gone = await fresh_api.get(f"/schemas/ids/{v2_id}")
    assert (gone.status, gone.error_code) == (404, 40403)
    unknown = await fresh_api.delete("/subjects/users-value/versions/7")
    assert (unknown.status, unknown.error_code) == (404, 40402)


async def test_a_subject_is_soft_deleted_then_permanently_deleted_as_confluent_requires(fresh_api: Api) -> None:
    await fresh_api.register("users-value", USER_V1)
    await fresh_api.register("users-value", USER_V2)
    await fresh_api.register("orders-value", ORDER)
    too_early = await fresh_api.delete("/subjects/users-value?permanent=true")
    assert (too_early.status, too_early.error_code) == (404, 40405)
    assert (await fresh_api.delete("/subjects/users-value")).json == [1, 2]
    again = await fresh_api.delete("/subjects/users-value")
    assert (again.status, again.error_code) == (404, 40404)
    assert (await fresh_api.get("/subjects")).json == ["orders-value"]
    assert (await fresh_api.get("/subjects?deleted=true")).json == ["orders-value", "users-value"]
    assert (await fresh_api.get("/subjects?deletedOnly=true")).json == ["users-value"]
    assert (await fresh_api.get("/subjects/users-value/versions")).error_code == 40401
    assert (await fresh_api.get("/subjects/users-value/versions?deleted=true")).json == [1, 2]
    assert (await fresh_api.delete("/subjects/users-value?permanent=true")).json == [1, 2]
    assert (await fresh_api.get("/subjects?deleted=true")).json == ["orders-value"]
    unknown = await fresh_api.delete("/subjects/users-value")
    assert (unknown.status, unknown.error_code) == (404, 40401)


async def test_registering_into_a_soft_deleted_subject_continues_its_version_numbers(api: Api) -> None:
    """Soft-deleted versions keep their numbers, so the next version is 3, and the
    schema keeps its id."""
    v1_id = await api.register("reused-value", USER_V1)
    await api.register("reused-value", USER_V2)
    await api.delete("/subjects/reused-value")
    assert await api.register("reused-value", USER_V1) == v1_id
    assert (await api.get("/subjects/reused-value/versions")).json == [3]


# ----------------------------------------------------------------------------------------------
# Bad input


async def test_invalid_json_gets_400_with_confluents_error_body(api: Api) -> None:
    for data in (b'{"schema": ', b"not json", b""):
        reply = await api.post("/subjects/json-a/versions", data=data)
        assert (reply.status, reply.error_code) == (400, 400), data
        assert reply.json["message"]
        assert reply.content_type == V1
    array = await api.post("/subjects/json-a/versions", data=b"[1, 2]")
    assert (array.status, array.error_code) == (400, 400)


@pytest.mark.parametrize(
    "schema_text",
    [
        "{not json",
        '{"type": "no-such-type"}',
        '{"type": "record", "name": "NoFields"}',
        '{"type": "record", "name": "R", "fields": [{"name": "n", "type": "int", "default": "x"}]}',
        '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}, {"name": "a", "type": "int"}]}',
        '["null", "null"]',
        '{"type": "record", "name": "9lives", "fields": []}',
        '{"type": "enum", "name": "E", "symbols": ["A", "A"]}',
        "42",
    ],
)
async def test_invalid_avro_gets_42201(api: Api, schema_text: str) -> None:
    for path in ("/subjects/avro-a/versions", "/subjects/avro-a", "/compatibility/subjects/avro-a/versions/latest"):
        reply = await api.post(path, {"schema": schema_text})
        assert (reply.status, reply.error_code) == (422, 42201), path
    assert "avro-a" not in (await api.get("/subjects?deleted=true")).json


async def test_a_missing_schema_or_unsupported_references_get_42201(api: Api) -> None:
    for payload in ({}, {"schema": ""}, {"schema": None}):
        reply = await api.post("/subjects/refs-a/versions", payload)
        assert (reply.status, reply.error_code) == (422, 42201), payload
    refs = body(ORDER, references=[{"name": "x.Y", "subject": "refs-y", "version": 1}])
    assert (await api.post("/subjects/refs-a/versions", refs)).error_code == 42201
    for not_a_list in ({}, "x", 1):  # not an empty list: refused, not read as "no references"
        reply = await api.post("/subjects/refs-a/versions", body(ORDER, references=not_a_list))
        assert (reply.status, reply.error_code) == (422, 42201), not_a_list
    assert (await api.post("/subjects/refs-a/versions", body(ORDER, references=None))).status == 200


async def test_a_config_body_with_one_good_and_one_bad_level_is_refused(api: Api) -> None:
    reply = await api.put("/config", {"compatibility": "FULL", "compatibilityLevel": "AAA"})
    assert (reply.status, reply.error_code) == (422, 42203)
    assert (await api.get("/config")).json == {"compatibilityLevel": "BACKWARD"}


@pytest.mark.parametrize(
    "content_type",
    [V1, "application/vnd.schemaregistry+json", "application/json", "application/octet-stream", f"{V1}; charset=utf-8"],
)
async def test_confluents_request_media_types_are_accepted(api: Api, content_type: str) -> None:
    subject = re.sub(r"\W", "-", content_type)  # a subject per media type
    reply = await api.post(f"/subjects/{subject}/versions", body(ORDER), headers={"Content-Type": content_type})
    assert reply.status == 200


async def test_a_wrong_content_type_gets_415(api: Api) -> None:
    for content_type in ("text/plain", "application/xml", "application/x-www-form-urlencoded"):
        reply = await api.post("/subjects/refused-a/versions", body(ORDER), headers={"Content-Type": content_type})
        assert (reply.status, reply.error_code) == (415, 415), content_type
    assert "refused-a" not in (await api.get("/subjects?deleted=true")).json


async def test_the_response_type_follows_the_accept_header(api: Api) -> None:
    assert (await api.get("/subjects")).content_type == V1
    assert (await api.get("/subjects", headers={"Accept": "*/*"})).content_type == V1
    plain = await api.get("/subjects", headers={"Accept": "application/json"})
    assert (plain.status, plain.content_type) == (200, "application/json")
    refused = await api.get("/subjects", headers={"Accept": "text/html"})
    assert (refused.status, refused.error_code) == (406, 406)


@pytest.mark.parametrize("version", ["0", "-2", "abc", "1.5", "2147483648"])
async def test_an_invalid_version_gets_42202(api: Api, version: str) -> None:
    await api.register("version-a", ORDER)
    for reply in (
        await api.get(f"/subjects/version-a/versions/{version}"),
        await api.get(f"/subjects/version-a/versions/{version}/schema"),
        await api.delete(f"/subjects/version-a/versions/{version}"),
        await api.post(f"/compatibility/subjects/version-a/versions/{version}", body(ORDER)),
    ):
        assert (reply.status, reply.error_code) == (422, 42202)


async def test_unknown_subject_version_path_and_method_get_confluents_404_and_405(api: Api) -> None:
    await api.register("paths-a", ORDER)
    assert (await api.get("/subjects/paths-nobody/versions")).error_code == 40401
    assert (await api.get("/subjects/paths-nobody/versions/1")).error_code == 40401
    assert (await api.get("/subjects/paths-nobody/versions/latest/schema")).error_code == 40401
    assert (await api.get("/subjects/paths-a/versions/2")).error_code == 40402
    unknown_path = await api.get("/no/such/path")
    assert (unknown_path.status, unknown_path.error_code) == (404, 404)
    wrong_method = await api.put("/subjects/paths-a/versions", body(ORDER))
    assert (wrong_method.status, wrong_method.error_code) == (405, 405)


# ----------------------------------------------------------------------------------------------
# Compatibility


async def test_an_incompatible_schema_is_refused_with_409_and_not_registered(api: Api) -> None:
    await api.register("incompatible-value", USER_V1)
    reply = await api.post("/subjects/incompatible-value/versions", body(USER_REQUIRED_AGE))
    assert (reply.status, reply.error_code) == (409, 409)
    assert "age" in reply.json["message"]
    assert (await api.get("/subjects/incompatible-value/versions")).json == [1]


async def test_the_compatibility_endpoint_checks_a_version_latest_or_all(api: Api) -> None:
    await api.register("check-value", USER_V1)
    await api.register("check-value", USER_V2)
    base = "/compatibility/subjects/check-value/versions"
    assert (await api.post(f"{base}/latest", body(USER_V2))).json == {"is_compatible": True}
    assert (await api.post(f"{base}/1", body(USER_V2))).json == {"is_compatible": True}
    assert (await api.post(base, body(USER_V2))).json == {"is_compatible": True}
    refused = await api.post(f"{base}/latest", body(USER_REQUIRED_AGE))
    assert refused.json == {"is_compatible": False}
    verbose = (await api.post(f"{base}/latest?verbose=true", body(USER_REQUIRED_AGE))).json
    assert verbose["is_compatible"] is False
    assert any("age" in message for message in verbose["messages"])
    assert (await api.post(f"{base}/1?verbose=true", body(USER_V1))).json == {"is_compatible": True, "messages": []}
    assert (await api.post(f"{base}/9", body(USER_V2))).error_code == 40402
    assert (await api.post("/compatibility/subjects/check-nobody/versions/1", body(USER_V2))).error_code == 40401
    first = await api.post("/compatibility/subjects/check-nobody/versions/latest", body(USER_V2))
    assert first.json == {"is_compatible": True}, "anything is compatible with an empty subject"


async def test_transitive_levels_check_every_version_and_plain_levels_only_the_latest(api: Api) -> None:
    """v1 {a: int} -> v2 {} -> v3 {a: string = ""}: v3 reads v2 (BACKWARD) but not v1."""
    v1 = {"type": "record", "name": "T", "fields": [{"name": "a", "type": "int"}]}
    v2 = {"type": "record", "name": "T", "fields": []}
    v3 = {"type": "record", "name": "T", "fields": [{"name": "a", "type": "string", "default": ""}]}
    for subject in ("plain", "transitive"):
        await api.register(subject, v1)
        await api.register(subject, v2)
    await api.put("/config/transitive", {"compatibility": "BACKWARD_TRANSITIVE"})
    assert (await api.post("/subjects/plain/versions", body(v3))).status == 200
    refused = await api.post("/subjects/transitive/versions", body(v3))
    assert (refused.status, refused.error_code) == (409, 409)


async def test_a_subject_level_overrides_the_global_level(fresh_api: Api) -> None:
    await fresh_api.register("strict", USER_V1)
    await fresh_api.register("loose", USER_V1)
    assert (await fresh_api.put("/config/loose", {"compatibility": "NONE"})).json == {"compatibility": "NONE"}
    assert (await fresh_api.post("/subjects/strict/versions", body(USER_REQUIRED_AGE))).status == 409
    assert (await fresh_api.post("/subjects/loose/versions", body(USER_REQUIRED_AGE))).status == 200
    await fresh_api.put("/config", {"compatibility": "NONE"})
    assert (await fresh_api.post("/subjects/strict/versions", body(USER_REQUIRED_AGE))).status == 200


# ----------------------------------------------------------------------------------------------
# Config


async def test_global_config_defaults_to_backward_and_can_be_set_and_reset(fresh_api: Api) -> None:
    assert (await fresh_api.get("/config")).json == {"compatibilityLevel": "BACKWARD"}
    assert (await fresh_api.put("/config", {"compatibility": "FULL_TRANSITIVE"})).json == {
        "compatibility": "FULL_TRANSITIVE"
    }
    assert (await fresh_api.get("/config")).json == {"compatibilityLevel": "FULL_TRANSITIVE"}
    assert (await fresh_api.delete("/config")).json == {"compatibilityLevel": "FULL_TRANSITIVE"}
    assert (await fresh_api.get("/config")).json == {"compatibilityLevel": "BACKWARD"}


async def test_subject_config_is_40408_until_set_and_falls_back_on_request(api: Api) -> None:
    unset = await api.get("/config/config-value")
    assert (unset.status, unset.error_code) == (404, 40408)
    assert (await api.get("/config/config-value?defaultToGlobal=true")).json == {"compatibilityLevel": "BACKWARD"}
    assert (await api.put("/config/config-value", {"compatibility": "FORWARD"})).status == 200
    assert (await api.get("/config/config-value")).json == {"compatibilityLevel": "FORWARD"}
    assert (await api.get("/config")).json == {"compatibilityLevel": "BACKWARD"}
    assert (await api.delete("/config/config-value")).json == {"compatibilityLevel": "FORWARD"}
    assert (await api.get("/config/config-value")).error_code == 40408
    assert (await api.delete("/config/config-value")).error_code == 40401


@pytest.mark.parametrize("payload", [{"compatibility": "SIDEWAYS"}, {"compatibility": 3}, {}, {"level": "FULL"}])
async def test_an_invalid_compatibility_level_gets_42203(api: Api, payload: dict[str, Any]) -> None:
    for path in ("/config", "/config/level-value"):
        reply = await api.put(path, payload)
        assert (reply.status, reply.error_code) == (422, 42203)
    assert (await api.get("/config")).json == {"compatibilityLevel": "BACKWARD"}


# ----------------------------------------------------------------------------------------------
# Mode


async def test_readonly_mode_refuses_writes_with_42205_and_still_serves_reads(fresh_api: Api) -> None:
    schema_id = await fresh_api.register("users-value", USER_V1)
    assert (await fresh_api.get("/mode")).json == {"mode": "READWRITE"}
    assert (await fresh_api.put("/mode", {"mode": "READONLY"})).json == {"mode": "READONLY"}
    for reply in (
        await fresh_api.post("/subjects/users-value/versions", body(USER_V2)),
        await fresh_api.post("/subjects/users-value/versions", body(USER_V1)),
        await fresh_api.delete("/subjects/users-value/versions/1"),
        await fresh_api.delete("/subjects/users-value"),
    ):
        assert (reply.status, reply.error_code) == (422, 42205)
    assert (await fresh_api.get(f"/schemas/ids/{schema_id}")).status == 200
    assert (await fresh_api.post("/subjects/users-value", body(USER_V1))).json["id"] == schema_id
    await fresh_api.put("/mode", {"mode": "READWRITE"})
    assert (await fresh_api.post("/subjects/users-value/versions", body(USER_V2))).status == 200


async def test_a_subject_mode_applies_to_that_subject_only(api: Api) -> None:
    unset = await api.get("/mode/frozen")
    assert (unset.status, unset.error_code) == (404, 40409)
    assert (await api.get("/mode/frozen?defaultToGlobal=true")).json == {"mode": "READWRITE"}
    assert (await api.put("/mode/frozen", {"mode": "READONLY"})).json == {"mode": "READONLY"}
    assert (await api.post("/subjects/frozen/versions", body(ORDER))).error_code == 42205
    assert (await api.post("/subjects/open/versions", body(ORDER))).status == 200
    assert (await api.delete("/mode/frozen")).json == {"mode": "READONLY"}
    assert (await api.post("/subjects/frozen/versions", body(ORDER))).status == 200
    assert (await api.delete("/mode/frozen")).error_code == 40401


async def test_an_invalid_mode_gets_42204(api: Api) -> None:
    for payload in ({"mode": "READWRITEISH"}, {}, {"mode": 1}):
        reply = await api.put("/mode", payload)
        assert (reply.status, reply.error_code) == (422, 42204)


async def test_import_mode_takes_ids_and_versions_from_the_request(fresh_api: Api) -> None:
    """IMPORT needs an empty registry (or force=true) and registers under the given id and
    version; outside IMPORT, giving an id is refused."""
    outside = await fresh_api.post("/subjects/users-value/versions", body(USER_V1, id=100))
    assert (outside.status, outside.error_code) == (422, 42205)
    assert (await fresh_api.put("/mode", {"mode": "IMPORT"})).json == {"mode": "IMPORT"}
    imported = await fresh_api.post("/subjects/users-value/versions", body(USER_V1, id=100, version=7))
    assert imported.json == {"id": 100}
    assert (await fresh_api.get("/subjects/users-value/versions/7")).json["id"] == 100
    clash = await fresh_api.post("/subjects/other/versions", body(ORDER, id=100))
    assert (clash.status, clash.error_code) == (422, 42207)
    await fresh_api.put("/mode", {"mode": "READWRITE"})
    refused = await fresh_api.put("/mode", {"mode": "IMPORT"})
    assert (refused.status, refused.error_code) == (422, 42205)
    assert (await fresh_api.put("/mode?force=true", {"mode": "IMPORT"})).status == 200
    await fresh_api.put("/mode", {"mode": "READWRITE"})
    assert await fresh_api.register("orders-value", ORDER) == 101, "new ids continue after the imported ones"


# ----------------------------------------------------------------------------------------------
# Health


async def test_health_and_readiness_report_the_broker_and_the_replay(fresh_api: Api) -> None:
    await fresh_api.register("a", ORDER)
    assert (await fresh_api.get("/healthz")).json == {"status": "ok"}
    ready = await fresh_api.get("/readyz")
    assert ready.status == 200
    assert ready.json["status"] == "ready"
    assert ready.json["position"] == ready.json["end"] == 2, "the record and its transaction's commit marker"
    assert ready.json["role"] == "primary"
    assert ready.json["primary"] == fresh_api.url
