"""OpenTelemetry's SDK for every streamshop process, configured by the standard environment.

`configure(default_name)` installs the tracer provider once per process, before the app is built:

- ``OTEL_SDK_DISABLED=true``: nothing is installed; the API's no-op tracer still carries an
  incoming trace context through (HTTP to Kafka headers), but no span is recorded or exported.
- ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` name the process; without them it is
  `default_name` (the process's own name: ``orders``, ``registry``, ...).
- ``OTEL_TRACES_SAMPLER`` / ``OTEL_TRACES_SAMPLER_ARG``: read by the SDK itself (default: follow
  the parent's decision, sample new traces).
- ``OTEL_TRACES_EXPORTER``: ``otlp`` (OTLP over HTTP, ``OTEL_EXPORTER_OTLP_ENDPOINT``), ``zipkin``
  (Zipkin's v2 API, ``OTEL_EXPORTER_ZIPKIN_ENDPOINT``), ``console`` (stderr) or ``none``.  The
  kit's default differs from the specification's (``otlp`` to localhost): ``otlp`` when an OTLP
  endpoint is set, else ``none``, so a demo without a backend does not retry one it lacks.  Spans
  are still made without an exporter: their ids reach the log lines and the Kafka headers.

Spans leave through the SDK's batch processor: a bounded queue (``OTEL_BSP_MAX_QUEUE_SIZE``,
2,048 by default) that a worker thread drains, so a slow or absent backend costs dropped spans,
never a request's time, and its stop at most `shutdown`'s bound.  The spans exported, failed and
dropped are counted (kit.span_export) and shown on every app's ``/metrics``.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

from kit import span_export
from kit.settings import ConfigError

__all__ = ["EXPORTERS", "VARIABLES", "configure", "exporter_name", "queue_size", "resource", "shutdown"]

EXPORTERS = ("otlp", "zipkin", "console", "none")
# The standard variables the kit and the SDK read: every process's settings besides its own.
VARIABLES = frozenset(
    {
        "OTEL_SDK_DISABLED",
        "OTEL_SERVICE_NAME",
        "OTEL_RESOURCE_ATTRIBUTES",
        "OTEL_TRACES_SAMPLER",
        "OTEL_TRACES_SAMPLER_ARG",
        "OTEL_TRACES_EXPORTER",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_ZIPKIN_ENDPOINT",
        "OTEL_BSP_MAX_QUEUE_SIZE",
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
        "OTEL_BSP_SCHEDULE_DELAY",
        "OTEL_BSP_EXPORT_TIMEOUT",
    }
)
DEFAULT_QUEUE_SIZE = 2048  # the specification's default for OTEL_BSP_MAX_QUEUE_SIZE
DEFAULT_BATCH_SIZE = 512  # ... and for OTEL_BSP_MAX_EXPORT_BATCH_SIZE


class _State:
    configured = False
    provider: TracerProvider | None = None


def exporter_name(environ: Mapping[str, str]) -> str:
    """The exporter ``OTEL_TRACES_EXPORTER`` asks for, with the kit's default; `ConfigError` for
    one the kit does not have."""
    name = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if not name:
        endpoint = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        return "otlp" if endpoint else "none"
    if name not in EXPORTERS:
        raise ConfigError(f"OTEL_TRACES_EXPORTER={name!r}: expected one of {', '.join(EXPORTERS)}")
    return name


def queue_size(environ: Mapping[str, str]) -> int:
    """``OTEL_BSP_MAX_QUEUE_SIZE``: read here and given to the batch processor, so that the
    processor and the gate that counts its drops agree on it; `ConfigError` unless a positive
    integer."""
    raw = environ.get("OTEL_BSP_MAX_QUEUE_SIZE", "").strip()
    if not raw:
        return DEFAULT_QUEUE_SIZE
    try:
        size = int(raw)
    except ValueError:
        size = 0
    if size < 1:
        raise ConfigError(f"OTEL_BSP_MAX_QUEUE_SIZE={raw!r}: expected a positive integer")
    return size


def _exporter(name: str) -> SpanExporter | None:
    if name == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    if name == "zipkin":
        from kit.zipkin_export import ResendingZipkinExporter

        return ResendingZipkinExporter()
    if name == "console":
        return ConsoleSpanExporter(out=sys.stderr)  # stdout carries the process's ready line
    return None


def resource(default_name: str, environ: Mapping[str, str]) -> Resource:
    """The SDK's resource from the environment, with the kit's defaults for what it leaves out:
    the process's own name, and an instance id telling replicas apart (host name and pid: a
    container's host name is its id)."""
    given = environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    defaults: dict[str, str] = {}
    if not (environ.get("OTEL_SERVICE_NAME") or "service.name=" in given):
        defaults["service.name"] = default_name
    if "service.instance.id=" not in given:
        defaults["service.instance.id"] = f"{socket.gethostname()}:{os.getpid()}"
    return Resource.create(defaults)


def configure(
    default_name: str, environ: Mapping[str, str] | None = None, *, http_client: bool = True
) -> TracerProvider | None:
    """Install the SDK's tracer provider (once: later calls return the first one's) and the
    aiohttp client's instrumentation; None when ``OTEL_SDK_DISABLED`` is true.  Call before the
    process makes its HTTP client sessions: the instrumentation traces those made after.
    `http_client` false leaves the client alone (a test's client sends the headers it is given)."""
    env = os.environ if environ is None else environ
    if _State.configured:
        return _State.provider
    name = exporter_name(env)  # a wrong value fails the start, even with the SDK disabled
    capacity = queue_size(env)
    _State.configured = True
    if http_client:  # disabled too: the API's no-op spans still pass the current context on
        _instrument_http()
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    provider = TracerProvider(resource=resource(default_name, env))
    exporter = _exporter(name)
    if exporter is not None:
        counted = span_export.CountingExporter(exporter, span_export.PROCESS)
        # A batch larger than the queue is refused by the SDK: a small queue alone sets both.
        batch = None if env.get("OTEL_BSP_MAX_EXPORT_BATCH_SIZE") else min(DEFAULT_BATCH_SIZE, capacity)
        batches = BatchSpanProcessor(counted, max_queue_size=capacity, max_export_batch_size=batch)
        provider.add_span_processor(span_export.QueueGate(batches, capacity, span_export.PROCESS))
    trace.set_tracer_provider(provider)
    _State.provider = provider
    return provider


def _instrument_http() -> None:
    """aiohttp's client, where the process has it (the broker and the analytics job run without
    the services' extra).  The server side is the kit's own middleware (kit.http_tracing)."""
    try:
        from opentelemetry.instrumentation.aiohttp_client import AioHttpClientInstrumentor
    except ImportError:
        return
    AioHttpClientInstrumentor().instrument()


def shutdown(timeout_s: float = 5.0) -> None:
    """Export what is queued, waiting at most `timeout_s`: a backend that is down or hung costs
    the stop no more than that.  The SDK's own flush and shutdown wait for the export in course,
    up to the exporter's timeout per batch, whatever they are given: so they run on a daemon
    thread, abandoned when the time is up (the process is ending)."""
    provider = _State.provider
    if provider is None:
        return
    # The provider's shutdown has its batch processor export what is queued, then stop.
    stopping = threading.Thread(target=provider.shutdown, name="otel-shutdown", daemon=True)
    stopping.start()
    stopping.join(timeout_s)
