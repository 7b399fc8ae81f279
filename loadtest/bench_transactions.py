"""Transactional produce beside idempotent produce: streamshop's broker, Tansu and Apache Kafka,
same workload, one run.

    python -m loadtest.bench_transactions [--only NAME ...] [--records N (default 10,000)]
                                          [--repeat K (default 3)] [--json PATH]
                                          [--peers tansu-pg,kafka-fsync]

Each broker is started here (loadtest.brokers; stopped on exit, even on errors).  One
confluent-kafka producer (acks=all, linger.ms=5) writes N records of 100 bytes to a fresh
6-partition topic, keys `i % 1000`:

- idempotent: `enable.idempotence=true`, one flush at the end;
- transactional, 1 / 10 / 100 records per transaction: `init_transactions` once, then
  begin, produce, `commit_transaction` (which flushes) for every group of records.

Reported: records/s and transactions/s (the median of K runs, brokers alternating run by run),
and the broker's CPU seconds per 1,000 records.  A step a broker refuses is n/a with the reason
(the first one is kept).  Afterwards a read_committed consumer must read back exactly the
committed records of the last run, so a broker that drops or exposes records fails the step.
Streamshop fsyncs every transaction state change, marker and acks=all batch before answering;
--peers adds peers that also wait for the disk (loadtest.brokers: Tansu on PostgreSQL, Apache
Kafka flushing every append).  A transaction's time (transactions/s inverted: one at a time) is
also shown as a multiple of the floor of a durable round trip measured before and after the
steps (loadtest.floor: a Heartbeat's round trip plus an fdatasync on streamshop's data disk); a
transaction of one producer takes several such round trips (AddPartitionsToTxn, the produce,
EndTxn and its markers).
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from loadtest.brokers import (
    DURABLE_PEERS,
    BrokerProcess,
    Metrics,
    add_durability_option,
    add_peers_option,
    cell,
    cpu_seconds,
    create_topic,
    default_tansu_binary,
    exit_on_sigterm,
    ratio,
    started_brokers,
)
from loadtest.floor import Floor, measure_beside

PARTITIONS = 6
VALUE = b"x" * 100
SIZES = (1, 10, 100)
NAMES = ("streamshop", "tansu", "apache-kafka")
STEPS = ["idempotent", *(f"txn{n}" for n in SIZES)]
_SHORT = {"apache-kafka": "kafka", "tansu-pg": "tansu-pg", "kafka-fsync": "k-fsync"}  # column titles of the ratios


@dataclass
class Bench:
    broker: BrokerProcess
    runs: dict[str, list[float]] = field(default_factory=dict)
    failures: dict[str, list[str]] = field(default_factory=dict)
    metrics: Metrics = field(default_factory=dict)

    def add(self, key: str, value: float) -> None:
        self.runs.setdefault(key, []).append(value)

    def fail(self, step: str, reason: str) -> None:
        self.failures.setdefault(step, []).append(reason)


def _producer(bootstrap: str, transactional: bool) -> Producer:
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "linger.ms": 5,
        "enable.idempotence": True,
    }
    if transactional:
        config["transactional.id"] = f"bench-{uuid.uuid4().hex[:8]}"
    return Producer(config)


def produce(bootstrap: str, topic: str, records: int, per_txn: int | None) -> int:
    """Produce `records`; returns the transactions committed (0 for idempotent)."""
    p = _producer(bootstrap, per_txn is not None)
    if per_txn is None:
        for i in range(records):
            _produce(p, topic, i)
        if p.flush(120) != 0:
            raise RuntimeError("records left undelivered")
        return 0
    p.init_transactions(30)
    txns = 0
    for start in range(0, records, per_txn):
        p.begin_transaction()
        for i in range(start, min(start + per_txn, records)):
            _produce(p, topic, i)
        p.commit_transaction(60)
        txns += 1
    return txns


def _produce(p: Producer, topic: str, i: int) -> None:
    while True:
        try:
            p.produce(topic, key=str(i % 1000).encode(), value=VALUE)
            return
        except BufferError:
            p.poll(0.01)


def read_committed(bootstrap: str, topic: str, expected: int) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-unused",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = 0
    deadline = time.monotonic() + 60
    idle_until = time.monotonic() + 5
    try:
        while time.monotonic() < deadline and (got < expected or time.monotonic() < idle_until):
            msgs = consumer.consume(1000, 0.2)
            got += sum(1 for m in msgs if m.error() is None)
            if got >= expected and time.monotonic() >= idle_until - 4:
                break
    finally:
        consumer.close()
    return got


def run_step(bench: Bench, step: str, records: int, *, check: bool) -> None:
    broker = bench.broker
    per_txn = None if step == "idempotent" else int(step[3:])
    topic = f"bench-{step}-{uuid.uuid4().hex[:6]}"
    try:
        create_topic(broker.bootstrap, topic, PARTITIONS)
        cpu0, t0 = cpu_seconds(broker.pid), time.perf_counter()
        txns = produce(broker.bootstrap, topic, records, per_txn)
        seconds = time.perf_counter() - t0
        cpu = cpu_seconds(broker.pid) - cpu0
        if check:
            got = read_committed(broker.bootstrap, topic, records)
            if got != records:
                raise RuntimeError(f"read_committed read {got} of {records} committed records")
    except (KafkaException, RuntimeError, TimeoutError) as e:
        bench.fail(step, f"{type(e).__name__}: {e}")
        return
    bench.add(f"{step}_rec_per_s", records / seconds)
    bench.add(f"{step}_cpu_ms_per_1k", cpu * 1000 / records * 1000)
    if txns:
        bench.add(f"{step}_txn_per_s", txns / seconds)


@dataclass(frozen=True)
class Options:
    names: list[str]
    records: int
    repeat: int
    tansu_binary: Path
    json_path: Path | None
    durability: str = "fsync"  # streamshop's log.durability


def run_all(opts: Options) -> tuple[list[Bench], Floor]:
    with started_brokers(opts.names, opts.tansu_binary, durability=opts.durability) as brokers:
        before = measure_beside(brokers)
        benches = [Bench(b) for b in brokers]
        for step in STEPS:
            for run in range(opts.repeat):
                for bench in benches:
                    if step in bench.failures:
                        continue  # refused once: not retried
                    run_step(bench, step, opts.records, check=run == opts.repeat - 1)
        floor = measure_beside(brokers, before)
        for bench in benches:
            bench.metrics = {k: statistics.median(v) for k, v in bench.runs.items()}
            for n in SIZES:
                per_s = bench.metrics.get(f"txn{n}_txn_per_s")
                if per_s:
                    bench.metrics[f"txn{n}_ms"] = 1000 / per_s
                    bench.metrics[f"txn{n}_floors"] = 1000 / per_s / floor.ms
        return benches, floor


def rows() -> list[tuple[str, str, str]]:
    out = [
        ("idempotent  rec/s", "idempotent_rec_per_s", ",.0f"),
        ("  broker CPU ms / 1k rec", "idempotent_cpu_ms_per_1k", ".1f"),
    ]
    for n in SIZES:
        out += [
            (f"transactional, {n}/txn  rec/s", f"txn{n}_rec_per_s", ",.0f"),
            ("  txn/s", f"txn{n}_txn_per_s", ",.0f"),
            ("  time of one txn  ms", f"txn{n}_ms", ".2f"),
            ("    in floors (see below)", f"txn{n}_floors", ".1f"),
            ("  broker CPU ms / 1k rec", f"txn{n}_cpu_ms_per_1k", ".1f"),
        ]
    return out


def _value(bench: Bench, key: str, fmt: str) -> str:
    if key not in bench.metrics and key.split("_", maxsplit=1)[0] in bench.failures:
        return "n/a"
    return cell(bench.metrics.get(key), fmt)


def format_report(benches: list[Bench], opts: Options, floor: Floor) -> str:
    results = {b.broker.name: b.metrics for b in benches}
    names = [b.broker.name for b in benches]
    lines = [
        f"transactional vs idempotent produce: {opts.records:,} records x 100 B, {PARTITIONS} partitions, "
        "confluent-kafka acks=all linger.ms=5",
        f"median of {opts.repeat} run(s), streamshop's log.durability={opts.durability}; "
        "ratios are streamshop's value over the peer's",
        f"{'':34}" + "".join(f"{n:>14}" for n in names) + "".join(f"{'s/' + _SHORT.get(n, n):>12}" for n in names[1:]),
    ]
    for label, key, fmt in rows():
        values = "".join(f"{_value(b, key, fmt):>14}" for b in benches)
        ratios = "".join(f"{cell(ratio(results, key, n), '.2f'):>12}" for n in names[1:])
        lines.append(f"{label:34}{values}{ratios}")
    lines += ["", floor.describe()]
    notes = [f"  {b.broker.name} {step}: {reasons[0]}" for b in benches for step, reasons in b.failures.items()]
    if notes:
        lines += ["", "not measured (first reason):", *notes]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", action="append", choices=(*NAMES, *DURABLE_PEERS), help="only this broker (repeatable)")
    add_peers_option(p)
    add_durability_option(p)
    p.add_argument("--records", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--tansu-binary", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None, dest="json_path")
    args = p.parse_args()
    opts = Options(
        names=[*(args.only or NAMES), *args.peers],
        records=args.records,
        repeat=args.repeat,
        tansu_binary=args.tansu_binary or default_tansu_binary(),
        json_path=args.json_path,
        durability=args.durability,
    )
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    benches, floor = run_all(opts)
    print(format_report(benches, opts, floor), flush=True)
    if opts.json_path is not None:
        opts.json_path.write_text(
            json.dumps(
                {
                    "records": opts.records,
                    "repeat": opts.repeat,
                    "floor": floor.as_json(),
                    "results": {b.broker.name: b.metrics for b in benches},
                    "runs": {b.broker.name: b.runs for b in benches},
                    "not_measured": {b.broker.name: b.failures for b in benches},
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
