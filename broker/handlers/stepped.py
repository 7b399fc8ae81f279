"""A handler written as a generator that yields after each entry it handles: a request of
few entries is run through at once, as any handler; one of many is run a step of entries
at a time (broker/cooperative.py), the loop free between steps.

The generator keeps its state between steps.  What concerns the whole request (names
repeated in it, the per-request partition cap) is judged in a first pass over the request
alone, before any entry is handled; each entry's own work (its look-ups and the change they
decide) is done between two yields, never across one, so another client's request served in
between finds no entry half done.
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


def stepped(work: Steps[R], entries: int) -> R | Serial:
    """`work`'s result: computed now when `entries` fit in one step, as before; else by a
    task that frees the loop every STEP entries, which the connection waits for before it
    dispatches its next request (`Serial`), so that request still sees every change."""
    return at_once(work) if entries <= STEP else Serial(_run(work))


def at_once(work: Steps[T]) -> T:
    """`work`'s result, computed without a pause."""
    while True:
        try:
            next(work)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]  # StopIteration.value is Any


async def in_steps(work: Steps[T]) -> T:
    """`work`'s result, the loop free every STEP entries."""
    count = 0
    try:
        while True:
            try:
                next(work)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]  # StopIteration.value is Any
            count += 1
            await pause(count)
    except BaseException:
        work.close()  # the connection went away: the generator releases what it holds
        raise


async def _run(work: Steps[R]) -> Outcome:
    result: Result = await in_steps(work)
    if isinstance(result, Serial):
        result = result.awaitable
    return await result if inspect.isawaitable(result) else result
