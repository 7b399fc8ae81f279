"""structlog setup, request/trace context and the log shipper (buffer, drops, no recursion)."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import structlog
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from kit.logging import ACCESS_LOGGER, configure_logging
from kit.tracing import (
    RequestContext,
    TraceContext,
    current_context,
    kafka_headers,
    parse_traceparent,
    process_span,
    request_id_for,
    use_context,
)
from schemas.catalog import default_catalog
from schemas.serde import encode
from services.common.log_shipper import LogShipper
from tests.support.spans import hex_trace, named, recorder

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{SPAN_ID}-01"
INCOMING = TraceContext(TRACE_ID, SPAN_ID)  # a caller's span, as an incoming traceparent names it


@pytest.fixture
def reset_logging() -> Iterator[None]:
    root = logging.getLogger()
    level = root.level
    yield
    configure_logging(stream=io.StringIO(), fmt="json")  # replace the test's handler...
    for h in [h for h in root.handlers if getattr(h, "_streamshop_handler", False)]:
        root.removeHandler(h)  # ...then remove it
    root.setLevel(level)
    structlog.reset_defaults()


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


class Recorder:
    """An in-memory LogProducer: keeps what it is sent, optionally logging while it sends
    (as a Kafka client would) or failing."""

    def __init__(self, *, log_while_sending: bool = False, fail: bool = False) -> None:
        self.sent: list[tuple[str, bytes | None, bytes]] = []
        self.log_while_sending = log_while_sending
        self.fail = fail

    async def send(self, topic: str, key: bytes | None, value: bytes, headers: Sequence[tuple[str, bytes]]) -> None:
        if self.log_while_sending:
            logging.getLogger("aiokafka.producer").warning("client line")
            structlog.get_logger("services.orders.api").info("logged inside send")
        if self.fail:
            raise ConnectionError("broker down")
        self.sent.append((topic, key, value))


class Stalled:
    """A LogProducer whose sends never complete: a broker that stopped answering."""

    async def send(self, topic: str, key: bytes | None, value: bytes, headers: Sequence[tuple[str, bytes]]) -> None:
        await asyncio.Event().wait()


# -- output ----------------------------------------------------------------------------------------


@pytest.mark.usefixtures("reset_logging")
def test_structlog_and_stdlib_lines_are_json_with_level_logger_and_timestamp() -> None:
    out = io.StringIO()
    configure_logging(stream=out, fmt="auto")  # StringIO is not a TTY: JSON
    structlog.get_logger("services.orders.api").info("order created", order_id="o1", total="25.00")
    logging.getLogger("aiohttp.server").warning("stdlib %s", "line")
    first, second = lines(out)
    assert first["event"] == "order created"
    assert first["order_id"] == "o1"
    assert first["level"] == "info"
    assert first["logger"] == "services.orders.api"
    assert first["timestamp"].endswith("Z")
    assert second["event"] == "stdlib line"
    assert second["logger"] == "aiohttp.server"
    assert second["level"] == "warning"


@pytest.mark.usefixtures("reset_logging")
def test_exceptions_are_rendered_as_text_in_json() -> None:
    out = io.StringIO()
    configure_logging(stream=out, fmt="json")
    try:
        raise ValueError("boom")
    except ValueError:
        structlog.get_logger("x").exception("failed")
    (line,) = lines(out)
    assert "Traceback" in line["exception"]
    assert "ValueError: boom" in line["exception"]


@pytest.mark.usefixtures("reset_logging")
def test_json_lines_show_objects_as_their_repr_which_masks_secrets_and_hides_the_code() -> None:
    """A settings object or a message logged as a field is written as its repr(): the settings'
    repr masks secrets and the OTP message's repr leaves out the body (it holds the code).  A
    JSON encoder that walks dataclass fields itself would print both in clear."""
    from services.notify.config import SmsSenderConfig
    from services.notify.providers import OutgoingMessage
    from services.otp.domain import Channel

    out = io.StringIO()
    configure_logging(stream=out, fmt="json")
    config = SmsSenderConfig(seal_key="c2VhbC1rZXktaW4tY2xlYXI=", webhook_token="token-in-clear")
    message = OutgoingMessage("req-1", Channel.SMS, "+15550100", "123456 is your code")
    structlog.get_logger("services.notify").info("sending", config=config, message=message)
    text = out.getvalue()
    assert "sending" in text
    for secret in ("c2VhbC1rZXktaW4tY2xlYXI=", "token-in-clear", "123456"):
        assert secret not in text
    (line,) = lines(out)
    assert line["message"] == repr(message)


@pytest.mark.usefixtures("reset_logging")
def test_a_terminal_gets_the_console_renderer_and_the_level_filters() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Tty()
    configure_logging(stream=out, level="warning")
    structlog.get_logger("x").info("hidden")
    structlog.get_logger("x").warning("shown", k=1)
    text = out.getvalue()
    assert "hidden" not in text
    assert "shown" in text
    assert not text.lstrip().startswith("{")


@pytest.mark.usefixtures("reset_logging")
def test_lines_inside_a_request_context_carry_its_request_trace_and_span_ids() -> None:
    out = io.StringIO()
    configure_logging(stream=out, fmt="json")
    with use_context(RequestContext("req-7f3a9c", INCOMING)):
        structlog.get_logger("x").info("inside")
        logging.getLogger("lib").info("stdlib inside")
    structlog.get_logger("x").info("outside")
    inside, stdlib_inside, outside = lines(out)
    assert inside["request_id"] == stdlib_inside["request_id"] == "req-7f3a9c"
    assert inside["trace_id"] == stdlib_inside["trace_id"] == TRACE_ID
    assert inside["span_id"] == SPAN_ID
    assert "request_id" not in outside
    assert "trace_id" not in outside


# -- tracing ---------------------------------------------------------------------------------------


def test_traceparent_is_parsed_and_invalid_ones_are_ignored() -> None:
    assert parse_traceparent(TRACEPARENT) == TraceContext(TRACE_ID, SPAN_ID, True)
    assert parse_traceparent(f"00-{TRACE_ID}-{SPAN_ID}-00") == TraceContext(TRACE_ID, SPAN_ID, False)
    for bad in (
        "",
        "garbage",
        f"00-{'0' * 32}-{SPAN_ID}-01",
        f"00-{TRACE_ID}-{'0' * 16}-01",
        f"ff-{TRACE_ID}-{SPAN_ID}-01",
        f"00-{TRACE_ID.upper()}-{SPAN_ID}-01",
        f"00-{TRACE_ID}-{SPAN_ID}-01" + "-x" * 400,
    ):
        assert parse_traceparent(bad) is None, bad


def test_request_id_comes_from_the_header_or_the_trace_or_is_generated() -> None:
    assert request_id_for("abc-123") == "abc-123"
    with use_context(RequestContext("ignored", INCOMING)):
        assert request_id_for(None) == TRACE_ID
        # A header that would inject log lines or is absurdly long is replaced, not trusted.
        assert request_id_for("a\nb") == TRACE_ID
        assert request_id_for("x" * 500) == TRACE_ID
    fresh = request_id_for(None)
    assert len(fresh) == 32
    assert fresh not in (TRACE_ID, request_id_for(None))


def test_kafka_headers_carry_the_current_span_to_a_consumer_whose_span_is_its_child() -> None:
    spans = recorder()
    assert kafka_headers() == []  # outside any request: plain events
    with use_context(RequestContext("req-1", INCOMING)):
        assert current_context() == RequestContext("req-1", INCOMING)
        with trace.get_tracer("test").start_as_current_span("POST /orders") as server:
            headers = kafka_headers()
    ours = TraceContext.of(server.get_span_context())
    assert dict(headers) == {"traceparent": ours.traceparent().encode(), "x-request-id": b"req-1"}
    with process_span("orders", group="g", headers=[("other", b"x"), *headers, ("empty", None)]) as span:
        assert current_context() == RequestContext("req-1", TraceContext.of(span.get_span_context()))
    (consumer,) = named(spans.get_finished_spans(), "process orders")
    assert consumer.kind == SpanKind.CONSUMER
    assert hex_trace(consumer) == TRACE_ID  # the producer's trace, continued
    assert consumer.parent is not None
    assert consumer.parent.span_id == server.get_span_context().span_id
    assert consumer.attributes is not None
    assert consumer.attributes["messaging.consumer.group.name"] == "g"


def test_a_record_without_or_with_a_malformed_traceparent_starts_a_new_trace() -> None:
    spans = recorder()
    for headers in (None, [("traceparent", b"00-zz")], [("traceparent", b"\xff" * 10_000)], [("traceparent", None)]):
        with process_span("orders", group="g", headers=headers):
            pass
    finished = named(spans.get_finished_spans(), "process orders")
    assert len(finished) == 4
    assert all(s.parent is None for s in finished)
    assert len({hex_trace(s) for s in finished}) == 4


# -- shipper ---------------------------------------------------------------------------------------


def shipper(**kw: Any) -> LogShipper:
    kw.setdefault("exclude_loggers", ("services.common.log_shipper", "aiokafka", "kafka"))
    return LogShipper(service="orders", instance="orders-1", **kw)


@pytest.mark.usefixtures("reset_logging")
async def test_shipped_records_follow_the_log_record_schema_and_route_by_stream() -> None:
    ship = shipper(level="info")
    configure_logging(stream=io.StringIO(), fmt="json", tap=ship)
    with use_context(RequestContext("req-9", INCOMING)):
        structlog.get_logger(ACCESS_LOGGER).info("http request", status=201, duration_ms=3.4, tags=["a"], ua=None)
    structlog.get_logger("services.orders.db").warning("slow statement", sql="SELECT 1", big=2**70)
    structlog.get_logger("services.orders.api").info("chosen", log_stream="db")
    structlog.get_logger("services.orders.api").debug("below the shipping level")
    producer = Recorder()
    await ship.start(producer)
    await ship.stop()
    assert [topic for topic, _, _ in producer.sent] == ["logs.ingress", "logs.db", "logs.db"]
    assert [key for _, key, _ in producer.sent] == [None, b"orders-1", b"orders-1"]  # access lines unkeyed
    access = json.loads(producer.sent[0][2])
    assert access["request_id"] == "req-9"
    assert access["trace_id"] == access["envelope"]["trace_id"] == TRACE_ID
    assert access["traceparent"] == INCOMING.traceparent()  # the span the line was logged in
    assert json.loads(producer.sent[1][2])["traceparent"] is None  # logged outside any span
    assert access["fields"] == {"status": 201, "duration_ms": 3.4, "tags": '["a"]', "ua": None}
    assert json.loads(producer.sent[1][2])["fields"]["big"] == str(2**70)  # beyond Avro long: text
    # The same record, before JSON encoding, is valid Avro for schemas/LogRecord.avsc.
    ship2 = shipper()
    configure_logging(stream=io.StringIO(), fmt="json", tap=ship2)
    with use_context(RequestContext(TRACE_ID, INCOMING)):
        structlog.get_logger("services.orders.api").error("failed", n=1, f=1.5, ok=True, obj=object())
    ((_, record),) = list(ship2._buffer)
    encode(default_catalog().schema("LogRecord"), record)
    assert ship.shipped == 3
    assert ship.dropped == 0


@pytest.mark.usefixtures("reset_logging")
async def test_a_full_buffer_drops_and_counts_lines_without_blocking_the_loop() -> None:
    log = structlog.get_logger("services.orders.api")

    async def two_thousand_lines() -> float:
        start = time.perf_counter()
        for i in range(2000):
            log.info("line", i=i)
            if i % 100 == 0:
                await asyncio.sleep(0)  # let the shipper task take (and get stuck on) a batch
        return time.perf_counter() - start

    configure_logging(stream=io.StringIO(), fmt="json")
    unshipped = await two_thousand_lines()
    ship = shipper(capacity=50, batch_size=10, flush_interval=0.01)
    configure_logging(stream=io.StringIO(), fmt="json", tap=ship)
    await ship.start(Stalled())
    elapsed = await two_thousand_lines()
    # 2000 lines against a dead broker cost about what they cost without shipping: no waiting on
    # it (the bound is relative, so a loaded machine slows both alike).
    assert elapsed < 5 * unshipped + 0.25, (elapsed, unshipped)
    assert ship.buffered == 50
    assert 2000 - 50 - 10 <= ship.dropped <= 2000 - 50
    await ship.stop(grace=0.1)  # the stuck send is abandoned, not awaited forever


@pytest.mark.usefixtures("reset_logging")
async def test_lines_logged_by_the_producer_or_the_shipper_itself_are_not_shipped() -> None:
    ship = shipper(flush_interval=0.01)
    out = io.StringIO()
    configure_logging(stream=out, fmt="json", tap=ship)
    producer = Recorder(log_while_sending=True)
    await ship.start(producer)
    structlog.get_logger("services.orders.api").info("one")
    await ship.flush()
    await asyncio.sleep(0.05)  # several flush intervals: any recursion would show up as more sends
    assert len(producer.sent) == 1
    assert ship.buffered == 0
    # The shipper's own failure warning is written locally but never shipped either.
    producer.fail = True
    structlog.get_logger("services.orders.api").info("two")
    await ship.flush()
    await asyncio.sleep(0.05)
    assert ship.failed == 1
    assert ship.buffered == 0
    await ship.stop()
    assert "log records not shipped" in out.getvalue()
    assert "logged inside send" in out.getvalue()  # printed, just not shipped


@pytest.mark.usefixtures("reset_logging")
def test_lines_from_other_threads_are_buffered_too() -> None:
    import threading

    ship = shipper()
    configure_logging(stream=io.StringIO(), fmt="json", tap=ship)
    threads = [
        threading.Thread(target=lambda: [structlog.get_logger("t").info("x") for _ in range(100)]) for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ship.buffered == 400
