"""The Confluent-framed Avro serde, the registry client and the subject naming strategies.

The registry here is a deliberately tiny aiohttp server on a real socket (127.0.0.1:0) with just
`POST /subjects/{s}/versions` and `GET /schemas/ids/{id}`, answering like Confluent's registry
(same content type, same error bodies).  The real registry is tested on its own.
"""

from __future__ import annotations

import asyncio
import copy
import io
import json
import socket
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

import fastavro
import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.catalog import default_catalog
from schemas.client import CONTENT_TYPE, RegistryClient, RegistryError, RegistryUnavailableError
from schemas.serde import (
    HEADER_SIZE,
    AvroDeserializer,
    AvroSchema,
    AvroSerializer,
    ReaderSchemaMismatchError,
    RecordValidationError,
    SerdeError,
    SubjectNameStrategy,
    UndecodablePayloadError,
    UnknownMagicByteError,
    UnknownSchemaIdError,
    decode,
    encode,
    frame,
    unframe,
)
from tests.support.examples import examples

CATALOG = default_catalog()
ORDER_CREATED = CATALOG.schema("OrderCreated")
STATUS_CHANGED = CATALOG.schema("OrderStatusChanged")


# -- a minimal Confluent-compatible registry ---------------------------------------------------


@dataclass
class TinyRegistry:
    """Schemas get ids 1, 2, ... in registration order; the same text gets the same id."""

    url: str = ""
    ids: dict[str, int] = field(default_factory=dict)
    texts: dict[int, str] = field(default_factory=dict)
    subjects: dict[str, list[int]] = field(default_factory=dict)
    calls: Counter[str] = field(default_factory=Counter)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/subjects/{subject}/versions", self.register)
        app.router.add_get("/schemas/ids/{id}", self.get_schema)
        return app

    @staticmethod
    def error(status: int, code: int, message: str) -> web.Response:
        body = json.dumps({"error_code": code, "message": message})
        return web.Response(status=status, text=body, content_type=CONTENT_TYPE)

    async def register(self, request: web.Request) -> web.Response:
        self.calls["register"] += 1
        try:
            text = (await request.json())["schema"]
            fastavro.parse_schema(json.loads(text))
        except Exception as e:
            return self.error(422, 42201, f"Invalid schema: {e}")
        schema_id = self.ids.setdefault(text, len(self.ids) + 1)
        self.texts[schema_id] = text
        versions = self.subjects.setdefault(request.match_info["subject"], [])
        if schema_id not in versions:
            versions.append(schema_id)
        return web.Response(text=json.dumps({"id": schema_id}), content_type=CONTENT_TYPE)

    async def get_schema(self, request: web.Request) -> web.Response:
        self.calls["get_schema"] += 1
        await asyncio.sleep(0.01)  # long enough for concurrent callers to pile up
        text = self.texts.get(int(request.match_info["id"]))
        if text is None:
            return self.error(404, 40403, "Schema not found")
        return web.Response(text=json.dumps({"schema": text}), content_type=CONTENT_TYPE)


