"""The server-side assignors of the consumer group protocol (KIP-848): `uniform` and `range`.

Under KIP-848 the coordinator, not a member, computes the group's target assignment.  An
assignor sees every member's subscribed topics (by topic id), each topic's partition count
and the previous target, and returns the new one.  Both are pure functions, deterministic
for a given input, so a restarted broker recomputes what it computed before.

- `uniform` (the default, as in Kafka): every member gets as many partitions as it can
  within one of every other member subscribed to the same topics, and a partition stays
  with its member whenever the balance allows (sticky), so a member leaving or joining
  moves only the partitions it must.
- `range`: per topic, the subscribed members in member-id order take contiguous ranges,
  the first `partitions % members` of them one more.  Members subscribed to several topics
  with the same partition count get the same partition numbers of each (co-partitioning).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping

Assignment = dict[uuid.UUID, frozenset[int]]  # topic id -> partitions
Subscriptions = Mapping[str, frozenset[uuid.UUID]]  # member id -> subscribed topic ids
Assignor = Callable[[Subscriptions, Mapping[uuid.UUID, int], Mapping[str, Assignment]], dict[str, Assignment]]


def uniform(
    members: Subscriptions, partitions: Mapping[uuid.UUID, int], previous: Mapping[str, Assignment]
) -> dict[str, Assignment]:
    owned: dict[str, set[tuple[uuid.UUID, int]]] = {m: set() for m in members}
    taken: set[tuple[uuid.UUID, int]] = set()
    eligible = {t: sorted(m for m, subs in members.items() if t in subs) for t in partitions}
    # What each member keeps: its previous partitions that still exist and that it still
    # subscribes to (each partition once, should a previous target be inconsistent).  When all
    # subscribe alike, up to the balanced share, so a member joining takes only what it must;
    # otherwise all of them, and the balancing below moves only what the balance requires.
    alike = len({members[m] for m in members}) <= 1
    total = sum(count for t, count in partitions.items() if eligible[t])
    for member in sorted(members):
        share = -(-total // len(members)) if alike else total
        for topic, parts in sorted(previous.get(member, {}).items(), key=lambda tp: str(tp[0])):
            if topic not in members[member] or topic not in partitions:
                continue
            for p in sorted(parts):
                if len(owned[member]) < share and p < partitions[topic] and (topic, p) not in taken:
                    owned[member].add((topic, p))
                    taken.add((topic, p))
    # The rest go, one by one, to the least loaded eligible member (ties: member id).
    for topic in sorted(partitions, key=str):
        if not eligible[topic]:
            continue
        for p in range(partitions[topic]):
            if (topic, p) not in taken:
                chosen = min(eligible[topic], key=lambda m: (len(owned[m]), m))
                owned[chosen].add((topic, p))
                taken.add((topic, p))
    _balance(owned, eligible)
    return {m: _as_assignment(parts) for m, parts in owned.items()}


def _balance(owned: dict[str, set[tuple[uuid.UUID, int]]], eligible: Mapping[uuid.UUID, list[str]]) -> None:
    """Move partitions from the most loaded members to members with two or more fewer
    that may take them.  Each move lowers the sum of squared loads, so this ends."""
    moved = True
    while moved:
        moved = False
        for giver in sorted(owned, key=lambda m: (-len(owned[m]), m)):
            # Highest partitions first: a member keeps the low ones it had longest.
            for topic, p in sorted(owned[giver], key=lambda tp: (str(tp[0]), -tp[1])):
                takers = [m for m in eligible[topic] if len(owned[m]) + 1 < len(owned[giver])]
                if takers:
                    taker = min(takers, key=lambda m: (len(owned[m]), m))
                    owned[giver].discard((topic, p))
                    owned[taker].add((topic, p))
                    moved = True
                    break
            if moved:
                break


def range_(
    members: Subscriptions, partitions: Mapping[uuid.UUID, int], previous: Mapping[str, Assignment]
) -> dict[str, Assignment]:
    owned: dict[str, set[tuple[uuid.UUID, int]]] = {m: set() for m in members}
    for topic, count in partitions.items():
        subscribers = sorted(m for m, subs in members.items() if topic in subs)
        if not subscribers:
            continue
        share, extra = divmod(count, len(subscribers))
        start = 0
        for i, member in enumerate(subscribers):
            size = share + (1 if i < extra else 0)
            owned[member].update((topic, p) for p in range(start, start + size))
            start += size
    return {m: _as_assignment(parts) for m, parts in owned.items()}


def _as_assignment(parts: set[tuple[uuid.UUID, int]]) -> Assignment:
    out: dict[uuid.UUID, set[int]] = {}
    for topic, p in parts:
        out.setdefault(topic, set()).add(p)
    return {topic: frozenset(ps) for topic, ps in out.items()}


ASSIGNORS: dict[str, Assignor] = {"uniform": uniform, "range": range_}
