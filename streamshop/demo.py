"""`streamshop demo`: a broker in a child process, a topic, 1,000 keyed records produced with
acks=all and consumed back with confluent-kafka, a short report; then the broker keeps
running until Ctrl-C (or stops at once with --exit).

Layout under --data-dir DIR: DIR/broker (the broker's log directory) and DIR/broker.log
(its structlog output)."""

from __future__ import annotations

import argparse
import json
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from streamshop.broker_process import broker_command, parse_ready_line
from streamshop.clients import CLIENT_ID, CommandError, StopSignal, client_config, error_text

TOPIC = "demo.events"
PARTITIONS = 6
RECORDS = 1000
KEYS = 50


@dataclass
class ChildBroker:
    """`streamshop broker` as a child process; its stdout is drained by a thread."""

    proc: subprocess.Popen[str]
    log_path: Path
    bootstrap: str = ""
    admin_url: str | None = None
    _lines: queue.Queue[str | None] = field(default_factory=queue.Queue)

    @classmethod
    def start(cls, data_dir: Path, listen: str, admin_listen: str, timeout: float = 60) -> ChildBroker:
        data_dir.mkdir(parents=True, exist_ok=True)
        log_path = data_dir / "broker.log"
        cmd = broker_command(data_dir / "broker", listen, admin_listen)
        with log_path.open("a") as log:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
        child = cls(proc, log_path)
        assert proc.stdout is not None
        threading.Thread(target=child._drain, args=(proc.stdout,), daemon=True, name="broker-stdout").start()
        child._wait_ready(timeout)
        return child

    def _drain(self, stream: IO[str]) -> None:
        for line in stream:
            self._lines.put(line)
        self._lines.put(None)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                line = self._lines.get(timeout=remaining)
            except queue.Empty:
                break
            if line is None:
                raise CommandError(f"the broker exited with status {self.proc.wait()}; see {self.log_path}")
            ready = parse_ready_line(line)
            if ready is not None:
                self.bootstrap = ready.bootstrap
                self.admin_url = ready.admin_url
                return
        self.stop()
        raise CommandError(f"the broker did not report ready within {timeout:g} s; see {self.log_path}")

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM (a clean shutdown) and wait; SIGKILL if it hangs."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()


def _produce(bootstrap: str) -> tuple[float, int]:
    """Produce RECORDS keyed records with acks=all; (seconds, failures)."""
    failures = 0

    def delivered(error: Any, _message: Any) -> None:
        nonlocal failures
        if error is not None:
            failures += 1

    producer = Producer(client_config(bootstrap, (), {"acks": "all", "linger.ms": 5, "message.timeout.ms": 30000}))
    started = time.perf_counter()
    for i in range(RECORDS):
        key = f"user-{i % KEYS}"
        value = json.dumps({"seq": i, "user": key, "event": "page_view", "ts_ms": int(time.time() * 1000)})
        producer.produce(TOPIC, value.encode(), key.encode(), on_delivery=delivered)
        producer.poll(0)
    failures += producer.flush(30)
    return time.perf_counter() - started, failures


def _consume(bootstrap: str, starts: dict[int, int]) -> tuple[float, Counter[int], bool]:
    """Read back what _produce wrote; (seconds, records per partition, every key in one partition)."""
    consumer = Consumer(client_config(bootstrap, (), {"group.id": CLIENT_ID, "enable.auto.commit": False}))
    counts: Counter[int] = Counter()
    key_partitions: dict[bytes, set[int]] = {}
    started = time.perf_counter()
    try:
        consumer.assign([TopicPartition(TOPIC, p, offset) for p, offset in starts.items()])
        deadline = time.monotonic() + 30
        while sum(counts.values()) < RECORDS and time.monotonic() < deadline:
            for message in consumer.consume(RECORDS, 0.2):
                partition = message.partition()
                if message.error() is None and partition is not None:
                    counts[partition] += 1
                    key_partitions.setdefault(message.key() or b"", set()).add(partition)
        elapsed = time.perf_counter() - started
    finally:
        consumer.close()
    return elapsed, counts, all(len(parts) == 1 for parts in key_partitions.values())


def _prepare_topic(bootstrap: str) -> dict[int, int]:
    """Create the topic unless a previous run did; the end offset of every partition."""
    admin = AdminClient(client_config(bootstrap))
    try:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS)], request_timeout=15)[TOPIC].result(20)
    except KafkaException as e:
        if e.args[0].name() != "TOPIC_ALREADY_EXISTS":
            raise CommandError(f"creating {TOPIC}: {error_text(e)}") from None
    metadata = admin.list_topics(TOPIC, timeout=15)
    consumer = Consumer(client_config(bootstrap, (), {"group.id": CLIENT_ID}))
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=15, cached=False)[1]
            for p in sorted(metadata.topics[TOPIC].partitions)
        }
    finally:
        consumer.close()


def _rate(count: int, seconds: float) -> str:
    return f"{count / seconds:,.0f} records/s" if seconds > 0 else "n/a"


def _run_demo(broker: ChildBroker) -> bool:
    starts = _prepare_topic(broker.bootstrap)
    produce_s, failures = _produce(broker.bootstrap)
    consume_s, counts, keys_ok = _consume(broker.bootstrap, starts)
    consumed = sum(counts.values())
    print(f"streamshop demo: broker {broker.bootstrap} (pid {broker.proc.pid}, log {broker.log_path})")
    print(f"  topic        {TOPIC} ({len(starts)} partitions)")
    print(
        f"  produced     {RECORDS - failures} records in {produce_s:.2f} s ({_rate(RECORDS - failures, produce_s)}, "
        f"acks=all, {failures} failed)"
    )
    print(f"  consumed     {consumed} records in {consume_s:.2f} s ({_rate(consumed, consume_s)})")
    print("  partitions   " + " ".join(f"{p}:{counts.get(p, 0)}" for p in sorted(starts)))
    print(f"  keys         {KEYS} keys, each in exactly one partition: {'yes' if keys_ok else 'NO'}")
    if broker.admin_url:
        print(f"  admin API    {broker.admin_url}/api/topics  (metrics: {broker.admin_url}/metrics)")
    sys.stdout.flush()
    return failures == 0 and consumed == RECORDS and keys_ok


def demo(args: argparse.Namespace) -> int:
    host, _, port = args.listen.rpartition(":")
    admin_listen = args.admin_listen or f"{host or '127.0.0.1'}:{0 if port == '0' else 9644}"
    broker = ChildBroker.start(Path(args.data_dir), args.listen, admin_listen)
    try:
        ok = _run_demo(broker)
        if not args.exit:
            print("broker running; press Ctrl-C to stop", flush=True)
            with StopSignal() as stop:
                while not stop and broker.proc.poll() is None:
                    stop.event.wait(0.5)
            if broker.proc.poll() not in (None, 0):
                raise CommandError(f"the broker exited with status {broker.proc.returncode}; see {broker.log_path}")
    finally:
        status = broker.stop()
    if status != 0:
        raise CommandError(f"the broker stopped with status {status}; see {broker.log_path}")
    print(f"broker stopped cleanly (data in {Path(args.data_dir) / 'broker'})", flush=True)
    return 0 if ok else 1
