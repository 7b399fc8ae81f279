"""A trace backend that is down never costs a request its time nor fails it, and what it costs
in spans is counted on ``/metrics``.  Each case is the kit's base app served in a process of its
own (`tests.support.traced_app`: the SDK is set up once per process, from the ``OTEL_*``
variables it starts with), over real sockets; latencies are compared with a control, tracing
exported nowhere, measured in the same test, its requests interleaved with the others'."""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from streamshop.broker_process import parse_service_ready_line
from tests.support.harness import REPO
from tests.support.services import serve_app

SPANS_PER_REQUEST = 2  # GET /work: the request's server span and the handler's own


@dataclass
class Served:
    url: str
    proc: subprocess.Popen[str]


@contextmanager
def served_app(log: Path, otel: Mapping[str, str]) -> Iterator[Served]:
    """The app served with `otel` as its only ``OTEL_*`` variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env |= {"TRACED_APP_PORT": "0", "PYTHONUNBUFFERED": "1", **otel}
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.traced_app"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            ready = parse_service_ready_line(line)
            assert ready is not None, f"{line!r}; see {log}"
            yield Served(ready.url, proc)
        finally:
            proc.terminate()  # its last flush may wait on the backend: not the test's concern
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


@contextmanager
def traced_app(log: Path, otel: Mapping[str, str]) -> Iterator[str]:
    """`served_app`'s base URL."""
    with served_app(log, otel) as served:
        yield served.url


@contextmanager
def closed_port() -> Iterator[int]:
    """A port nothing listens on (bound, then closed: connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    yield port


@contextmanager
def black_hole() -> Iterator[int]:
    """A port that accepts connections (the kernel completes them) and never reads or answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(512)
        yield int(s.getsockname()[1])


async def span_metrics(session: aiohttp.ClientSession, base: str) -> dict[str, float]:
    async with session.get(f"{base}/metrics") as response:
        assert response.status == 200
        text = await response.text()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("otel_span")
    }


async def timed_get(session: aiohttp.ClientSession, url: str) -> float:
    started = time.perf_counter()
    async with session.get(url) as response:
        assert response.status == 200, await response.text()
        assert await response.text() == "ok"
    return time.perf_counter() - started


async def until(session: aiohttp.ClientSession, base: str, name: str, least: float, within: float = 60) -> float:
    """The metric `name` once it is at least `least` (the backend's timeouts run on their own clock)."""
    deadline = time.monotonic() + within
    while (value := (await span_metrics(session, base)).get(name, 0.0)) < least:
        assert time.monotonic() < deadline, f"{name} stayed at {value}"
        await asyncio.sleep(0.1)
    return value


def quick_exports(**more: str) -> dict[str, str]:
    """Exports every 50 ms (not the default 5 s), so they happen while the requests run."""
    return {"OTEL_BSP_SCHEDULE_DELAY": "50", "OTEL_TRACES_SAMPLER": "always_on", **more}


@pytest.mark.slow
async def test_a_trace_backend_that_is_down_or_hung_costs_requests_no_time(tmp_path: Path) -> None:
    rounds = 150
    with closed_port() as refused, black_hole() as hung:
        backends = {
            "control": {"OTEL_TRACES_EXPORTER": "none"},
            # OTLP retries a refused connection with backoff, up to its timeout, per batch.
            "refused": quick_exports(
                OTEL_TRACES_EXPORTER="otlp",
                OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{refused}",
                OTEL_EXPORTER_OTLP_TIMEOUT="1",
            ),
            # Zipkin's exporter waits for an answer that never comes, up to its timeout.
            "hung": quick_exports(
                OTEL_TRACES_EXPORTER="zipkin",
                OTEL_EXPORTER_ZIPKIN_ENDPOINT=f"http://127.0.0.1:{hung}/api/v2/spans",
                OTEL_EXPORTER_ZIPKIN_TIMEOUT="2",
            ),
        }
        with (
            traced_app(tmp_path / "control.log", backends["control"]) as control,
            traced_app(tmp_path / "refused.log", backends["refused"]) as down,
            traced_app(tmp_path / "hung.log", backends["hung"]) as stuck,
        ):
            bases = {"control": control, "refused": down, "hung": stuck}
            latencies: dict[str, list[float]] = {name: [] for name in bases}
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
                for base in bases.values():  # warm-up: connections, first imports
                    await timed_get(session, f"{base}/work")
                for _ in range(rounds):  # interleaved: the three see the same load on the host
                    for name, base in bases.items():
                        latencies[name].append(await timed_get(session, f"{base}/work"))
                # The exporters really met the backends: exports failed, none succeeded.
                for name in ("refused", "hung"):
                    await until(session, bases[name], "otel_span_export_failures_total", 1)
                    assert (await span_metrics(session, bases[name]))["otel_spans_exported_total"] == 0
                assert await span_metrics(session, control) == {
                    "otel_spans_exported_total": 0,
                    "otel_span_export_failures_total": 0,
                    "otel_spans_dropped_total": 0,
                    "otel_spans_queued": 0,
                }
    control_p50, control_p90 = p50_p90(latencies["control"])
    for name in ("refused", "hung"):
        assert len(latencies[name]) == rounds  # every request answered 200 (timed_get asserts it)
        # A request waiting on the backend would take its timeout (1 or 2 s): hundreds of times
        # the control.  Three and five times the control leave room for a shared host's noise.
        p50, p90 = p50_p90(latencies[name])
        assert p50 < 3 * control_p50, (name, p50, control_p50)
        assert p90 < 5 * control_p90, (name, p90, control_p90)


