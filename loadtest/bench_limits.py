"""What hostile and careless clients cost the broker: memory, release of abandoned work, and
how long one request can hold the event loop.

    python -m loadtest.bench_limits [--connections 10000] [--polls 1000] [--loop-stall-elements N] [--json PATH]

A `streamshop broker` child process (its descriptor limit raised to the hard limit) is
measured from outside, through /proc and its own /metrics:

1. slow readers (`loadtest.slow_readers`): 100 and then 1,000 connections, each with a 4 KiB
   receive buffer, ask twice for the whole of a 20 MB partition and read nothing: resident
   memory and the response memory the broker counts while they wait;
2. resident memory with N idle connections open (they connect and send nothing);
3. resident memory with 10 connections that each announce a 100 MB request and send nothing;
4. the time for P abandoned long polls (Fetch v4, max_wait 2^31-1 ms, on an empty partition,
   whose clients then disconnect) to be freed: `streamshop_fetch_long_polls` and
   `streamshop_connections_open` back to 0;
5. event-loop stalls: a probe connection sends ApiVersions every 5 ms and records its slowest
   answer while another client creates 10,000 partitions, sends a zstd batch of 16 KB that
   expands to 512 MiB, has 20,000 records recompressed, and while the cleaner compacts a
   partition of 400,000 records;
6. client quotas (`loadtest.quota_accuracy`), Kafka's default windows (11 of 1 s): a producer
   held to `producer_byte_rate` 1 MB/s and then a consumer held to `consumer_byte_rate` 1 MB/s,
   each measured over two whole windows after one; then a producer of 16 MiB requests held to
   1 MB/s, measured from burst to burst over 66 s after 11;
7. password guessing on a SASL listener (`loadtest.guessing`): eight threads guessing `admin`'s
   PLAIN password for 10 s, new connection each time, with the failure throttle on and off:
   attempts answered and passwords checked per second, and how long the real user then waits;
   then SCRAM proofs of 500 exchanges opened first, and the owner's logins beside a guesser;
8. the registry's and the dashboard's logins (`loadtest.http_attacks`): guesses checked from
   100 addresses, the owner beside a guesser, the first login under a flood of unknown names;
9. the longest event-loop stall of each API at request.max.elements (`loadtest.bench_loop_stall`;
   `--loop-stall-elements 0` skips this step, the longest).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from broker.protocol.records import Record, build_batch
from loadtest import bench_loop_stall, guessing, http_attacks, quota_accuracy, slow_readers
from loadtest.brokers import (
    connect,
    gauge,
    lag_buckets,
    recv_exactly,
    rss_mib,
    streamshop_broker,
    wait_idle,
    worst_lag_ms,
)
from loadtest.probe import Probe

QUOTA = 1_000_000  # bytes/s, for the quota step
LARGE_REQUEST = 16 << 20  # bytes per request of the quota step's large producer
ZSTD = 4
GZIP = 1


def _raise_nofile() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


@contextmanager
def broker(workdir: Path) -> Iterator[tuple[Any, str, str]]:
    """(process, bootstrap, admin URL) of a broker with a raised descriptor limit."""
    _raise_nofile()  # inherited by the child
    with streamshop_broker(workdir, admin=True, settings={"log.cleaner.backoff.ms": "500"}) as started:
        assert started.admin_url is not None
        yield started.proc, started.bootstrap, started.admin_url


# --- memory ----------------------------------------------------------------------------------


def idle_connections(proc: Any, bootstrap: str, count: int) -> dict[str, float]:
    wait_idle(proc.pid)
    before = rss_mib(proc.pid)
    sockets = [connect(bootstrap) for _ in range(count)]
    time.sleep(2)
    wait_idle(proc.pid)
    after = rss_mib(proc.pid)
    for s in sockets:
        s.close()
    return {
        "connections": count,
        "rss_before_mib": before,
        "rss_with_connections_mib": after,
        "kib_per_connection": (after - before) * 1024 / count,
    }


def size_claims(proc: Any, bootstrap: str) -> dict[str, float]:
    wait_idle(proc.pid)
    before = rss_mib(proc.pid)
    sockets = []
    for _ in range(10):
        s = connect(bootstrap)
        s.sendall(struct.pack(">i", 100_000_000))  # a 100 MB request is coming... and never does
        sockets.append(s)
    time.sleep(2)
    after = rss_mib(proc.pid)
    for s in sockets:
        s.close()
    return {"claimed_mb": 1000, "rss_before_mib": before, "rss_after_mib": after}


# --- abandoned long polls ----------------------------------------------------------------------


def _fetch_v4(topic: str, correlation_id: int) -> bytes:
    name = topic.encode()
    header = struct.pack(">hhih", 1, 4, correlation_id, 5) + b"bench"
    body = struct.pack(">iiiib", -1, 0x7FFFFFFF, 1, 1 << 20, 0)
    body += struct.pack(">ih", 1, len(name)) + name + struct.pack(">iiqi", 1, 0, 0, 1 << 20)
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def abandoned_polls(bootstrap: str, admin_url: str, count: int) -> dict[str, float]:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: a dropped client fails its futures
    admin.create_topics([NewTopic("polls", 1, 1)])["polls"].result(30)
    others = gauge(admin_url, "streamshop_connections_open")  # the admin client's, which stay
    sockets = []
    for i in range(count):
        s = connect(bootstrap)
        s.sendall(_fetch_v4("polls", i))
        sockets.append(s)
    deadline = time.monotonic() + 30
    while gauge(admin_url, "streamshop_fetch_long_polls") < count and time.monotonic() < deadline:
        time.sleep(0.05)
    waiting = gauge(admin_url, "streamshop_fetch_long_polls")
    started = time.monotonic()
    for s in sockets:
        s.close()
    while time.monotonic() - started < 60:
        polls = gauge(admin_url, "streamshop_fetch_long_polls")
        conns = gauge(admin_url, "streamshop_connections_open")
        if polls == 0 and conns <= others:
            break
        time.sleep(0.01)
    return {"long_polls_waiting": waiting, "seconds_to_free": time.monotonic() - started}


# --- event-loop stalls -------------------------------------------------------------------------


def _produce_raw(bootstrap: str, topic: str, batch: bytes) -> int:
    """Produce v9 of one batch to partition 0 with acks=1; returns the error code."""
    name = topic.encode()
    header = struct.pack(">hhih", 0, 9, 1, 5) + b"bench" + b"\x00"  # v9 is flexible: header v2
    body = b"\x00" + struct.pack(">hi", 1, 60_000)  # null transactional id, acks, timeout
    body += _uvarint(2) + _uvarint(len(name) + 1) + name + _uvarint(2) + struct.pack(">i", 0)
    body += _uvarint(len(batch) + 1) + batch + b"\x00" + b"\x00" + b"\x00"
    payload = header + body
    with connect(bootstrap) as s:
        s.settimeout(120)
        s.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", recv_exactly(s, 4))[0]
        response = recv_exactly(s, size)
    # correlation id, header tags, topics(1), name, partitions(1), index, error code
    pos = 4 + 1 + 1
    length = response[pos] - 1
    pos += 1 + length + 1 + 4
    return int(struct.unpack_from(">h", response, pos)[0])


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def stalls(bootstrap: str, admin_url: str) -> dict[str, float]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    out: dict[str, float] = {}

    def measured(label: str, work: Callable[[], object]) -> None:
        before = lag_buckets(admin_url)
        with Probe(bootstrap) as probe:
            work()
            time.sleep(0.2)
        after = lag_buckets(admin_url)
        out[label] = probe.worst * 1000
        out[label.replace("_ms", "_loop_lag_ms")] = worst_lag_ms(before, after)
        out[label.replace("_ms", "_lags_over_50ms")] = (after[float("inf")] - before[float("inf")]) - (
            after[0.05] - before[0.05]
        )

    def create() -> None:
        admin.create_topics([NewTopic("wide", 10_000, 1)], request_timeout=120)["wide"].result(120)

    measured("create_10000_partitions_ms", create)
    made = admin.create_topics(
        [
            NewTopic("bomb", 1, 1),
            NewTopic("recompress", 1, 1, config={"compression.type": "gzip", "max.message.bytes": "8388608"}),
        ]
    )
    for future in made.values():
        future.result(30)
    bomb = build_batch([Record(0, int(time.time() * 1000), b"k", bytes(512 << 20))], compression=ZSTD)
    out["bomb_batch_bytes"] = len(bomb)
    codes: list[int] = []
    measured("zstd_bomb_512mib_ms", lambda: codes.append(_produce_raw(bootstrap, "bomb", bomb)))
    out["bomb_error_code"] = codes[-1]
    now = int(time.time() * 1000)
    plain = build_batch([Record(i, now, f"k{i}".encode(), b"v" * 40) for i in range(20_000)])
    measured("recompress_20000_records_ms", lambda: codes.append(_produce_raw(bootstrap, "recompress", plain)))
    out["recompress_error_code"] = codes[-1]

    # Written with cleanup.policy=delete, then switched to compact: the cleaner's whole pass
    # falls inside the measured window.
    made = admin.create_topics([NewTopic("compact", 1, 1, config={"segment.bytes": "1048576"})])
    made["compact"].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10_000})
    for i in range(400_000):
        producer.produce("compact", key=f"key-{i % 1000}".encode(), value=b"x" * 60, partition=0)
        if i % 50_000 == 0:
            producer.flush(60)
    producer.flush(60)
    size = 'streamshop_log_size_bytes{partition="0",topic="compact"}'
    out["compaction_bytes_before"] = gauge(admin_url, size)

    def compacted() -> None:  # the cleaner looks every 500 ms; wait for it to shrink the partition
        change = ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)
        resource = ConfigResource(ResourceType.TOPIC, "compact", incremental_configs=[change])
        admin.incremental_alter_configs([resource])[resource].result(30)
        deadline = time.monotonic() + 30
        while gauge(admin_url, size) >= out["compaction_bytes_before"] * 0.9 and time.monotonic() < deadline:
            time.sleep(0.1)

    measured("compaction_400000_records_ms", compacted)
    out["compaction_bytes_after"] = gauge(admin_url, size)
    return out


# --- report ------------------------------------------------------------------------------------


def run(connections: int, polls: int, loop_stall_elements: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-limits-") as tmp, broker(Path(tmp)) as (proc, bootstrap, admin):
        # Slow readers first: the later steps grow the heap, which would hide what they take.
        slow_readers.fill(bootstrap, megabytes=20)
        for count in (100, 1000):
            results[f"slow_readers_{count}"] = slow_readers.measure(proc, bootstrap, admin, count)
        results["idle_connections"] = idle_connections(proc, bootstrap, connections)
        results["size_claims"] = size_claims(proc, bootstrap)
        results["abandoned_polls"] = abandoned_polls(bootstrap, admin, polls)
        results["loop_stalls"] = stalls(bootstrap, admin)
    with tempfile.TemporaryDirectory(prefix="bench-quotas-") as tmp, broker(Path(tmp)) as (_, bootstrap, _):
        results["quotas"] = {
            "quota_bytes_per_s": QUOTA,
            "producer_bytes_per_s": quota_accuracy.producer_rate(bootstrap, QUOTA, warmup=11, seconds=22),
            "consumer_bytes_per_s": quota_accuracy.consumer_rate(bootstrap, QUOTA, warmup=11, seconds=22),
            "large_producer_bytes_per_s": quota_accuracy.large_producer_rate(
                bootstrap, QUOTA, request_bytes=LARGE_REQUEST, warmup=11, seconds=66
            ),
        }
    with tempfile.TemporaryDirectory(prefix="bench-guessing-") as tmp:
        for throttle_ms in (30_000, 0):
            results[f"guessing_throttle_{throttle_ms}"] = guessing.measure(
                Path(tmp), throttle_ms=throttle_ms, seconds=10, threads=8
            )
        results["scram_attacks"] = guessing.broker_attacks(Path(tmp))
    results["http_attacks"] = asyncio.run(http_attacks.measure_all())
    if loop_stall_elements:
        results["loop_stall_per_api"] = {
            row.api: {"entries": row.entries, "stall_ms": row.stall_ms, "idle_ms": row.idle_ms}
            for row in bench_loop_stall.run(loop_stall_elements)
        }
    return results


def report(results: dict[str, Any]) -> list[str]:
    idle, claims = results["idle_connections"], results["size_claims"]
    polls, loop = results["abandoned_polls"], results["loop_stalls"]
    quotas = results["quotas"]
    return [
        *(
            f"{int(slow['connections']):,} slow readers of a 20 MB partition: RSS {slow['rss_before_mib']:.0f} -> "
            f"{slow['rss_with_readers_mib']:.0f} MiB (+{slow['rss_with_readers_mib'] - slow['rss_before_mib']:.0f};"
            f" goal < +300 at 1,000), response memory held {slow['response_memory_mib']:.1f} MiB,"
            f" {slow['response_memory_after_mib']:.1f} after they left"
            for slow in (results["slow_readers_100"], results["slow_readers_1000"])
        ),
        f"{int(idle['connections']):,} idle connections: broker RSS {idle['rss_before_mib']:.0f} -> "
        f"{idle['rss_with_connections_mib']:.0f} MiB ({idle['kib_per_connection']:.1f} KiB each; goal < 500 MiB)",
        f"10 connections claiming 100 MB requests: RSS {claims['rss_before_mib']:.0f} -> "
        f"{claims['rss_after_mib']:.0f} MiB",
        f"{int(polls['long_polls_waiting']):,} abandoned long polls freed in {polls['seconds_to_free'] * 1000:.0f} ms"
        " (goal < 1 s)",
        "while ... : slowest ApiVersions answer seen by a client / event-loop lag inside the broker"
        " (bucket bound) / lags over 50 ms",
        *(
            f"  {label:40}{loop[key + '_ms']:8.1f} ms {loop[key + '_loop_lag_ms']:8.1f} ms "
            f"{int(loop[key + '_lags_over_50ms']):4d}"
            for label, key in (
                ("creating 10,000 partitions", "create_10000_partitions"),
                (
                    f"a {loop['bomb_batch_bytes'] / 1024:.0f} KiB zstd batch of 512 MiB "
                    f"(error {int(loop['bomb_error_code'])})",
                    "zstd_bomb_512mib",
                ),
                (
                    f"recompressing 20,000 records (error {int(loop['recompress_error_code'])})",
                    "recompress_20000_records",
                ),
                (
                    f"compacting 400,000 records ({loop['compaction_bytes_before'] / 1e6:.0f} -> "
                    f"{loop['compaction_bytes_after'] / 1e6:.1f} MB)",
                    "compaction_400000_records",
                ),
            )
        ),
        *(
            f"client held to {name}_byte_rate {quotas['quota_bytes_per_s'] / 1e6:.1f} MB/s: "
            f"{quotas[name + '_bytes_per_s'] / 1e6:.3f} MB/s "
            f"({quotas[name + '_bytes_per_s'] / quotas['quota_bytes_per_s'] - 1:+.1%}; goal within 10 %)"
            for name in ("producer", "consumer")
        ),
        f"producer of {LARGE_REQUEST >> 20} MiB requests held to producer_byte_rate "
        f"{quotas['quota_bytes_per_s'] / 1e6:.1f} MB/s: {quotas['large_producer_bytes_per_s'] / 1e6:.3f} MB/s "
        f"({quotas['large_producer_bytes_per_s'] / quotas['quota_bytes_per_s'] - 1:+.1%})",
        "password guessing, 8 threads for 10 s: attempts answered/s, passwords checked/s, refused unchecked,"
        " the real user's wait after",
        *(
            f"  throttle {'max ' + str(g['throttle_max_ms'] // 1000) + ' s' if g['throttle_max_ms'] else 'off':12}"
            f"{g['attempts_per_s']:8.1f}/s {g['checked_per_s']:8.2f}/s {int(g['refused_unchecked']):8d}"
            f"{g['real_user_waited_s']:8.1f} s"
            for g in (results["guessing_throttle_30000"], results["guessing_throttle_0"])
        ),
        *guessing.report(results["scram_attacks"]),
        *http_attacks.report(results["http_attacks"]),
        *_loop_stall_lines(results.get("loop_stall_per_api", {})),
    ]


def _loop_stall_lines(per_api: dict[str, dict[str, float]]) -> list[str]:
    if not per_api:
        return []
    worst = sorted(per_api.items(), key=lambda item: -item[1]["stall_ms"])
    return [
        f"longest event-loop stall per API, request.max.elements entries ({len(per_api)} APIs;"
        " the ten longest; idle: the probe's slowest round trip in the second before):",
        *(
            f"  {api:40}{row['stall_ms']:8.0f} ms (idle {row['idle_ms']:.0f} ms, {int(row['entries']):,} entries)"
            for api, row in worst[:10]
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.bench_limits", description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=10_000, help="idle connections (default 10,000)")
    parser.add_argument("--polls", type=int, default=1_000, help="abandoned long polls (default 1,000)")
    parser.add_argument(
        "--loop-stall-elements",
        type=int,
        default=bench_loop_stall.MAX_ELEMENTS,
        metavar="N",
        help="entries per request of the per-API loop stall step (default request.max.elements; 0 skips it)",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    _raise_nofile()
    results = run(args.connections, args.polls, args.loop_stall_elements)
    for line in report(results):
        print(line)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
