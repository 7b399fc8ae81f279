"""Locust load test of the streamshop stack: shoppers, sign-ins and Kafka clients at once.

    python -m locust -f loadtest/locustfile.py --host http://127.0.0.1:8001     # web UI on :8089
    python -m loadtest.load --run-time 60s --max-p95-ms 500                      # headless, with thresholds

Three kinds of users, weighted 3 : 1 : 1:

- `OrdersUser` — a shopper: buys a basket (most orders then get paid, shipped and delivered, some
  are cancelled), reads the order back, browses their order list, and now and then tries to cancel a
  delivered order, which the state machine refuses (409, the expected answer, counted a success).
- `OtpUser` — a sign-in: requests a code by SMS and e-mail, reads it from the SMS sink of the
  catcher (``GET /sms?to=PHONE``; these polls are not counted as requests), sometimes types a wrong
  code first (422 expected) and sometimes replays the right one (409 expected).  The time from the
  request to the SMS arriving is reported as request type ``OTP``, name ``sms delivered``: the
  whole fan-out path otp -> broker -> sms-sender -> SMS provider.
- `KafkaUser` — a Kafka client producing (`acks=all`) through the Kafka protocol to its own topic,
  reported as request type ``KAFKA``: ``produce-ack`` is the time until the broker acknowledged the
  record, ``end-to-end`` the time until one consumer per Locust process read it back.

Where the load goes: `loadtest.targets` (``LOADTEST_*`` variables, a running `streamshop up`,
or the default ports); ``--host`` sets the orders URL.  Run it with ``python -m locust`` from
the repository root (or the image's /app), so that ``loadtest`` and the project import.
"""

from __future__ import annotations

import csv
import itertools
import json
import random
import re
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import gevent
from confluent_kafka import OFFSET_END, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from locust import FastHttpUser, User, between, events, task
from locust.env import Environment
from locust.stats import PERCENTILES_TO_REPORT, StatsCSV

from loadtest.targets import FINAL_STATS_SUFFIX, LoadTargets
from streamshop.env_file import apply_env_file
from streamshop.stack.demo import CANCEL_REASONS, CURRENCIES, PRODUCTS, api_key_headers

apply_env_file()  # the compose file's secure profile: the Kafka login and the API key
TARGETS = LoadTargets.from_env()
KAFKA_LOGIN = LoadTargets.kafka_config()
RUN = uuid.uuid4().hex[:8]  # this Locust process: names its customers, users and Kafka keys
_sequence = itertools.count(1)
KAFKA = "KAFKA"
_CODE = re.compile(r"(?<!\d)(\d{6})(?!\d)")  # the code in the SMS text, as `streamshop demo` reads it
PAYLOAD = "x" * 256  # a record about the size of one of the services' Avro events


def _fire(
    environment: Environment, kind: str, name: str, started: float, size: int, *, error: Exception | None = None
) -> None:
    environment.events.request.fire(  # type: ignore[no-untyped-call]  # locust's EventHook is untyped
        request_type=kind,
        name=name,
        response_time=(time.perf_counter() - started) * 1000,
        response_length=size,
        exception=error,
        context={},
    )


def basket(rng: random.Random) -> tuple[str, list[dict[str, Any]], Decimal]:
    """A basket of 1-4 products in one of the demo currencies, and its expected total."""
    currency = rng.choice(list(CURRENCIES))
    rate, places = CURRENCIES[currency]
    quantum = Decimal(1).scaleb(-places)
    items, total = [], Decimal(0)
    for sku in rng.sample(list(PRODUCTS), rng.randint(1, 4)):
        price = (PRODUCTS[sku] * rate).quantize(quantum)
        quantity = rng.choices((1, 2, 3, 5), weights=(70, 20, 8, 2))[0]
        items.append({"sku": sku, "quantity": quantity, "unit_price": str(price)})
        total += price * quantity
    return currency, items, total


def lifecycle(rng: random.Random) -> list[str]:
    """The statuses an order goes through after it is created: 80% delivered, 20% cancelled."""
    roll = rng.random()
    if roll < 0.1:
        return ["cancelled"]
    if roll < 0.2:
        return ["paid", "cancelled"]
    return ["paid", "shipped", "delivered"]


