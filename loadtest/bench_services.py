"""Benchmark of the services on the whole local stack (`streamshop up`), driven from the same host,
side by side on SQLite, on PostgreSQL, and on PostgreSQL with two orders instances.

    python -m loadtest.bench_services [--configs sqlite,postgres,postgres-2] [--rate 1000]
                                      [--seconds 20] [--concurrency 64]
                                      [--otp-rate 50] [--otp-seconds 10] [--json PATH]
    python -m loadtest.bench_services --tracing [...]   # what tracing costs

For each configuration the stack (broker, registry, catcher, orders, otp, sms-sender,
email-sender, logs; with `--postgres`, its PostgreSQL server) is started with `streamshop up
--ephemeral-ports` in a temporary directory and stopped before the next.  The load generator
runs in this process (aiohttp, one connection pool), on the same cores as the stack.  The steps:

1. orders, closed loop: `--concurrency` clients POST /orders back to back for `--seconds`;
   the throughput the stack sustains and its latencies;
2. orders, paced: POST /orders at a fixed `--rate` per second for `--seconds` (open loop: each
   request is due at its slot whether or not earlier ones finished, and its latency is counted
   from the slot, so a stall is not hidden by the generator waiting — no coordinated omission);
   the achieved rate, p50/p99, and errors;
3. every order acknowledged with 201 is then looked for on the `orders` topic (OrderCreated,
   keyed by order id), read from the beginning: the outbox must have published all of them;
4. OTP end to end, paced at `--otp-rate`: from sending POST /otp (channels sms and email) until
   both OtpDelivered events for that request_id have been read from `otp.deliveries` by a
   consumer started beforehand; p50/p99 and deliveries missing after a grace period.

Besides latencies, over the two orders steps: the CPU the orders instances spent per order
acknowledged, the CPU of the whole stack (each child with its descendants: PostgreSQL's backends
count) and of the load generator, which share the same cores, and on PostgreSQL the database
transactions per order (from `pg_stat_database`).

`--tracing` compares instead SQLite stacks with `--observability` (Zipkin and Prometheus beside
them) twice: every child tracing with 100 % sampling, exporting to that real Zipkin
(`sqlite-traced`), and the same stack with ``OTEL_SDK_DISABLED=true`` (`sqlite-untraced`): the
closed-loop rate, the paced p99 and the orders CPU per order side by side, with the ratio, and
what became of the orders service's spans (its ``otel_spans_*`` metrics, Zipkin's services).

Targets: 1,000 orders/s sustained with p99 under 100 ms on each backend, closed-loop throughput
on PostgreSQL at least SQLite's; OTP p99 under 500 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiokafka import AIOKafkaConsumer
from prometheus_client.parser import text_string_to_metric_families

from loadtest.brokers import cpu_seconds, tree_cpu_seconds
from schemas.client import RegistryClient
from schemas.serde import AvroDeserializer
from streamshop.stack.state import read_stack

READY_TIMEOUT = 120.0
ZIPKIN_TIMEOUT = 300.0  # a JVM's start on two busy cores
TRACES = "traces"  # the stack's Zipkin child (--observability)
DELIVERY_GRACE = 10.0
CURRENCIES = ("EUR", "USD", "GBP")


@dataclass
class Latencies:
    samples: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)

    def error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1

    def percentile(self, p: float) -> float:
        ordered = sorted(self.samples)
        if not ordered:
            return float("nan")
        return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] * 1000


def order_body(rng: random.Random) -> dict[str, Any]:
    return {
        "customer_id": f"c-{rng.randrange(10_000)}",
        "currency": rng.choice(CURRENCIES),
        "items": [
            {
                "sku": f"sku-{rng.randrange(500)}",
                "quantity": rng.randint(1, 3),
                "unit_price": f"{rng.randint(1, 9999) / 100:.2f}",
            }
            for _ in range(rng.randint(1, 4))
        ],
    }


# -- the stack -----------------------------------------------------------------------------------

# The configurations compared: the options of `streamshop up` for each.
CONFIGS: dict[str, tuple[str, ...]] = {
    "sqlite": (),
    "postgres": ("--postgres",),
    "postgres-2": ("--postgres", "--scale", "orders=2"),
    "sqlite-untraced": ("--observability",),
    "sqlite-traced": ("--observability",),
}
DEFAULT_CONFIGS = ("sqlite", "postgres", "postgres-2")
TRACING_CONFIGS = ("sqlite-untraced", "sqlite-traced")
# Variables set for the whole stack in a configuration (the children inherit them).
ENVIRONMENTS: dict[str, dict[str, str]] = {
    "sqlite-untraced": {"OTEL_SDK_DISABLED": "true"},
    "sqlite-traced": {"OTEL_TRACES_SAMPLER": "always_on"},  # every request traced: the worst case
}


class Stack:
    """`streamshop up --ephemeral-ports` in `data_dir`, until `stop()`."""

    def __init__(
        self,
        data_dir: Path,
        options: tuple[str, ...] = (),
        without: tuple[str, ...] = ("analytics", "dashboard"),
        environ: dict[str, str] | None = None,
    ) -> None:
        # The Spark job and the dashboard's polling would take CPU from the services measured.
        self.data_dir = data_dir
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}  # the configuration's only
        env = {**inherited, "NO_COLOR": "1", **(environ or {})}
        self.log = (data_dir / "up.log").open("w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streamshop.cli",
                "up",
                "--ephemeral-ports",
                "--no-color",
                "--data-dir",
                str(data_dir),
                *(arg for child in without for arg in ("--without", child)),
                *options,
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
        )

    def wait_ready(self) -> dict[str, Any]:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"streamshop up exited with {self.proc.returncode}; see {self.log.name}")
            doc = read_stack(self.data_dir)
            if doc and doc.get("state") == "running":
                return doc
            time.sleep(0.2)
        raise RuntimeError(f"the stack was not ready within {READY_TIMEOUT:g} s; see {self.log.name}")

    def pids(self, prefix: str = "") -> list[int]:
        """The pids of the children whose name starts with `prefix` (all by default)."""
        doc = read_stack(self.data_dir) or {}
        children = doc.get("children", {})
        return [int(c["pid"]) for name, c in children.items() if c.get("pid") and name.startswith(prefix)]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def url(doc: dict[str, Any], child: str, role: str = "http") -> str:
    return str(doc["children"][child]["urls"][role])


def bootstrap_of(doc: dict[str, Any]) -> str:
    return url(doc, "broker", "bootstrap").removeprefix("kafka://")


# -- orders --------------------------------------------------------------------------------------


@dataclass
class OrdersLoad:
    """POST /orders with random bodies; latencies, errors and the ids of acknowledged orders."""

    session: aiohttp.ClientSession
    base: str
    rng: random.Random
    lat: Latencies = field(default_factory=Latencies)
    ids: list[str] = field(default_factory=list)

    async def post(self, started: float) -> None:
        """One order; its latency counts from `started` (its slot when paced)."""
        try:
            async with self.session.post(f"{self.base}/orders", json=order_body(self.rng)) as response:
                body = await response.json()
                if response.status != 201:
                    self.lat.error(f"http {response.status}")
                    return
                self.ids.append(body["order_id"])
        except (aiohttp.ClientError, TimeoutError) as e:
            self.lat.error(type(e).__name__)
            return
        self.lat.samples.append(time.perf_counter() - started)


async def closed_loop(load: OrdersLoad, seconds: float, concurrency: int) -> float:
    """`concurrency` clients posting back to back for `seconds`; the orders per second."""
    end = time.perf_counter() + seconds

    async def client() -> None:
        while time.perf_counter() < end:
            await load.post(time.perf_counter())

    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    return len(load.lat.samples) / (time.perf_counter() - t0)


async def paced(rate: float, seconds: float, fire: Callable[[float], Coroutine[Any, Any, None]]) -> float:
    """Call `fire(slot_time)` at `rate` per second for `seconds`, without waiting for earlier calls."""
    tasks: set[asyncio.Task[None]] = set()
    t0 = time.perf_counter()
    total = int(rate * seconds)
    for i in range(total):
        due = t0 + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(fire(due))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks)
    return time.perf_counter() - t0


async def orders_on_topic(bootstrap: str, registry_url: str, wanted: set[str], within: float) -> set[str]:
    """Order ids of OrderCreated events on `orders`, read from the beginning until all `wanted` are seen."""
    seen: set[str] = set()
    consumer = AIOKafkaConsumer(
        "orders", bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    try:
        async with RegistryClient(registry_url) as registry:
            deserializer = AvroDeserializer(registry)
            deadline = time.monotonic() + within
            while not wanted <= seen and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=500, max_records=5000)).values():
                    for record in records:
                        decoded = await deserializer.deserialize(record.value or b"")
                        if decoded.record_name.endswith("OrderCreated"):
                            seen.add(str(decoded.value["order_id"]))
    finally:
        await consumer.stop()
    return seen & wanted


# -- otp -----------------------------------------------------------------------------------------


async def otp_end_to_end(
    doc: dict[str, Any], session: aiohttp.ClientSession, rate: float, seconds: float
) -> tuple[Latencies, int]:
    base, bootstrap, registry_url = url(doc, "otp"), bootstrap_of(doc), url(doc, "registry")
    sent: dict[str, float] = {}
    delivered: dict[str, set[str]] = {}
    lat = Latencies()
    consumer = AIOKafkaConsumer(
        "otp.deliveries", bootstrap_servers=bootstrap, auto_offset_reset="latest", enable_auto_commit=False
    )
    await consumer.start()
    async with RegistryClient(registry_url) as registry:
        deserializer = AvroDeserializer(registry)
        await consumer.getmany(timeout_ms=1000)  # assigned and positioned at the end before sending
        stop = asyncio.Event()

        async def read() -> None:
            while not stop.is_set():
                for records in (await consumer.getmany(timeout_ms=100)).values():
                    now = time.perf_counter()
                    for record in records:
                        decoded = await deserializer.deserialize(record.value or b"")
                        if not decoded.record_name.endswith("OtpDelivered"):
                            continue
                        rid = str(decoded.value["request_id"])
                        channels = delivered.setdefault(rid, set())
                        channels.add(str(decoded.value["channel"]))
                        if channels == {"sms", "email"} and rid in sent:
                            lat.samples.append(now - sent[rid])

        reader = asyncio.create_task(read())
        n = 0

        async def fire(due: float) -> None:
            nonlocal n
            n += 1
            body = {
                "user_id": f"u-{n}",
                "channels": ["sms", "email"],
                "phone": f"+1555{n:07d}",
                "email": f"u{n}@example.com",
            }
            try:
                async with session.post(f"{base}/otp", json=body) as response:
                    if response.status != 202:
                        lat.error(f"http {response.status}")
                        return
                    sent[str((await response.json())["request_id"])] = due
            except (aiohttp.ClientError, TimeoutError) as e:
                lat.error(type(e).__name__)

        await paced(rate, seconds, fire)
        deadline = time.monotonic() + DELIVERY_GRACE
        while len(lat.samples) < len(sent) and time.monotonic() < deadline:  # noqa: ASYNC110 - polls a count
            await asyncio.sleep(0.1)
        stop.set()
        await reader
    await consumer.stop()
    return lat, len(sent) - len(lat.samples)


# -- report --------------------------------------------------------------------------------------


def row(name: str, rate: float, lat: Latencies, extra: str = "") -> str:
    errors = sum(lat.errors.values())
    return (
        f"| {name} | {rate:,.0f}/s | {lat.percentile(50):.1f} | {lat.percentile(99):.1f} | "
        f"{len(lat.samples):,} | {errors}{' ' + json.dumps(lat.errors) if errors else ''} | {extra} |"
    )


async def _transactions(doc: dict[str, Any], data_dir: Path) -> int | None:
    """Transactions committed so far in the orders database (PostgreSQL only)."""
    if "postgres" not in doc["children"]:
        return None
    import asyncpg

    from streamshop import postgres

    base = postgres.with_password(url(doc, "postgres", "postgresql"), data_dir / "postgres")
    conn = await asyncpg.connect(postgres.for_database(base, "orders"))
    try:
        value = await conn.fetchval("SELECT xact_commit FROM pg_stat_database WHERE datname = 'orders'")
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        return int(value)
    finally:
        await conn.close()


# -- tracing ------------------------------------------------------------------------------------


async def zipkin_ready(session: aiohttp.ClientSession, doc: dict[str, Any]) -> str | None:
    """Zipkin's URL once it answers (the stack serves before that JVM is up), None without it."""
    if TRACES not in doc["children"]:
        return None
    base = url(doc, TRACES)
    deadline = time.monotonic() + ZIPKIN_TIMEOUT
    while time.monotonic() < deadline:
        try:
            async with session.get(f"{base}/health") as response:
                if response.status == 200:
                    return base
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(1)
    raise RuntimeError(f"Zipkin did not answer at {base} within {ZIPKIN_TIMEOUT:g} s")


