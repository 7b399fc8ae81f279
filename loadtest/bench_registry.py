"""The registry's single writer: what a write costs on the primary and through a secondary
(forwarded), and how long writes wait when the primary goes away.

    python -m loadtest.bench_registry [--writes N (400)] [--clients C (8)] [--instances K (3)]
                                      [--session-timeout-ms MS (10000)] [--json PATH]

A broker and K `streamshop registry` processes run as children on loopback. C clients register
N new schemas (distinct subjects, so no compatibility check is involved) in a closed loop, once
against the primary and once against a secondary; the rate and the latency percentiles are
printed side by side. Then the primary is stopped twice, once with SIGTERM (it leaves the group)
and once with SIGKILL (the group notices after the session timeout), while a client keeps
registering through a survivor: the figure is the time from the signal to the first write
acknowledged again.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp

from loadtest.brokers import child_process, streamshop_broker
from streamshop.broker_process import parse_registry_ready_line, registry_command

V1 = {"Content-Type": "application/vnd.schemaregistry.v1+json"}


class Instance:
    def __init__(self, proc: subprocess.Popen[bytes], url: str) -> None:
        self.proc, self.url = proc, url


@contextlib.contextmanager
def registries(bootstrap: str, workdir: Path, count: int, session_ms: int) -> Iterator[list[Instance]]:
    env = {
        **os.environ,
        "REGISTRY_SESSION_TIMEOUT_MS": str(session_ms),
        "REGISTRY_HEARTBEAT_INTERVAL_MS": str(max(100, session_ms // 10)),
    }
    with contextlib.ExitStack() as stack:
        instances = []
        for i in range(count):
            log_path = workdir / f"registry-{i}.log"
            proc = stack.enter_context(child_process(registry_command(bootstrap, "127.0.0.1:0"), log_path, env))
            instances.append(Instance(proc, _ready_url(proc, log_path)))
        yield instances


def _ready_url(proc: subprocess.Popen[bytes], log_path: Path) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for line in log_path.read_text(errors="replace").splitlines():
            url = parse_registry_ready_line(line)
            if url is not None:
                return url
        if proc.poll() is not None:
            raise RuntimeError(f"registry exited with {proc.returncode}: {log_path}")
        time.sleep(0.05)
    raise TimeoutError("registry did not report ready")


def schema(name: str) -> str:
    record = {"type": "record", "name": name.replace("-", "_"), "fields": []}
    return json.dumps({"schema": json.dumps(record)})


async def register(session: aiohttp.ClientSession, url: str, name: str) -> int:
    async with session.post(f"{url}/subjects/{name}/versions", data=schema(name), headers=V1) as response:
        await response.read()
        return response.status


async def role(session: aiohttp.ClientSession, url: str) -> str | None:
    try:
        async with session.get(url + "/readyz") as response:
            body = json.loads(await response.text())
    except (aiohttp.ClientError, ValueError):
        return None
    return body.get("role")  # type: ignore[no-any-return]


async def settled(session: aiohttp.ClientSession, instances: list[Instance]) -> list[str | None]:
    """The roles of the live instances once the group has named one primary (dead ones: None)."""
    for _ in range(600):
        alive = [i.proc.poll() is None for i in instances]
        roles = [await role(session, i.url) if up else None for i, up in zip(instances, alive, strict=True)]
        live = [r for r, up in zip(roles, alive, strict=True) if up]
        if live.count("primary") == 1 and live.count("secondary") == len(live) - 1:
            return roles
        await asyncio.sleep(0.05)
    raise RuntimeError("the registries did not settle on one primary")


async def closed_loop(
    session: aiohttp.ClientSession, url: str, tag: str, writes: int, clients: int
) -> dict[str, float]:
    latencies: list[float] = []
    counter = iter(range(writes))

    async def client() -> None:
        for i in counter:
            start = time.perf_counter()
            status = await register(session, url, f"{tag}{i}")
            if status != 200:
                raise RuntimeError(f"write answered {status}")
            latencies.append(time.perf_counter() - start)

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    elapsed = time.perf_counter() - start
    latencies.sort()
    return {
        "writes_per_s": writes / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
    }


async def failover(session: aiohttp.ClientSession, instances: list[Instance], how: signal.Signals) -> float:
    roles = await settled(session, instances)
    primary = instances[roles.index("primary")]
    survivor = next(i for i in instances if i is not primary and i.proc.poll() is None)
    primary.proc.send_signal(how)
    start = time.monotonic()
    for n in range(10_000):
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            status = await register(session, survivor.url, f"failover-{how.name}-{n}")
            if status == 200:
                return time.monotonic() - start
            if status < 500:
                raise RuntimeError(f"write answered {status}")
        await asyncio.sleep(0.02)
    raise RuntimeError("writes never resumed")


async def measure(instances: list[Instance], writes: int, clients: int) -> dict[str, Any]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        roles = await settled(session, instances)
        primary = instances[roles.index("primary")]
        secondary = instances[roles.index("secondary")]
        await closed_loop(session, primary.url, "warm", 50, clients)
        results: dict[str, Any] = {
            "primary": await closed_loop(session, primary.url, "p", writes, clients),
            "forwarded": await closed_loop(session, secondary.url, "s", writes, clients),
        }
        results["failover_sigterm_s"] = await failover(session, instances, signal.SIGTERM)
        results["failover_sigkill_s"] = await failover(session, instances, signal.SIGKILL)
        return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writes", type=int, default=400)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--instances", type=int, default=3)
    parser.add_argument("--session-timeout-ms", type=int, default=10_000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.instances < 3:
        parser.error("--instances: at least 3 (two primaries are stopped)")
    with tempfile.TemporaryDirectory(prefix="bench-registry-") as tmp:
        workdir = Path(tmp)
        with (
            streamshop_broker(workdir, settings={"group.min.session.timeout.ms": "1000"}) as broker,
            registries(broker.bootstrap, workdir, args.instances, args.session_timeout_ms) as instances,
        ):
            results = asyncio.run(measure(instances, args.writes, args.clients))
    print(f"registry writes: {args.writes} new schemas, {args.clients} clients, {args.instances} instances")
    print(f"{'':<22}{'writes/s':>10}{'p50 ms':>9}{'p99 ms':>9}")
    for name in ("primary", "forwarded"):
        r = results[name]
        print(f"{name:<22}{r['writes_per_s']:>10.0f}{r['p50_ms']:>9.1f}{r['p99_ms']:>9.1f}")
    print(f"writes wait after the primary's SIGTERM: {results['failover_sigterm_s']:.2f} s")
    print(
        f"writes wait after the primary's SIGKILL: {results['failover_sigkill_s']:.2f} s "
        f"(session timeout {args.session_timeout_ms / 1000:.0f} s)"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