class OrdersUser(FastHttpUser):
    """A shopper of the orders service (the ``--host``)."""

    host = TARGETS.orders_url
    default_headers = api_key_headers()  # STREAMSHOP_API_KEY, for a secured stack
    weight = 3
    wait_time = between(0.5, 2.0)

    def on_start(self) -> None:
        self.rng = random.Random()
        self.customer = f"load-{RUN}-c{next(_sequence)}"
        self.delivered: list[str] = []

    @task(6)
    def buy(self) -> None:
        currency, items, total = basket(self.rng)
        with self.client.post(
            "/orders",
            json={"customer_id": self.customer, "currency": currency, "items": items},
            headers={"Idempotency-Key": str(uuid.uuid4())},
            name="POST /orders",
            catch_response=True,
        ) as response:
            if response.status_code != 201:
                response.failure(f"HTTP {response.status_code}: {(response.text or '')[:200]}")
                return
            order = response.json()
            if Decimal(order["total"]) != total:
                response.failure(f"total {order['total']}, expected {total}")
                return
        order_id = order["order_id"]
        self.client.get(f"/orders/{order_id}", name="GET /orders/[id]")
        statuses = lifecycle(self.rng)
        for status in statuses:
            reason = self.rng.choice(CANCEL_REASONS) if status == "cancelled" else None
            with self.client.post(
                f"/orders/{order_id}/status",
                json={"status": status, "reason": reason},
                name="POST /orders/[id]/status",
                catch_response=True,
            ) as response:
                if response.status_code != 200 or response.json().get("status") != status:
                    response.failure(f"to {status}: HTTP {response.status_code}: {(response.text or '')[:200]}")
                    return
        if statuses[-1] == "delivered":
            self.delivered = [*self.delivered[-9:], order_id]

    @task(3)
    def browse(self) -> None:
        self.client.get("/orders", params={"customer_id": self.customer, "limit": "20"}, name="GET /orders?customer_id")

    @task(1)
    def cancel_delivered(self) -> None:
        """Too late: the state machine refuses, and 409 is the right answer."""
        if not self.delivered:
            return
        order_id = self.delivered.pop()
        with self.client.post(
            f"/orders/{order_id}/status",
            json={"status": "cancelled", "reason": "customer changed their mind"},
            name="POST /orders/[id]/status (late cancel)",
            catch_response=True,
        ) as response:
            if response.status_code == 409:
                response.success()
            else:
                response.failure(f"HTTP {response.status_code}, expected 409")


