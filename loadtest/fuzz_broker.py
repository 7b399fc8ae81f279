"""Network fuzzer for the broker, with a control client.

    python -m loadtest.fuzz_broker [--frames N] [--seconds S] [--connections C] [--seed K]
                                   [--bootstrap HOST:PORT]

Starts `streamshop broker` as a child process (or fuzzes one at --bootstrap), records real
clients' requests as seeds (`fuzz_seeds`: every advertised API and version), then sends
mutated copies over C connections: bit flips, boundary integers written over counts and
lengths, varint bombs, truncations, extensions, splices of two requests, another version or
API key in the header, and size prefixes that lie.  Meanwhile a control client produces keyed
records with acks=all (idempotent); at the end every acknowledged record must be read back
exactly once, in order per partition, and the broker must still answer.  A broker exit, a
control failure or an unresponsive broker fails the run (exit status 1).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kit.settings import parse_host_port
from loadtest.brokers import connect, lag_buckets, recv_exactly, rss_mib, streamshop_broker, worst_lag_ms
from loadtest.fuzz_seeds import Frame, Recorder, record_seeds, relabel

CONTROL_TOPIC = "fuzz-control"
CONTROL_PARTITIONS = 3
_INT32 = [0, 1, -1, 0x7FFFFFFF, -0x80000000, 0x7FFFFFF0, 0xFFFF, 0x10000]
_INT16 = [0, 1, -1, 0x7FFF, -0x8000]
_VARINTS = [b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", b"\x80\x80\x80\x80\x08", b"\x00"]


@dataclass
class Report:
    frames: int = 0
    connections: int = 0
    closed_by_broker: int = 0
    unanswered: int = 0  # frames with neither an answer nor a close within 50 ms
    responses_bytes: int = 0
    seconds: float = 0.0
    seeds: int = 0
    apis: int = 0
    recorded_apis: int = 0  # API keys the client sessions sent (the rest start from empty bodies)
    recorded_keys: list[int] = field(default_factory=list)
    broker_exits: int = 0
    acknowledged: int = 0
    control_problems: list[str] = field(default_factory=list)
    answers_after: bool = False
    broker_rss_mib: float = 0.0
    tracebacks: int = 0  # in the broker's log (one per failing place in the code, not per frame)
    loop_lag_ms: float | None = None  # the broker's longest event-loop lag while fuzzed (bucket bound)

    @property
    def ok(self) -> bool:
        return self.broker_exits == 0 and not self.control_problems and self.answers_after

    def lines(self) -> list[str]:
        fps = self.frames / self.seconds if self.seconds else 0.0
        return [
            f"seeds: {self.seeds} requests covering {self.apis} API keys (every advertised version), "
            f"{self.recorded_apis} of them recorded from real clients",
            f"frames sent: {self.frames:,} in {self.seconds:.1f} s ({fps:,.0f} frames/s) "
            f"over {self.connections:,} connections: {self.closed_by_broker:,} closed by the broker, "
            f"{self.unanswered:,} frames without an answer within 50 ms",
            f"broker exits: {self.broker_exits}; answers afterwards: {self.answers_after}; "
            f"resident memory at the end: {self.broker_rss_mib:.0f} MiB; tracebacks logged: {self.tracebacks}",
            *(
                [f"longest event-loop stall in the broker while fuzzed: at most {self.loop_lag_ms:,.0f} ms"]
                if self.loop_lag_ms is not None
                else []
            ),
            f"control: {self.acknowledged:,} acknowledged records, "
            + (
                "all read back exactly once, in order"
                if not self.control_problems
                else "; ".join(self.control_problems)
            ),
        ]


# --- mutations -----------------------------------------------------------------------------


def mutate(rng: random.Random, seeds: list[Frame], advertised: dict[int, tuple[int, int]]) -> tuple[bytes, bool]:
    """A mutated frame with its size prefix; True when the prefix lies (the stream is then
    out of step, so the connection is dropped after it)."""
    frame = bytearray(rng.choice(seeds))
    for _ in range(rng.choice((0, 1, 1, 1, 1, 1, 2, 2, 3, 5))):  # some go as recorded: state moves on
        _mutate_once(rng, frame, seeds, advertised)
    size = len(frame)
    lie = rng.random() < 0.02
    if lie:
        size = rng.choice((size + rng.randint(1, 1 << 20), max(0, size - rng.randint(1, 8)), -1, 0x7FFFFFFF))
    return struct.pack(">i", size) + bytes(frame), lie


def _mutate_once(
    rng: random.Random, frame: bytearray, seeds: list[Frame], advertised: dict[int, tuple[int, int]]
) -> None:
    if len(frame) < 8:
        frame.extend(rng.randbytes(8))
    kind = rng.randrange(10)
    pos = rng.randrange(8, len(frame)) if len(frame) > 8 else 8
    if kind == 0:  # bit flips
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(frame))
            frame[i] ^= 1 << rng.randrange(8)
    elif kind == 1 and len(frame) >= pos + 4:
        struct.pack_into(
            ">i", frame, pos, rng.choice(_INT32) if rng.random() < 0.8 else rng.randint(-(1 << 31), (1 << 31) - 1)
        )
    elif kind == 2 and len(frame) >= pos + 2:
        struct.pack_into(">h", frame, pos, rng.choice(_INT16))
    elif kind == 3:
        frame[pos:pos] = rng.choice(_VARINTS)
    elif kind == 4:
        del frame[pos:]
    elif kind == 5:
        frame.extend(rng.randbytes(rng.randint(1, 64)))
    elif kind == 6:  # splice: the head of this request, the tail of another
        other = rng.choice(seeds)
        frame[pos:] = other[rng.randrange(len(other)) :]
    elif kind == 7:  # another advertised version of the same API
        key = struct.unpack_from(">h", frame)[0]
        low, high = advertised.get(key, (0, 0))
        struct.pack_into(">h", frame, 2, rng.randint(low, high))
    elif kind == 8:  # another API key, even one not advertised
        struct.pack_into(">h", frame, 0, rng.choice([*advertised, rng.randint(-5, 200)]))
    else:  # duplicate a chunk
        end = min(len(frame), pos + rng.randint(1, 32))
        frame[pos:pos] = frame[pos:end] * rng.randint(1, 64)


# --- the fuzzing connections ---------------------------------------------------------------


@dataclass
class _Target:
    host: str
    port: int
    seeds: list[Frame]
    advertised: dict[int, tuple[int, int]]
    report: Report
    deadline: float
    budget: list[int]  # frames still to send, shared by the connections


async def _connection(target: _Target, rng: random.Random) -> None:
    host, port, seeds, advertised = target.host, target.port, target.seeds, target.advertised
    report, deadline, budget = target.report, target.deadline, target.budget
    while budget[0] > 0 and time.monotonic() < deadline:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 5)
        except (OSError, TimeoutError):
            await asyncio.sleep(0.05)
            continue
        report.connections += 1
        heard = asyncio.Event()
        drain = asyncio.ensure_future(_drain(reader, report, heard))
        try:
            for _ in range(rng.randint(1, 200)):  # connections churn too
                if budget[0] <= 0 or drain.done():
                    break
                budget[0] -= 1
                data, lie = mutate(rng, seeds, advertised)
                heard.clear()
                writer.write(data)
                report.frames += 1
                await asyncio.wait_for(writer.drain(), 2)
                if lie:
                    break
                # Each frame is answered or refused before the next (a frame that gets no
                # answer, such as acks=0 or a long poll, is given 50 ms), so every frame
                # counted was read and handled by the broker.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(heard.wait(), 0.05)
                if not heard.is_set():
                    report.unanswered += 1
        except (OSError, TimeoutError):
            pass
        finally:
            if drain.done():
                report.closed_by_broker += 1
            drain.cancel()
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1)


async def _drain(reader: asyncio.StreamReader, report: Report, heard: asyncio.Event) -> None:
    with contextlib.suppress(OSError):
        while data := await reader.read(1 << 16):
            report.responses_bytes += len(data)
            heard.set()
    heard.set()  # closed


# --- the control client --------------------------------------------------------------------


class Control:
    """Keyed acks=all records produced throughout; verified at the end."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.acked: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(CONTROL_PARTITIONS)}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        admin.create_topics([NewTopic(CONTROL_TOPIC, CONTROL_PARTITIONS, 1)])[CONTROL_TOPIC].result(30)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        producer = Producer(
            {"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 2}
        )

        def delivered(err: object, msg: object) -> None:
            if err is not None:
                self.errors.append(str(err))
                return
            self.acked[msg.partition()].append((msg.offset(), msg.value()))  # type: ignore[attr-defined]

        i = 0
        while not self._stop.is_set():
            value = f"control-{i}".encode()
            producer.produce(CONTROL_TOPIC, key=f"key-{i % 17}".encode(), value=value, on_delivery=delivered)
            producer.poll(0)
            i += 1
            time.sleep(0.002)
        producer.flush(30)

    def verify(self) -> list[str]:
        problems = [f"producer error: {e}" for e in self.errors[:5]]
        consumer = Consumer(
            {"bootstrap.servers": self.bootstrap, "group.id": "fuzz-verify", "enable.auto.commit": False}
        )
        try:
            for partition, acked in self.acked.items():
                ends = consumer.get_watermark_offsets(TopicPartition(CONTROL_TOPIC, partition), timeout=20)
                consumer.assign([TopicPartition(CONTROL_TOPIC, partition, 0)])
                seen: list[tuple[int, bytes]] = []
                deadline = time.monotonic() + 60
                while ends[1] > 0 and (not seen or seen[-1][0] < ends[1] - 1) and time.monotonic() < deadline:
                    message = consumer.poll(0.5)
                    if message is not None and message.error() is None:
                        seen.append((message.offset() or 0, message.value() or b""))
                offsets = [o for o, _ in seen]
                if offsets != sorted(set(offsets)):
                    problems.append(f"partition {partition}: offsets out of order or repeated")
                values = [v for _, v in seen]
                if len(values) != len(set(values)):
                    problems.append(f"partition {partition}: a record stored twice")
                stored = dict(seen)
                missing = [o for o, v in acked if stored.get(o) != v]
                if missing:
                    problems.append(f"partition {partition}: {len(missing)} acknowledged records not read back")
                acked_values = {a for _, a in acked}  # once: a long run acknowledges ~10^5 records
                if [v for o, v in acked] != [v for v in values if v in acked_values]:
                    problems.append(f"partition {partition}: acknowledged records out of order")
        except KafkaException as e:
            problems.append(f"verification failed: {e}")
        finally:
            consumer.close()
        return problems


