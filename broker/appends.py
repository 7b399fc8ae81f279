"""A Fetch long poll's registration for appends, shared by the broker and its handlers."""

from __future__ import annotations

import asyncio


class AppendWatch:
    """`needed` more bytes appended to the partitions keyed `keys` (their logs' ids) complete
    `future`."""

    __slots__ = ("future", "keys", "needed")

    def __init__(self, future: asyncio.Future[None], needed: int, keys: set[int]) -> None:
        self.future = future
        self.needed = needed
        self.keys = keys
