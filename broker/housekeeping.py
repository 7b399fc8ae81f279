"""The broker's fine-grained periodic work, on one timer.

Group sessions and join deadlines, `flush.ms`, `file.delete.delay.ms` and the event loop's own
lag each want a look every few tens of milliseconds.  Separate sleeping tasks woke an idle broker
about 150 times a second, a task step and a future each time, about 3 % of a core doing nothing;
one timer callback serves them all at 40 wake-ups a second.  Slower jobs (retention, the
cleaner) keep their own tasks: they run seconds apart.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

log = structlog.get_logger(__name__)

TICK_S = 0.025


@dataclass(frozen=True)
class Job:
    name: str
    every: int  # in ticks
    run: Callable[[], object]


class Ticker:
    """Runs each job every `job.every` ticks of TICK_S, and reports how late each tick came
    (`observe_lag`): whatever held the event loop meanwhile.  A job that raises is logged and
    runs again at its next turn."""

    def __init__(self, jobs: list[Job], observe_lag: Callable[[float], None]) -> None:
        self._jobs = jobs
        self._observe_lag = observe_lag
        self._ticks = 0
        self._due = 0.0
        self._handle: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._schedule()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _schedule(self) -> None:
        self._due = time.perf_counter() + TICK_S
        self._handle = asyncio.get_running_loop().call_later(TICK_S, self._tick)

    def _tick(self) -> None:
        self._observe_lag(max(0.0, time.perf_counter() - self._due))
        self._ticks += 1
        for job in self._jobs:
            if self._ticks % job.every == 0:
                try:
                    job.run()
                except Exception:
                    log.exception("periodic job failed", job=job.name)
        self._schedule()


def ticks(seconds: float) -> int:
    """A period in whole ticks, at least one."""
    return max(1, round(seconds / TICK_S))
