"""Handlers whose entries sit at several depths (transactions, topics, partitions) served a
step of entries at a time (broker/cooperative.py), the loop free between steps.

`EntrySteps` counts the entries one request has handled over all its arrays, so the loop is
freed after every STEP of them however they are spread (a pause per array would let 300
topics of 300 partitions each run in one go).  `stepped` runs a handler's synchronous part,
written as a generator that yields after each entry: at once for a request of few entries,
as before; for one of many, a step at a time, answered before the connection's next request
is dispatched (`Serial`), so that request still sees every change.
"""

from __future__ import annotations

import inspect
from collections.abc import Generator
from typing import TypeAlias, TypeVar

from broker.cooperative import STEP, pause
from broker.handlers.base import Outcome, Result, Serial

T = TypeVar("T")
R = TypeVar("R", bound=Result)

Steps: TypeAlias = Generator[None, None, T]


class EntrySteps:
    """`await steps.done()` after each entry handled."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    async def done(self) -> None:
        self.count += 1
        await pause(self.count)

    async def run(self, work: Steps[T]) -> T:
        """`work`'s result, counting each of its yields as an entry."""
        while True:
            try:
                next(work)
            except StopIteration as finished:
                return finished.value  # type: ignore[no-any-return]  # StopIteration.value is Any
            await self.done()


def at_once(work: Steps[T]) -> T:
    """`work`'s result, computed without a pause."""
    while True:
        try:
            next(work)
        except StopIteration as finished:
            return finished.value  # type: ignore[no-any-return]  # StopIteration.value is Any


def stepped(work: Steps[R], entries: int) -> R | Serial:
    """`work`'s result now when `entries` fit in one step; else a task's, the loop free
    every STEP entries, which the connection waits for before its next request."""
    return at_once(work) if entries <= STEP else Serial(_run(work))


async def _run(work: Steps[R]) -> Outcome:
    result: Result = await EntrySteps().run(work)
    if isinstance(result, Serial):
        result = result.awaitable
    return await result if inspect.isawaitable(result) else result
