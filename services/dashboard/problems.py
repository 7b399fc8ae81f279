"""What needs a person's attention, from one observation and what earlier ones saw: the page's
banner.  Each problem says what is wrong, with what (which broker, which group), and since when.

- A broker is down: it was seen before, or a partition names it as a replica, and the cluster
  no longer lists it (Kafka's Metadata lists live brokers only).  The partitions it leaves
  under-replicated or offline are counted with it.
- A consumer group lost its consumers: it had members and has none now, while its partitions
  lag (its service is down, or cannot reach the cluster).
- A job that commits without joining the group (the analytics job) stopped committing.
- The cluster cannot be read at all (the snapshot is stale).

Pure, like `model`: the poller feeds it observations and the time a poll failed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from services.dashboard.model import BrokerInfo, GroupInfo, Observation, group_lags, iso

__all__ = ["Problem", "ProblemTracker"]


@dataclass(frozen=True, slots=True)
class Problem:
    kind: str  # broker, group, job, cluster
    subject: str  # which: "broker 2", "group sms-sender", "job orders"
    text: str  # what is wrong, for a person
    since: float  # epoch seconds when first seen

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "subject": self.subject, "text": self.text, "since": iso(self.since)}


class ProblemTracker:
    """Remembers what earlier observations saw (the brokers, the groups that had members) and
    when each problem began, so that a problem keeps its first `since` while it lasts."""

    def __init__(self) -> None:
        self.brokers: dict[int, BrokerInfo] = {}  # every broker ever seen, by node id
        self.had_members: set[str] = set()
        self.began: dict[tuple[str, str], float] = {}
        self.unreadable_since: float | None = None

    def observe(self, observation: Observation) -> list[Problem]:
        """The problems `observation` shows, and the tracker's memory updated with it."""
        self.unreadable_since = None
        live = {b.node_id for b in observation.brokers}
        for broker in observation.brokers:
            self.brokers[broker.node_id] = broker
        found: list[tuple[str, str, str, float | None]] = []
        for node, (under, offline) in sorted(_down_brokers(observation, live, set(self.brokers)).items()):
            known = self.brokers.get(node)
            where = f" ({known.host}:{known.port})" if known else ""
            effect = f"{under} partition(s) under-replicated" + (f", {offline} offline" if offline else "")
            found.append(("broker", f"broker {node}", f"broker {node}{where} is down: {effect}", None))
        for group_id, group in sorted(observation.groups.items()):
            found.extend(self._group_problems(group_id, group, observation))
        problems = [
            self._since(kind, subject, text, observation.wall if since is None else since)
            for kind, subject, text, since in found
        ]
        current = {(p.kind, p.subject) for p in problems}
        self.began = {key: at for key, at in self.began.items() if key in current}
        return problems

    def unreadable(self, error: str, now: float) -> list[Problem]:
        """The problem of a poll that failed at `now`: the cluster cannot be read."""
        if self.unreadable_since is None:
            self.unreadable_since = now
        return [Problem("cluster", "cluster", error, self.unreadable_since)]

    def _group_problems(
        self, group_id: str, group: GroupInfo, observation: Observation
    ) -> list[tuple[str, str, str, float | None]]:
        """A group's problems: (kind, subject, text, since when if known, else None: now)."""
        if group.members:
            self.had_members.add(group_id)
            return []
        found: list[tuple[str, str, str, float | None]] = []
        lag = sum(p.lag or 0 for p in group_lags(group, observation.topics))
        if group_id in self.had_members and lag > 0 and group.committer is None:
            found.append(("group", f"group {group_id}", f"group {group_id} has no consumers left ({lag} behind)", None))
        note = group.committer
        now_ms = round(observation.wall * 1000)
        if note is not None and not note.alive(now_ms):
            found.append(
                (
                    "job",
                    f"job {note.job}",
                    f"the {note.job} job ({note.client}) of group {group_id} stopped committing: last commit "
                    f"{note.age_s(now_ms):.0f} s ago, {lag} behind",
                    note.committed_at_ms / 1000,  # silent since its last commit
                )
            )
        return found

    def _since(self, kind: str, subject: str, text: str, now: float) -> Problem:
        began = self.began.setdefault((kind, subject), now)
        return Problem(kind, subject, text, began)


def _down_brokers(observation: Observation, live: set[int], seen: set[int]) -> Mapping[int, tuple[int, int]]:
    """Each broker that is down (seen before or named as a replica, not listed now): how many
    partitions it leaves under-replicated, and how many offline."""
    down: dict[int, list[int]] = {node: [0, 0] for node in seen - live}
    for topic in observation.topics.values():
        for partition in topic.partitions:
            for node in set(partition.replicas) - live:
                counts = down.setdefault(node, [0, 0])
                counts[1 if partition.offline else 0] += 1
    return {node: (under, offline) for node, (under, offline) in down.items()}
