"""Slow readers, for `bench_limits` and its test: connections that ask for a whole large
partition and never read the answer.

Each connection shrinks its receive buffer to 4 KiB (as a client on a slow link would have it),
sends two Fetches of the partition from offset 0 with every limit at its maximum (`max_bytes`
and `partition_max_bytes` 2^31-1), and reads nothing.  What the broker holds for them shows in
its resident memory and in its `streamshop_response_memory_bytes` gauge.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kit.settings import parse_host_port
from loadtest.brokers import gauge, rss_mib, wait_idle

TOPIC = "slow-readers"
RCVBUF = 4096
MAX = 0x7FFFFFFF


def fill(bootstrap: str, megabytes: int = 20, topic: str = TOPIC) -> int:
    """A one-partition topic of about `megabytes` MB (1 KB records); returns the records written."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 256 * 1024, "acks": 1})
    value = b"x" * 1000
    count = megabytes * 1000
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value, key=str(i).encode())
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0
    return count


def fetch_request(correlation_id: int, topic: str = TOPIC) -> bytes:
    """Fetch v4 of partition 0 from offset 0, every limit at its maximum, no wait."""
    name = topic.encode()
    client = b"slow-reader"
    header = struct.pack(">hhih", 1, 4, correlation_id, len(client)) + client
    body = struct.pack(">iiiib", -1, 0, 1, MAX, 0)  # replica, max wait, min bytes, max bytes, isolation
    body += struct.pack(">ih", 1, len(name)) + name + struct.pack(">iiqi", 1, 0, 0, MAX)
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def open_slow_reader(bootstrap: str) -> socket.socket:
    server = parse_host_port(bootstrap)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)  # before connect: sets the window
    sock.settimeout(10)
    sock.connect((server.host, server.port))
    sock.sendall(fetch_request(1) + fetch_request(2))
    return sock


def settled(admin_url: str, name: str, quiet: float = 1.5, timeout: float = 120.0) -> float:
    """The gauge's value once it has not changed for `quiet` seconds."""
    value, since = gauge(admin_url, name), time.monotonic()
    deadline = since + timeout
    while time.monotonic() - since < quiet and time.monotonic() < deadline:
        time.sleep(0.1)
        now = gauge(admin_url, name)
        if now != value:
            value, since = now, time.monotonic()
    return value


def measure(proc: Any, bootstrap: str, admin_url: str, connections: int) -> dict[str, float]:
    """Resident memory before and while `connections` slow readers wait, and what the broker
    still holds once they left."""
    wait_idle(proc.pid)
    before = rss_mib(proc.pid)
    sockets = [open_slow_reader(bootstrap) for _ in range(connections)]
    held = settled(admin_url, "streamshop_response_memory_bytes")
    during = rss_mib(proc.pid)
    for sock in sockets:
        sock.close()
    deadline = time.monotonic() + 30
    while gauge(admin_url, "streamshop_response_memory_bytes") > 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    return {
        "connections": connections,
        "rss_before_mib": before,
        "rss_with_readers_mib": during,
        "response_memory_mib": held / (1 << 20),
        "response_memory_after_mib": gauge(admin_url, "streamshop_response_memory_bytes") / (1 << 20),
    }
