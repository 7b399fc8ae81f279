"""The spans this test process finished, kept in memory: the SDK is installed once per process
(tests/conftest.py, as `serve_app` does in a service) and this exporter added to it."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from kit import telemetry

_exporter: InMemorySpanExporter | None = None


def recorder() -> InMemorySpanExporter:
    """The process's in-memory exporter, emptied."""
    global _exporter  # noqa: PLW0603 - one exporter per process, added to the one provider once
    if _exporter is None:
        telemetry.configure("tests")
        provider = trace.get_tracer_provider()
        assert isinstance(provider, TracerProvider), "the SDK is not installed (OTEL_SDK_DISABLED?)"
        _exporter = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(_exporter))
    _exporter.clear()
    return _exporter


def named(spans: tuple[ReadableSpan, ...] | list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def hex_trace(span: ReadableSpan) -> str:
    assert span.context is not None
    return f"{span.context.trace_id:032x}"