def p50_p90(samples: list[float]) -> tuple[float, float]:
    deciles = statistics.quantiles(samples, n=10)
    return statistics.median(samples), deciles[8]


async def test_a_full_export_queue_drops_spans_and_counts_them_while_requests_are_answered(
    tmp_path: Path,
) -> None:
    requests = 40
    capacity = 4
    with black_hole() as hung:
        otel = quick_exports(
            OTEL_TRACES_EXPORTER="zipkin",
            OTEL_EXPORTER_ZIPKIN_ENDPOINT=f"http://127.0.0.1:{hung}/api/v2/spans",
            OTEL_EXPORTER_ZIPKIN_TIMEOUT="60",  # the exporter stays blocked throughout
            OTEL_BSP_MAX_QUEUE_SIZE=str(capacity),
        )
        with traced_app(tmp_path / "app.log", otel) as base:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
                before = await span_metrics(session, base)
                assert before["otel_spans_dropped_total"] == 0
                for _ in range(requests):
                    await timed_get(session, f"{base}/work")
                after = await span_metrics(session, base)
    spans = requests * SPANS_PER_REQUEST
    # At most a queue's worth waits and a batch (no larger than the queue) is with the exporter.
    assert after["otel_spans_dropped_total"] >= spans - 2 * capacity, after
    assert after["otel_spans_queued"] <= capacity, after
    assert after["otel_spans_exported_total"] == 0, after


def test_a_queue_size_that_is_not_a_positive_integer_stops_the_start_naming_it() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env |= {"TRACED_APP_PORT": "0", "OTEL_TRACES_EXPORTER": "console", "OTEL_BSP_MAX_QUEUE_SIZE": "many"}
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.traced_app"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "OTEL_BSP_MAX_QUEUE_SIZE='many'" in done.stderr


async def test_a_hung_backend_costs_the_stop_no_more_than_the_kits_bound(tmp_path: Path) -> None:
    """The SDK's flush waits for the export in course, up to the exporter's timeout (a minute
    here); the kit gives the whole of its shutdown 5 s (kit.telemetry.shutdown)."""
    exporter_timeout = 60
    with black_hole() as hung:
        otel = quick_exports(
            OTEL_TRACES_EXPORTER="zipkin",
            OTEL_EXPORTER_ZIPKIN_ENDPOINT=f"http://127.0.0.1:{hung}/api/v2/spans",
            OTEL_EXPORTER_ZIPKIN_TIMEOUT=str(exporter_timeout),
        )
        with served_app(tmp_path / "app.log", otel) as served:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
                for _ in range(20):
                    await timed_get(session, f"{served.url}/work")
                await until(session, served.url, "otel_spans_queued", 1)  # the exporter is stuck
            started = time.monotonic()
            served.proc.terminate()
            returncode = await asyncio.to_thread(served.proc.wait, exporter_timeout * 2)
            stopped_in = time.monotonic() - started
    assert returncode == 0
    assert stopped_in < exporter_timeout / 2, stopped_in


@asynccontextmanager
async def span_receiver() -> AsyncIterator[tuple[str, list[float]]]:
    """A Zipkin v2 endpoint on an OS port that takes every POST and notes when it came."""
    arrivals: list[float] = []

    async def spans(request: web.Request) -> web.Response:
        await request.read()
        arrivals.append(time.monotonic())
        return web.Response(status=202)

    app = web.Application()
    app.router.add_post("/api/v2/spans", spans)
    async with serve_app(app) as (url, _):
        yield f"{url}/api/v2/spans", arrivals


async def test_with_the_sdk_disabled_nothing_is_exported_and_an_incoming_trace_still_names_the_request(
    tmp_path: Path,
) -> None:
    """OTEL_SDK_DISABLED=true beside an exporter and its endpoint: requests are answered, the
    caller's trace id is still the request's id (the API passes the context on), and the
    receiver gets nothing in ten times what the same app enabled took to send its first spans."""
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    headers = {"traceparent": f"00-{trace_id}-b7ad6b7169203331-01"}
    async with span_receiver() as (endpoint, arrivals), aiohttp.ClientSession() as session:
        otel = quick_exports(OTEL_TRACES_EXPORTER="zipkin", OTEL_EXPORTER_ZIPKIN_ENDPOINT=endpoint)
        with traced_app(tmp_path / "enabled.log", otel) as base:
            sent = time.monotonic()
            async with session.get(f"{base}/work", headers=headers) as response:
                assert response.status == 200
            while not arrivals:
                assert time.monotonic() - sent < 60, "the enabled app exported nothing"
                await asyncio.sleep(0.02)
            first_export = arrivals[0] - sent
    # A receiver of its own: the enabled app's last flush, sent as it stopped, may still be
    # arriving at the first one.
    async with span_receiver() as (endpoint, arrivals), aiohttp.ClientSession() as session:
        otel = quick_exports(OTEL_TRACES_EXPORTER="zipkin", OTEL_EXPORTER_ZIPKIN_ENDPOINT=endpoint)
        with traced_app(tmp_path / "disabled.log", {**otel, "OTEL_SDK_DISABLED": "true"}) as base:
            sent = time.monotonic()
            for _ in range(20):
                async with session.get(f"{base}/work", headers=headers) as response:
                    assert response.status == 200
                    assert response.headers["X-Request-ID"] == trace_id
            await asyncio.sleep(max(1.0, 10 * first_export) - (time.monotonic() - sent))
            assert arrivals == []
            assert {k: v for k, v in (await span_metrics(session, base)).items() if v} == {}
