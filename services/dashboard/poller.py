"""The background poller: one observation of the cluster every `interval` seconds, turned into
the snapshot the page reads.  HTTP handlers only read the latest snapshot, so a page view costs
no Kafka round trip, however many browsers are open.

A failed poll (broker down, timeout) keeps the last good snapshot, marks it stale with the
error, and the clients are reconnected on the next poll (they may hold dead connections, or the
cluster may have been replaced at the same address).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from typing import Any, Protocol

from kit.logging import get_logger
from services.dashboard.model import (
    History,
    Observation,
    RebalanceCounter,
    cluster_json,
    groups_json,
    history_point,
    iso,
    messages_in_rates,
    messages_out_rates,
    transactions_json,
)
from services.dashboard.problems import Problem, ProblemTracker

__all__ = ["ObservationSource", "SnapshotPoller"]

log = get_logger(__name__)


class ObservationSource(Protocol):
    """What the poller needs; `services.dashboard.kafka_reader.ClusterReader` is one."""

    @property
    def started(self) -> bool: ...

    async def start(self) -> None: ...

    async def observe(self) -> Observation: ...

    async def close(self) -> None: ...


class SnapshotPoller:
    def __init__(
        self,
        source: ObservationSource,
        *,
        interval: float,
        timeout: float,
        history_points: int,
        rate_window: float = 20.0,
    ) -> None:
        self.source = source
        self.interval = interval
        self.rate_window = rate_window
        # Recent observations, oldest first; rates compare the newest with the oldest one that is
        # at least `rate_window` old.  Between two consecutive polls, bursty producers (an outbox
        # relay, a log shipper, a micro-batch's commit) read as 0 and then as a spike.
        self.recent: collections.deque[Observation] = collections.deque()
        self.timeout = timeout
        self.history = History(history_points)
        self.rebalances = RebalanceCounter()
        self.tracker = ProblemTracker()
        self.problems: list[Problem] = []
        self.previous: Observation | None = None
        self.cluster: dict[str, Any] | None = None
        self.groups: list[dict[str, Any]] = []
        self.transactions: dict[str, Any] = {"known": False, "open": []}
        self.updated_at: float | None = None
        self.error: str | None = None
        self.polls = 0
        self.failures = 0

    @property
    def stale(self) -> bool:
        return self.error is not None

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Poll until `stop` is set (or cancelled), one poll every `interval` seconds at most.

        Stopping between polls rather than cancelling one matters: aiokafka leaves the socket of
        a bootstrap that is cancelled half-way open."""
        stop = stop if stop is not None else asyncio.Event()
        try:
            while not stop.is_set():
                began = time.monotonic()
                await self.poll_once()
                await wait_or_stop(stop, self.interval - (time.monotonic() - began))
        finally:
            await self.source.close()

    async def poll_once(self) -> bool:
        """One poll; whether it succeeded."""
        self.polls += 1
        try:
            async with asyncio.timeout(self.timeout):
                if not self.source.started:
                    await self.source.start()
                observation = await self.source.observe()
        except Exception as e:
            self.failures += 1
            message = f"timed out after {self.timeout:g} s" if isinstance(e, TimeoutError) else str(e)
            error = f"cannot read the cluster: {type(e).__name__}: {message}"[:300]
            if error != self.error:
                log.warning("poll failed", error=error)
            self.error = error
            self.problems = self.tracker.unreadable(error, time.time())
            await self.source.close()
            return False
        if self.error is not None:
            log.info("poll recovered")
        self.apply(observation)
        return True

    def apply(self, observation: Observation) -> None:
        """Take a successful observation: rates over the rate window, rebalances, history."""
        baseline = self._baseline(observation)
        in_rates = messages_in_rates(baseline, observation)
        out_rates = messages_out_rates(baseline, observation)
        for group in observation.groups.values():
            self.rebalances.observe(group)
        self.rebalances.forget_missing(observation.groups)
        self.cluster = cluster_json(observation, in_rates)
        self.groups = groups_json(observation, out_rates, self.rebalances.counts)
        self.transactions = transactions_json(observation)
        self.problems = self.tracker.observe(observation)
        self.history.add(history_point(observation, in_rates, out_rates))
        self.previous = observation
        self.updated_at = observation.wall
        self.error = None

    def _baseline(self, observation: Observation) -> list[Observation]:
        """The observations rates are measured from, oldest first: from the newest one at least
        `rate_window` older than `observation` (or the oldest kept while the window fills) on.
        Each topic and group is measured from the oldest of them that saw it."""
        recent = self.recent
        if recent and observation.mono < recent[-1].mono:  # a clock that went back: start over
            recent.clear()
        recent.append(observation)
        horizon = observation.mono - self.rate_window
        while len(recent) > 2 and recent[1].mono <= horizon:
            recent.popleft()
        return list(recent)[:-1]

    def partitions(self, topic: str) -> list[int] | None:
        """The topic's partitions as last observed; None if it did not exist (or no poll succeeded yet)."""
        info = self.previous.topics.get(topic) if self.previous is not None else None
        return None if info is None else [p.partition for p in info.partitions]

    def topics(self) -> dict[str, list[int]]:
        """Every topic and its partitions as last observed (none before the first good poll)."""
        if self.previous is None:
            return {}
        return {name: [p.partition for p in info.partitions] for name, info in self.previous.topics.items()}

    def state(self) -> dict[str, Any]:
        """The snapshot's cluster part: what the last good poll saw, and whether it is stale."""
        return {
            "updated_at": iso(self.updated_at) if self.updated_at is not None else None,
            "stale": self.stale,
            "error": self.error,
            "refresh_interval": self.interval,
            "cluster": self.cluster or _EMPTY_CLUSTER,
            "groups": self.groups,
            "transactions": self.transactions,
            "problems": [p.to_json() for p in self.problems],
            "history": self.history.points(),
        }


_EMPTY_CLUSTER: dict[str, Any] = {
    "brokers": [],
    "controller_id": None,
    "sizes_known": False,
    "topics": [],
    "totals": {"topics": 0, "partitions": 0, "messages": None, "size_bytes": None, "in_rate": None},
}


async def wait_or_stop(stop: asyncio.Event, seconds: float) -> None:
    """Sleep `seconds`, or less when `stop` is set meanwhile."""
    if seconds > 0:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), seconds)
