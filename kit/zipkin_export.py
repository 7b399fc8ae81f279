"""The Zipkin exporter, sending a batch once more when the connection it went out on was closed
under it.

The exporter keeps its HTTP connection to the collector alive between batches, and the
collector closes connections that stay idle.  A batch sent just as the collector closes its
connection fails with "connection reset" or "connection aborted" before any answer, and the SDK
drops it: a whole batch of spans lost to a race, more often the busier the machine.  Sending it
once more on a new connection is safe (Zipkin merges a span it receives twice, by its ids).  A
timeout is not sent again: a hung collector would cost each batch twice its timeout."""

from __future__ import annotations

from collections.abc import Sequence

import requests
from opentelemetry.exporter.zipkin.json import ZipkinExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

__all__ = ["ResendingZipkinExporter"]


class ResendingZipkinExporter(SpanExporter):
    """Zipkin's exporter (`endpoint` and `timeout` in seconds as it takes them, from the
    environment when None), with a batch whose connection broke before an answer sent once more."""

    def __init__(self, endpoint: str | None = None, timeout: int | None = None) -> None:
        self._inner: SpanExporter = ZipkinExporter(endpoint=endpoint, timeout=timeout)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            return self._inner.export(spans)
        except requests.exceptions.Timeout:
            raise
        except requests.exceptions.ConnectionError:
            return self._inner.export(spans)  # requests' pool dropped the broken connection

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)
