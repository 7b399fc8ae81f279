"""Connection-level limits against raw clients over real sockets: idle connections are
closed, a size prefix allocates nothing by itself, request memory is shared and waited for,
connection counts are capped, abandoned long polls are freed at once, and a Fetch is bounded
whatever it asks for."""

from __future__ import annotations

import resource
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.types import TopicName
from kio.static.primitive import i32, i64

from tests.support.harness import BrokerProcess, ThreadBroker
from tests.support.kafka_wire import ConnectionClosed, batch, connect, encode_request, ms


def _wait_for(condition: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _raw(broker: ThreadBroker) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _closed_by_peer(sock: socket.socket, timeout: float = 5.0) -> bool:
    """Whether the broker closes `sock` within `timeout` (the socket is closed after)."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    finally:
        sock.close()


def _sample(broker: ThreadBroker, name: str, labels: dict[str, str] | None = None) -> float:
    value = broker.broker.metrics.registry.get_sample_value(name, labels)
    return float(value or 0.0)


def test_an_idle_connection_is_closed_after_connections_max_idle_ms_and_a_busy_one_is_not(
    broker_factory: Callable[..., ThreadBroker],
) -> None:
    broker = broker_factory(settings={"connections.max.idle.ms": "400"})
    idle = _raw(broker)
    with connect(broker.bootstrap) as busy:
        started = time.monotonic()
        while time.monotonic() - started < 1.5:  # keeps talking for well over the idle limit
            busy.api_versions()
            time.sleep(0.1)
        assert _closed_by_peer(idle, timeout=2.0)
        busy.api_versions()  # still open
    assert _sample(broker, "streamshop_connections_idle_closed_total") >= 1


def test_a_size_prefix_claiming_100_mb_allocates_nothing_until_the_bytes_arrive(broker: ThreadBroker) -> None:
    """Ten connections each claim a 100 MB request and send 4 bytes: no request memory is
    drawn from the pool and each holds at most its base buffer; the broker serves others."""
    socks = [_raw(broker) for _ in range(10)]
    for sock in socks:
        sock.sendall(struct.pack(">i", 100_000_000))
    time.sleep(0.3)
    assert broker.call(lambda: broker.server.memory.used) == 0
    assert broker.call(lambda: max(len(c.buf) for c in broker.server.connections)) <= 64 * 1024
    with connect(broker.bootstrap) as other:
        assert other.api_versions().error_code == ErrorCode.none
    for sock in socks:
        sock.close()


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_idle_clients_leaving_together_cost_no_base_buffers(
    broker_process_factory: Callable[..., BrokerProcess],
) -> None:
    """Reading the end of the stream of an idle connection starts from a small buffer, not
    the 64 KiB base one: thousands of idle clients leaving at once do not make the broker's
    peak memory jump by a base buffer each (it was 640 MiB for 10,000)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    count = min(3_000, hard // 2 - 100)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    proc = broker_process_factory(nofile=hard)
    assert proc.proc is not None
    socks = [socket.create_connection(("127.0.0.1", proc.port)) for _ in range(count)]
    time.sleep(1.5)  # idle: nothing read, nothing allocated
    before = _peak_rss_kib(proc.proc.pid)
    for sock in socks:
        sock.close()
    time.sleep(1.0)
    growth = _peak_rss_kib(proc.proc.pid) - before
    assert growth < count * 16, f"peak memory grew {growth} KiB for {count} connections closing"
    with connect(proc.bootstrap) as c:
        assert c.api_versions().error_code == ErrorCode.none


def test_a_large_request_grows_the_buffer_with_the_bytes_and_gives_the_memory_back(broker: ThreadBroker) -> None:
    with connect(broker.bootstrap) as c:
        assert c.create_topic("big", 1, {"max.message.bytes": str(8 << 20)}).error_code == ErrorCode.none
        values = [bytes([i % 251]) * 100_000 for i in range(30)]  # one batch of ~3 MB
        assert c.produce("big", 0, batch(values)).error_code == ErrorCode.none
        assert [r.value for r in c.read_all("big")] == values
    _wait_for(lambda: broker.call(lambda: broker.server.memory.used) == 0, what="memory released")


def test_a_producer_s_next_large_request_gets_its_buffer_at_once_and_a_newcomer_s_does_not(
    broker: ThreadBroker,
) -> None:
    """A connection that sent a 900 KB request whole gets the whole buffer for its next one as
    soon as its size is read; a new connection sending the same first bytes still grows with
    what it sent (at most doubling).  Both requests complete."""
    with connect(broker.bootstrap) as c:
        assert c.create_topic("next", 1).error_code == ErrorCode.none
    frame = encode_request(_produce_request("next", batch([bytes([n % 251]) * 10_000 for n in range(90)])), 1)
    head = 70 * 1024  # more than the base buffer: the buffer must grow to take it

    def buffer_of(sock: socket.socket) -> int:
        me = sock.getsockname()
        return int(broker.call(lambda: next(len(c.buf) for c in broker.server.connections if c.peer == me)))

    producer, newcomer = _raw(broker), _raw(broker)
    try:
        producer.sendall(frame)
        (size,) = struct.unpack(">i", _recv_exactly(producer, 4))
        _recv_exactly(producer, size)
        for sock in (producer, newcomer):
            sock.sendall(frame[:head])
        _wait_for(lambda: buffer_of(producer) == len(frame), what="the producer's buffer sized for its frame")
        _wait_for(lambda: buffer_of(newcomer) > 64 * 1024, what="the newcomer's buffer grown")
        assert buffer_of(newcomer) <= 3 * head, "a newcomer's buffer grows with the bytes it sent"
        for sock in (producer, newcomer):
            sock.sendall(frame[head:])
            (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
            _recv_exactly(sock, size)
    finally:
        producer.close()
        newcomer.close()
    with connect(broker.bootstrap) as c:
        assert len(c.read_all("next")) == 270
    _wait_for(lambda: broker.call(lambda: broker.server.memory.used) == 0, what="memory released")


def test_when_request_memory_is_used_up_a_connection_waits_and_then_proceeds(
    broker_factory: Callable[..., ThreadBroker],
) -> None:
    """queued.max.request.bytes = socket.request.max.bytes = 1 MiB.  Two clients hold large
    half-sent requests (the pool admits a reservation while it is not used up, as Kafka's
    does); a third client's large request is then not read past its base buffer.  When the
    first two complete, the third is read and answered.  Nothing is refused or lost."""
    limit = 1 << 20
    broker = broker_factory(settings={"socket.request.max.bytes": str(limit), "queued.max.request.bytes": str(limit)})
    with connect(broker.bootstrap) as c:
        assert c.create_topic("t", 1).error_code == ErrorCode.none
    frames = [
        encode_request(_produce_request("t", batch([bytes([n]) * 10_000 for _ in range(90)])), 1) for n in range(3)
    ]
    socks = [_raw(broker) for _ in range(3)]
    try:
        for sock, data in zip(socks[:2], frames[:2], strict=True):
            sock.sendall(data[:-10])
        _wait_for(lambda: broker.call(lambda: broker.server.memory.used) >= limit, what="two requests buffered")
        socks[2].sendall(frames[2][:300_000])
        third = socks[2].getsockname()
        waiting = lambda: broker.call(  # noqa: E731
            lambda: [len(c.buf) for c in broker.server.connections if c.waiting_memory and c.peer == third]
        )
        _wait_for(lambda: bool(waiting()), what="the third client waiting for memory")
        assert waiting() == [64 * 1024]  # not read past its base buffer
        for sock, data in zip(socks, frames, strict=True):
            sock.sendall(data[-10:] if sock is not socks[2] else data[300_000:])
        for sock in socks:
            sock.settimeout(10)
            (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
            _recv_exactly(sock, size)
    finally:
        for sock in socks:
            sock.close()
    with connect(broker.bootstrap) as c:
        assert len(c.read_all("t")) == 270
    _wait_for(lambda: broker.call(lambda: broker.server.memory.used) == 0, what="memory released")


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionClosed("closed")
        out += chunk
    return bytes(out)


def _produce_request(topic: str, records: bytes) -> object:
    from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
    from kio.static.primitive import Records, i16

    return ProduceRequest(
        transactional_id=None,
        acks=i16(1),
        timeout=ms(5000),
        topic_data=(
            TopicProduceData(
                name=TopicName(topic), partition_data=(PartitionProduceData(index=i32(0), records=Records(records)),)
            ),
        ),
    )


def test_max_connections_per_ip_refuses_the_extra_connection_and_the_others_keep_working(
    broker_factory: Callable[..., ThreadBroker],
) -> None:
    broker = broker_factory(settings={"max.connections.per.ip": "3"})
    kept = [connect(broker.bootstrap) for _ in range(3)]
    try:
        extra = _raw(broker)
        assert _closed_by_peer(extra)
        for c in kept:
            assert c.api_versions().error_code == ErrorCode.none
        reason = {"reason": "max.connections.per.ip"}
        assert _sample(broker, "streamshop_connections_rejected_total", reason) == 1
    finally:
        for c in kept:
            c.close()
    _wait_for(lambda: broker.call(lambda: len(broker.server.connections)) == 0, what="connections gone")
    with connect(broker.bootstrap) as again:  # a slot is free again
        assert again.api_versions().error_code == ErrorCode.none


def test_an_override_for_an_address_replaces_the_per_ip_limit(broker_factory: Callable[..., ThreadBroker]) -> None:
    broker = broker_factory(settings={"max.connections.per.ip": "1", "max.connections.per.ip.overrides": "127.0.0.1:4"})
    kept = [connect(broker.bootstrap) for _ in range(4)]
    try:
        for c in kept:
            assert c.api_versions().error_code == ErrorCode.none
        assert _closed_by_peer(_raw(broker))
    finally:
        for c in kept:
            c.close()


def test_max_connections_caps_the_total(broker_factory: Callable[..., ThreadBroker]) -> None:
    broker = broker_factory(settings={"max.connections": "2"})
    with connect(broker.bootstrap) as a, connect(broker.bootstrap) as b:
        assert _closed_by_peer(_raw(broker))
        assert a.api_versions().error_code == b.api_versions().error_code == ErrorCode.none


def _long_poll(topic: str, wait_ms: int, min_bytes: int, repeats: int = 1) -> FetchRequest:
    return FetchRequest(
        max_wait=ms(wait_ms),
        min_bytes=i32(min_bytes),
        max_bytes=i32(0x7FFFFFFF),
        topics=(
            FetchTopic(
                topic=TopicName(topic),
                partitions=tuple(
                    FetchPartition(partition=i32(0), fetch_offset=i64(0), partition_max_bytes=i32(50 << 20))
                    for _ in range(repeats)
                ),
            ),
        ),
        forgotten_topics_data=(),
    )


def test_long_polls_of_clients_that_went_away_are_freed_at_once(broker: ThreadBroker) -> None:
    """200 Fetches waiting 2**31-1 ms for 1 GB: when their clients disconnect, the broker
    stops waiting for them immediately (not after their max wait)."""
    with connect(broker.bootstrap) as c:
        assert c.create_topic("polled", 1).error_code == ErrorCode.none
    clients = [connect(broker.bootstrap) for _ in range(200)]
    for client in clients:
        client.send(_long_poll("polled", 0x7FFFFFFF, 1 << 30))
    _wait_for(lambda: broker.call(broker.broker.long_polls) == 200, what="200 long polls")
    for client in clients:
        client.close()
    _wait_for(lambda: broker.call(broker.broker.long_polls) == 0, timeout=2.0, what="long polls freed")


def test_a_fetch_max_wait_beyond_fetch_max_wait_ms_is_shortened(broker_factory: Callable[..., ThreadBroker]) -> None:
    broker = broker_factory(settings={"fetch.max.wait.ms": "300"})
    with connect(broker.bootstrap) as c:
        assert c.create_topic("quiet", 1).error_code == ErrorCode.none
        started = time.monotonic()
        response = c.request(_long_poll("quiet", 0x7FFFFFFF, 1 << 30))
        assert time.monotonic() - started < 5
        assert response.responses[0].partitions[0].error_code == ErrorCode.none


def test_a_long_poll_is_answered_once_enough_bytes_arrived(broker: ThreadBroker) -> None:
    with connect(broker.bootstrap) as c, connect(broker.bootstrap) as producer:
        assert c.create_topic("t", 1).error_code == ErrorCode.none
        cid = c.send(_long_poll("t", 20_000, 3_000))
        _wait_for(lambda: broker.call(broker.broker.long_polls) == 1, what="the long poll")
        producer.produce("t", 0, batch([b"x" * 1000]))
        time.sleep(0.2)
        assert broker.call(broker.broker.long_polls) == 1  # 1 KB of 3 KB: still waiting
        started = time.monotonic()
        producer.produce("t", 0, batch([b"y" * 2500]))
        response = c.receive(1, 12, cid)
        assert time.monotonic() - started < 2
        assert len(response.responses[0].partitions[0].records) > 3000


def test_a_partition_named_200_times_in_one_fetch_is_read_once(broker: ThreadBroker) -> None:
    with connect(broker.bootstrap) as c:
        assert c.create_topic("dup", 1, {"max.message.bytes": str(4 << 20)}).error_code == ErrorCode.none
        for _ in range(3):
            assert c.produce("dup", 0, batch([b"z" * 1_000_000])).error_code == ErrorCode.none
        response = c.request(_long_poll("dup", 0, 1, repeats=200))
        partitions = response.responses[0].partitions
        assert len(partitions) == 1
        assert 3_000_000 < len(partitions[0].records) < 3_100_000


def test_fetch_max_bytes_bounds_the_whole_response(broker_factory: Callable[..., ThreadBroker]) -> None:
    broker = broker_factory(settings={"fetch.max.bytes": str(2 << 20)})
    with connect(broker.bootstrap) as c:
        assert c.create_topic("wide", 1, {"max.message.bytes": str(4 << 20)}).error_code == ErrorCode.none
        for _ in range(5):
            assert c.produce("wide", 0, batch([b"w" * 900_000])).error_code == ErrorCode.none
        records = c.fetch("wide", {0: 0}, max_bytes=0x7FFFFFFF, partition_max_bytes=50 << 20)[0].records
        assert 900_000 < len(records) <= 2 << 20