# --- running -------------------------------------------------------------------------------


def advertised_versions(bootstrap: str, timeout: float = 10) -> dict[int, tuple[int, int]]:
    """ApiVersions v0 by hand (every broker answers it): {api key: (min, max)}."""
    request = struct.pack(">hhih", 18, 0, 7, 4) + b"fuzz"
    with connect(bootstrap, timeout) as sock:
        sock.sendall(struct.pack(">i", len(request)) + request)
        size = struct.unpack(">i", recv_exactly(sock, 4))[0]
        body = recv_exactly(sock, size)
    _, error, count = struct.unpack_from(">ihi", body)
    if error:
        raise RuntimeError(f"ApiVersions error {error}")
    return {key: (low, high) for key, low, high in struct.iter_unpack(">hhh", body[10 : 10 + 6 * count])}


def run(
    *,
    frames: int,
    seconds: float,
    connections: int = 8,
    seed: int = 1,
    bootstrap: str | None = None,
    settings: dict[str, str] | None = None,
) -> Report:
    """Fuzz the broker at `bootstrap`, or a `streamshop broker` started here (then its exit,
    memory and logged tracebacks are reported too)."""
    report = Report()
    plan = _Plan(frames, seconds, connections, seed)
    if bootstrap is not None:
        _fuzz_and_check(bootstrap, None, report, plan)
        return report
    # The broker advertises the seed recorder, so the clients recording seeds reach it through
    # the recorder on every connection (the control client too, afterwards, unrecorded).
    with (
        tempfile.TemporaryDirectory(prefix="fuzz-broker-") as tmp,
        Recorder() as recorder,
        streamshop_broker(Path(tmp), admin=True, settings=settings, advertise=f"127.0.0.1:{recorder.port}") as broker,
    ):
        assert broker.proc is not None  # streamshop_broker starts it as our child
        server = parse_host_port(broker.bootstrap)
        recorder.upstream = (server.host, server.port)
        _fuzz_and_check(broker.bootstrap, broker.proc, report, plan, recorder, admin_url=broker.admin_url)
        if broker.proc.poll() is None:
            report.broker_rss_mib = rss_mib(broker.pid)
        assert broker.log_path is not None
        report.tracebacks = broker.log_path.read_text(errors="replace").count("Traceback")
    return report


