"""The primary's transactional producer, driven from asyncio.

confluent-kafka's producer blocks, so every call runs on one thread of the writer's own, in order.
A write is one transaction, begun, produced and committed in a single call on that thread, so
the delivery reports (which carry the offsets) are served by the commit's own flush. A producer
fenced by a newer one with the same `transactional.id` reports a fatal error; the writer
then raises `Fenced` and can never write again.

A producer can also be left in a state it never leaves by itself: a process paused mid-commit
(a GC pause, a VM migration) resumes with its commit timed out, and librdkafka then refuses
every call but the same commit again ("Conflicting commit_transaction API call is already in
progress"), abort included. A failed transaction that cannot be aborted therefore raises
`Broken`, and so does every later call: the store replaces the producer (`init_transactions` on
a new one fences this one and ends what it left open at the broker).
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
    """The transaction was aborted; nothing of it is visible."""


class Broken(WriteFailed):
    """The transaction could not be aborted: its outcome is unknown until a new producer with
    the same transactional id ends it, and this producer can never write again."""


CLOSE_SECONDS = 5.0  # closing a broken producer may wait on requests it can no longer complete


class TransactionalWriter:
    def __init__(self, conf: dict[str, Any]) -> None:
        self._fatal: KafkaError | None = None
        self._broken: str | None = None
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
        try:
            await self._call(self._producer.init_transactions, within)
        except Exception as e:
            # A timed-out init may be resumed by calling it again, but nothing else; the store
            # takes a new producer instead, so mark this one as done with.
            self._broken = f"init_transactions failed: {e}"
            raise

    async def write(
        self,
        topic: str,
        records: Sequence[Record],
        within: float,
        *,
        also: tuple[str, Sequence[Record]] | None = None,
    ) -> list[int]:
        """Commit `records` to partition 0 of `topic` in one transaction, with `also`'s records
        to partition 0 of its topic: the offsets of `records`."""
        return await self._call(self._transaction, topic, records, within, also)

    def _transaction(
        self, topic: str, records: Sequence[Record], timeout: float, also: tuple[str, Sequence[Record]] | None
    ) -> list[int]:
        if self._broken is not None:
            raise Broken(self._broken)
        offsets: list[int] = []
        others: list[int] = []

        def delivered(error: KafkaError | None, message: Message) -> None:
            if error is None:
                (offsets if message.topic() == topic else others).append(int(message.offset() or 0))

        extra: Sequence[tuple[str, Record]] = [(also[0], r) for r in also[1]] if also is not None else []
        try:
            self._producer.begin_transaction()
            for key, value in records:
                self._producer.produce(topic, value=value, key=key, partition=0, on_delivery=delivered)
            for other, (key, value) in extra:
                self._producer.produce(other, value=value, key=key, partition=0, on_delivery=delivered)
            self._producer.commit_transaction(timeout)
        except Exception as e:  # KafkaException, or the SystemError confluent-kafka wraps it in
            if self._fatal is not None or _fatal(e):
                raise Fenced(str(self._fatal or e)) from e
            try:
                self._producer.abort_transaction(timeout)
            except Exception as abort_error:
                # The commit may still happen, or not: only a new producer ends the transaction.
                if self._fatal is not None or _fatal(abort_error):
                    raise Fenced(str(self._fatal or abort_error)) from e
                self._broken = f"{e}; abort failed: {abort_error}"
                raise Broken(self._broken) from e
            raise WriteFailed(str(e)) from e
        if len(offsets) != len(records) or len(others) != len(extra):
            raise WriteFailed("the commit did not report every record delivered")
        return sorted(offsets)

    async def close(self) -> None:
        # A fenced or broken producer has nothing left to deliver; bounded, as a stuck one may
        # wait on its coordinator.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._call(self._producer.close), CLOSE_SECONDS)
        self._thread.shutdown(wait=False)


def _fatal(e: BaseException) -> bool:
    for cause in (e, e.__cause__, e.__context__):
        if isinstance(cause, KafkaException) and cause.args and isinstance(cause.args[0], KafkaError):
            error = cause.args[0]
            return bool(error.fatal() or error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED))
    return False
