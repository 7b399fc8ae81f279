"""Steps of unequal entries: the loop is freed after every STEP units of work rather than
every STEP entries, for loops whose entries differ a hundredfold in cost (a DescribeConfigs
resource that failed costs one unit, a topic's 35 configs 36; a DeleteAcls filter one, plus
one per ACL it matched)."""

from __future__ import annotations

import asyncio

from broker.cooperative import STEP


class WeightedSteps:
    """Counts work done and frees the loop each time it reaches a step."""

    __slots__ = ("_done", "_step")

    def __init__(self, step: int = STEP) -> None:
        self._done = 0
        self._step = step

    async def done(self, units: int) -> None:
        """`units` more of work done: the loop is freed if they end a step."""
        self._done += units
        if self._done >= self._step:
            self._done = 0
            await asyncio.sleep(0)
