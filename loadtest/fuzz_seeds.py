"""Seed requests for the network fuzzer: real clients' traffic, recorded.

A recording TCP proxy (`Recorder`) sits between real clients (confluent-kafka's producer,
consumer group, admin and transactional clients, aiokafka, kafka-python's admin client) and the
broker, and keeps every request frame it forwards.  Clients follow the broker's Metadata to the
address it advertises, so the proxy sees all their connections only when the broker advertises
the proxy's address (`fuzz_broker` starts its broker so); otherwise it sees their bootstrap
connections alone.  Each frame is then relabelled with every version the broker advertises for
its API key, so the fuzzer starts from a real request of each API a client sent, in every
advertised version (the body of a relabelled frame is the nearest real one), and from an empty
body for the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import threading
import uuid
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from kio.schema.alter_share_group_offsets.v0 import request as alter_share_offsets
from kio.schema.delete_share_group_offsets.v0 import request as delete_share_offsets
from kio.schema.describe_share_group_offsets.v0 import request as describe_share_offsets
from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i64

from broker.protocol.codec import encode_body
from kit.settings import parse_host_port
from loadtest.brokers import connect, recv_exactly

Frame = bytes  # a request without its 4-byte size prefix: header then body


class Recorder:
    """A loopback proxy to `upstream` that records the client-to-broker frames while
    `recording` (its port is known before its upstream: a broker may advertise it)."""

    def __init__(self, upstream: tuple[str, int] | None = None) -> None:
        self.upstream = upstream
        self.frames: list[Frame] = []
        self.recording = True
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._sessions: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server

    def __enter__(self) -> Recorder:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _shutdown(self) -> None:
        self._server.close()
        for task in list(self._sessions):
            task.cancel()
        await asyncio.gather(*self._sessions, return_exceptions=True)
        await self._server.wait_closed()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._sessions.add(task)
        try:
            await self._relay(reader, writer)
        finally:
            self._sessions.discard(task)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self.upstream is not None, "a client connected before the recorder's upstream was set"
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)

        async def requests() -> None:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                if self.recording:
                    self.frames.append(frame)
                up_writer.write(struct.pack(">i", size) + frame)
                await up_writer.drain()

        async def responses() -> None:
            while data := await up_reader.read(65536):
                writer.write(data)
                await writer.drain()

        tasks = [asyncio.ensure_future(requests()), asyncio.ensure_future(responses())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for w in (writer, up_writer):
                w.close()
                with contextlib.suppress(Exception):
                    await w.wait_closed()


def _confluent_session(bootstrap: str) -> None:
    topic = f"seed-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1, config={"cleanup.policy": "compact"})])[topic].result(20)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "compression.type": "gzip"})
    for i in range(20):
        producer.produce(topic, key=f"k{i % 3}".encode(), value=f"v{i}".encode(), headers=[("h", b"1")])
    producer.flush(20)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = 0
    for _ in range(100):
        if got >= 20:
            break
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            got += 1
    consumer.commit(asynchronous=False)
    consumer.committed([TopicPartition(topic, 0)], timeout=10)
    consumer.close()
    resource = ConfigResource(ResourceType.TOPIC, topic)
    admin.describe_configs([resource])[resource].result(20)
    change = ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET)
    altered = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[change])
    admin.incremental_alter_configs([altered])[altered].result(20)
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(20)
    admin.list_consumer_groups().result(20)
    admin.describe_consumer_groups([f"g-{topic}"])[f"g-{topic}"].result(20)
    admin.list_topics(timeout=10)
    admin.delete_topics([topic])[topic].result(20)


def _aiokafka_session(bootstrap: str) -> None:
    """aiokafka speaks older versions of most APIs than librdkafka."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def session() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", compression_type="gzip")
        await producer.start()
        try:
            await producer.send_and_wait("aio-seed", b"v", key=b"k")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            "aio-seed", bootstrap_servers=bootstrap, group_id="aio-group", auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            await consumer.getmany(timeout_ms=2000)
            await consumer.commit()
        finally:
            await consumer.stop()

    asyncio.run(session())


