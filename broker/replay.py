"""Internal records that do not decode are skipped at replay, never fatal.

The metadata log and `__consumer_offsets` are written only by the broker, but a disk, an
older version or a bug can still leave a record the replay cannot read.  One such record
must not stop the broker from starting: it is skipped, counted per topic (exposed as
`streamshop_internal_records_skipped_total`) and logged, once per topic per start.
"""

from __future__ import annotations

import collections

import structlog

log = structlog.get_logger(__name__)


class SkippedRecords:
    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()

    def skip(self, topic: str, offset: int, reason: str) -> None:
        if not self.counts[topic]:
            log.error("skipped an internal record that does not decode", topic=topic, offset=offset, reason=reason)
        self.counts[topic] += 1


class Malformed(ValueError):
    """An internal record whose fields do not have the shape the broker writes."""


def is_int(x: object, bits: int = 64) -> bool:
    """An integer field as the broker writes them: no bool (an int subclass), within `bits`."""
    bound = 1 << (bits - 1)
    return isinstance(x, int) and not isinstance(x, bool) and -bound <= x < bound


def need(condition: bool, what: str) -> None:
    if not condition:
        raise Malformed(what)
