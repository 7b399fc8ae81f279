"""Ship the service's own log lines to the ``logs.*`` topics without blocking the event loop.

The shipper is a structlog processor (installed by `configure_logging`): for each line it
builds a LogRecord (schemas/LogRecord.avsc shape) and appends it to a bounded in-memory
buffer.  That is all the logging call pays; when the buffer is full the line is dropped and
counted (`dropped`, exported by `LogShipperCollector`) instead of waiting, so a slow or
absent broker never slows requests down.  A background task sends batches through the
producer it is given (anything with an async ``send(topic, key, value, headers)``).

Never recursive: lines of the shipper itself and of the Kafka client (logger names in
`exclude_loggers`) are not shipped, and neither is anything logged while the shipper's task is
sending (a contextvar marks it), because shipping those would produce more lines to ship.

Topic: ``logs.ingress`` for the access log, ``logs.db`` for loggers named ``*.db``, else
``logs.app``; a line may choose with a ``log_stream`` key (``app``/``ingress``/``db``).
The Kafka key of ``logs.app`` and ``logs.db`` lines is the instance id, so one instance's story
stays in order in one partition.  Access log lines (``logs.ingress``) are one per request and
independent of each other (the indexer deduplicates by event id and search orders by timestamp),
so they go without a key: each batch to a partition of its own choosing, and the busiest
stream's load spreads over every partition instead of one per instance.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

import structlog
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from structlog.typing import EventDict, WrappedLogger

from kit import tracing
from kit.logging import ACCESS_LOGGER, dumps_json

if TYPE_CHECKING:
    from schemas.serde import AvroSchema, AvroSerializer

__all__ = [
    "DEFAULT_EXCLUDED_LOGGERS",
    "LogEncoder",
    "LogProducer",
    "LogShipper",
    "LogShipperCollector",
    "SendRawAdapter",
    "avro_log_encoder",
    "json_log_encoder",
]

log = structlog.get_logger(__name__)

DEFAULT_EXCLUDED_LOGGERS: tuple[str, ...] = (__name__, "aiokafka", "kafka")
_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}
_LEVEL_ALIASES = {"warn": "warning", "exception": "error", "fatal": "critical", "notset": "debug", "trace": "debug"}
_RESERVED = frozenset({"event", "level", "logger", "timestamp", "request_id", "trace_id", "span_id", "log_stream"})
_LONG = 2**63
_shipping: ContextVar[bool] = ContextVar("streamshop_log_shipping", default=False)


class LogProducer(Protocol):
    """What the shipper needs of a Kafka producer.  `send` may return once the record is
    acknowledged, or return a future that resolves then (aiokafka style): both are awaited."""

    async def send(self, topic: str, key: bytes | None, value: bytes, headers: Sequence[tuple[str, bytes]]) -> Any: ...


class _SendRaw(Protocol):
    async def send_raw(
        self, topic: str, key: bytes | None, value: bytes, headers: Any = None, *, traced: bool = True
    ) -> Any: ...

    async def send_batch_raw(self, topic: str, key: bytes | None, values: Sequence[bytes]) -> list[Any]: ...


class SendRawAdapter:
    """A `LogProducer` over a producer with ``send_raw(topic, key, value, headers)`` (the
    services' `EventProducer` in services.common.kafka)."""

    def __init__(self, producer: _SendRaw) -> None:
        self.producer = producer

    async def send(self, topic: str, key: bytes | None, value: bytes, headers: Sequence[tuple[str, bytes]]) -> Any:
        return await self.producer.send_raw(topic, key, value, list(headers), traced=False)

    async def send_many(self, topic: str, key: bytes | None, values: Sequence[bytes]) -> None:
        """All of `values` as whole batches; returns once they are acknowledged."""
        await asyncio.gather(*await self.producer.send_batch_raw(topic, key, values))


LogEncoder = Callable[[str, dict[str, Any]], Awaitable[bytes]]


async def json_log_encoder(topic: str, record: dict[str, Any]) -> bytes:
    """Plain JSON (timestamps as ISO 8601): for tools and tests without a registry."""
    return dumps_json(record)


def avro_log_encoder(serializer: AvroSerializer, schema: AvroSchema | None = None) -> LogEncoder:
    """Confluent-framed Avro through the registry serde, as every other streamshop event."""
    if schema is None:
        from schemas.catalog import default_catalog

        schema = default_catalog().schema("LogRecord")
    chosen = schema

    async def encode(topic: str, record: dict[str, Any]) -> bytes:
        return await serializer.serialize(topic, chosen, record)

    return encode


def _level(name: object) -> str:
    text = str(name).lower()
    text = _LEVEL_ALIASES.get(text, text)
    return text if text in _LEVELS else "info"


def _field_value(value: object) -> bool | int | float | str | None:
    """A value of the LogRecord `fields` map: scalars keep their type, the rest is JSON text."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int) and -_LONG <= value < _LONG:
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    return json.dumps(value, default=repr) if isinstance(value, list | dict | tuple) else repr(value)


class LogShipper:
    """Bounded buffer of log records plus the task that sends them; see the module doc."""

    def __init__(
        self,
        *,
        service: str,
        instance: str,
        capacity: int = 10_000,
        batch_size: int = 500,
        flush_interval: float = 0.5,
        level: str = "info",
        encoder: LogEncoder = json_log_encoder,
        exclude_loggers: Sequence[str] = DEFAULT_EXCLUDED_LOGGERS,
        topic_prefix: str = "logs.",
    ) -> None:
        if capacity < 1 or batch_size < 1:
            raise ValueError("capacity and batch_size must be positive")
        self.service = service
        self.instance = instance
        self.capacity = capacity
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self.min_level = _LEVELS[_level(level)]
        self.encoder = encoder
        self.exclude = tuple(exclude_loggers)
        self.topic_prefix = topic_prefix
        self.dropped = 0  # lines lost because the buffer was full (or could not be built)
        self.shipped = 0  # records the producer accepted
        self.failed = 0  # records that could not be encoded or sent
        # (topic, record); deque appends/pops are atomic, the lock makes check+append atomic
        # because other threads (executors, an in-process broker in tests) log too.
        self._buffer: deque[tuple[str, dict[str, Any]]] = deque()
        self._lock = threading.Lock()
        self._wake: asyncio.Event | None = None
        self._loop_thread: int | None = None
        self._task: asyncio.Task[None] | None = None
        self._producer: LogProducer | None = None
        self._stopping = False

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    # -- the processor (hot path: no I/O, no awaiting, never raises) -----------------------------

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        try:
            self._offer(event_dict)
        except Exception:
            # A line that cannot be turned into a record must not break the caller's logging.
            self.dropped += 1
        return event_dict

    def _offer(self, event_dict: EventDict) -> None:
        if _shipping.get():
            return
        name = str(event_dict.get("logger") or "")
        if any(name == ex or name.startswith(ex + ".") for ex in self.exclude):
            return
        level = _level(event_dict.get("level", "info"))
        if _LEVELS[level] < self.min_level:
            return
        topic, record = self._record(event_dict, name, level)
        with self._lock:
            if len(self._buffer) >= self.capacity:
                self.dropped += 1
                return
            self._buffer.append((topic, record))
            full = len(self._buffer) >= self.batch_size
        # asyncio.Event is not thread-safe: other threads' lines wait for the flush interval.
        if full and self._wake is not None and threading.get_ident() == self._loop_thread:
            self._wake.set()

    def _record(self, event_dict: EventDict, name: str, level: str) -> tuple[str, dict[str, Any]]:
        data = dict(event_dict)
        if "exc_info" in data:
            data = dict(structlog.processors.format_exc_info(None, "", data))
        stream = data.get("log_stream")
        if stream not in ("app", "ingress", "db"):
            stream = "ingress" if name == ACCESS_LOGGER else "db" if name.endswith(".db") else "app"
        now = datetime.now(UTC)
        trace_id = data.get("trace_id")
        trace_id = trace_id if isinstance(trace_id, str) else None
        # The span the line was logged in (this processor runs in the logging call's context),
        # when it is the line's trace: the logs indexer links its batches to it.
        span = tracing.current_trace() if trace_id else None
        traceparent = span.traceparent() if span is not None and span.trace_id == trace_id else None
        request_id = data.get("request_id")
        record = {
            "envelope": {
                "event_id": str(uuid.uuid4()),
                "occurred_at": now,
                "producer": {"service": self.service, "instance": self.instance},
                "trace_id": trace_id,
            },
            "service": self.service,
            "instance": self.instance,
            "level": level,
            "event": str(data.get("event", "")),
            "logger": name,
            "timestamp": now,
            "trace_id": trace_id,
            "traceparent": traceparent,
            "request_id": request_id if isinstance(request_id, str) else None,
            "fields": {k: _field_value(v) for k, v in data.items() if k not in _RESERVED},
        }
        return f"{self.topic_prefix}{stream}", record

    # -- the background task ---------------------------------------------------------------------

    async def start(self, producer: LogProducer, encoder: LogEncoder | None = None) -> None:
        """Start sending through `producer` (lines logged before are already buffered), encoded
        by `encoder` when given (the services pass `avro_log_encoder` once their registry client
        is up)."""
        if self._task is not None:
            raise RuntimeError("log shipper already started")
        if encoder is not None:
            self.encoder = encoder
        self._producer = producer
        self._stopping = False
        self._wake = asyncio.Event()
        self._loop_thread = threading.get_ident()
        self._task = asyncio.create_task(self._run(), name="log-shipper")

    async def stop(self, grace: float = 5.0) -> None:
        """Send what is buffered (for at most `grace` seconds), then stop the task."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping = True
        assert self._wake is not None
        self._wake.set()
        try:
            async with asyncio.timeout(grace):
                await asyncio.shield(task)
        except TimeoutError:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self._wake = None
        self._loop_thread = None

    async def flush(self) -> None:
        """Send everything buffered now (shutdown hooks and tests)."""
        token = _shipping.set(True)
        try:
            await self._drain()
        finally:
            _shipping.reset(token)

    async def _run(self) -> None:
        _shipping.set(True)  # this task's context only: whatever it logs is not shipped
        assert self._wake is not None
        while True:
            try:
                async with asyncio.timeout(self.flush_interval):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            await self._drain()
            if self._stopping:
                return

    async def _drain(self) -> None:
        while self._buffer and self._producer is not None:
            batch: list[tuple[str, dict[str, Any]]] = []
            while self._buffer and len(batch) < self.batch_size:
                batch.append(self._buffer.popleft())
            await self._send(self._producer, batch)

    async def _send(self, producer: LogProducer, batch: list[tuple[str, dict[str, Any]]]) -> None:
        instance_key = self.instance.encode()
        ingress = f"{self.topic_prefix}ingress"
        by_topic: dict[str, list[bytes]] = {}
        for topic, record in batch:
            try:
                by_topic.setdefault(topic, []).append(await self.encoder(topic, record))
            except Exception as e:
                self.failed += 1
                log.warning("log record not encodable", error=repr(e), event_name=record["event"])
        send_many = getattr(producer, "send_many", None)
        sends: list[Awaitable[Any]] = []
        counts: list[int] = []
        for topic, values in by_topic.items():
            key = None if topic == ingress else instance_key
            if send_many is not None:  # whole record batches: no per-line future
                sends.append(send_many(topic, key, values))
                counts.append(len(values))
            else:  # concurrent sends still let the producer batch them into few requests
                sends.extend(self._deliver(producer, topic, key, value) for value in values)
                counts.extend([1] * len(values))
        results = await asyncio.gather(*sends, return_exceptions=True)
        failed = sum(n for n, r in zip(counts, results, strict=True) if isinstance(r, BaseException))
        self.failed += failed
        self.shipped += sum(counts) - failed
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            log.warning("log records not shipped", count=failed, error=repr(errors[0]))

    @staticmethod
    async def _deliver(producer: LogProducer, topic: str, key: bytes | None, value: bytes) -> None:
        result = await producer.send(topic, key, value, [])
        if isinstance(result, asyncio.Future):
            await result  # acknowledged (or failed) only when the future resolves


class LogShipperCollector(Collector):
    """The shipper's counters on ``/metrics``, read at scrape time: the shipper's hot path stays a
    plain integer increment instead of a labelled Prometheus counter update."""

    def __init__(self, shipper: LogShipper) -> None:
        self.shipper = shipper

    def collect(self) -> Iterator[Metric]:
        s = self.shipper
        yield CounterMetricFamily("log_shipper_dropped", "log lines dropped: buffer full", value=s.dropped)
        yield CounterMetricFamily("log_shipper_shipped", "log records sent to logs.* topics", value=s.shipped)
        yield CounterMetricFamily("log_shipper_failed", "log records that failed to encode or send", value=s.failed)
        yield GaugeMetricFamily("log_shipper_buffered", "log records waiting to be sent", value=s.buffered)