async def span_fate(session: aiohttp.ClientSession, doc: dict[str, Any], zipkin: str) -> dict[str, Any]:
    """The orders service's ``otel_span*`` metrics, and the services Zipkin has spans of."""
    async with session.get(f"{url(doc, 'orders')}/metrics") as response:
        text = await response.text()
    metrics = {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("otel_span")
    }
    async with session.get(f"{zipkin}/api/v2/services") as response:
        services = await response.json()
    return {"orders_metrics": metrics, "zipkin_services": sorted(services)}


async def run(args: argparse.Namespace, doc: dict[str, Any], stack: Stack) -> dict[str, Any]:
    orders = url(doc, "orders")
    connector = aiohttp.TCPConnector(limit=max(args.concurrency, 256))
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as session:
        zipkin = await zipkin_ready(session, doc)
        load0 = os.getloadavg()[0]
        await closed_loop(OrdersLoad(session, orders, random.Random(0)), 2, 16)  # warm-up: connections, caches
        await asyncio.sleep(1)  # pg_stat_database is reported by the server at most every 500 ms
        tx0 = await _transactions(doc, stack.data_dir)
        cpu0 = sum(tree_cpu_seconds(pid) for pid in stack.pids())
        generator0 = time.process_time()
        orders_cpu0 = sum(cpu_seconds(pid) for pid in stack.pids("orders"))
        closed = OrdersLoad(session, orders, random.Random(1))
        closed_rate = await closed_loop(closed, args.seconds, args.concurrency)
        paced_load = OrdersLoad(session, orders, random.Random(2))
        elapsed = await paced(args.rate, args.seconds, paced_load.post)
        paced_rate = len(paced_load.lat.samples) / elapsed
        generator = time.process_time() - generator0
        cpu = sum(tree_cpu_seconds(pid) for pid in stack.pids()) - cpu0
        orders_cpu = sum(cpu_seconds(pid) for pid in stack.pids("orders")) - orders_cpu0
        await asyncio.sleep(1)
        tx1 = await _transactions(doc, stack.data_dir)
        load1 = os.getloadavg()[0]
        spans = None if zipkin is None else await span_fate(session, doc, zipkin)

        wanted = set(closed.ids) | set(paced_load.ids)
        found = await orders_on_topic(bootstrap_of(doc), url(doc, "registry"), wanted, within=60)
        otp_lat, otp_missing = await otp_end_to_end(doc, session, args.otp_rate, args.otp_seconds)

    acknowledged = len(closed.ids) + len(paced_load.ids)
    return {
        "orders_closed": {
            "rate": closed_rate,
            "p50_ms": closed.lat.percentile(50),
            "p99_ms": closed.lat.percentile(99),
            "errors": closed.lat.errors,
        },
        "orders_paced": {
            "target": args.rate,
            "rate": paced_rate,
            "p50_ms": paced_load.lat.percentile(50),
            "p99_ms": paced_load.lat.percentile(99),
            "errors": paced_load.lat.errors,
        },
        "orders_published": {"acknowledged": len(wanted), "on_topic": len(found)},
        "cpu": {
            "stack_s": cpu,
            "generator_s": generator,
            "orders_s": orders_cpu,
            "orders_ms_per_order": 1000 * orders_cpu / max(1, acknowledged),
            # The warm-up's transactions are excluded; the relay's (marking rows sent) are in.
            "db_transactions_per_order": None if tx0 is None or tx1 is None else (tx1 - tx0) / max(1, acknowledged),
        },
        "otp": {
            "rate": len(otp_lat.samples) / args.otp_seconds,
            "p50_ms": otp_lat.percentile(50),
            "p99_ms": otp_lat.percentile(99),
            "missing": otp_missing,
            "errors": otp_lat.errors,
        },
        "load_average": {"before": load0, "after": load1},  # 1-minute, of the whole host
        "spans": spans,
        "_latencies": (closed.lat, paced_load.lat, otp_lat),
    }


