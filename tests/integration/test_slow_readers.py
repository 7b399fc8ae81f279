"""Clients that ask for much and read little: a Fetch answer larger than a few KiB is read from
its segment file as the client's socket drains, so connections that never read pin a bounded
amount of memory (`queued.max.response.bytes`, the `streamshop_response_memory_bytes` gauge),
other clients are served meanwhile, and a client that takes nothing for
`connections.max.idle.ms` is closed.  Streamed answers arrive intact over TLS too."""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.list_groups.v4.request import ListGroupsRequest

from broker.connection import MAX_PENDING_BYTES, MAX_WRITE_BATCH
from broker.netlimits import MIN_CHUNK
from loadtest import slow_readers
from loadtest.brokers import gauge, rss_mib
from streamshop.pki import LocalCA
from tests.support.harness import BrokerProcess, ThreadBroker
from tests.support.kafka_wire import encode_request
from tests.support.secure import make_admin_user, secure_settings

POOL = 8 * 1024 * 1024


def _read_all(conf: dict[str, str | int | float | bool], topic: str, count: int) -> list[bytes]:
    consumer = Consumer(conf | {"group.id": "reader", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < count and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                assert message.error() is None, message.error()
                value = message.value()
                assert value is not None
                got.append(value)
    finally:
        consumer.close()
    return got


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_hundred_slow_readers_of_a_20_mb_partition_pin_a_bounded_amount_of_memory(
    broker_process_factory: Callable[..., BrokerProcess],
) -> None:
    """Each asks twice for the whole partition and reads nothing: before answers were streamed
    the broker held 4 GB for them.  Now it holds the pool and a chunk each, and still serves
    a consumer the whole partition meanwhile."""
    broker = broker_process_factory(settings={"queued.max.response.bytes": str(POOL)})
    assert broker.proc is not None
    bootstrap, admin_url = f"127.0.0.1:{broker.port}", f"http://127.0.0.1:{broker.admin_port}"
    count = slow_readers.fill(bootstrap, megabytes=20)
    before = rss_mib(broker.proc.pid)
    sockets = [slow_readers.open_slow_reader(bootstrap) for _ in range(100)]
    try:
        held = slow_readers.settled(admin_url, "streamshop_response_memory_bytes", quiet=1.0)
        assert 0 < held <= POOL + 100 * (MIN_CHUNK + 4096)
        assert rss_mib(broker.proc.pid) - before < 100
        values = _read_all({"bootstrap.servers": bootstrap}, slow_readers.TOPIC, count)
        assert len(values) == count
        assert set(values) == {b"x" * 1000}
    finally:
        for sock in sockets:
            sock.close()
    deadline = time.monotonic() + 10
    while gauge(admin_url, "streamshop_response_memory_bytes") > 0:
        assert time.monotonic() < deadline, "response memory not given back when the readers left"
        time.sleep(0.05)


def test_a_client_that_takes_none_of_its_answer_is_closed_after_connections_max_idle_ms(
    broker_factory: Callable[..., ThreadBroker],
) -> None:
    broker = broker_factory(settings={"connections.max.idle.ms": "1000"})
    slow_readers.fill(broker.bootstrap, megabytes=4)
    sock = slow_readers.open_slow_reader(broker.bootstrap)
    try:
        _wait_for(lambda: broker.call(lambda: broker.server.responses.used) > 0, "the answer to stall")
        _wait_for(
            lambda: broker.call(lambda: not broker.server.connections and broker.server.responses.used == 0),
            "the stalled connection to be closed and its memory given back",
        )
    finally:
        sock.close()


def test_streamed_answers_arrive_intact_over_tls(tmp_path: Path, broker_factory: Callable[..., ThreadBroker]) -> None:
    ca = LocalCA(tmp_path / "pki")
    make_admin_user(tmp_path / "broker")
    settings = secure_settings(ca, ca.issue("broker", hosts=("127.0.0.1",)))
    del settings["authorizer.class.name"]  # TLS is what is tested here, not ACLs
    broker = broker_factory(settings=settings, name="broker")
    conf: dict[str, str | int | float | bool] = {
        "bootstrap.servers": f"127.0.0.1:{broker.server.ports['SSL']}",
        "security.protocol": "SSL",
        "ssl.ca.location": str(ca.cert_path),
    }
    admin = AdminClient(conf)  # kept: a dropped client fails its futures
    admin.create_topics([NewTopic("tls-large", 1, 1)])["tls-large"].result(15)
    producer = Producer(conf | {"linger.ms": 20, "batch.size": 256 * 1024})
    values = [i.to_bytes(4, "big") * 250 for i in range(4000)]  # 4 MB, each value its own
    for value in values:
        producer.produce("tls-large", value)
    assert producer.flush(30) == 0
    assert _read_all(conf | {"max.partition.fetch.bytes": 2 * 1024 * 1024}, "tls-large", len(values)) == values
    _wait_for(lambda: broker.call(lambda: broker.server.responses.used) == 0, "response memory to be given back")


def test_a_slow_but_reading_client_gets_a_large_answer_byte_for_byte(broker: ThreadBroker) -> None:
    """A 4 KiB receive buffer read a little at a time: the answer goes out partly by sendfile
    and partly through the transport while the socket is full, and must arrive in order."""
    slow_readers.fill(broker.bootstrap, megabytes=4)
    sock = slow_readers.open_slow_reader(broker.bootstrap)  # sends two Fetches of the partition
    try:
        stored = broker.call(lambda: broker.broker.store.partition_log(slow_readers.TOPIC, 0).read(0, 1 << 30))
        for _ in range(2):
            (size,) = struct.unpack(">i", _recv(sock, 4))
            answer = b""
            while len(answer) < size:
                time.sleep(0.0005)
                answer += _recv(sock, min(8192, size - len(answer)))
            assert answer.endswith(stored)  # Fetch v4: the records are the answer's last field
    finally:
        sock.close()


def _recv(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "the broker closed the connection"
        data += chunk
    return data


# --- TLS: what clients that do not read cost, and what is given back when they leave -----------


def _tls_describe_configs(address: str, ctx: ssl.SSLContext) -> int:
    """A client that reads: the size of its DescribeConfigs answer (one broker resource)."""
    with contextlib.closing(slow_readers.open_reader(address, slow_readers.describe_configs_request(7, 1), ctx)) as s:
        (size,) = struct.unpack(">i", _recv(s, 4))
        (correlation_id,) = struct.unpack(">i", _recv(s, 4))
        _recv(s, size - 4)
    assert correlation_id == 7
    return int(size)


def _wait_for_gauge(admin_url: str, name: str, condition: Callable[[float], bool], what: str) -> None:
    _wait_for(lambda: condition(gauge(admin_url, name)), what, timeout=90)


def test_tls_clients_that_read_none_of_an_amplified_answer_hold_no_ciphertext_copy_of_it(tmp_path: Path) -> None:
    """Twelve TLS clients each ask for this broker's configs 2,000 times (a 21.6 MB answer built
    from one 10.8 KB encoding) and read nothing.  The whole answer used to be encrypted at once
    and held as ciphertext, beside an OpenSSL buffer as large that never shrank: 12 such
    clients grew the broker by 508 MiB, and 255 MiB of it stayed after they left.  Now
    plaintext is encrypted as the socket drains, and other clients are served meanwhile."""
    with slow_readers.tls_broker(tmp_path) as (broker, address, ca):
        assert broker.admin_url is not None
        ctx = slow_readers.client_tls(ca)
        one = _tls_describe_configs(address, ctx)  # also warms up what any first answer allocates
        before = rss_mib(broker.pid)
        readers = [slow_readers.open_reader(address, slow_readers.describe_configs_request(1), ctx) for _ in range(12)]
        try:
            answers = 12 * slow_readers.AMPLIFY * (one - 100)
            # Every answer built and handed to its connection's transport (it counts them).
            _wait_for_gauge(
                broker.admin_url, "streamshop_response_memory_bytes", lambda v: v > answers * 0.75, "the answers"
            )
            grown = rss_mib(broker.pid) - before
            assert grown < 64, f"the broker grew by {grown:.0f} MiB for 12 answers of {answers / 12 / 2**20:.1f} MiB"
            assert _tls_describe_configs(address, ctx) == one  # others are served meanwhile
        finally:
            for sock in readers:
                sock.close()
        _wait_for_gauge(broker.admin_url, "streamshop_connections_open", lambda v: v == 0, "the readers to leave")
        _wait_for_gauge(broker.admin_url, "streamshop_response_memory_bytes", lambda v: v == 0, "memory given back")
        assert rss_mib(broker.pid) - before < 64


@pytest.mark.slow
def test_memory_of_hundreds_of_slow_tls_readers_is_given_back_when_they_leave(tmp_path: Path) -> None:
    """400 TLS clients ask twice for a whole partition and read nothing, then leave.  Their
    connections used to stay in reference cycles (connection and TLS layer) until a full
    garbage collection, and glibc kept what was freed: the broker's resident memory stayed
    where the readers had taken it.  Now most of what they took is given back, compared with
    what they took on the same broker."""
    with slow_readers.tls_broker(tmp_path) as (broker, address, ca):
        assert broker.admin_url is not None
        ctx = slow_readers.client_tls(ca)
        slow_readers.fill(broker.bootstrap, megabytes=4)
        _tls_describe_configs(address, ctx)
        before = rss_mib(broker.pid)
        request = slow_readers.fetch_request(1) + slow_readers.fetch_request(2)
        readers = [slow_readers.open_reader(address, request, ctx) for _ in range(400)]
        try:
            slow_readers.settled(broker.admin_url, "streamshop_response_memory_bytes", quiet=1.0)
            taken = rss_mib(broker.pid) - before
            assert taken > 40, f"the readers took only {taken:.0f} MiB: nothing to give back"
        finally:
            for sock in readers:
                sock.close()
        _wait_for_gauge(broker.admin_url, "streamshop_connections_open", lambda v: v == 0, "the readers to leave")
        _wait_for(lambda: rss_mib(broker.pid) - before < taken / 3, "their memory to be given back", timeout=30)


def test_a_client_that_pipelines_requests_and_reads_nothing_holds_at_most_its_share(
    broker_factory: Callable[..., ThreadBroker],
) -> None:
    """1,000 ListGroups in one write, each answer listing 300 groups (about 63 KB), and nothing
    read.  Answers built as protocol objects used to count for nothing until they reached the
    socket's transport, so all that one read held were encoded and handed over together (some
    60 MB for this one client).  Now every answer counts from the moment it is built: the
    connection stops at its share and other clients are still served."""
    broker = broker_factory()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("committed", 1, 1)])["committed"].result(15)
    names = [f"{i:03d}-" + "g" * 200 for i in range(300)]
    for name in names:
        offsets = ConsumerGroupTopicPartitions(name, [TopicPartition("committed", 0, 1)])
        admin.alter_consumer_group_offsets([offsets])[name].result(15)
    request = encode_request(ListGroupsRequest(states_filter=()), 1)
    sock = slow_readers.open_reader(broker.bootstrap, request * 1000)
    try:
        held = _settled(lambda: broker.call(lambda: broker.server.responses.used))
        answer = 300 * (len(names[0]) + 20)
        assert 0 < held <= MAX_PENDING_BYTES + 2 * MAX_WRITE_BATCH + 2 * answer, f"{held / 2**20:.1f} MiB held"
        listed = admin.list_consumer_groups().result(15)  # served meanwhile
        assert {g.group_id for g in listed.valid} >= set(names)
    finally:
        sock.close()
    _wait_for(lambda: broker.call(lambda: broker.server.responses.used) == 0, "response memory to be given back")


def _settled(read: Callable[[], int], quiet: float = 1.5) -> int:
    """`read()` once it has not changed for `quiet` seconds."""
    value, since = read(), time.monotonic()
    deadline = since + 60
    while time.monotonic() - since < quiet:
        assert time.monotonic() < deadline, "the value never settled"
        time.sleep(0.1)
        now = read()
        if now != value:
            value, since = now, time.monotonic()
    return value