@dataclass(frozen=True)
class _Plan:
    frames: int
    seconds: float
    connections: int
    seed: int


def _fuzz_and_check(
    bootstrap: str,
    proc: subprocess.Popen[bytes] | None,
    report: Report,
    plan: _Plan,
    recorder: Recorder | None = None,
    *,
    admin_url: str | None = None,
) -> None:
    advertised = advertised_versions(bootstrap)
    recorded = record_seeds(bootstrap, recorder)
    report.recorded_keys = sorted({struct.unpack_from(">h", f)[0] for f in recorded if len(f) >= 2})
    report.recorded_apis = len(report.recorded_keys)
    seeds = relabel(recorded, advertised)
    report.seeds, report.apis = len(seeds), len(advertised)
    control = Control(bootstrap)
    control.start()
    server = parse_host_port(bootstrap)
    lags = lag_buckets(admin_url) if admin_url else None
    started = time.monotonic()
    deadline = started + plan.seconds if plan.seconds else float("inf")  # 0: bounded by frames alone
    target = _Target(server.host, server.port, seeds, advertised, report, deadline, [plan.frames])
    asyncio.run(_fuzz(target, plan.connections, plan.seed))
    report.seconds = time.monotonic() - started
    control.stop()
    if proc is not None and proc.poll() is not None:
        report.broker_exits = 1
        return
    if admin_url and lags is not None:
        report.loop_lag_ms = worst_lag_ms(lags, lag_buckets(admin_url))
    try:
        advertised_versions(bootstrap)
        report.answers_after = True
    except Exception as e:  # reported: the run fails
        report.control_problems.append(f"the broker does not answer: {e}")
    report.acknowledged = sum(len(a) for a in control.acked.values())
    report.control_problems += control.verify()
    if report.acknowledged == 0:
        report.control_problems.append("the control client got nothing acknowledged")


async def _fuzz(target: _Target, connections: int, seed: int) -> None:
    await asyncio.gather(*(_connection(target, random.Random(seed * 1000 + i)) for i in range(connections)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.fuzz_broker", description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=1_000_000, help="frames to send (default 1,000,000)")
    parser.add_argument(
        "--seconds",
        type=float,
        default=600,
        help="stop after this long even with frames left (0: no limit; default 600)",
    )
    parser.add_argument("--connections", type=int, default=8, help="concurrent fuzzing connections (default 8)")
    parser.add_argument("--seed", type=int, default=int(time.time()), help="random seed (default: the time)")
    parser.add_argument("--bootstrap", help="fuzz a running broker instead of starting one")
    args = parser.parse_args(argv)
    print(f"seed {args.seed}", flush=True)
    report = run(
        frames=args.frames,
        seconds=args.seconds,
        connections=args.connections,
        seed=args.seed,
        bootstrap=args.bootstrap,
    )
    for line in report.lines():
        print(line)
    print("OK" if report.ok else "FAILED")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