class OtpUser(FastHttpUser):
    """A sign-in through the otp service.  Absolute URLs: ``--host`` overrides every class's host."""

    host = TARGETS.otp_url
    default_headers = api_key_headers()  # STREAMSHOP_API_KEY, for a secured stack
    weight = 1
    wait_time = between(1.0, 3.0)

    def on_start(self) -> None:
        self.rng = random.Random()

    @task
    def sign_in(self) -> None:
        n = next(_sequence)
        user, phone = f"load-{RUN}-u{n}", f"+1555{self.rng.randrange(10**7):07d}"
        with self.client.post(
            f"{TARGETS.otp_url}/otp",
            json={"user_id": user, "channels": ["sms", "email"], "phone": phone, "email": f"{user}@example.com"},
            name="POST /otp",
            catch_response=True,
        ) as response:
            if response.status_code != 202:
                response.failure(f"HTTP {response.status_code}: {(response.text or '')[:200]}")
                return
            request_id = str(response.json()["request_id"])
        code = self.sms_code(phone, request_id)
        if code is None:
            return
        verify = f"{TARGETS.otp_url}/otp/verify"
        if n % 3 == 0:
            wrong = f"{(int(code) + self.rng.randrange(1, 10**6)) % 10**6:06d}"
            self.expect(verify, {"request_id": request_id, "code": wrong}, 422, "POST /otp/verify (wrong code)")
        if not self.expect(verify, {"request_id": request_id, "code": code}, 200, "POST /otp/verify"):
            return
        if n % 4 == 1:
            self.expect(verify, {"request_id": request_id, "code": code}, 409, "POST /otp/verify (replay)")

    def expect(self, url: str, body: dict[str, str], status: int, name: str) -> bool:
        with self.client.post(url, json=body, name=name, catch_response=True) as response:
            if response.status_code == status:
                response.success()  # 409 and 422 are failures to Locust unless they are the expected answer
                return True
            response.failure(f"HTTP {response.status_code}, expected {status}: {(response.text or '')[:200]}")
            return False

    def sms_code(self, phone: str, request_id: str) -> str | None:
        """Poll the SMS sink until the code of `request_id` arrives; reported as ``sms delivered``."""
        url = f"{TARGETS.catcher_url}/sms?" + urllib.parse.urlencode({"to": phone, "limit": "20"})
        started = time.perf_counter()
        while time.perf_counter() - started < TARGETS.otp_timeout:
            try:
                request = urllib.request.Request(url, headers=api_key_headers())
                with urllib.request.urlopen(request, timeout=10) as reply:  # cooperative: gevent patched sockets
                    items = json.loads(reply.read()).get("items", [])
            except (urllib.error.URLError, OSError, ValueError) as e:
                _fire(self.environment, "OTP", "sms delivered", started, 0, error=e)
                return None
            for item in items:
                if item.get("request_id") == request_id and (code := _code_in(str(item.get("body", "")))):
                    _fire(self.environment, "OTP", "sms delivered", started, len(str(item.get("body", ""))))
                    return code
            gevent.sleep(0.05)
        _fire(self.environment, "OTP", "sms delivered", started, 0, error=TimeoutError(f"no SMS to {phone}"))
        return None


def _code_in(text: str) -> str | None:
    match = _CODE.search(text)
    return match.group(1) if match else None


class EndToEnd:
    """One consumer per Locust process on the Kafka users' topic: matches the records it reads
    with the ones this process produced and reports their end-to-end latency.  It starts reading
    at the partitions' end offsets taken before any user produces, so no record of this run is
    missed and none of another run is counted."""

    def __init__(self) -> None:
        self.consumer: Consumer | None = None
        self.pending: dict[bytes, float] = {}  # key -> perf_counter when produced, oldest first
        self.reader: Any = None  # the greenlet

    def start(self, environment: Environment) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": TARGETS.bootstrap_servers,
                **KAFKA_LOGIN,
                "group.id": f"loadtest-e2e-{RUN}",  # never joined: partitions are assigned, nothing committed
                "enable.auto.commit": False,
                "allow.auto.create.topics": True,  # our Metadata request creates the topic on first use
                "client.id": f"loadtest-e2e-{RUN}",
            }
        )
        deadline = time.monotonic() + 30
        while True:
            topic = consumer.list_topics(TARGETS.kafka_topic, timeout=10).topics.get(TARGETS.kafka_topic)
            if topic is not None and topic.error is None and topic.partitions:
                break
            if time.monotonic() > deadline:
                consumer.close()
                raise RuntimeError(f"topic {TARGETS.kafka_topic} not available at {TARGETS.bootstrap_servers}")
            gevent.sleep(0.2)  # a new topic has no leaders for a moment
        assignment = []
        for partition in sorted(topic.partitions):
            _, end = consumer.get_watermark_offsets(TopicPartition(TARGETS.kafka_topic, partition), timeout=10)
            assignment.append(TopicPartition(TARGETS.kafka_topic, partition, end if end >= 0 else OFFSET_END))
        consumer.assign(assignment)
        self.consumer = consumer
        self.reader = gevent.spawn(self.read, consumer, environment)

    def stop(self) -> None:
        if self.reader is not None:
            self.reader.kill()
            self.reader = None
        if self.consumer is not None:
            self.consumer.close()
            self.consumer = None
        self.pending.clear()  # in flight when the run ended: neither delivered nor lost

    def sent(self, key: bytes, at: float) -> None:
        self.pending[key] = at

    def forget(self, key: bytes) -> None:
        self.pending.pop(key, None)

    def read(self, consumer: Consumer, environment: Environment) -> None:
        next_sweep = 0.0
        while True:
            # timeout 0 never blocks the gevent hub; librdkafka fetches in its own threads
            messages: list[Message] = consumer.consume(num_messages=500, timeout=0)
            for message in messages:
                key = message.key()
                at = self.pending.pop(key, None) if isinstance(key, bytes) else None
                if at is not None:
                    _fire(environment, KAFKA, "end-to-end", at, len(message.value() or b""))
            now = time.perf_counter()
            if now >= next_sweep:
                self.sweep(environment, now)
                next_sweep = now + 0.5
            if not messages:
                gevent.sleep(0.002)

    def sweep(self, environment: Environment, now: float) -> None:
        """Count the records not read back within the timeout as lost."""
        for key, at in list(self.pending.items()):
            if now - at < TARGETS.e2e_timeout:
                break  # insertion order: the rest are younger
            del self.pending[key]
            error = TimeoutError(f"not consumed within {TARGETS.e2e_timeout:g} s")
            _fire(environment, KAFKA, "end-to-end", at, 0, error=error)


