"""What security costs: produce and consume throughput over SASL_SSL (TLS 1.3, SCRAM-SHA-512)
against PLAINTEXT, on streamshop's broker and on Apache Kafka, in one run.

    python -m loadtest.bench_security [--records N (200000)] [--size BYTES (512)] [--repeat K (3)]
                                      [--only streamshop|apache-kafka] [--json PATH]

Each broker runs once with two listeners, PLAINTEXT and SASL_SSL (a certificate of a local CA,
one SCRAM user), and no authorizer, so the figures are the transport's and the login's cost.
Apache Kafka is the release of `streamshop kafka-cluster`, one KRaft node, 1 GiB heap.  Every
run writes N records of BYTES (keys ``i % 1000``) with the confluent-kafka producer (acks=all,
idempotent, linger.ms=5) to a fresh 6-partition topic, then reads them all back from offset 0
with the confluent-kafka consumer.  Runs alternate between the listeners and the brokers
(run 1 on each, then run 2...), so that noise on the machine falls on all alike; the median is
reported.  MB/s counts the values (decimal megabytes).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kit.ports import free_port
from loadtest.brokers import streamshop_broker
from streamshop import kafka_cluster
from streamshop.broker_users import set_offline
from streamshop.pki import LocalCA

USER, PASSWORD = "bench", "bench-secret"
PROTOCOLS = ("PLAINTEXT", "SASL_SSL")


@dataclass
class Target:
    broker: str
    listeners: dict[str, str]  # protocol: bootstrap
    ca: Path

    def conf(self, protocol: str) -> dict[str, Any]:
        conf: dict[str, Any] = {"bootstrap.servers": self.listeners[protocol]}
        if protocol == "SASL_SSL":
            conf |= {
                "security.protocol": "sasl_ssl",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": USER,
                "sasl.password": PASSWORD,
                "ssl.ca.location": str(self.ca),
            }
        return conf


@contextlib.contextmanager
def streamshop_target(workdir: Path, ca: LocalCA) -> Iterator[Target]:
    server = ca.issue("streamshop", hosts=("127.0.0.1",))
    set_offline(workdir / "streamshop-data", USER, PASSWORD)
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "ssl.keystore.location": str(server.keystore),
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
    }
    with streamshop_broker(workdir, settings=settings) as broker:
        assert broker.log_path is not None
        for line in broker.log_path.read_text().splitlines():
            if " listeners " in line:
                listeners = dict(item.split("=", 1) for item in line.split(" listeners ", 1)[1].split(","))
                yield Target("streamshop", listeners, ca.cert_path)
                return
        raise RuntimeError("the broker did not announce its listeners")


@contextlib.contextmanager
def kafka_target(workdir: Path, ca: LocalCA) -> Iterator[Target]:
    server = ca.issue("kafka", hosts=("127.0.0.1",))
    security = kafka_cluster.ClusterSecurity(str(server.keystore), str(ca.cert_path), USER, PASSWORD)
    base, plain = free_port(), free_port()
    while plain in (base, base + 1):
        plain = free_port()
    settings = {
        "listeners": f"SASL_SSL://127.0.0.1:{base},PLAINTEXT://127.0.0.1:{plain},CONTROLLER://127.0.0.1:{base + 1}",
        "advertised.listeners": f"SASL_SSL://127.0.0.1:{base},PLAINTEXT://127.0.0.1:{plain}",
        "listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT",
        "authorizer.class.name": "",
    }
    directory = workdir / "kafka"
    kafka_cluster.start(directory, nodes=1, base_port=base, heap_mb=1024, settings=settings, security=security)
    try:
        yield Target("apache-kafka", {"SASL_SSL": f"127.0.0.1:{base}", "PLAINTEXT": f"127.0.0.1:{plain}"}, ca.cert_path)
    finally:
        kafka_cluster.stop(directory, grace=30)


def produce(conf: dict[str, Any], topic: str, records: int, size: int) -> float:
    """Seconds to write `records` and have every one acknowledged."""
    value = b"v" * size
    producer = Producer({**conf, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    failed: list[object] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(err)

    started = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value, str(i % 1000).encode(), on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(120)
    seconds = time.perf_counter() - started
    if failed:
        raise RuntimeError(f"{len(failed)} records failed, first: {failed[0]}")
    return seconds


def consume(conf: dict[str, Any], topic: str, records: int) -> float:
    """Seconds to read `records` back from the start of `topic`."""
    consumer = Consumer(
        {**conf, "group.id": f"bench-{topic}", "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )
    consumer.subscribe([topic])
    seen = 0
    started: float | None = None
    deadline = time.monotonic() + 300
    try:
        while seen < records and time.monotonic() < deadline:
            for message in consumer.consume(10_000, timeout=1.0):
                if message.error() is None:
                    started = started or time.perf_counter()
                    seen += 1
    finally:
        consumer.close()
    if seen < records or started is None:
        raise RuntimeError(f"read {seen} of {records} records of {topic}")
    return time.perf_counter() - started


def run_once(target: Target, protocol: str, run: int, records: int, size: int) -> dict[str, float]:
    conf = target.conf(protocol)
    topic = f"bench-{protocol.lower()}-{run}"
    admin = AdminClient(conf)  # kept alive until the topic is made: a dropped client cancels its calls
    admin.create_topics([NewTopic(topic, 6, 1)])[topic].result(30)
    time.sleep(0.5)
    megabytes = records * size / 1e6
    produced = produce(conf, topic, records, size)
    consumed = consume(conf, topic, records)
    return {"produce_mb_s": megabytes / produced, "consume_mb_s": megabytes / consumed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", choices=("streamshop", "apache-kafka"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    results: dict[str, dict[str, list[dict[str, float]]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-security-") as tmp, contextlib.ExitStack() as stack:
        workdir = Path(tmp)
        ca = LocalCA(workdir / "pki")
        targets: list[Target] = []
        if args.only in (None, "streamshop"):
            targets.append(stack.enter_context(streamshop_target(workdir, ca)))
        if args.only in (None, "apache-kafka"):
            targets.append(stack.enter_context(kafka_target(workdir, ca)))
        for target in targets:
            print(f"{target.broker}: {target.listeners}", flush=True)
        for run in range(args.repeat):
            for target in targets:
                for protocol in PROTOCOLS:
                    figures = run_once(target, protocol, run, args.records, args.size)
                    results.setdefault(target.broker, {}).setdefault(protocol, []).append(figures)
                    print(
                        f"run {run + 1}: {target.broker} {protocol}: produce {figures['produce_mb_s']:.1f} MB/s, "
                        f"consume {figures['consume_mb_s']:.1f} MB/s",
                        flush=True,
                    )
    medians = {
        broker: {
            protocol: {key: statistics.median(r[key] for r in runs) for key in runs[0]}
            for protocol, runs in by_protocol.items()
        }
        for broker, by_protocol in results.items()
    }
    print(f"\n{args.records} records of {args.size} bytes, median of {args.repeat} runs (MB/s)")
    print(f"{'broker':<14}{'protocol':<12}{'produce':>10}{'consume':>10}")
    for broker, by_protocol in medians.items():
        for protocol, figures in by_protocol.items():
            print(f"{broker:<14}{protocol:<12}{figures['produce_mb_s']:>10.1f}{figures['consume_mb_s']:>10.1f}")
        plain, secure = by_protocol["PLAINTEXT"], by_protocol["SASL_SSL"]
        print(
            f"{broker:<14}{'SASL_SSL/PT':<12}{secure['produce_mb_s'] / plain['produce_mb_s']:>10.2f}"
            f"{secure['consume_mb_s'] / plain['consume_mb_s']:>10.2f}"
        )
    if args.json:
        args.json.write_text(json.dumps({"records": args.records, "size": args.size, "medians": medians}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