def report(args: argparse.Namespace, results: dict[str, dict[str, Any]]) -> None:
    print("| configuration | step | rate | p50 ms | p99 ms | requests | errors | notes |")
    print("|---|---|---|---|---|---|---|---|")
    for name, figures in results.items():
        closed, paced_lat, otp = figures["_latencies"]
        published = figures["orders_published"]
        note = f"{published['on_topic']:,} of {published['acknowledged']:,} on the topic"
        print(
            f"| {name} "
            + row(f"orders closed loop, {args.concurrency} clients", figures["orders_closed"]["rate"], closed)
        )
        print(f"| {name} " + row(f"orders paced at {args.rate:g}/s", figures["orders_paced"]["rate"], paced_lat, note))
        print(
            f"| {name} "
            + row(
                f"OTP -> both deliveries, paced at {args.otp_rate:g}/s",
                figures["otp"]["rate"],
                otp,
                f"{figures['otp']['missing']} undelivered",
            )
        )
    print(
        "\n| configuration | orders CPU per order | stack CPU, both orders steps | load generator CPU"
        " | DB transactions per order |"
    )
    print("|---|---|---|---|---|")
    for name, figures in results.items():
        cpu = figures["cpu"]
        tx = cpu["db_transactions_per_order"]
        print(
            f"| {name} | {cpu['orders_ms_per_order']:.2f} ms | {cpu['stack_s']:.1f} s over {2 * args.seconds:g} s | "
            f"{cpu['generator_s']:.1f} s | "
            f"{'-' if tx is None else f'{tx:.2f}'} |"
        )