@pytest.fixture
async def registry() -> AsyncIterator[TinyRegistry]:
    tiny = TinyRegistry()
    runner = web.AppRunner(tiny.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    tiny.url = f"http://{host}:{port}"
    yield tiny
    await runner.cleanup()


@pytest.fixture
async def client(registry: TinyRegistry) -> AsyncIterator[RegistryClient]:
    async with RegistryClient(registry.url) as c:
        yield c


def _example(name: str) -> Any:
    return CATALOG.example(name)


def _schema(fields: list[dict[str, Any]], name: str = "Thing") -> AvroSchema:
    return AvroSchema.parse(
        {"type": "record", "name": name, "namespace": "io.streamshop.test", "doc": "test", "fields": fields}
    )


# -- framing -----------------------------------------------------------------------------------


def test_frame_is_magic_byte_then_big_endian_schema_id_then_the_avro_payload() -> None:
    assert frame(0x01020304, b"avro") == b"\x00\x01\x02\x03\x04avro"
    schema_id, payload = unframe(b"\x00\x01\x02\x03\x04avro")
    assert (schema_id, bytes(payload)) == (0x01020304, b"avro")


@given(st.integers(0, 2**31 - 1), st.binary(max_size=64))
def test_frame_and_unframe_round_trip_any_id_and_payload(schema_id: int, payload: bytes) -> None:
    framed = frame(schema_id, payload)
    assert len(framed) == HEADER_SIZE + len(payload)
    got_id, got_payload = unframe(framed)
    assert got_id == schema_id
    assert bytes(got_payload) == payload


@pytest.mark.parametrize("bad_id", [-1, 2**31])
def test_frame_refuses_ids_a_java_int_cannot_hold(bad_id: int) -> None:
    with pytest.raises(ValueError, match="schema id"):
        frame(bad_id, b"")


async def test_serializer_output_is_the_registered_id_and_plain_avro_binary(
    registry: TinyRegistry, client: RegistryClient
) -> None:
    record = _example("OrderCreated")
    data = await AvroSerializer(client).serialize("orders", ORDER_CREATED, record)
    assert data[0] == 0
    assert int.from_bytes(data[1:5], "big") == registry.ids[ORDER_CREATED.text]
    # The payload is Avro binary any fastavro reader decodes with the registered schema alone.
    plain = fastavro.schemaless_reader(io.BytesIO(data[5:]), fastavro.parse_schema(json.loads(ORDER_CREATED.text)))
    assert plain == record


# -- errors, one class each --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "shown"),
    [(b'{"order_id": 1}', "0x7b (it looks like JSON)"), (b"\x01\x00\x00\x00\x01\x02", "0x01"), (b"hello", "'h'")],
)
async def test_a_message_not_starting_with_magic_byte_0_is_rejected_as_unknown_magic(
    client: RegistryClient, data: bytes, shown: str
) -> None:
    with pytest.raises(UnknownMagicByteError, match="unknown magic byte") as info:
        await AvroDeserializer(client).deserialize(data)
    assert shown in str(info.value)
    assert info.value.magic == data[0]


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x00\x00\x00\x01"])
def test_a_message_shorter_than_the_header_is_undecodable(data: bytes) -> None:
    with pytest.raises(UndecodablePayloadError, match=r"empty|truncated header"):
        unframe(data)


async def test_an_id_the_registry_does_not_know_is_an_unknown_schema_id(client: RegistryClient) -> None:
    with pytest.raises(UnknownSchemaIdError, match="unknown schema id 4242") as info:
        await AvroDeserializer(client).deserialize(frame(4242, b"\x02"))
    assert info.value.schema_id == 4242
    assert isinstance(info.value.__cause__, RegistryError)
    assert info.value.__cause__.error_code == 40403


async def test_every_truncation_of_a_valid_message_is_undecodable(client: RegistryClient) -> None:
    data = await AvroSerializer(client).serialize("orders", ORDER_CREATED, _example("OrderCreated"))
    deserializer = AvroDeserializer(client)
    for cut in range(HEADER_SIZE, len(data)):
        with pytest.raises(UndecodablePayloadError, match="Avro payload for schema id") as info:
            await deserializer.deserialize(data[:cut])
        assert info.value.record_name == ORDER_CREATED.name


async def test_bytes_left_after_the_record_are_undecodable(client: RegistryClient) -> None:
    data = await AvroSerializer(client).serialize("orders", ORDER_CREATED, _example("OrderCreated"))
    with pytest.raises(UndecodablePayloadError, match="3 bytes left after the record"):
        await AvroDeserializer(client).deserialize(data + b"\x00\x01\x02")


