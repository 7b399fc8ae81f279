"""The event schemas in schemas/: they parse, are documented, have valid examples that round-trip,
and what schemas/README.md says about them is true."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import fastavro
import pytest

from schemas.catalog import (
    EVENTS_NAMESPACE,
    SCHEMA_DIR,
    CatalogError,
    default_catalog,
    from_json,
    iter_fields,
    load_catalog,
)
from schemas.serde import AvroSchema, SubjectNameStrategy, decode, encode, frame, unframe

CATALOG = default_catalog()
FILES = sorted(SCHEMA_DIR.glob("*.avsc"))
NAMES = [CATALOG.full_name(p.stem) for p in FILES]
EVENTS = CATALOG.events()
README = (SCHEMA_DIR / "README.md").read_text()
ENVELOPE = "io.streamshop.events.common.Envelope"
MONEY = {"type": "bytes", "logicalType": "decimal", "precision": 18, "scale": 4}


def _raw(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def _named_definitions(node: Any) -> list[dict[str, Any]]:
    """Every named type defined in a raw .avsc (records, enums, fixed), nested ones included."""
    found: list[dict[str, Any]] = []
    if isinstance(node, list):
        for branch in node:
            found += _named_definitions(branch)
    elif isinstance(node, dict):
        if node.get("type") in ("record", "enum", "fixed"):
            found.append(node)
        for key in ("type", "items", "values"):
            found += _named_definitions(node.get(key))
        for f in node.get("fields", []):
            found += _named_definitions(f["type"])
    return found


# -- they parse, are named after their file, documented ------------------------------------------


def test_the_schema_directory_holds_every_event_of_the_data_flow() -> None:
    assert {n.rsplit(".", 1)[-1] for n in EVENTS} == {
        "OrderCreated",
        "OrderStatusChanged",
        "OtpRequested",
        "OtpDelivered",
        "OtpFailed",
        "LogRecord",
    }
    assert set(CATALOG.topics) == {"orders", "otp.requests", "otp.deliveries", "logs.app", "logs.ingress", "logs.db"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_each_file_parses_on_its_own_once_references_are_inlined(path: Path) -> None:
    schema = CATALOG.schema(path.stem)
    # The registered text is self-contained: plain fastavro parses it without the other files.
    fastavro.parse_schema(json.loads(schema.text))
    assert schema.name == CATALOG.full_name(path.stem)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_each_file_defines_one_type_named_after_the_file_in_the_events_namespace(path: Path) -> None:
    raw = _raw(path)
    assert raw["name"] == path.stem
    assert raw["namespace"].startswith(f"{EVENTS_NAMESPACE}.")


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_type_and_field_is_documented(path: Path) -> None:
    for definition in _named_definitions(_raw(path)):
        assert definition.get("doc", "").strip(), f"{path.name}: {definition['name']} has no doc"
        for f in definition.get("fields", []):
            assert f.get("doc", "").strip(), f"{path.name}: {definition['name']}.{f['name']} has no doc"


# -- examples ------------------------------------------------------------------------------------


def test_every_schema_has_an_example_and_every_example_a_schema() -> None:
    examples = {p.stem for p in (SCHEMA_DIR / "examples").glob("*.json")}
    assert examples == {p.stem for p in FILES}


@pytest.mark.parametrize("name", NAMES, ids=lambda n: n.rsplit(".", 1)[-1])
def test_each_example_validates_and_round_trips_through_the_wire_format(name: str) -> None:
    schema = CATALOG.schema(name)
    example = CATALOG.example(name)
    assert fastavro.validation.validate(example, schema.parsed, raise_errors=True)
    payload = encode(schema, example)
    schema_id, body = unframe(frame(17, payload))
    assert schema_id == 17
    decoded = decode(body, schema, schema_id=17)
    assert decoded == example
    assert encode(schema, decoded) == payload  # and byte-identical when written again


@pytest.mark.parametrize("name", EVENTS, ids=lambda n: n.rsplit(".", 1)[-1])
def test_each_example_sets_every_field_so_it_shows_the_whole_event(name: str) -> None:
    raw = json.loads(CATALOG.example_path(name).read_text())
    assert [f["name"] for f in json.loads(CATALOG.schema(name).text)["fields"]] == list(raw)


def test_the_order_example_adds_up() -> None:
    order = CATALOG.example("OrderCreated")
    assert order["total"] == sum(i["quantity"] * i["unit_price"] for i in order["items"])


def test_the_otp_example_has_one_destination_per_channel() -> None:
    otp = CATALOG.example("OtpRequested")
    assert sorted(d["channel"] for d in otp["destinations"]) == sorted(otp["channels"])


# -- README statements -------------------------------------------------------------------------


@pytest.mark.parametrize("name", EVENTS, ids=lambda n: n.rsplit(".", 1)[-1])
def test_every_event_starts_with_the_envelope_field(name: str) -> None:
    parsed: Any = CATALOG.schema(name).parsed
    first = parsed["fields"][0]
    assert first["name"] == "envelope"
    assert first["type"] == ENVELOPE or first["type"]["name"] == ENVELOPE


def test_the_envelope_holds_event_id_occurred_at_producer_and_trace_id() -> None:
    fields = {f["name"]: f["type"] for f in _raw(SCHEMA_DIR / "Envelope.avsc")["fields"]}
    assert fields["event_id"] == {"type": "string", "logicalType": "uuid"}
    assert fields["occurred_at"] == {"type": "long", "logicalType": "timestamp-millis"}
    assert [f["name"] for f in fields["producer"]["fields"]] == ["service", "instance"]
    assert fields["trace_id"] == ["null", "string"]


def _all_fields() -> list[tuple[str, str, dict[str, Any]]]:
    return [(name, path, f) for name in NAMES for path, f in iter_fields(CATALOG.schema(name))]


def _leaf(t: Any) -> Any:
    return t if not isinstance(t, list) else next(b for b in t if b != "null")


def test_money_is_decimal_18_4_everywhere_and_never_a_float() -> None:
    assert "**precision 18, scale 4**" in README
    decimals = [(n, p) for n, p, f in _all_fields() if isinstance(f["type"], dict) and "precision" in f["type"]]
    assert decimals, "some field holds money"
    for name, path, f in _all_fields():
        t = f["type"]
        if isinstance(t, dict) and t.get("logicalType") == "decimal":
            assert {k: v for k, v in t.items() if not k.startswith("__")} == MONEY, f"{name}.{path}"
        if re.search(r"price|total|amount", f["name"]):
            assert isinstance(t, dict), f"{name}.{path} is money"
            assert t.get("logicalType") == "decimal", f"{name}.{path} is money"
        assert t not in ("float", "double"), f"{name}.{path}: no floats in events"


def test_money_always_travels_with_its_currency() -> None:
    for name in EVENTS:
        fields = list(iter_fields(CATALOG.schema(name)))
        if any(isinstance(f["type"], dict) and f["type"].get("logicalType") == "decimal" for _, f in fields):
            assert "currency" in {path for path, _ in fields}, name


def test_times_are_timestamp_millis_and_streamshop_ids_are_uuids() -> None:
    for name, path, f in _all_fields():
        t = _leaf(f["type"])
        if f["name"].endswith("_at") or f["name"] == "timestamp":
            assert t == {"type": "long", "logicalType": "timestamp-millis"}, f"{name}.{path}"
        if f["name"] in ("event_id", "order_id", "request_id") and "LogRecord" not in name:
            assert t == {"type": "string", "logicalType": "uuid"}, f"{name}.{path}"
        if f["name"] in ("customer_id", "user_id"):
            assert t == "string", f"{name}.{path}"


def test_every_enum_ends_with_unknown_as_its_default() -> None:
    enums = [s for schema in CATALOG.schemas.values() for s in schema.named.values() if s["type"] == "enum"]
    assert {e["name"].rsplit(".", 1)[-1] for e in enums} == {"Channel", "OrderStatus", "LogLevel"}
    for enum in enums:
        assert enum["symbols"][-1] == "unknown", enum["name"]
        assert enum["default"] == "unknown", enum["name"]
        assert all(s == s.lower() for s in enum["symbols"]), enum["name"]


def test_optional_fields_are_null_first_with_a_null_default() -> None:
    for name, path, f in _all_fields():
        if isinstance(f["type"], list) and "null" in f["type"]:
            assert f["type"][0] == "null", f"{name}.{path}"
            if not path.endswith("fields"):  # LogRecord.fields is a map whose values may be null
                assert f.get("default", "missing") is None, f"{name}.{path}"


@pytest.mark.parametrize("name", EVENTS, ids=lambda n: n.rsplit(".", 1)[-1])
def test_every_defaulted_field_can_be_added_later_readers_fill_the_default(name: str) -> None:
    # What "defaults that allow evolution" means in practice: data written before a defaulted
    # field existed reads with today's schema, the field taking its default.
    current = CATALOG.schema(name)
    full = json.loads(current.text)
    for f in [f for f in full["fields"] if "default" in f]:
        older = {**full, "fields": [g for g in full["fields"] if g["name"] != f["name"]]}
        record = {k: v for k, v in CATALOG.example(name).items() if k != f["name"]}
        decoded = decode(encode(AvroSchema.parse(older), record), AvroSchema.parse(older), current)
        assert decoded[f["name"]] == f["default"], f"{name}.{f['name']}"


def test_the_otp_code_never_appears_in_clear() -> None:
    assert "no field is called `code`" in README
    for name, path, f in _all_fields():
        assert f["name"] not in ("code", "otp", "pin", "plain_code", "one_time_code"), f"{name}.{path}"
        if "code" in f["name"]:
            assert f["name"] in ("code_hash", "sealed_code"), f"{name}.{path}: what is this code?"
    otp = CATALOG.example("OtpRequested")
    assert re.fullmatch(r"[a-z0-9-]+:[0-9a-f]{64}", otp["code_hash"])
    sealed = CATALOG.schema("OtpRequested").named["io.streamshop.events.otp.SealedCode"]
    assert {f["name"]: f["type"] for f in sealed["fields"]}["ciphertext"] == "bytes"


def test_the_readme_topic_table_is_the_catalogs() -> None:
    rows = re.findall(r"^\| ([a-z.]+) \| ([A-Za-z, ]+) \| ([a-z_]+) \| (\w+) \|$", README, re.MULTILINE)
    table = {t: (tuple(events.split(", ")), key, strategy) for t, events, key, strategy in rows if t != "topic"}
    assert table == {
        t.name: (tuple(e.rsplit(".", 1)[-1] for e in t.events), t.key, t.strategy.value)
        for t in CATALOG.topics.values()
    }


def test_topics_with_several_event_types_use_topic_record_name_subjects() -> None:
    for topic in CATALOG.topics.values():
        expected = SubjectNameStrategy.TOPIC_RECORD if len(topic.events) > 1 else SubjectNameStrategy.TOPIC
        assert topic.strategy is expected, topic.name
    assert CATALOG.subject("orders", "OrderCreated") == "orders-io.streamshop.events.orders.OrderCreated"
    assert CATALOG.subject("otp.requests", "OtpRequested") == "otp.requests-value"
    assert [t.name for t in CATALOG.topics_for("LogRecord")] == ["logs.app", "logs.ingress", "logs.db"]


@pytest.mark.parametrize("name", EVENTS, ids=lambda n: n.rsplit(".", 1)[-1])
def test_each_topic_key_is_a_string_field_of_its_events(name: str) -> None:
    for topic in CATALOG.topics_for(name):
        key_field = next(f for f in json.loads(CATALOG.schema(name).text)["fields"] if f["name"] == topic.key)
        assert _leaf(key_field["type"]) in ("string", {"type": "string", "logicalType": "uuid"}), topic.name


# -- catalog loading -----------------------------------------------------------------------------


def _write(directory: Path, name: str, schema: dict[str, Any]) -> None:
    (directory / f"{name}.avsc").write_text(json.dumps(schema))


def test_a_type_shared_between_files_is_inlined_once_at_its_first_use(tmp_path: Path) -> None:
    _write(tmp_path, "Id", {"type": "fixed", "name": "Id", "namespace": "a.common", "size": 2})
    _write(
        tmp_path,
        "Pair",
        {
            "type": "record",
            "name": "Pair",
            "namespace": "a.b",
            "fields": [{"name": "left", "type": "a.common.Id"}, {"name": "right", "type": "a.common.Id"}],
        },
    )
    catalog = load_catalog(tmp_path, topics=())
    fields = json.loads(catalog.schema("Pair").text)["fields"]
    assert fields[0]["type"] == {"type": "fixed", "name": "Id", "namespace": "a.common", "size": 2}
    assert fields[1]["type"] == "a.common.Id"
    assert decode(encode(catalog.schema("Pair"), {"left": b"ab", "right": b"cd"}), catalog.schema("Pair")) == {
        "left": b"ab",
        "right": b"cd",
    }


def test_an_unknown_reference_names_the_file_and_the_type(tmp_path: Path) -> None:
    _write(tmp_path, "A", {"type": "record", "name": "A", "namespace": "x", "fields": [{"name": "b", "type": "B"}]})
    with pytest.raises(CatalogError, match=r"A.avsc: unknown type 'B' \(resolved as x.B\)"):
        load_catalog(tmp_path, topics=())


def test_an_invalid_schema_names_the_file(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "A",
        {"type": "record", "name": "A", "namespace": "x", "fields": [{"name": "n", "type": "int", "default": "one"}]},
    )
    with pytest.raises(CatalogError, match=r"A\.avsc: invalid Avro schema"):
        load_catalog(tmp_path, topics=())


def test_a_topic_carrying_an_undefined_event_is_refused(tmp_path: Path) -> None:
    from schemas.catalog import TOPICS

    _write(tmp_path, "A", {"type": "enum", "name": "A", "namespace": "x", "symbols": ["a"]})
    with pytest.raises(CatalogError, match=r"topic orders carries .*OrderCreated"):
        load_catalog(tmp_path, topics=TOPICS)


def test_short_and_full_names_both_find_a_schema_and_typos_list_the_known_names() -> None:
    assert CATALOG.schema("OrderCreated") is CATALOG.schema("io.streamshop.events.orders.OrderCreated")
    with pytest.raises(CatalogError, match=r"no schema named 'OrderCreatd'; known: .*OrderCreated"):
        CATALOG.schema("OrderCreatd")


# -- plain JSON to Python values -----------------------------------------------------------------


def test_plain_json_decimals_must_be_strings_and_timestamps_need_an_offset() -> None:
    schema = CATALOG.schema("OrderCreated")
    raw = json.loads(CATALOG.example_path("OrderCreated").read_text())
    with pytest.raises(CatalogError, match=r"OrderCreated.total: write decimals as strings"):
        from_json(schema, {**raw, "total": 32.99})
    with pytest.raises(CatalogError, match=r"OrderCreated.created_at: timestamp .* has no UTC offset"):
        from_json(schema, {**raw, "created_at": "2025-03-14T09:26:53"})
    epoch = from_json(schema, {**raw, "created_at": 1741944413589})
    assert epoch["created_at"] == CATALOG.example("OrderCreated")["created_at"]
