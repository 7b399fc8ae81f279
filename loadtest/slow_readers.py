"""Slow readers, for `bench_limits` and its test: connections that ask for a whole large
partition and never read the answer.

Each connection shrinks its receive buffer to 4 KiB (as a client on a slow link would have it),
sends two Fetches of the partition from offset 0 with every limit at its maximum (`max_bytes`
and `partition_max_bytes` 2^31-1), and reads nothing.  What the broker holds for them shows in
its resident memory and in its `streamshop_response_memory_bytes` gauge.

    python -m loadtest.slow_readers [--answers 12] [--connections 1000] [--set KEY=VALUE]

measures, each on a fresh broker with a PLAINTEXT and an SSL listener, the broker's resident
memory before, while readers wait and after they left: `--answers` connections that each ask for
DescribeConfigs of the broker resource 2,000 times (a 5 KB request, a 21.6 MB answer), over
plaintext and over TLS, then `--connections` slow readers of a 20 MB partition over TLS.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import ssl
import struct
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.static.primitive import i8

from kit.ports import free_ports
from kit.settings import parse_host_port
from loadtest.brokers import BrokerProcess, gauge, rss_mib, streamshop_broker, wait_idle
from streamshop.pki import LocalCA
from tests.support.kafka_wire import encode_request

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


# --- amplified answers, plaintext and TLS ------------------------------------------------------

BROKER_RESOURCE = 4
AMPLIFY = 2000  # repeats of the broker resource: a 5 KB request, a 21.6 MB answer


def describe_configs_request(correlation_id: int, repeats: int = AMPLIFY) -> bytes:
    """DescribeConfigs v4 naming this broker's resource `repeats` times, synonyms and
    documentation on: Kafka answers each one, about 10.8 KB apiece."""
    resource = DescribeConfigsResource(resource_type=i8(BROKER_RESOURCE), resource_name="1", configuration_keys=None)
    request = DescribeConfigsRequest(resources=(resource,) * repeats, include_synonyms=True, include_documentation=True)
    return encode_request(request, correlation_id)


def open_reader(address: str, request: bytes, tls: ssl.SSLContext | None = None) -> socket.socket:
    """A connection with a 4 KiB receive buffer that sends `request` and reads nothing."""
    server = parse_host_port(address)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)  # before connect: sets the window
    sock.settimeout(30)
    sock.connect((server.host, server.port))
    if tls is not None:
        sock = tls.wrap_socket(sock, server_hostname=server.host)
    sock.sendall(request)
    return sock


def client_tls(ca: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.check_hostname = False  # the broker's certificate names 127.0.0.1 as an address
    return ctx


def wait_released(admin_url: str, timeout: float = 60.0) -> float:
    """Seconds until the broker holds no response bytes and no connection (the readers left)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if not gauge(admin_url, "streamshop_response_memory_bytes") and not gauge(
            admin_url, "streamshop_connections_open"
        ):
            break
        time.sleep(0.1)
    return time.monotonic() - start


def measure_readers(
    pid: int, admin_url: str, address: str, request: bytes, connections: int, *, tls: ssl.SSLContext | None
) -> dict[str, float]:
    """Resident memory before, while `connections` readers of `request` wait, and after they left."""
    wait_idle(pid)
    before = rss_mib(pid)
    sockets = [open_reader(address, request, tls) for _ in range(connections)]
    wait_idle(pid, timeout=120)
    held = settled(admin_url, "streamshop_response_memory_bytes")
    during = rss_mib(pid)
    for sock in sockets:
        sock.close()
    wait_released(admin_url)
    time.sleep(2.0)  # the broker's sweep (once a second) gives back what idle moments release
    wait_idle(pid)
    return {
        "connections": connections,
        "rss_before_mib": before,
        "rss_with_readers_mib": during,
        "rss_after_mib": rss_mib(pid),
        "response_memory_mib": held / (1 << 20),
    }


@contextlib.contextmanager
def tls_broker(workdir: Path, settings: dict[str, str] | None = None) -> Iterator[tuple[BrokerProcess, str, Path]]:
    """A broker child process with a PLAINTEXT and an SSL listener: (broker, SSL address, CA file)."""
    ca = LocalCA(workdir / "pki")
    issued = ca.issue("broker", hosts=("127.0.0.1",))
    plain, secure = free_ports(2)
    listeners = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{secure}",
        "ssl.keystore.location": str(issued.keystore),
    }
    with streamshop_broker(workdir, admin=True, settings=listeners | (settings or {})) as started:
        yield started, f"127.0.0.1:{secure}", ca.cert_path


def run(connections: int, answers: int, settings: dict[str, str]) -> dict[str, dict[str, float]]:
    """Each measurement on a broker of its own, so that one does not hide another's growth."""
    results: dict[str, dict[str, float]] = {}
    for label, tls, count, request in (
        ("describe_configs_plaintext", False, answers, describe_configs_request(1)),
        ("describe_configs_tls", True, answers, describe_configs_request(1)),
        ("fetch_tls", True, connections, fetch_request(1) + fetch_request(2)),
    ):
        with (
            tempfile.TemporaryDirectory(prefix="slow-readers-") as tmp,
            tls_broker(Path(tmp), settings) as (b, ssl_address, ca),
        ):
            assert b.admin_url is not None
            if label.startswith("fetch"):
                fill(b.bootstrap, megabytes=20)
            address, ctx = (ssl_address, client_tls(ca)) if tls else (b.bootstrap, None)
            results[label] = measure_readers(b.pid, b.admin_url, address, request, count, tls=ctx)
    return results


def report(results: dict[str, dict[str, float]]) -> list[str]:
    lines = []
    for label, r in results.items():
        lines.append(
            f"{label}: {int(r['connections']):,} readers: RSS {r['rss_before_mib']:.0f} -> "
            f"{r['rss_with_readers_mib']:.0f} MiB with them (+{r['rss_with_readers_mib'] - r['rss_before_mib']:.0f}),"
            f" {r['rss_after_mib']:.0f} after they left (+{r['rss_after_mib'] - r['rss_before_mib']:.0f});"
            f" response memory counted {r['response_memory_mib']:.1f} MiB"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.slow_readers", description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=1000, help="slow readers of a Fetch over TLS")
    parser.add_argument("--answers", type=int, default=12, help="readers of an amplified DescribeConfigs answer")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a broker setting")
    args = parser.parse_args(argv)
    settings = dict(item.split("=", 1) for item in args.set)
    for line in report(run(args.connections, args.answers, settings)):
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