@settings(max_examples=examples(300), suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200))
def test_garbage_payloads_decode_or_raise_undecodable_never_anything_else(garbage: bytes) -> None:
    for schema in (ORDER_CREATED, CATALOG.schema("OtpRequested"), CATALOG.schema("LogRecord")):
        try:
            decode(garbage, schema, schema_id=7)
        except UndecodablePayloadError as e:
            error: UndecodablePayloadError | None = e
        else:
            error = None
        assert error is None or error.schema_id == 7


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda r: r.update(total=32.99), "OrderCreated.total: got float 32.99, expected decimal(18,4)"),
        (lambda r: r["items"][1].update(quantity="1"), "OrderCreated.items[1].quantity: got str '1', expected int"),
        (lambda r: r["items"][0].update(quantity=2**31), "OrderCreated.items[0].quantity: got int 2147483648"),
        (lambda r: r["items"][0].update(quantity=1.5), "OrderCreated.items[0].quantity: got float 1.5"),
        (lambda r: r.pop("customer_id"), "OrderCreated.customer_id: missing (required, no default)"),
        (lambda r: r.update(custmer_id="x"), "OrderCreated.custmer_id: not a field of"),
        (lambda r: r["items"][0].update(colour="blue"), "OrderCreated.items[0].colour: not a field of"),
        (lambda r: r.update(order_id="order-1"), "OrderCreated.order_id: got str 'order-1', expected uuid"),
        (
            lambda r: r["items"][0].update(unit_price=Decimal("0.00001")),
            "OrderCreated.items[0].unit_price: got Decimal Decimal('0.00001'), expected decimal(18,4)",
        ),
        (
            lambda r: r["envelope"].update(occurred_at=datetime(2025, 1, 1)),  # naive on purpose
            "OrderCreated.envelope.occurred_at: got datetime",
        ),
        (
            lambda r: r.update(total=Decimal("100000000000000")),
            "OrderCreated.total: got Decimal Decimal('100000000000000'), expected decimal(18,4) as Decimal "
            "(at most 14 digits before the point)",
        ),
        (lambda r: r.update(total=Decimal("NaN")), "OrderCreated.total: got Decimal Decimal('NaN')"),
        (lambda r: r["envelope"].update(trace_id=123), "OrderCreated.envelope.trace_id: got int 123, expected null"),
        (lambda r: r.update(items={"sku": "A"}), "OrderCreated.items: got dict"),
    ],
)
async def test_a_record_that_does_not_match_its_schema_is_refused_naming_the_field(
    registry: TinyRegistry, client: RegistryClient, change: Any, named: str
) -> None:
    record = _example("OrderCreated")
    change(record)
    with pytest.raises(RecordValidationError) as info:
        await AvroSerializer(client).serialize("orders", ORDER_CREATED, record)
    assert named in str(info.value)
    assert info.value.record_name == ORDER_CREATED.name
    assert registry.calls["register"] == 0  # nothing reaches the registry for a bad record


def test_an_unknown_enum_symbol_is_refused_listing_the_symbols() -> None:
    record = _example("OrderStatusChanged")
    record["to_status"] = "lost"
    with pytest.raises(
        RecordValidationError, match=r"to_status: got str 'lost', expected enum .*OrderStatus \{created"
    ):
        encode(STATUS_CHANGED, record)


def test_log_fields_take_scalars_only() -> None:
    record = _example("LogRecord")
    record["fields"]["nested"] = {"a": 1}
    with pytest.raises(RecordValidationError, match=r"LogRecord.fields\['nested'\]: got dict"):
        encode(CATALOG.schema("LogRecord"), record)


def test_the_error_kinds_are_distinct_serde_errors() -> None:
    kinds = [
        UnknownMagicByteError,
        UnknownSchemaIdError,
        UndecodablePayloadError,
        RecordValidationError,
        ReaderSchemaMismatchError,
    ]
    assert all(issubclass(k, SerdeError) for k in kinds)
    assert len({k.__mro__[0] for k in kinds}) == len(kinds)
    assert not any(issubclass(a, b) for a in kinds for b in kinds if a is not b)


async def test_an_unreachable_registry_is_a_registry_error_not_a_serde_error() -> None:
    # A transient outage must not look like a poison message (which would be dead-lettered).
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with RegistryClient(f"http://127.0.0.1:{port}", timeout=2) as c:
        with pytest.raises(RegistryUnavailableError, match="GET") as info:
            await AvroDeserializer(c).deserialize(frame(1, b""))
    assert not isinstance(info.value, SerdeError)
    assert info.value.status is None