def report_tracing(args: argparse.Namespace, results: dict[str, dict[str, Any]]) -> None:
    """Untraced and traced side by side, with the ratio."""
    off, on = (results[name] for name in TRACING_CONFIGS)
    rows: tuple[tuple[str, str, str, str], ...] = (
        ("orders/s, closed loop", "orders_closed", "rate", "{:,.0f}"),
        (f"p99 ms, paced at {args.rate:g}/s", "orders_paced", "p99_ms", "{:.1f}"),
        (f"rate achieved, paced at {args.rate:g}/s", "orders_paced", "rate", "{:,.0f}"),
        ("orders CPU ms per order", "cpu", "orders_ms_per_order", "{:.2f}"),
        ("stack CPU s, both orders steps", "cpu", "stack_s", "{:.1f}"),
    )
    print(f"\n| tracing | OTEL_SDK_DISABLED=true | {args.trace_ratio:.0%} sampled, to Zipkin | traced / untraced |")
    print("|---|---|---|---|")
    for label, step, key, fmt in rows:
        a, b = float(off[step][key]), float(on[step][key])
        print(f"| {label} | {fmt.format(a)} | {fmt.format(b)} | {b / a if a else float('nan'):.2f} |")
    loads = ", ".join(
        f"{name} {f['load_average']['before']:.2f} -> {f['load_average']['after']:.2f}"
        for name, f in zip(TRACING_CONFIGS, (off, on), strict=True)
    )
    print(f"\nload average (1 min) before -> after: {loads}")
    spans = on["spans"] or {}
    fate = spans.get("orders_metrics", {})
    print(
        f"orders' spans when traced: {fate.get('otel_spans_exported_total', 0):,.0f} exported, "
        f"{fate.get('otel_span_export_failures_total', 0):,.0f} failed, "
        f"{fate.get('otel_spans_dropped_total', 0):,.0f} dropped, {fate.get('otel_spans_queued', 0):,.0f} queued; "
        f"Zipkin has spans of: {', '.join(spans.get('zipkin_services', [])) or 'nothing'}"
    )


