"""The primary's transactional producer, driven from asyncio.

confluent-kafka's producer blocks, so every call runs on one thread of the writer's own, in order.
A write is one transaction, begun, produced and committed in a single call on that thread, so
the delivery reports (which carry the offsets) are served by the commit's own flush. A producer
fenced by a newer one with the same `transactional.id` reports a fatal error; the writer
then raises `Fenced` and can never write again.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from registry.log_records import Record

T = TypeVar("T")


class Fenced(Exception):
    """Another instance opened a writer with the same transactional id: this one is deposed."""


class WriteFailed(Exception):
    """The transaction was aborted (or its outcome is unknown); nothing of it is visible."""


class TransactionalWriter:
    def __init__(self, conf: dict[str, Any]) -> None:
        self._fatal: KafkaError | None = None
        self._producer = Producer({**conf, "error_cb": self._on_error})
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="registry-writer")

    def _on_error(self, error: KafkaError) -> None:
        if error.fatal():
            self._fatal = error

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    async def init(self, within: float) -> None:
        """Register the transactional id: fences every earlier writer with it and aborts what
        it left open."""
        await self._call(self._producer.init_transactions, within)

    async def write(self, topic: str, records: Sequence[Record], within: float) -> list[int]:
        """Commit `records` to partition 0 of `topic` in one transaction: their offsets."""
        return await self._call(self._transaction, topic, records, within)

    def _transaction(self, topic: str, records: Sequence[Record], timeout: float) -> list[int]:
        offsets: list[int] = []

        def delivered(error: KafkaError | None, message: Message) -> None:
            if error is None:
                offsets.append(int(message.offset() or 0))

        try:
            self._producer.begin_transaction()
            for key, value in records:
                self._producer.produce(topic, value=value, key=key, partition=0, on_delivery=delivered)
            self._producer.commit_transaction(timeout)
        except Exception as e:  # KafkaException, or the SystemError confluent-kafka wraps it in
            if self._fatal is not None or _fatal(e):
                raise Fenced(str(self._fatal or e)) from e
            # Should the abort fail, the commit may still have happened: the caller reads the log.
            with contextlib.suppress(Exception):
                self._producer.abort_transaction(timeout)
            raise WriteFailed(str(e)) from e
        if len(offsets) != len(records):
            raise WriteFailed("the commit did not report every record delivered")
        return sorted(offsets)

    async def close(self) -> None:
        with contextlib.suppress(Exception):  # a fenced producer has nothing left to deliver
            await self._call(self._producer.close)
        self._thread.shutdown(wait=False)


def _fatal(e: BaseException) -> bool:
    for cause in (e, e.__cause__, e.__context__):
        if isinstance(cause, KafkaException) and cause.args and isinstance(cause.args[0], KafkaError):
            error = cause.args[0]
            return bool(error.fatal() or error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED))
    return False