# -- registry client ---------------------------------------------------------------------------


async def test_client_registers_and_fetches_by_id_and_caches_both(
    registry: TinyRegistry, client: RegistryClient
) -> None:
    schema_id = await client.register("orders-value", ORDER_CREATED.text)
    assert await client.register("orders-value", ORDER_CREATED.text) == schema_id
    assert registry.calls["register"] == 1
    async with RegistryClient(registry.url) as fresh:
        assert await fresh.get_schema(schema_id) == ORDER_CREATED.text
        assert await fresh.get_schema(schema_id) == ORDER_CREATED.text
    assert registry.calls["get_schema"] == 1


async def test_a_failed_fetch_is_not_cached_the_next_call_asks_again(
    registry: TinyRegistry, client: RegistryClient
) -> None:
    for _ in range(2):
        with pytest.raises(RegistryError, match="Schema not found"):
            await client.get_schema(99)
    assert registry.calls["get_schema"] == 2


async def test_a_closed_client_refuses_requests(registry: TinyRegistry) -> None:
    client = RegistryClient(registry.url)
    await client.close()
    with pytest.raises(RuntimeError, match="closed"):
        await client.get_schema(1)


async def test_client_surfaces_confluent_error_bodies(client: RegistryClient) -> None:
    with pytest.raises(RegistryError) as info:
        await client.register("x-value", '{"type": "nonsense"}')
    assert (info.value.status, info.value.error_code) == (422, 42201)
    assert "Invalid schema" in info.value.message
    assert "HTTP 422, error_code 42201" in str(info.value)


async def test_client_surfaces_an_error_without_a_confluent_body(client: RegistryClient) -> None:
    # The tiny registry has no /subjects/{s}/versions/latest route: aiohttp answers a text 404.
    with pytest.raises(RegistryError) as info:
        await client.latest("orders-value")
    assert info.value.status == 404
    assert info.value.error_code is None
    assert info.value.not_found


async def test_concurrent_first_reads_of_a_schema_id_share_one_request(
    registry: TinyRegistry, client: RegistryClient
) -> None:
    data = await AvroSerializer(client).serialize("orders", ORDER_CREATED, _example("OrderCreated"))
    async with RegistryClient(registry.url) as fresh:
        deserializer = AvroDeserializer(fresh)
        decoded = await asyncio.gather(*(deserializer.deserialize(data) for _ in range(20)))
    assert {d.schema_id for d in decoded} == {registry.ids[ORDER_CREATED.text]}
    assert registry.calls["get_schema"] == 1


async def test_serializer_registers_once_per_subject_and_schema(registry: TinyRegistry, client: RegistryClient) -> None:
    serializer = AvroSerializer(client)
    for _ in range(50):
        await serializer.serialize("orders", ORDER_CREATED, _example("OrderCreated"))
    assert registry.calls["register"] == 1


# -- logical types -----------------------------------------------------------------------------


async def test_logical_types_come_back_as_decimal_aware_datetime_and_uuid(client: RegistryClient) -> None:
    data = await AvroSerializer(client).serialize("orders", ORDER_CREATED, _example("OrderCreated"))
    value = (await AvroDeserializer(client).deserialize(data)).value
    assert value["total"] == Decimal("32.99")
    assert value["total"].as_tuple().exponent == -4  # decimal(18,4)
    assert value["items"][0]["unit_price"] == Decimal("12.50")
    assert value["created_at"] == datetime(2025, 3, 14, 9, 26, 53, 589000, tzinfo=UTC)
    assert value["created_at"].utcoffset() is not None
    assert value["order_id"] == UUID("0b8c9e44-3b0e-4c5e-9a0e-2f1f7c5a1e11")


def test_uuid_values_may_be_written_as_uuid_objects() -> None:
    record = _example("OrderCreated")
    record["order_id"] = UUID(int=7)
    assert decode(encode(ORDER_CREATED, record), ORDER_CREATED)["order_id"] == UUID(int=7)


# -- reader-schema projection ------------------------------------------------------------------

