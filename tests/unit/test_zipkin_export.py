"""kit.zipkin_export against a collector on loopback that closes a kept-alive connection as a
batch arrives on it (the batch is sent again, on a new connection) or never answers (the batch
is not sent again)."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import requests
from opentelemetry.exporter.zipkin.json import ZipkinExporter
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from kit.zipkin_export import ResendingZipkinExporter

ACCEPTED = b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n"


def read_request(conn: socket.socket) -> bytes:
    """One HTTP request's body (its headers read up to the blank line, then Content-Length)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        assert chunk, "the client closed before a whole request"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        body += conn.recv(65536)
    return body


def reset(conn: socket.socket) -> None:
    """Close with an RST, as a server dropping a connection under a request does."""
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


@contextmanager
def collector(serve: Callable[[socket.socket, list[bytes]], None]) -> Iterator[tuple[str, list[bytes]]]:
    """A collector on loopback run by `serve` (given the listening socket and the list of the
    bodies it read), its endpoint and that list."""
    listener = socket.create_server(("127.0.0.1", 0))
    bodies: list[bytes] = []
    thread = threading.Thread(target=serve, args=(listener, bodies), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/api/v2/spans", bodies
    finally:
        thread.join(10)
        listener.close()
    assert not thread.is_alive()


def closes_the_kept_alive_connection(listener: socket.socket, bodies: list[bytes]) -> None:
    """The first batch answered on a kept-alive connection; the second read there and the
    connection reset; anything sent again answered on a new connection."""
    first, _ = listener.accept()
    bodies.append(read_request(first))
    first.sendall(ACCEPTED)
    bodies.append(read_request(first))
    reset(first)
    listener.settimeout(3)
    try:
        second, _ = listener.accept()
    except TimeoutError:
        return  # nothing sent again
    bodies.append(read_request(second))
    second.sendall(ACCEPTED)
    second.close()


def never_answers(listener: socket.socket, bodies: list[bytes]) -> None:
    conn, _ = listener.accept()
    bodies.append(read_request(conn))
    listener.settimeout(3)
    try:
        again, _ = listener.accept()
        bodies.append(read_request(again))
        again.close()
    except TimeoutError:
        pass
    conn.close()


def spans(name: str) -> list[ReadableSpan]:
    span = TracerProvider().get_tracer("test").start_span(name)
    span.end()
    assert isinstance(span, ReadableSpan)  # the SDK's span
    return [span]


def test_a_batch_whose_kept_alive_connection_is_reset_is_sent_again_on_a_new_one() -> None:
    with collector(closes_the_kept_alive_connection) as (endpoint, bodies):
        exporter = ResendingZipkinExporter(endpoint=endpoint, timeout=5)
        assert exporter.export(spans("first")) is SpanExportResult.SUCCESS
        assert exporter.export(spans("second")) is SpanExportResult.SUCCESS
        exporter.shutdown()
    assert [b"first" in b for b in bodies] == [True, False, False]
    assert bodies[1] == bodies[2]  # the second batch, read twice: once before the reset


def test_zipkins_own_exporter_loses_that_batch() -> None:
    """What the kit's exporter is for: the SDK's raises, and its batch processor drops the batch."""
    with collector(closes_the_kept_alive_connection) as (endpoint, bodies):
        exporter: SpanExporter = ZipkinExporter(endpoint=endpoint, timeout=5)
        assert exporter.export(spans("first")) is SpanExportResult.SUCCESS
        with pytest.raises(requests.exceptions.ConnectionError):
            exporter.export(spans("second"))
        exporter.shutdown()
    assert len(bodies) == 2


def test_a_batch_the_collector_never_answers_is_not_sent_again() -> None:
    with collector(never_answers) as (endpoint, bodies):
        exporter = ResendingZipkinExporter(endpoint=endpoint, timeout=1)
        with pytest.raises(requests.exceptions.Timeout):
            exporter.export(spans("hung"))
        exporter.shutdown()
    assert len(bodies) == 1
