"""Kafka offsets as the streaming source's offset dicts: canonical order, parsing, read limits.

An offset is ``{"orders": {"0": 12, "1": 40}, "otp.requests": {"0": 7}}``: per topic, per
partition (a string, JSON keys are strings), the next offset to read.  Spark serialises offsets
with `json.dumps` and compares the *text* to decide whether a batch has new data, so every offset
this source returns is built by `canonical()`: topics sorted by name, partitions by number.  Two
equal positions always print the same; built in any other order Spark would see "new data" that
is not there and run empty batches forever.

Pure functions, no I/O: unit-tested without a broker or Spark.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "EARLIEST",
    "LATEST",
    "OffsetRange",
    "Offsets",
    "Partition",
    "canonical",
    "fair_share",
    "flatten",
    "parse_offsets_json",
    "ranges",
    "split_range",
    "to_json",
]

# Kafka's sentinels in an offsets JSON (`startingOffsets` / `endingOffsets`), as in Spark's Kafka source.
EARLIEST = -2
LATEST = -1

Partition = tuple[str, int]
Offsets = dict[str, dict[str, int]]


def canonical(positions: Mapping[Partition, int]) -> Offsets:
    """{(topic, partition): offset} -> the offset dict in its one stable order."""
    out: Offsets = {}
    for (topic, partition), offset in sorted(positions.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def flatten(offsets: Mapping[str, Mapping[str, int]]) -> dict[Partition, int]:
    """{"topic": {"0": 5}} -> {("topic", 0): 5}."""
    return {(topic, int(p)): int(o) for topic, parts in offsets.items() for p, o in parts.items()}


def to_json(positions: Mapping[Partition, int]) -> str:
    return json.dumps(canonical(positions))


def parse_offsets_json(text: str, option: str) -> dict[Partition, int]:
    """`{"topic": {"0": 23, "1": -2}}` -> {(topic, 0): 23, (topic, 1): EARLIEST}.

    -2 means earliest, -1 latest (Kafka's convention, as in Spark's Kafka source).  Raises
    ValueError naming `option` on anything else.
    """
    try:
        raw = json.loads(text)
    except ValueError as e:
        raise ValueError(f"{option}: not JSON: {e}") from e
    if not isinstance(raw, dict):
        raise ValueError(f'{option}: expected {{"topic": {{"partition": offset}}}}, got {text!r}')  # noqa: TRY004 - a bad option value
    out: dict[Partition, int] = {}
    for topic, parts in raw.items():
        if not isinstance(parts, dict):
            raise ValueError(f"{option}: topic {topic!r} must map partitions to offsets")  # noqa: TRY004
        for partition, offset in parts.items():
            try:
                number = int(partition)
            except ValueError:
                raise ValueError(f"{option}: partition {partition!r} of {topic!r} is not a number") from None
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST or number < 0:
                raise ValueError(f"{option}: offset {offset!r} of {topic}-{partition} must be >= 0, -1 or -2")
            out[(topic, number)] = offset
    return out


def fair_share(available: Mapping[Partition, int], budget: int) -> dict[Partition, int]:
    """Split `budget` records across partitions with `available` records each, fairly.

    Water-filling: every partition gets an equal share, a partition needing less than its share
    gives the rest back to the others; what cannot be divided equally goes one record each to the
    partitions first in (topic, partition) order.  Deterministic, and the total is
    min(budget, sum(available)).  Returns how many records each partition may read.
    """
    if budget < 0:
        raise ValueError("budget must be >= 0")
    wanted = {tp: n for tp, n in sorted(available.items()) if n > 0}
    granted = dict.fromkeys(available, 0)
    left = budget
    while wanted and left > 0:
        share = left // len(wanted)
        if share == 0:
            for tp in list(wanted)[:left]:
                granted[tp] += 1
            break
        for tp, need in list(wanted.items()):
            take = min(need, share)
            granted[tp] += take
            left -= take
            if take == need:
                del wanted[tp]
            else:
                wanted[tp] = need - take
    return granted


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Records [start, end) of one topic-partition: one Spark input partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def count(self) -> int:
        return self.end - self.start


def split_range(topic: str, partition: int, start: int, end: int, max_records: int | None) -> list[OffsetRange]:
    """[start, end) as one range, or as consecutive ranges of at most `max_records` offsets."""
    if end <= start:
        return []
    if not max_records or max_records <= 0:
        return [OffsetRange(topic, partition, start, end)]
    return [OffsetRange(topic, partition, s, min(s + max_records, end)) for s in range(start, end, max_records)]


def ranges(start: Mapping[Partition, int], end: Mapping[Partition, int], max_records: int | None) -> list[OffsetRange]:
    """The input partitions between two positions, in (topic, partition, offset) order.

    A partition in `end` but not in `start` (created or matched since) is read from offset 0:
    Kafka's consumer moves to the log start if retention removed the beginning.
    """
    out: list[OffsetRange] = []
    for (topic, partition), stop in sorted(end.items()):
        out.extend(split_range(topic, partition, start.get((topic, partition), 0), stop, max_records))
    return out