_V1_FIELDS: list[dict[str, Any]] = [
    {"name": "id", "type": "string", "doc": "id"},
    {"name": "gone", "type": "int", "default": 0, "doc": "dropped in v2"},
]
_V2_FIELDS: list[dict[str, Any]] = [
    {"name": "id", "type": "string", "doc": "id"},
    {"name": "channel", "type": "string", "default": "web", "doc": "added in v2"},
    {"name": "note", "type": ["null", "string"], "default": None, "doc": "added in v2"},
]


async def test_data_written_with_an_older_version_reads_with_the_newer_new_fields_get_their_defaults(
    client: RegistryClient,
) -> None:
    v1, v2 = _schema(_V1_FIELDS), _schema(_V2_FIELDS)
    data = await AvroSerializer(client).serialize("things", v1, {"id": "a", "gone": 5})
    decoded = await AvroDeserializer(client, reader_schemas=[v2]).deserialize(data)
    assert decoded.value == {"id": "a", "channel": "web", "note": None}
    # Without a reader schema the writer's shape comes back.
    assert (await AvroDeserializer(client).deserialize(data)).value == {"id": "a", "gone": 5}


async def test_an_older_event_version_reads_with_the_current_schema(client: RegistryClient) -> None:
    # OrderStatusChanged as it might have been before `reason` existed.
    old = json.loads(STATUS_CHANGED.text)
    old["fields"] = [f for f in old["fields"] if f["name"] != "reason"]
    record = _example("OrderStatusChanged")
    del record["reason"]
    data = await AvroSerializer(client).serialize("orders", AvroSchema.parse(old), record)
    decoded = await AvroDeserializer(client, reader_schemas=CATALOG.schemas.values()).deserialize(data)
    assert decoded.value == {**record, "reason": None}


async def test_a_status_added_later_reads_as_unknown_in_an_older_reader(client: RegistryClient) -> None:
    newer = json.loads(STATUS_CHANGED.text)
    newer["fields"][2]["type"]["symbols"].insert(-1, "returned")
    record = {**_example("OrderStatusChanged"), "from_status": "delivered", "to_status": "returned"}
    data = await AvroSerializer(client).serialize("orders", AvroSchema.parse(newer), record)
    decoded = await AvroDeserializer(client, reader_schemas=[STATUS_CHANGED]).deserialize(data)
    assert (decoded.value["from_status"], decoded.value["to_status"]) == ("delivered", "unknown")


async def test_a_reader_needing_a_field_the_writer_lacks_without_default_is_a_mismatch(client: RegistryClient) -> None:
    v1 = _schema(_V1_FIELDS)
    strict = _schema([*_V2_FIELDS, {"name": "required", "type": "long", "doc": "no default"}])
    data = await AvroSerializer(client).serialize("things", v1, {"id": "a"})
    with pytest.raises(ReaderSchemaMismatchError, match=r"io.streamshop.test.Thing \(schema id \d+\) cannot be read"):
        await AvroDeserializer(client).deserialize(data, reader=strict)


async def test_the_record_name_tells_event_types_apart_on_a_shared_topic(client: RegistryClient) -> None:
    serializer = AvroSerializer(client, topic_strategies=CATALOG.topic_strategies())
    deserializer = AvroDeserializer(client, reader_schemas=CATALOG.schemas.values())
    for name in ("OrderCreated", "OrderStatusChanged"):
        data = await serializer.serialize("orders", CATALOG.schema(name), _example(name))
        decoded = await deserializer.deserialize(data)
        assert decoded.record_name == CATALOG.full_name(name)
        assert decoded.value == _example(name)


# -- subject naming strategies -----------------------------------------------------------------


def test_the_three_subject_naming_strategies() -> None:
    name = "io.streamshop.events.orders.OrderCreated"
    assert SubjectNameStrategy.TOPIC.subject("orders", name) == "orders-value"
    assert SubjectNameStrategy.TOPIC.subject("orders", name, is_key=True) == "orders-key"
    assert SubjectNameStrategy.RECORD.subject("orders", name) == name
    assert SubjectNameStrategy.RECORD.subject("orders", name, is_key=True) == name
    assert SubjectNameStrategy.TOPIC_RECORD.subject("orders", name) == f"orders-{name}"


