"""The analytics job's trace: a span per micro-batch, linked to a bounded sample of its records.

Each batch of a job is one ``process {topics}`` CONSUMER span (job, batch id, records, the
offsets it covered per partition, the consumer group its progress is committed to), a trace of
its own, linked to the producers of up to `SAMPLE` of its records: the newest of each partition
it covered, the records someone who has just placed an order looks for.  Each of those also gets
a short ``process {topic}`` span in its producer's trace, so a viewer without links (Zipkin)
still shows the job in an order's trace.

Why a sample and not every record: the records are decoded and aggregated on the executors as
Arrow columns, never one Python object per record; a span per record would need a Python pass
over every row (and its header column decoded for every record), tens of thousands of spans a
batch for a job that counts them, and an exporter queue overflowing at any real rate.  The
sample costs one small read on the driver: the last records of each partition the batch
covered, up to `SAMPLE` in all, read back with the job's own Kafka settings, only when the span
is recorded.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind

from analytics.ledger import Span as Covered
from kit import tracing

__all__ = ["SAMPLE", "BatchTracer", "topics_of"]

SAMPLE = 32
_READ_WITHIN_S = 5.0  # the sample never holds a batch longer than this

_tracer = trace.get_tracer("streamshop.analytics")
Partition = tuple[str, int]


class BatchTracer:
    """Spans of one job's batches; reads its samples with the job's Kafka settings."""

    def __init__(self, job: str, group: str, kafka: Mapping[str, str]) -> None:
        self.job = job
        self.group = group
        self._kafka = dict(kafka)
        self._consumer: Consumer | None = None

    @contextmanager
    def batch(self, batch_id: int, topics: str) -> Iterator[Span]:
        """The batch's span, current while the batch is computed; `done` adds what it covered."""
        attributes: dict[str, str | int] = {
            "messaging.system": "kafka",
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": topics,
            "messaging.consumer.group.name": self.group,
            "streamshop.analytics.job": self.job,
            "streamshop.analytics.batch_id": batch_id,
        }
        with _tracer.start_as_current_span(
            f"process {topics}", context=trace.set_span_in_context(trace.INVALID_SPAN), kind=SpanKind.CONSUMER
        ) as span:
            span.set_attributes(attributes)
            yield span

    def done(self, span: Span, records: int, coverage: Mapping[Partition, Covered]) -> None:
        """The batch's size and offsets, and its links to a sample of its records' producers."""
        span.set_attribute("messaging.batch.message_count", records)
        span.set_attribute(
            "streamshop.analytics.offsets",
            [f"{t}-{p}:{c.first}-{c.last}" for (t, p), c in sorted(coverage.items())],
        )
        if not span.is_recording() or not coverage:
            return
        batch = span.get_span_context()
        for (topic, partition, offset), headers in self._sample(coverage):
            producer = trace.get_current_span(tracing.parent_from_headers(headers)).get_span_context()
            if not producer.is_valid:
                continue
            span.add_link(producer)
            tracing.batch_member(
                topic,
                producer,
                batch,
                **{
                    "messaging.consumer.group.name": self.group,
                    "messaging.destination.partition.id": str(partition),
                    "messaging.kafka.offset": offset,
                    "streamshop.analytics.job": self.job,
                },
            )

    def _sample(self, coverage: Mapping[Partition, Covered]) -> list[tuple[tuple[str, int, int], Any]]:
        """(topic, partition, offset) and headers of the last records of each covered
        partition, `SAMPLE` in all at most; fewer when the read takes too long."""
        each = max(1, SAMPLE // len(coverage))
        covered = list(coverage.items())[:SAMPLE]
        wanted = {tp: c.last for tp, c in covered}
        consumer = self._reader()
        consumer.assign([TopicPartition(t, p, max(c.first, c.last - each + 1)) for (t, p), c in covered])
        found: list[tuple[tuple[str, int, int], Any]] = []
        open_ = dict(wanted)
        deadline = time.monotonic() + _READ_WITHIN_S
        try:
            while open_ and time.monotonic() < deadline:
                for message in consumer.consume(num_messages=SAMPLE, timeout=0.2):
                    if message.error() is not None:
                        continue
                    tp = (message.topic() or "", message.partition() or 0)
                    offset = message.offset() or 0
                    last = open_.get(tp)
                    if last is None or offset > last:
                        continue
                    found.append(((tp[0], tp[1], offset), message.headers()))
                    if offset >= last:
                        del open_[tp]
        finally:
            consumer.unassign()
        return found

    def _reader(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(
                {
                    **self._kafka,
                    "group.id": f"{self.group}-trace-sample",  # never joined nor committed: assign only
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "client.id": f"streamshop-analytics-{self.job}-trace-sample",
                }
            )
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def topics_of(subscription: Mapping[str, str]) -> str:
    """The destination a job's spans name: its topics, or its pattern."""
    return subscription.get("topics") or subscription.get("topicPattern") or "?"