def met(args: argparse.Namespace, results: dict[str, dict[str, Any]]) -> bool:
    ok = all(
        f["orders_paced"]["rate"] >= 0.97 * args.rate
        and f["orders_paced"]["p99_ms"] < 100
        and f["otp"]["p99_ms"] < 500
        and f["orders_published"]["on_topic"] == f["orders_published"]["acknowledged"]
        for f in results.values()
    )
    if "sqlite" in results and "postgres" in results:
        ok = ok and results["postgres"]["orders_closed"]["rate"] >= results["sqlite"]["orders_closed"]["rate"]
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.bench_services", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--configs",
        default=",".join(DEFAULT_CONFIGS),
        help=f"configurations to compare, of {', '.join(CONFIGS)} (default {','.join(DEFAULT_CONFIGS)})",
    )
    parser.add_argument(
        "--tracing", action="store_true", help=f"what tracing costs: --configs {','.join(TRACING_CONFIGS)}"
    )
    parser.add_argument(
        "--trace-ratio",
        type=float,
        default=1.0,
        help="with --tracing: the share of new traces sampled (parentbased_traceidratio; default 1: every one)",
    )
    parser.add_argument("--rate", type=float, default=1000, help="paced POST /orders per second (default 1000)")
    parser.add_argument("--seconds", type=float, default=20, help="duration of each orders step (default 20)")
    parser.add_argument("--concurrency", type=int, default=64, help="clients of the closed-loop step (default 64)")
    parser.add_argument("--otp-rate", type=float, default=50, help="paced POST /otp per second (default 50)")
    parser.add_argument("--otp-seconds", type=float, default=10, help="duration of the OTP step (default 10)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    names = list(TRACING_CONFIGS) if args.tracing else [n.strip() for n in args.configs.split(",") if n.strip()]
    if unknown := [n for n in names if n not in CONFIGS]:
        parser.error(f"unknown configuration {', '.join(unknown)} (known: {', '.join(CONFIGS)})")
    if not 0 < args.trace_ratio <= 1:
        parser.error("--trace-ratio: a share in (0, 1]")
    environments = dict(ENVIRONMENTS)
    if args.trace_ratio < 1:
        environments["sqlite-traced"] = {
            "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": f"{args.trace_ratio:g}",
        }
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        with tempfile.TemporaryDirectory(prefix="streamshop-bench-") as tmp:
            stack = Stack(Path(tmp), CONFIGS[name], environ=environments.get(name))
            try:
                doc = stack.wait_ready()
                results[name] = asyncio.run(run(args, doc, stack))
            finally:
                stack.stop()
    report(args, results)
    if all(name in results for name in TRACING_CONFIGS):
        report_tracing(args, results)
    if args.json:
        args.json.write_text(
            json.dumps({n: {k: v for k, v in f.items() if not k.startswith("_")} for n, f in results.items()}, indent=2)
        )
    print("\ntargets met" if met(args, results) else "\ntargets NOT met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