def test_record_strategies_need_a_named_schema() -> None:
    with pytest.raises(ValueError, match="named schema"):
        SubjectNameStrategy.RECORD.subject("orders", "string")


@pytest.mark.parametrize(
    ("text", "strategy"),
    [
        ("TopicNameStrategy", SubjectNameStrategy.TOPIC),
        ("io.confluent.kafka.serializers.subject.RecordNameStrategy", SubjectNameStrategy.RECORD),
        ("TopicRecordNameStrategy", SubjectNameStrategy.TOPIC_RECORD),
        ("topic_record", SubjectNameStrategy.TOPIC_RECORD),
    ],
)
def test_strategies_are_named_like_confluents(text: str, strategy: SubjectNameStrategy) -> None:
    assert SubjectNameStrategy.from_name(text) is strategy


def test_an_unknown_strategy_name_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="TopicNameStrategy, RecordNameStrategy, TopicRecordNameStrategy"):
        SubjectNameStrategy.from_name("ByColour")


@pytest.mark.parametrize(
    ("strategy", "is_key", "subject"),
    [
        (SubjectNameStrategy.TOPIC, False, "orders-value"),
        (SubjectNameStrategy.TOPIC, True, "orders-key"),
        (SubjectNameStrategy.RECORD, False, "io.streamshop.events.orders.OrderCreated"),
        (SubjectNameStrategy.TOPIC_RECORD, False, "orders-io.streamshop.events.orders.OrderCreated"),
    ],
)
async def test_the_serializer_registers_under_the_strategys_subject(
    registry: TinyRegistry, client: RegistryClient, strategy: SubjectNameStrategy, is_key: bool, subject: str
) -> None:
    serializer = AvroSerializer(client, strategy=strategy)
    await serializer.serialize("orders", ORDER_CREATED, _example("OrderCreated"), is_key=is_key)
    assert list(registry.subjects) == [subject]


async def test_per_topic_strategies_override_the_default(registry: TinyRegistry, client: RegistryClient) -> None:
    serializer = AvroSerializer(client, topic_strategies=CATALOG.topic_strategies())
    await serializer.serialize("otp.requests", CATALOG.schema("OtpRequested"), _example("OtpRequested"))
    await serializer.serialize("otp.deliveries", CATALOG.schema("OtpFailed"), _example("OtpFailed"))
    assert sorted(registry.subjects) == ["otp.deliveries-io.streamshop.events.otp.OtpFailed", "otp.requests-value"]


# -- interoperability with Confluent's own serde -----------------------------------------------


@pytest.fixture
def confluent_registry(registry: TinyRegistry) -> Iterator[Any]:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    with SchemaRegistryClient({"url": registry.url}) as confluent:
        yield confluent


async def test_confluents_avro_deserializer_reads_what_we_write(
    client: RegistryClient, confluent_registry: Any
) -> None:
    from confluent_kafka.schema_registry.avro import AvroDeserializer as ConfluentDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    record = _example("OtpRequested")
    data = await AvroSerializer(client).serialize("otp.requests", CATALOG.schema("OtpRequested"), record)
    ctx = SerializationContext("otp.requests", MessageField.VALUE)
    value = await asyncio.to_thread(ConfluentDeserializer(confluent_registry), data, ctx)
    assert value == record


async def test_we_read_what_confluents_avro_serializer_writes(client: RegistryClient, confluent_registry: Any) -> None:
    from confluent_kafka.schema_registry.avro import AvroSerializer as ConfluentSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    record = _example("OrderCreated")
    confluent = ConfluentSerializer(confluent_registry, ORDER_CREATED.text)
    ctx = SerializationContext("orders", MessageField.VALUE)
    data = await asyncio.to_thread(confluent, copy.deepcopy(record), ctx)
    decoded = await AvroDeserializer(client, reader_schemas=[ORDER_CREATED]).deserialize(data)
    assert decoded.record_name == ORDER_CREATED.name
    assert decoded.value == record