def _transactional_session(bootstrap: str) -> None:
    """The transaction APIs: InitProducerId with an id, AddPartitionsToTxn, AddOffsetsToTxn,
    TxnOffsetCommit, EndTxn (commit and abort), and a read_committed fetch."""
    topic = f"seed-txn-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(20)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"seed-{topic}"})
    producer.init_transactions(20)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "isolation.level": "read_committed"})
    for commit in (True, False):
        producer.begin_transaction()
        producer.produce(topic, key=b"k", value=b"v")
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, 1)], consumer.consumer_group_metadata(), 20)
        if commit:
            producer.commit_transaction(20)
        else:
            producer.abort_transaction(20)
    consumer.assign([TopicPartition(topic, 0, 0)])
    consumer.poll(1.0)
    consumer.close()
    admin.delete_topics([topic])[topic].result(20)


def _replica_admin_session(bootstrap: str) -> None:
    """kafka-python's admin client for the leader, reassignment and log-directory APIs, which
    librdkafka's has not all of."""
    from kafka import KafkaAdminClient
    from kafka.structs import TopicPartition as KafkaTopicPartition
    from kafka.structs import TopicPartitionReplica

    topic = f"seed-replicas-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(20)
    client = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20_000)
    try:
        client.elect_leaders(0, {topic: [0, 1]}, raise_errors=False)
        client.alter_partition_reassignments({KafkaTopicPartition(topic, 0): [1], KafkaTopicPartition(topic, 1): None})
        client.list_partition_reassignments()
        client.describe_log_dirs()
        client.alter_replica_log_dirs({TopicPartitionReplica(topic, 0, 1): "/"})
    finally:
        client.close()
    admin.delete_topics([topic])[topic].result(20)


def _consumer_protocol_session(bootstrap: str) -> None:
    """The consumer group protocol (KIP-848): ConsumerGroupHeartbeat (join, reconcile, commit
    with the member epoch, leave) and ConsumerGroupDescribe."""
    topic = f"seed-kip848-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(20)
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, key=b"k", value=b"v")
    producer.flush(20)
    group = f"g-{topic}"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                         "auto.offset.reset": "earliest", "group.instance.id": f"i-{topic}"})  # fmt: skip
    consumer.subscribe([topic, "^seed-kip848-.*"])
    for _ in range(50):
        message = consumer.poll(0.1)
        if message is not None and message.error() is None:
            consumer.commit(message=message, asynchronous=False)
            break
    admin.describe_consumer_groups([group])[group].result(20)
    consumer.close()
    admin.delete_topics([topic])[topic].result(20)


def _share_session(bootstrap: str) -> None:
    """Share groups (KIP-932): a ShareConsumer's ShareGroupHeartbeat, ShareFetch (with
    acknowledgements: accept and release) and ShareAcknowledge; then the admin requests no
    Python client sends yet (ShareGroupDescribe and the share-group offset APIs), by hand."""
    topic = f"seed-share-{uuid.uuid4().hex[:8]}"
    group = f"g-{topic}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit", "fetch.wait.max.ms": "100"})  # fmt: skip
    consumer.subscribe([topic])
    consumer.poll(0.5)  # joined, its share partition started: what comes next is for it
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(3):
        producer.produce(topic, key=b"k", value=b"v%d" % i)
    producer.flush(20)
    acknowledged = 0
    for _ in range(30):
        for message in consumer.poll(0.2):
            if message.error() is None:
                kind = AcknowledgeType.RELEASE if acknowledged == 0 else AcknowledgeType.ACCEPT
                consumer.acknowledge(message, kind)
                acknowledged += 1
        consumer.commit_sync(10)
        if acknowledged >= 4:
            break
    consumer.close()
    name, gid = TopicName(topic), GroupId(group)
    describe_offsets = describe_share_offsets.DescribeShareGroupOffsetsRequest(
        groups=(
            describe_share_offsets.DescribeShareGroupOffsetsRequestGroup(
                group_id=gid,
                topics=(
                    describe_share_offsets.DescribeShareGroupOffsetsRequestTopic(topic_name=name, partitions=(i32(0),)),
                ),
            ),
        )
    )
    alter_offsets = alter_share_offsets.AlterShareGroupOffsetsRequest(
        group_id=gid,
        topics=(
            alter_share_offsets.AlterShareGroupOffsetsRequestTopic(
                topic_name=name,
                partitions=(
                    alter_share_offsets.AlterShareGroupOffsetsRequestPartition(
                        partition_index=i32(0), start_offset=i64(0)
                    ),
                ),
            ),
        ),
    )
    delete_offsets = delete_share_offsets.DeleteShareGroupOffsetsRequest(
        group_id=gid, topics=(delete_share_offsets.DeleteShareGroupOffsetsRequestTopic(topic_name=name),)
    )
    _send_by_hand(
        bootstrap,
        [ShareGroupDescribeRequest(group_ids=(gid,), include_authorized_operations=True),
         describe_offsets, alter_offsets, delete_offsets],
    )  # fmt: skip
    admin.delete_topics([topic])[topic].result(20)


