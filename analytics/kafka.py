"""The source's Kafka side, with confluent-kafka (librdkafka): what to read, and reading it.

`KafkaClients` runs where Spark plans batches (the driver-side streaming runner, or the batch
planner): it lists partitions, asks for earliest/latest offsets (one ListOffsets request for all
partitions), reads and commits the consumer group's offsets.  A commit is "standalone": the
consumer never subscribes or joins, it just sends OffsetCommit with generation -1, which Kafka
(and streamshop's broker) accept while the group has no active members.

`read_range` runs in Spark's Python workers: an assign()-only consumer (no group membership,
auto-commit off) reads one [start, end) range and yields lists of messages.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator, Mapping
from operator import lt
from typing import Any, cast

from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from analytics.offsets import OffsetRange, Partition

__all__ = ["KafkaClients", "read_range", "unreachable"]

_TIMEOUT_S = 30.0
# What librdkafka says when no broker answers (refused, reset, not resolved, timed out): passing
# trouble for a reader, which tries again; anything else is an answer, an error to report.
_UNREACHABLE = {
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._TIMED_OUT,
    KafkaError._RESOLVE,
    KafkaError._WAIT_COORD,
}

# Throughput-minded defaults for the worker consumers; any `kafka.<name>` option overrides them.
_READ_DEFAULTS: dict[str, Any] = {
    "fetch.max.bytes": 64 * 1024 * 1024,
    "max.partition.fetch.bytes": 16 * 1024 * 1024,
    "queued.max.messages.kbytes": 256 * 1024,
    "fetch.wait.max.ms": 100,
    # The planner's latest offsets are read_committed ones (the last stable offset) too: with
    # transactional producers on Apache Kafka, a task planned up to the high watermark would
    # otherwise wait at the LSO for records it may never see.
    "isolation.level": "read_committed",
}

# Errors a worker consumer reports while librdkafka reconnects or a leader moves: not a reason
# to fail the task (the idle timeout still ends a read that never resumes).
_TRANSIENT = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._RESOLVE,
        KafkaError._TIMED_OUT,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NETWORK_EXCEPTION,
    }
)


class KafkaClients:
    """Admin and group operations for one source; clients are created on first use."""

    def __init__(self, conf: Mapping[str, Any], group_id: str) -> None:
        self._conf = dict(conf)
        self._group_id = group_id
        self._admin: AdminClient | None = None
        self._consumer: Consumer | None = None

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(self._conf)
        return self._admin

    @property
    def consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(
                {
                    **self._conf,
                    "group.id": self._group_id,
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                }
            )
        return self._consumer

    def partitions(self, topics: Iterable[str] = (), pattern: str | None = None) -> list[Partition]:
        """Partitions of the named topics (those that exist) or of every topic matching `pattern`.

        The pattern must match the whole name (Java's `matches`, as Kafka's pattern subscription);
        internal topics (`__consumer_offsets`, ...) are never matched.
        """
        metadata = self.admin.list_topics(timeout=_TIMEOUT_S)
        wanted = set(topics)
        regex = re.compile(pattern) if pattern is not None else None
        out: list[Partition] = []
        for name, topic in metadata.topics.items():
            if topic.error is not None:
                continue
            if name in wanted or (regex is not None and not name.startswith("__") and regex.fullmatch(name)):
                out.extend((name, p) for p in topic.partitions)
        return sorted(out)

    def earliest(self, partitions: Iterable[Partition]) -> dict[Partition, int]:
        return self._list_offsets(partitions, OffsetSpec.earliest())  # type: ignore[no-untyped-call]

    def latest(self, partitions: Iterable[Partition]) -> dict[Partition, int]:
        return self._list_offsets(partitions, OffsetSpec.latest())  # type: ignore[no-untyped-call]

    def _list_offsets(self, partitions: Iterable[Partition], spec: OffsetSpec) -> dict[Partition, int]:
        request = {TopicPartition(t, p): spec for t, p in partitions}
        if not request:
            return {}
        futures = self.admin.list_offsets(
            request, request_timeout=_TIMEOUT_S, isolation_level=IsolationLevel.READ_COMMITTED
        )
        return {(tp.topic, tp.partition): int(f.result(_TIMEOUT_S).offset) for tp, f in futures.items()}

    def committed(self, partitions: Iterable[Partition]) -> dict[Partition, int]:
        """The group's committed offsets; partitions without one are left out."""
        tps = [TopicPartition(t, p) for t, p in partitions]
        if not tps:
            return {}
        found = self.consumer.committed(tps, timeout=_TIMEOUT_S)
        out: dict[Partition, int] = {}
        for tp in found:
            if tp.error is not None:
                raise KafkaException(tp.error)
            if tp.offset != OFFSET_INVALID and tp.offset >= 0:
                out[(tp.topic, tp.partition)] = tp.offset
        return out

    def commit(self, positions: Mapping[Partition, int], note: str | None = None) -> None:
        """Commit `positions` (next offsets to read) to the group, synchronously, with `note`
        as each partition's metadata (contracts.commit_note)."""
        tps = [TopicPartition(t, p, o, metadata=note) for (t, p), o in sorted(positions.items())]
        if not tps:
            return
        answered = self.consumer.commit(offsets=tps, asynchronous=False)
        for tp in answered or ():
            if tp.error is not None:
                raise KafkaException(tp.error)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        self._admin = None


