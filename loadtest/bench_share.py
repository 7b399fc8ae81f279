"""Share groups (KIP-932) on the bundled broker: how fast 1 and 3 confluent-kafka ShareConsumers
drain one partition, each record acknowledged (ACCEPT) one by one, beside one classic consumer
committing the same records, in one run.

    python -m loadtest.bench_share [--records 100000] [--runs 3]

Each step writes `--records` records of 100 B to a fresh one-partition topic, then starts the
consumers and times from their start to the last record handled (median of `--runs`), with the
broker's CPU over that time.  Queues cost more than offsets: a share group's broker tracks a
state per record (acquired, acknowledged) where a consumer group commits one offset per
partition.  Apache Kafka 4.1 is not measured beside it: its share groups are a preview, and
librdkafka 2.16's share consumer fails there for member ids with '/' or '+' (docs/services.md);
Tansu 0.6 has no share groups (no ShareGroupHeartbeat, ShareFetch or ShareAcknowledge), on memory
or PostgreSQL storage.  The broker writes each acknowledgement's state durably, but many ride on
one ShareFetch or ShareAcknowledge: the time per record is shown beside the floor of a durable
round trip measured before and after the steps (loadtest.floor: a Heartbeat's round trip plus an
fdatasync on the broker's data disk), as the share of one floor a record costs.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from loadtest.brokers import cpu_seconds, create_topic, streamshop_broker, wait_idle
from loadtest.floor import measure_beside

VALUE = b"x" * 100


def _produce(bootstrap: str, topic: str, records: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 1000})
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=VALUE, key=str(i).encode())
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0


def _earliest(bootstrap: str, group: str) -> None:
    entry = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.incremental_alter_configs([resource])[resource].result(30)


def _share_worker(bootstrap: str, topic: str, group: str, done: Callable[[int], bool]) -> None:
    consumer = ShareConsumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"}
    )
    consumer.subscribe([topic])
    try:
        while True:
            got = 0
            for message in consumer.poll(0.2):
                if message.error() is None:
                    consumer.acknowledge(message, AcknowledgeType.ACCEPT)
                    got += 1
            if done(got):
                return
    finally:
        consumer.close()


def share_step(bootstrap: str, records: int, members: int) -> tuple[float, str]:
    topic = f"bench-share-{uuid.uuid4().hex[:8]}"
    group = f"g-{topic}"
    create_topic(bootstrap, topic, 1)
    _produce(bootstrap, topic, records)
    _earliest(bootstrap, group)
    lock = threading.Lock()
    handled = [0]

    def done(got: int) -> bool:
        with lock:
            handled[0] += got
            return handled[0] >= records

    started = time.perf_counter()
    threads = [threading.Thread(target=_share_worker, args=(bootstrap, topic, group, done)) for _ in range(members)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    return time.perf_counter() - started, topic


def classic_step(bootstrap: str, records: int) -> tuple[float, str]:
    topic = f"bench-classic-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 1)
    _produce(bootstrap, topic, records)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    started = time.perf_counter()
    got = 0
    try:
        while got < records:
            fetched = [m for m in consumer.consume(1000, 0.2) if m.error() is None]
            got += len(fetched)
            if fetched:
                consumer.commit(message=fetched[-1], asynchronous=False)
    finally:
        consumer.close()
    return time.perf_counter() - started, topic


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_share", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    steps: dict[str, Callable[[str], tuple[float, str]]] = {
        "classic consumer, 1 member, commit per fetch": lambda b: classic_step(b, args.records),
        "share group, 1 member, ACCEPT per record": lambda b: share_step(b, args.records, 1),
        "share group, 3 members, ACCEPT per record": lambda b: share_step(b, args.records, 3),
    }
    with tempfile.TemporaryDirectory() as tmp, streamshop_broker(Path(tmp)) as broker:
        before = measure_beside([broker])
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in steps}
        for _ in range(args.runs):
            for name, step in steps.items():
                wait_idle(broker.pid)
                cpu_before = cpu_seconds(broker.pid)
                seconds, _ = step(broker.bootstrap)
                results[name].append((seconds, cpu_seconds(broker.pid) - cpu_before))
        floor = measure_beside([broker], before)
    print(f"{args.records:,} records of 100 B on one partition, median of {args.runs}")
    print(f"{'step':<48} {'records/s':>10} {'broker CPU s per 1M':>20} {'us/record':>10} {'floors/record':>14}")
    for name, runs in results.items():
        seconds = statistics.median(s for s, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        per_record_ms = seconds * 1000 / args.records
        print(
            f"{name:<48} {args.records / seconds:>10,.0f} {cpu / args.records * 1e6:>20.2f} "
            f"{per_record_ms * 1000:>10.1f} {per_record_ms / floor.ms:>14.3f}"
        )
    print(floor.describe())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
