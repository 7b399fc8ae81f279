"""A count of the entries one request has handled over all its nested arrays (transactions,
topics, partitions), for handlers whose entries sit at several depths: the loop is freed after
every STEP of them (broker/cooperative.py) however they are spread, where a pause per array
would let 300 topics of 300 partitions each run in one go.  A handler's synchronous part is
written as a generator that yields after each entry (broker/handlers/stepped.py); the parts it
runs after an await (the answer built once the change is stored) count here."""

from __future__ import annotations

from typing import TypeVar

from broker.cooperative import pause
from broker.handlers.stepped import Steps

T = TypeVar("T")


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
