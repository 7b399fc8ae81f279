"""What a user checks of a running compose stack, through its published ports (127.0.0.1), and
a topic read from inside the compose network, where the brokers' advertised names resolve."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.support.docker import Compose

ORDERS = "http://127.0.0.1:8001"
OTP = "http://127.0.0.1:8002"
LOGS = "http://127.0.0.1:8003"
REGISTRY = "http://127.0.0.1:8081"
CATCHER = "http://127.0.0.1:8025"
DASHBOARD = "http://127.0.0.1:8080"

T = TypeVar("T")

# Run by the orders container's Python: every record of a topic from the start, until the keys
# wanted were all seen or the time is up, as JSON lines (key, value in base64).
_READER = """
import base64, json, sys, time
from confluent_kafka import Consumer
topic, bootstrap, wanted, within, security = {args!r}
consumer = Consumer({{"bootstrap.servers": bootstrap, "group.id": "compose-check-" + str(time.time()),
                     "auto.offset.reset": "earliest", "enable.auto.commit": False, **security}})
consumer.subscribe([topic])
seen, deadline = set(), time.monotonic() + within
while not set(wanted) <= seen and time.monotonic() < deadline:
    message = consumer.poll(0.5)
    if message is None or message.error():
        continue
    key = (message.key() or b"").decode()
    seen.add(key)
    print(json.dumps({{"key": key, "value": base64.b64encode(message.value() or b"").decode()}}), flush=True)
consumer.close()
"""


def http(method: str, url: str, body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """(status, JSON body or text) of one request; a connection refused or reset is status 0."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data, method=method, headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            raw = response.read()
            status = response.status
    except urllib.error.HTTPError as e:
        with e:  # an error answer holds its connection until closed
            raw, status = e.read(), e.code
    except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
        return 0, str(e)
    try:
        return status, json.loads(raw or b"null")
    except ValueError:
        return status, raw.decode(errors="replace")


def eventually(what: str, check: Callable[[], T | None], within: float = 120, every: float = 0.5) -> T:
    deadline = time.monotonic() + within
    last: Any = None
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        last = result
        time.sleep(every)
    raise AssertionError(f"{what} not reached within {within} s (last: {last!r})")


def order_body(i: int) -> dict[str, Any]:
    return {
        "customer_id": f"compose-{i}",
        "currency": "EUR",
        "items": [{"sku": f"sku-{i}", "quantity": 2, "unit_price": "12.50"}],
    }


def post_order(i: int, headers: dict[str, str] | None = None) -> str:
    status, body = http("POST", f"{ORDERS}/orders", order_body(i), headers)
    assert status == 201, body
    return str(body["order_id"])


def read_orders(
    stack: Compose,
    wanted: set[str],
    *,
    bootstrap: str = "broker:9092",
    registry: SchemaRegistryClient | None = None,
    within: float = 90,
    security: dict[str, str] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """The `orders` records of the orders `wanted` (by key), read in the network (librdkafka's
    `security` settings, if any) and decoded here with Confluent's AvroDeserializer through the
    registry's published port."""
    code = _READER.format(args=("orders", bootstrap, sorted(wanted), within, security or {}))
    lines = stack.exec_python("orders", code, timeout=within + 60).splitlines()
    client = registry or SchemaRegistryClient({"url": REGISTRY})
    deserializer = AvroDeserializer(client)
    found: dict[str, list[dict[str, Any]]] = {}
    try:
        for line in lines:
            record = json.loads(line)
            if record["key"] in wanted:
                context = SerializationContext("orders", MessageField.VALUE)
                value = deserializer(base64.b64decode(record["value"]), context)
                assert str(value["order_id"]) == record["key"]  # keyed by order id
                found.setdefault(record["key"], []).append(value)
    finally:
        if registry is None:
            client.close()
    return found


def otp_delivered(headers: dict[str, str] | None = None) -> tuple[str, str]:
    """An OTP request for SMS and email, then its SMS and its mail at the catcher: (phone, email)."""
    user = f"compose-{uuid.uuid4().hex[:8]}"
    phone, email = f"+1555{uuid.uuid4().int % 10**7:07d}", f"{user}@example.com"
    body = {"user_id": user, "channels": ["sms", "email"], "phone": phone, "email": email}
    status, answer = http("POST", f"{OTP}/otp", body, headers)
    assert status == 202, answer

    def items(path: str) -> list[Any]:
        got, listed = http("GET", f"{CATCHER}{path}", headers=headers)
        assert got == 200, listed
        return list(listed["items"])

    eventually("the SMS at the catcher", lambda: items(f"/sms?to={urllib.parse.quote(phone)}"))
    eventually("the mail at the catcher", lambda: items(f"/messages?to={email}"))
    return phone, email
