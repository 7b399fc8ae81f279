"""The newest records the page lists with their trace: orders (topic ``orders``), OTP requests
(``otp.requests``) and dead letters (every ``<topic>.dlq``).

    GET /api/traced -> 200 {"items": [{"kind", "topic", "partition", "offset", "timestamp", "key",
                                       "trace_id", "trace_url", "original_topic", "error"}, ...],
                            "error": null, or why the last read failed (the items are then the
                                     last read's that worked)}

A record's trace is its ``traceparent`` header: the outbox relay's send span for an event (its
trace id is the envelope's `trace_id`, as the Envelope schema says), the original record's for
a dead letter (the DLQ keeps it).  Headers only: no value is decoded, so a dead letter that is
garbage is listed like any other, and the registry is not needed.  Everything read comes from
topics anyone may write: a header that is not a valid traceparent gives no trace id, keys and
error names are cut short.

The records are read on demand, at most once per `max_age` seconds however many pages ask (a
group-less consumer from the end of each partition: `PER_PARTITION` records back at most), each
read bounded in time: a broker that is down or hung costs the page a stale list, never a hung
request.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRecord
from aiokafka.errors import KafkaError
from aiokafka.structs import TopicPartition

from kit.logging import get_logger
from kit.tracing import TRACEPARENT_HEADER, parse_traceparent
from services.dashboard.model import iso

__all__ = ["ITEMS_PER_KIND", "PER_PARTITION", "TracedRecords", "kind_of", "traced_item"]

log = get_logger(__name__)

PER_PARTITION = 10  # the newest records read of each partition
ITEMS_PER_KIND = 10  # and kept of each kind, newest first
_READ_WITHIN_S = 5.0  # a read that has not reached the partitions' ends by then shows what it has
_SHORT = 128  # characters kept of a key or an error name

_KINDS = {"orders": "order", "otp.requests": "otp request"}
DLQ_SUFFIX = ".dlq"


def kind_of(topic: str) -> str | None:
    """What the page calls a record of `topic`; None for a topic it does not list."""
    if topic.endswith(DLQ_SUFFIX) and len(topic) > len(DLQ_SUFFIX):
        return "dead letter"
    return _KINDS.get(topic)


def _header(record: ConsumerRecord[bytes, bytes], name: str) -> str | None:
    found = None
    for key, value in record.headers or ():
        if key == name and value is not None:
            found = value[:512].decode("utf-8", "replace")
    return found


def _short(text: str | None) -> str | None:
    return None if text is None else text[:_SHORT]


def traced_item(record: ConsumerRecord[bytes, bytes], trace_link: str | None) -> dict[str, Any]:
    """One record as the page lists it."""
    context = parse_traceparent(_header(record, TRACEPARENT_HEADER))
    trace_id = context.trace_id if context is not None else None
    return {
        "kind": kind_of(record.topic),
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": iso(record.timestamp / 1000) if record.timestamp >= 0 else None,
        "key": _short(record.key.decode("utf-8", "replace")) if record.key is not None else None,
        "trace_id": trace_id,
        "trace_url": trace_link.replace("{trace_id}", trace_id) if trace_link and trace_id else None,
        "original_topic": _short(_header(record, "dlq.original.topic")),
        "error": _short(_header(record, "dlq.error.class")),
    }


class TracedRecords:
    """`items()`: the newest orders, OTP requests and dead letters, read at most every `max_age`
    seconds.  `topics()` gives each topic and its partitions as the poller last saw them."""

    def __init__(
        self,
        consumer_factory: Callable[[], AIOKafkaConsumer],
        topics: Callable[[], Mapping[str, Sequence[int]]],
        trace_link: str | None,
        *,
        max_age: float,
        read_timeout: float = 15.0,
    ) -> None:
        """`read_timeout` bounds a whole read, connecting included: past it, the read has failed."""
        self._consumer_factory = consumer_factory
        self._topics = topics
        self.trace_link = trace_link
        self.max_age = max_age
        self.read_timeout = read_timeout
        self._items: list[dict[str, Any]] = []
        self.error: str | None = None
        self._read_at: float | None = None
        self._lock = asyncio.Lock()

    async def json(self) -> dict[str, Any]:
        """The items of the last read that worked, and why the last read failed (None: it did not)."""
        async with self._lock:  # one read at a time; those waiting get its result
            if self._read_at is None or time.monotonic() - self._read_at >= self.max_age:
                try:
                    async with asyncio.timeout(self.read_timeout):
                        self._items = await self._read()
                    self.error = None
                except (KafkaError, OSError, TimeoutError) as e:
                    self.error = f"the cluster cannot be read: {type(e).__name__}: {e}"[:300]
                    log.warning("traced records not read", error=self.error)
                self._read_at = time.monotonic()
            return {"items": self._items, "error": self.error}

    async def _read(self) -> list[dict[str, Any]]:
        partitions = [
            TopicPartition(topic, p)
            for topic, numbers in sorted(self._topics().items())
            if kind_of(topic) is not None
            for p in numbers
        ]
        if not partitions:
            return []
        records = await self._newest(partitions)
        records.sort(key=lambda r: (r.timestamp, r.offset), reverse=True)
        kept: dict[str, int] = {}
        out = []
        for record in records:
            item = traced_item(record, self.trace_link)
            kept[item["kind"]] = kept.get(item["kind"], 0) + 1
            if kept[item["kind"]] <= ITEMS_PER_KIND:
                out.append(item)
        return out

    async def _newest(self, partitions: list[TopicPartition]) -> list[ConsumerRecord[bytes, bytes]]:
        consumer = self._consumer_factory()
        try:  # a start that fails half-way has connections to close too
            await consumer.start()
            consumer.assign(partitions)
            ends = await consumer.end_offsets(partitions)
            starts = await consumer.beginning_offsets(partitions)
            wanted: dict[TopicPartition, int] = {}
            for tp in partitions:
                if ends[tp] > starts[tp]:
                    consumer.seek(tp, max(starts[tp], ends[tp] - PER_PARTITION))
                    wanted[tp] = ends[tp]
            found: list[ConsumerRecord[bytes, bytes]] = []
            deadline = time.monotonic() + _READ_WITHIN_S
            while wanted and time.monotonic() < deadline:
                batches = await consumer.getmany(*wanted, timeout_ms=200)
                for tp, batch in batches.items():
                    found.extend(r for r in batch if r.offset < wanted[tp])
                for tp in list(wanted):
                    # the position, not the last record: transaction markers take offsets too
                    if await consumer.position(tp) >= wanted[tp]:
                        del wanted[tp]
            return found
        finally:
            with contextlib.suppress(Exception):
                await consumer.stop()
