"""Internal topics are the broker's: clients cannot produce to them, and a record in them
that does not decode is skipped at the next start (counted, logged), never fatal."""

from __future__ import annotations

import struct
import urllib.request
import zlib
from collections.abc import Callable

import msgpack
import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.schema.errors import ErrorCode

from broker.clock import SystemClock
from broker.config import BrokerConfig, LogConfig
from broker.log.partition_log import PartitionLog
from broker.metadata import METADATA_TOPIC, partition_dir
from broker.protocol.batch import compute_crc
from broker.protocol.records import Record, build_batch
from tests.support.harness import BrokerProcess
from tests.support.kafka_wire import batch, connect

GROUP = "billing"
OFFSETS_PARTITIONS = BrokerConfig().values.offsets_topic_num_partitions  # the broker's default


def _commit(bootstrap: str, offsets: dict[int, int]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition("orders", p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def _committed(bootstrap: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        found = consumer.committed([TopicPartition("orders", p) for p in range(3)], timeout=20)
        return {tp.partition: tp.offset for tp in found if tp.offset >= 0}
    finally:
        consumer.close()


def _skipped(admin_url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{admin_url}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("streamshop_internal_records_skipped_total{"):
            topic = line.split('topic="', 1)[1].split('"', 1)[0]
            out[topic] = float(line.rsplit(" ", 1)[1])
    return out


@pytest.mark.parametrize(
    "topic",
    [
        "__consumer_offsets",
        pytest.param(METADATA_TOPIC, marks=pytest.mark.slow),
        pytest.param("__transaction_state", marks=pytest.mark.slow),
    ],
)
def test_a_produce_to_an_internal_topic_is_refused_and_the_broker_restarts(
    broker_process_factory: Callable[..., BrokerProcess], topic: str
) -> None:
    proc = broker_process_factory()
    with connect(proc.bootstrap) as c:
        assert c.create_topic("orders", 3).error_code == ErrorCode.none
    _commit(proc.bootstrap, {0: 5, 2: 7})
    with connect(proc.bootstrap) as c:
        # The key a hostile client would use: not the coordinator's encoding.
        response = c.produce(topic, 0, batch([b"\xff" * 10], keys=[b"\xc1not-msgpack"]))
        assert response.error_code == ErrorCode.invalid_topic_exception
        assert "internal topic" in response.error_message
    proc.kill()
    proc.start()
    assert _committed(proc.bootstrap) == {0: 5, 2: 7}


def _hostile_batches() -> list[bytes]:
    """Records no broker writes: bad msgpack, wrong shapes, wrong types, and a batch with a
    valid CRC whose compression codec does not exist."""
    records = [
        (b"\xc1", b"\x00"),
        (msgpack.packb("not-a-list"), msgpack.packb({})),
        (msgpack.packb(["o", GROUP, "orders"]), msgpack.packb({"o": 1})),
        (msgpack.packb(["o", GROUP, "orders", 1]), msgpack.packb({"o": "ten", "e": -1, "m": "", "t": 0})),
        (msgpack.packb(["g", GROUP]), msgpack.packb({"generation": 1, "members": [["only-one-field"]]})),
        (msgpack.packb(["topic", "x" * 300]), msgpack.packb({"partitions": 1})),
        (msgpack.packb(["topic", "evil"]), msgpack.packb({"id": b"short", "partitions": -4, "configs": {}})),
        (msgpack.packb(["topic", "evil2"]), msgpack.packb({"id": b"0" * 16, "partitions": 1, "configs": {"x": 1}})),
        (msgpack.packb([[[[[[[[[[]]]]]]]]]]), None),
    ]
    out = [build_batch([Record(0, 0, k, v)]) for k, v in records]
    bad_codec = bytearray(build_batch([Record(0, 0, b"k", b"v")]))
    struct.pack_into(">h", bad_codec, 21, 7)  # codec 7 does not exist
    struct.pack_into(">I", bad_codec, 17, compute_crc(bad_codec))
    out.append(bytes(bad_codec))
    return out


@pytest.mark.slow
def test_undecodable_internal_records_are_skipped_counted_and_the_rest_replayed(
    broker_process_factory: Callable[..., BrokerProcess],
) -> None:
    proc = broker_process_factory()
    with connect(proc.bootstrap) as c:
        assert c.create_topic("orders", 3).error_code == ErrorCode.none
    _commit(proc.bootstrap, {0: 5, 2: 7})
    proc.stop()

    group_partition = zlib.crc32(GROUP.encode()) % OFFSETS_PARTITIONS
    for topic, partition in (("__consumer_offsets", group_partition), (METADATA_TOPIC, 0)):
        plog = PartitionLog(
            partition_dir(proc.data_dir, topic, partition),
            topic,
            partition,
            LogConfig.from_strings(BrokerConfig().topic_defaults()),
            SystemClock(),
            recover=False,
        )
        for raw in _hostile_batches():
            plog.append_internal(raw)
        plog.close(clean=True)

    proc.start()
    skipped = _skipped(proc.admin_url)
    assert skipped["__consumer_offsets"] >= 7
    assert skipped[METADATA_TOPIC] >= 7
    assert _committed(proc.bootstrap) == {0: 5, 2: 7}
    with connect(proc.bootstrap) as c:
        assert sorted(t.name for t in c.metadata(None).topics) == ["__consumer_offsets", "orders"]
        assert c.produce("orders", 1, batch([b"still works"])).error_code == ErrorCode.none
    _commit(proc.bootstrap, {1: 1})
    proc.kill()
    proc.start()  # and again after a crash, with the new commit after the hostile records
    assert _committed(proc.bootstrap) == {0: 5, 1: 1, 2: 7}
    log_text = proc.log_path.read_text()
    assert log_text.count("skipped an internal record that does not decode") == 4  # once per topic per start