E2E = EndToEnd()


class KafkaUser(User):
    """A Kafka producer (`acks=all`, idempotent) on the real wire protocol, one per user."""

    weight = 1
    wait_time = between(0.05, 0.25)

    def on_start(self) -> None:
        self.producer = Producer(
            {
                "bootstrap.servers": TARGETS.bootstrap_servers,
                **KAFKA_LOGIN,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 0,  # measure the broker, not the client's batching delay
                "message.timeout.ms": int(TARGETS.e2e_timeout * 1000),
                "client.id": f"loadtest-{RUN}",
            }
        )

    def on_stop(self) -> None:
        self.producer.purge()
        self.producer.poll(0)

    @task
    def produce(self) -> None:
        key = f"{RUN}-{next(_sequence)}".encode()
        value = json.dumps({"run": RUN, "key": key.decode(), "sent_at": time.time(), "payload": PAYLOAD}).encode()
        outcome: list[KafkaError | None] = []
        started = time.perf_counter()
        try:
            self.producer.produce(TARGETS.kafka_topic, key=key, value=value, on_delivery=_delivered(outcome.append))
        except (BufferError, KafkaException) as e:
            _fire(self.environment, KAFKA, "produce-ack", started, 0, error=e)
            return
        E2E.sent(key, started)
        while not outcome:
            # poll(0) serves the delivery callback without blocking the gevent hub
            self.producer.poll(0)
            if not outcome:
                gevent.sleep(0.001)
        error = outcome[0]
        if error is not None:
            E2E.forget(key)
        _fire(
            self.environment, KAFKA, "produce-ack", started, len(value), error=KafkaException(error) if error else None
        )


def _delivered(record: Callable[[KafkaError | None], None]) -> Callable[[KafkaError | None, Message], None]:
    def callback(error: KafkaError | None, _message: Message) -> None:
        record(error)

    return callback


def _start_consumer(environment: Environment, **_: Any) -> None:
    # Before any user spawns, and only when Kafka users take part in the run.
    if KafkaUser in (environment.user_classes or []) and E2E.consumer is None:
        E2E.start(environment)


def _stop_consumer(environment: Environment, **_: Any) -> None:
    E2E.stop()


def _write_final_stats(environment: Environment, **_: Any) -> None:
    # Locust rewrites PREFIX_stats.csv once a second, so it misses the run's last second; at
    # `quitting` the users have stopped and the numbers are final.  Same columns, Locust's writer.
    prefix = getattr(environment.parsed_options, "csv_prefix", None)
    if prefix:
        with open(f"{prefix}{FINAL_STATS_SUFFIX}", "w", newline="") as f:
            StatsCSV(environment, PERCENTILES_TO_REPORT).requests_csv(csv.writer(f))


events.test_start.add_listener(_start_consumer)  # type: ignore[no-untyped-call]
events.test_stop.add_listener(_stop_consumer)  # type: ignore[no-untyped-call]
events.quitting.add_listener(_write_final_stats)  # type: ignore[no-untyped-call]
