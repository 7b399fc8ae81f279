"""How closely a throttled client is held to its quota, for `bench_limits` and its test.

A confluent-kafka producer (client id `quota-bench`, 1 KB records, 16 KiB batches) produces
as fast as it can while the client id has a `producer_byte_rate`; the rate at which the broker
appended its records (their LogAppendTime stamps) is measured over a span that starts after a
warm-up (Kafka's rate counts the windows a young client has not lived yet, so it starts with
some credit); then a consumer with a `consumer_byte_rate` reads them back, measured as they
arrive.
"""

from __future__ import annotations

import struct
import time
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from loadtest.brokers import connect, recv_exactly

CLIENT = "quota-bench"
TOPIC = "quota-bench"
RECORD = 1000


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def set_client_quota(bootstrap: str, client_id: str, key: str, value: float) -> int:
    """AlterClientQuotas v0 for one client id; returns the entry's error code."""
    header = struct.pack(">hhi", 49, 0, 1) + _string("quota-bench-admin")
    body = struct.pack(">i", 1)  # one entry
    body += struct.pack(">i", 1) + _string("client-id") + _string(client_id)  # its entity
    body += struct.pack(">i", 1) + _string(key) + struct.pack(">d?", value, False)  # one op: set
    body += struct.pack(">?", False)  # validate_only
    with connect(bootstrap) as sock:
        sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
        (size,) = struct.unpack(">i", recv_exactly(sock, 4))
        answer = recv_exactly(sock, size)
    return int(struct.unpack_from(">h", answer, 12)[0])  # after correlation id, throttle, entry count


def _rate(stamps: list[tuple[float, int]], start: float, end: float) -> float:
    """The slope of bytes received against time over [start, end] (least squares): a
    throttled client receives in bursts, and a plain count over a span that holds one burst
    more or less than its share would be off by that burst."""
    total = 0.0
    points: list[tuple[float, float]] = []
    for t, n in stamps:
        total += n
        if start <= t < end:
            points.append((t, total))
    if len(points) < 2:
        return 0.0
    mean_t = sum(t for t, _ in points) / len(points)
    mean_b = sum(b for _, b in points) / len(points)
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    return sum((t - mean_t) * (b - mean_b) for t, b in points) / spread if spread else 0.0


def producer_rate(bootstrap: str, quota: float, *, warmup: float, seconds: float) -> float:
    """Bytes/s of values the broker acknowledged between `warmup` and `warmup + seconds`."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: a dropped client fails its futures
    # The broker stamps each record as it appends it (LogAppendTime), and the delivery report
    # carries that stamp: the rate is the broker's, not that of the client's callbacks, which a
    # client starved of CPU runs in bursts.
    config = {"message.timestamp.type": "LogAppendTime"}
    admin.create_topics([NewTopic(TOPIC, 1, 1, config=config)])[TOPIC].result(30)
    set_client_quota(bootstrap, CLIENT, "producer_byte_rate", quota)
    stamps: list[tuple[float, int]] = []

    def delivered(error: Any, message: Any) -> None:
        if error is None:
            stamps.append((message.timestamp()[1] / 1000, len(message.value())))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": CLIENT,
            "linger.ms": 2,
            "batch.size": 16384,
            "acks": 1,
            "queue.buffering.max.kbytes": 1024,  # a backlog of a second or two, not minutes
        }
    )
    value = b"q" * RECORD
    started = time.time()  # the clock of the broker's stamps (the same host)
    end = started + warmup + seconds
    while time.time() < end:
        try:
            producer.produce(TOPIC, value, on_delivery=delivered)
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    producer.purge()  # what is still queued is not measured: no need to wait for it
    producer.flush(10)
    return _rate(sorted(stamps), started + warmup, end)


def large_producer_rate(bootstrap: str, quota: float, *, request_bytes: int, warmup: float, seconds: float) -> float:
    """Bytes/s appended for a producer whose every request is one `request_bytes` batch, over
    whole bursts: from the first request appended after `warmup` to the last one before
    `warmup + seconds` (a plain count over the span would be off by up to one request)."""
    topic = f"{TOPIC}-large"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: a dropped client fails its futures
    config = {"message.timestamp.type": "LogAppendTime", "max.message.bytes": str(request_bytes + (1 << 20))}
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(30)
    client = f"{CLIENT}-large"
    set_client_quota(bootstrap, client, "producer_byte_rate", quota)
    appended: dict[float, int] = {}  # LogAppendTime -> bytes: one request each

    def delivered(error: Any, message: Any) -> None:
        if error is None:
            at = message.timestamp()[1] / 1000
            appended[at] = appended.get(at, 0) + len(message.value())

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client,
            "linger.ms": 100,
            "batch.size": request_bytes,
            "batch.num.messages": request_bytes // RECORD + 1,
            "message.max.bytes": request_bytes + (1 << 20),
            "acks": 1,
            "queue.buffering.max.kbytes": 2 * request_bytes // 1024,
        }
    )
    value = b"q" * RECORD
    started = time.time()
    end = started + warmup + seconds
    while time.time() < end:
        try:
            producer.produce(topic, value, on_delivery=delivered)
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    producer.purge()
    producer.flush(30)
    bursts = sorted((t, n) for t, n in appended.items() if started + warmup <= t < end)
    if len(bursts) < 2:
        return 0.0
    return sum(n for _, n in bursts[1:]) / (bursts[-1][0] - bursts[0][0])


def consumer_rate(bootstrap: str, quota: float, *, warmup: float, seconds: float) -> float:
    """Bytes/s of values a consumer held to `consumer_byte_rate` receives, after `warmup`."""
    set_client_quota(bootstrap, CLIENT, "consumer_byte_rate", quota)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": CLIENT,
            "group.id": CLIENT,
            "fetch.max.bytes": 64 * 1024,  # answers small beside the quota: the rate is met finely
            "message.max.bytes": 64 * 1024,
            "max.partition.fetch.bytes": 64 * 1024,
        }
    )
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    stamps: list[tuple[float, int]] = []
    started = time.monotonic()
    end = started + warmup + seconds
    try:
        while time.monotonic() < end:
            for message in consumer.consume(500, 0.2):
                if message.error() is None:
                    stamps.append((time.monotonic(), len(message.value() or b"")))
    finally:
        consumer.close()
    return _rate(stamps, started + warmup, end)
