"""What tracing costs one order's process, in process and without the rest of the stack: the CPU
of the spans an order makes in the orders service, from start to export, with OpenTelemetry's SDK
configured as every service configures it (`kit.telemetry`), side by side for three settings.

    python -m loadtest.bench_span_cost [--orders 6000]

An order there is three spans, made by the kit's own code: the request's SERVER span
(`kit.http_tracing.server_span`, on a request object built by aiohttp's test utilities), its
database write (`kit.tracing.db_span`, the transaction itself not run) and, as the outbox relay
does later, the record's PRODUCER span (`send_span` from the headers the request stored, then
`sent`).  Each setting runs in a process of its own (the SDK is installed once per process):

- ``OTEL_SDK_DISABLED=true``: no SDK;
- 10 % sampled (``traceidratio`` 0.1): ids made and carried, one trace in ten recorded;
- 100 % sampled (``always_on``).

The two sampled settings export with the SDK's Zipkin exporter, as `streamshop up --observability`
does, to a sink in another process that takes the batches and answers 202: the export thread's
encoding and HTTP calls are counted, a viewer's work is not.  The figure is the process's CPU
time (every thread) per order, after a warm-up, the queue flushed at the end.
"""

from __future__ import annotations

import argparse
import http.server
import multiprocessing
import os
import socketserver
import subprocess
import sys
import time

SETTINGS: dict[str, dict[str, str]] = {
    "disabled": {"OTEL_SDK_DISABLED": "true"},
    "10% sampled": {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.1"},
    "100% sampled": {"OTEL_TRACES_SAMPLER": "always_on"},
}
SPANS_PER_ORDER = 3
WARM_UP = 500


class _Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # the access log: silent
        pass


def _serve(server: socketserver.TCPServer) -> None:
    server.serve_forever()


def one(orders: int) -> float:
    """CPU microseconds per order in this process, as the environment configures the SDK."""
    from aiohttp.test_utils import make_mocked_request

    from kit import telemetry, tracing
    from kit.http_tracing import finish, server_span

    telemetry.configure("orders", http_client=False)
    request = make_mocked_request(
        "POST", "/orders", headers={"User-Agent": "bench", "Content-Type": "application/json"}
    )

    def order() -> None:
        with server_span(request, "/orders") as span:
            with tracing.db_span("sqlite", "orders.db", "write"):
                stored = tracing.kafka_headers()
            finish(span, 201)
        send, _headers = tracing.send_span("orders", "5f0c7a8e-6c1b-4f3e-9a51-0d4c1a2b3c4d", stored)
        tracing.sent(send, 0, 1)

    for _ in range(WARM_UP):
        order()
    time.sleep(6)  # the warm-up's batch exported (the batch processor's 5 s delay)
    began = time.process_time()
    for _ in range(orders):
        order()
    telemetry.shutdown()  # exports what is queued: its encoding is counted
    return 1e6 * (time.process_time() - began) / orders


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.bench_span_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--orders", type=int, default=6000, help="orders of each setting (default 6000)")
    parser.add_argument("--one", choices=sorted(SETTINGS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(f"{one(args.orders):.1f}")
        return 0

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Sink)
    sink = multiprocessing.get_context("fork").Process(target=_serve, args=(server,), daemon=True)
    sink.start()
    server.server_close()  # the child serves it
    endpoint = f"http://127.0.0.1:{server.server_address[1]}/api/v2/spans"
    results: dict[str, float] = {}
    try:
        for name, env in SETTINGS.items():
            inherited = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
            exporter = (
                {}
                if "OTEL_SDK_DISABLED" in env
                else {
                    "OTEL_TRACES_EXPORTER": "zipkin",
                    "OTEL_EXPORTER_ZIPKIN_ENDPOINT": endpoint,
                }
            )
            out = subprocess.run(
                [sys.executable, "-m", "loadtest.bench_span_cost", "--one", name, "--orders", str(args.orders)],
                env={**inherited, "OTEL_SERVICE_NAME": "orders", **exporter, **env},
                capture_output=True,
                text=True,
                check=True,
                timeout=600,
            )
            results[name] = float(out.stdout.strip().splitlines()[-1])
    finally:
        sink.kill()
        sink.join()

    base = results["disabled"]
    print(f"\n| setting | CPU per order ({SPANS_PER_ORDER} spans) | more than disabled | per span |")
    print("|---|---|---|---|")
    for name, micros in results.items():
        extra = micros - base
        print(f"| {name} | {micros:.0f} µs | {extra:+.0f} µs | {extra / SPANS_PER_ORDER:.0f} µs |")
    print(f"\n{args.orders:,} orders each; load average {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