def _next_if_in_order(messages: list[Message], next_offset: int, end: int) -> int | None:
    """The offset after the last message if no message is an error and their offsets strictly
    increase from at least `next_offset` and stay below `end`; None otherwise."""
    if any(map(Message.error, messages)):
        return None
    found = list(map(Message.offset, messages))
    if None in found:
        return None
    offsets = cast(list[int], found)
    if next_offset <= offsets[0] and offsets[-1] < end and all(map(lt, offsets, offsets[1:])):
        return offsets[-1] + 1
    return None


def read_range(
    conf: Mapping[str, Any], group_id: str, r: OffsetRange, *, batch: int = 10_000, idle_timeout_s: float = 120.0
) -> Iterator[list[Message]]:
    """Yield the messages of [r.start, r.end) in offset order, in lists of at most `batch`.

    Offsets missing from the log (compaction, transaction markers) are simply not there; the
    read ends at the first message at or past `r.end`, or when the consumer reports the end of
    the partition at or past it.  A partition that ends before `r.end` (recreated, truncated)
    or no progress for `idle_timeout_s` raises, and so does a consumer error other than the
    transient ones of a reconnect: the task fails, and Spark retries it (up to 3 times under the
    job's default master ``local[2,4]``) before failing the query.
    """
    consumer = Consumer(
        {
            **_READ_DEFAULTS,
            **conf,
            "group.id": group_id,  # never joined: assign() only, nothing committed
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition(r.topic, r.partition, r.start)])
        next_offset = r.start
        deadline = time.monotonic() + idle_timeout_s
        while next_offset < r.end:
            messages = consumer.consume(num_messages=min(batch, r.end - next_offset), timeout=0.5)
            after = _next_if_in_order(messages, next_offset, r.end) if messages else None
            if after is not None:
                # The usual case, checked in C: no errors, every offset new, in order and before
                # the end -- exactly what the loop below would keep, all of it.
                next_offset = after
                yield messages
                deadline = time.monotonic() + idle_timeout_s
                continue
            out: list[Message] = []
            done = False
            for m in messages:
                err = m.error()
                if err is not None:
                    if err.code() in _TRANSIENT and not err.fatal():
                        continue
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise KafkaException(err)
                    end_of_log = m.offset() or 0
                    if end_of_log < r.end:
                        raise RuntimeError(
                            f"{r.topic}-{r.partition} ends at offset {end_of_log}, before the planned end {r.end}: "
                            "the partition was truncated or recreated"
                        )
                    done = True
                    break
                offset = m.offset() or 0
                if offset >= r.end:
                    done = True
                    break
                if offset >= next_offset:
                    out.append(m)
                    next_offset = offset + 1
            if out:
                yield out
                deadline = time.monotonic() + idle_timeout_s
            if done:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no data from {r.topic}-{r.partition} for {idle_timeout_s:.0f} s "
                    f"(at offset {next_offset}, reading up to {r.end})"
                )
    finally:
        consumer.close()


def unreachable(error: BaseException) -> bool:
    """Whether `error` says the cluster could not be reached (rather than that it refused)."""
    if isinstance(error, TimeoutError):
        return True
    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
        return error.args[0].code() in _UNREACHABLE
    return False
