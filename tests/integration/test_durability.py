"""Durability of the broker process: a clean restart keeps every record, topic and topic
config; SIGKILL loses no acks=all-acknowledged record; after SIGKILL (and a torn write)
the log is consistent: no corrupt batch is served and offsets continue."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource

from broker.metadata import partition_dir
from tests.support.harness import BrokerProcess
from tests.support.kafka_clients import Got, by_partition, confluent_consume, confluent_produce, create_topic

TOPIC_CONFIG = {"retention.ms": "123456789", "segment.bytes": "4096", "message.timestamp.type": "LogAppendTime"}


def _end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "marks"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)]
    finally:
        consumer.close()


def _read_all(bootstrap: str, topic: str, partitions: int) -> list[Got]:
    ends = _end_offsets(bootstrap, topic, partitions)
    got = confluent_consume(bootstrap, [TopicPartition(topic, p, 0) for p in range(partitions)], sum(ends))
    assert len(got) == sum(ends)
    return got


def test_clean_restart_keeps_every_record_topic_and_topic_config(
    broker_process_factory: Callable[..., BrokerProcess],
) -> None:
    """SIGTERM shuts down cleanly (exit 0); after a restart on the same data dir every
    record (key, value, headers, timestamp, offset), every topic with its partition count
    and every topic config override (DescribeConfigs) is still there."""
    proc = broker_process_factory()
    create_topic(proc.bootstrap, "configured", 2, TOPIC_CONFIG)
    records = [
        {"partition": i % 2, "key": f"k{i}".encode(), "value": f"v{i}".encode() * 20, "headers": [("i", b"%d" % i)]}
        for i in range(300)
    ]
    confluent_produce(proc.bootstrap, "configured", records, {"acks": "1", "batch.size": 2000})
    confluent_produce(proc.bootstrap, "auto-created", [{"value": b"x"}])  # auto-created: 3 partitions
    before = sorted(_read_all(proc.bootstrap, "configured", 2), key=lambda r: (r.partition, r.offset))
    assert len(before) == 300
    segments = len(list(partition_dir(proc.data_dir, "configured", 0).glob("*.log")))
    assert segments > 1  # the 4 KB segment.bytes took effect: several segments to reload

    assert proc.stop() == 0
    proc.start()

    after = sorted(_read_all(proc.bootstrap, "configured", 2), key=lambda r: (r.partition, r.offset))
    assert after == before
    assert all(r.log_append_time for r in after)

    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    topics = admin.list_topics(timeout=10).topics
    assert {"configured", "auto-created"} <= set(topics)
    assert len(topics["configured"].partitions) == 2
    assert len(topics["auto-created"].partitions) == 3
    resource = ConfigResource(ConfigResource.Type.TOPIC, "configured")
    described = admin.describe_configs([resource])[resource].result(10)
    for name, value in TOPIC_CONFIG.items():
        assert described[name].value == value, name
        assert described[name].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, name
    assert described["cleanup.policy"].value == "delete"
    assert described["cleanup.policy"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value


def test_sigkill_during_acks_all_stream_loses_no_acknowledged_record(
    broker_process_factory: Callable[..., BrokerProcess],
) -> None:
    """A broker SIGKILLed while an acks=all producer streams records keeps every record
    that was acknowledged before the kill, at the offset in its acknowledgement; records
    acknowledged after the restart are there too."""
    proc = broker_process_factory()
    create_topic(proc.bootstrap, "durable", 3)
    acked: dict[tuple[int, int], bytes] = {}
    failed: list[object] = []

    def report(err: object, msg: object) -> None:
        if err is None:
            acked[(msg.partition(), msg.offset())] = msg.value()  # type: ignore[attr-defined]
        else:
            failed.append(err)

    producer = Producer(
        {
            "bootstrap.servers": proc.bootstrap,
            "acks": "all",
            "linger.ms": 2,
            "message.timeout.ms": 60_000,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 200,
        }
    )
    sent = 0
    deadline = time.monotonic() + 30
    while len(acked) < 2000:  # stream until well under way
        assert time.monotonic() < deadline, "the producer did not get acknowledgements"
        producer.produce("durable", key=str(sent % 50).encode(), value=f"m{sent}".encode(), on_delivery=report)
        sent += 1
        producer.poll(0)
    for _ in range(500):  # more in flight at the moment of the kill
        producer.produce("durable", key=str(sent % 50).encode(), value=f"m{sent}".encode(), on_delivery=report)
        sent += 1
    producer.poll(0)
    proc.kill()
    acked_before_kill = dict(acked)
    assert len(acked_before_kill) < sent  # the kill did interrupt the stream

    proc.start()
    assert producer.flush(60) == 0
    assert failed == []

    got = _read_all(proc.bootstrap, "durable", 3)
    stored = {(r.partition, r.offset): r.value for r in got}
    missing = {k: v for k, v in acked_before_kill.items() if stored.get(k) != v}
    assert not missing, f"{len(missing)} acknowledged records lost or changed, e.g. {list(missing.items())[:3]}"
    assert all(stored.get(k) == v for k, v in acked.items())
    assert {f"m{i}".encode() for i in range(sent)} <= set(stored.values())


def _assert_consistent(got: list[Got]) -> None:
    """Every partition's offsets run from 0 without a gap."""
    for partition, records in by_partition(got).items():
        offsets = sorted(r.offset for r in records)
        assert offsets == list(range(len(offsets))), partition


def test_sigkill_after_acks_1_and_a_corrupt_tail_keeps_a_consistent_log(
    broker_process_factory: Callable[..., BrokerProcess],
) -> None:
    """After SIGKILL following acks=1 produces, with a damaged tail on the active segment
    (a whole batch whose CRC does not match, then half a batch: what a torn write leaves),
    recovery truncates the tail: every acknowledged record is served, no corrupt batch is,
    and new records continue at the next offset."""
    proc = broker_process_factory()
    create_topic(proc.bootstrap, "torn", 1)
    reports = confluent_produce(
        proc.bootstrap, "torn", [{"value": f"r{i}".encode() * 10} for i in range(500)], {"acks": "1"}
    )
    acked = {m.offset() or 0: m.value() for m in reports}
    assert sorted(acked) == list(range(500))
    proc.kill()

    segment = max(partition_dir(proc.data_dir, "torn", 0).glob("*.log"))
    whole = segment.read_bytes()
    first_batch = whole[: 12 + int.from_bytes(whole[8:12], "big")]
    corrupt = bytearray(first_batch)
    corrupt[0:8] = (500).to_bytes(8, "big")  # plausible next offset...
    corrupt[-1] ^= 0xFF  # ...but the CRC no longer matches
    with segment.open("ab") as f:
        f.write(bytes(corrupt) + first_batch[:40])
    proc.start()

    got = _read_all(proc.bootstrap, "torn", 1)  # the consumer checks every CRC (check.crcs)
    _assert_consistent(got)
    assert {r.offset: r.value for r in got} == acked
    assert segment.read_bytes() == whole  # the damaged tail was cut off

    more = confluent_produce(proc.bootstrap, "torn", [{"value": b"after"}], {"acks": "1"})
    assert more[0].offset() == 500
    got = confluent_consume(proc.bootstrap, [TopicPartition("torn", 0, 499)], 2)
    assert [(r.offset, r.value) for r in got] == [(499, acked[499]), (500, b"after")]