def _send_by_hand(bootstrap: str, requests: list[Any]) -> None:
    """Flexible requests with a v2 header, each on its own connection and answered (or the
    connection closed, as a broker does for an API it does not serve) before the next."""
    for correlation_id, request in enumerate(requests):
        client_id = b"seeds"
        header = struct.pack(">hhih", int(request.__api_key__), int(request.__version__), correlation_id,
                             len(client_id)) + client_id + b"\x00"  # fmt: skip
        payload = header + encode_body(request)
        with connect(bootstrap, 10) as sock, contextlib.suppress(ConnectionError):
            sock.sendall(struct.pack(">i", len(payload)) + payload)
            recv_exactly(sock, struct.unpack(">i", recv_exactly(sock, 4))[0])


SESSIONS: list[Callable[[str], None]] = [
    _confluent_session,
    _aiokafka_session,
    _transactional_session,
    _replica_admin_session,
    _consumer_protocol_session,
    _share_session,
]


def record_seeds(bootstrap: str, recorder: Recorder | None = None) -> list[Frame]:
    """The frames the client sessions send to the broker at `bootstrap`: through `recorder`, a
    running proxy to it that the broker advertises (every connection), or else through a proxy
    of their own (their bootstrap connections only).  `recorder` stops recording after them."""
    if recorder is None:
        server = parse_host_port(bootstrap)
        with Recorder((server.host, server.port)) as own:
            return record_seeds(bootstrap, own)
    for session in SESSIONS:
        session(f"127.0.0.1:{recorder.port}")
    recorder.recording = False
    return list(recorder.frames)


def relabel(frames: list[Frame], advertised: dict[int, tuple[int, int]]) -> list[Frame]:
    """One seed per (API key, version) the broker advertises: the recorded frame of that key
    nearest in version, with its header's version set to it."""
    by_key: dict[int, dict[int, Frame]] = defaultdict(dict)
    for frame in frames:
        if len(frame) >= 8:
            key, version = struct.unpack_from(">hh", frame)
            by_key[key].setdefault(version, frame)
    out: list[Frame] = list(frames)
    for key, (low, high) in advertised.items():
        recorded = by_key.get(key)
        if not recorded:
            # No client above calls it: a header and a body of zeros (empty strings and
            # arrays, no tagged fields), for the mutations to grow from.
            recorded = {low: struct.pack(">hhih", key, low, 0, 4) + b"seed" + bytes(48)}
            by_key[key] = recorded
            out.append(recorded[low])
        for version in range(low, high + 1):
            if version in recorded:
                continue
            nearest = recorded[min(recorded, key=lambda v: abs(v - version))]
            out.append(nearest[:2] + struct.pack(">h", version) + nearest[4:])
    return out
