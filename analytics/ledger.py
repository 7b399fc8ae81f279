"""The analytics jobs' own state: what every micro-batch contributed, and the running totals.

Spark's checkpoint only knows which Kafka offsets each micro-batch read; the totals live here,
in `DATA_DIR/state/<job>/g<generation>/b<batch>.json`, one file per micro-batch, written before
the batch's outputs (Parquet, topic).  A file holds the batch's *coverage* (per topic-partition,
the first and last offset it read) and its *contributions*: components (`analytics.metrics`) to
add to the totals.  The totals are the sum of the contributions of every batch in force.

Generations.  Each start of a job begins a new generation (1, 2, ...; `next_generation`), and
its batch ids are Spark's.  A new query may read again records an earlier generation already
counted: restarted on its checkpoint, the batch that was in flight when the job stopped (Spark
runs it again with the same offsets); with a fresh checkpoint and `startingOffsets=group`, the
records after the group's committed offsets -- again that in-flight batch, since the source
commits a batch only once it is complete.  A batch of an earlier generation is *superseded* as
soon as a batch of a newer one covers one of its offsets: its contributions are withdrawn from
the totals and its windows recomputed.  Batches are contiguous per partition and a restart
resumes at the end of a complete batch, so the batches superseded are exactly those read again:
the totals stay exact.  (A query limited by maxRecordsPerTrigger may show lower values for a
moment, until it has read the whole withdrawn range again.)  A batch Spark runs again has the
same offsets and the same history before it -- the batch it supersedes is withdrawn before the
watermark is computed -- so it computes what the first attempt did.

Lateness.  Before each batch, watermark = (latest event time seen by the batches in force) -
lateness.  An event whose window ended at or before the watermark is late: it is not added to
its window (the window is final) but counted under the `late` component, so nothing
disappears silently.  Like Spark's watermark it depends on batch boundaries only for events
later than the allowed lateness.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from analytics.metrics import LATE, WINDOW_MS, ComponentKey, Components, MetricValue, derive

__all__ = ["Applied", "BatchFacts", "Ledger", "Span", "atomic_write", "next_generation"]

Partition = tuple[str, int]
BatchRef = tuple[int, int]  # (generation, batch id)
MAX_CLOCK_SKEW_MS = 5 * 60_000  # how far ahead of the driver's clock an event time may move the watermark
_GENERATION_DIR = re.compile(r"g(\d+)")
_BATCH_FILE = re.compile(r"b(\d+)\.json")


@dataclass(frozen=True, slots=True)
class Span:
    """The first and last offset of the records a batch read from one partition."""

    first: int
    last: int

    def overlaps(self, other: Span) -> bool:
        return self.first <= other.last and other.first <= self.last

    def union(self, other: Span) -> Span:
        return Span(min(self.first, other.first), max(self.last, other.last))


@dataclass
class BatchFacts:
    """What one micro-batch read, aggregated (by Spark) before the ledger classifies it."""

    coverage: dict[Partition, Span] = field(default_factory=dict)
    records: int = 0
    components: dict[ComponentKey, Components] = field(default_factory=dict)  # by event-time window
    quarantined: dict[ComponentKey, Components] = field(default_factory=dict)  # by record-time window
    max_event_ms: int | None = None


@dataclass(frozen=True)
class Applied:
    """The outcome of a batch: the metrics of every window it changed, and what it did."""

    values: list[MetricValue]
    late: int
    superseded: list[BatchRef]
    watermark_ms: int | None


@dataclass
class _Manifest:
    coverage: dict[Partition, Span]
    max_event_ms: int | None
    superseded: bool = False


def atomic_write(path: Path, data: bytes) -> None:
    """Replace `path` with `data` all at once: a crash, or a power cut, leaves the old file or
    the new one (the data is on disk before the rename, the rename before the return).  The
    temporary name starts with a dot, which Parquet readers skip."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def next_generation(root: Path) -> int:
    """1 + the highest generation with state under `root` (`state/<job>`)."""
    return 1 + max((g for g, _ in _generation_dirs(root)), default=0)


def _generation_dirs(root: Path) -> Iterator[tuple[int, Path]]:
    if root.is_dir():
        for d in root.iterdir():
            m = _GENERATION_DIR.fullmatch(d.name)
            if m and d.is_dir():
                yield int(m.group(1)), d


class Ledger:
    """The totals of one job and the state files they come from (see the module docstring)."""

    def __init__(
        self,
        root: Path,
        job: str,
        generation: int,
        lateness_ms: int,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.root = root
        self.clock_ms = clock_ms
        self.job = job
        self.generation = generation
        self.lateness_ms = lateness_ms
        self._manifests: dict[BatchRef, _Manifest] = {}
        self._totals: dict[int, dict[ComponentKey, Components]] = {}
        self._max_event_ms: int | None = None
        # Per partition, the last offset read by an older generation's batch in force: a batch
        # starting past it on every partition supersedes nothing (the usual case, cheap).
        self._older_reach: dict[Partition, int] = {}
        self._started = False

    # -- files -------------------------------------------------------------------------------

    def path(self, ref: BatchRef) -> Path:
        return self.root / f"g{ref[0]:04d}" / f"b{ref[1]:09d}.json"

    def _files(self) -> Iterator[tuple[BatchRef, Path]]:
        for generation, d in _generation_dirs(self.root):
            for f in d.iterdir():
                m = _BATCH_FILE.fullmatch(f.name)
                if m:
                    yield (generation, int(m.group(1))), f

    def _read(self, ref: BatchRef) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.path(ref).read_bytes())
        return loaded

    # -- start -------------------------------------------------------------------------------

    def start(self) -> None:
        """Load the state in force: every batch file, minus the superseded ones."""
        contributions: dict[BatchRef, dict[ComponentKey, Components]] = {}
        for ref, path in sorted(self._files()):
            if ref[0] >= self.generation:
                raise RuntimeError(
                    f"{path} belongs to generation {ref[0]}, not older than this job's {self.generation}: "
                    "is another job writing to this data directory?"
                )
            raw = json.loads(path.read_bytes())
            self._manifests[ref] = _Manifest(_coverage(raw["coverage"]), raw.get("max_event_ms"))
            contributions[ref] = _contributions(raw["contributions"])
        self._mark_superseded()
        for ref, manifest in self._manifests.items():
            if not manifest.superseded:
                self._add(contributions[ref])
                for tp, span in manifest.coverage.items():
                    self._older_reach[tp] = max(self._older_reach.get(tp, span.last), span.last)
        self._max_event_ms = self._latest_event()
        self._started = True

    def _mark_superseded(self) -> None:
        """A batch is superseded when a newer generation read one of its offsets.  A generation
        reads each partition contiguously (Spark's batches follow one another), so the span
        from the first to the last offset it read is exactly what it read."""
        spans: dict[int, dict[Partition, Span]] = {}  # per generation, per partition: what it read
        for (generation, _), m in self._manifests.items():
            per = spans.setdefault(generation, {})
            for tp, span in m.coverage.items():
                per[tp] = per[tp].union(span) if tp in per else span
        for (generation, _), m in self._manifests.items():
            m.superseded = any(
                tp in spans[newer] and spans[newer][tp].overlaps(span)
                for newer in spans
                if newer > generation
                for tp, span in m.coverage.items()
            )

    # -- batches -----------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self._started

    def watermark(self) -> int | None:
        return None if self._max_event_ms is None else self._max_event_ms - self.lateness_ms

    def apply(self, batch_id: int, facts: BatchFacts) -> Applied:
        """Record a batch of this generation: its state file, then the totals; the metrics of
        every window it changed."""
        if not self._started:
            raise RuntimeError("Ledger.start() must be called before the first batch")
        ref = (self.generation, batch_id)
        reaches_older = any(span.first <= self._older_reach.get(tp, -1) for tp, span in facts.coverage.items())
        superseded = [
            old
            for old, m in (self._manifests.items() if reaches_older else ())
            if old[0] < self.generation
            and not m.superseded
            and any(tp in m.coverage and m.coverage[tp].overlaps(span) for tp, span in facts.coverage.items())
        ]
        withdrawn = {old: _contributions(self._read(old)["contributions"]) for old in superseded}
        touched = {k.window_ms for c in withdrawn.values() for k in c}
        before = {w: {(v.metric, v.dimensions) for v in self._derive(w)} for w in touched}
        for old, contribution in withdrawn.items():
            self._manifests[old].superseded = True
            self._subtract(contribution)
        if superseded:
            self._max_event_ms = self._latest_event()

        watermark = self.watermark()
        contributions: dict[ComponentKey, Components] = {}
        late = 0
        for key, c in facts.components.items():
            if watermark is not None and key.window_ms + WINDOW_MS <= watermark:
                _accumulate(contributions, ComponentKey(LATE, key.window_ms), Components(n=c.n))
                late += c.n
            else:
                _accumulate(contributions, key, c)
        for key, c in facts.quarantined.items():
            _accumulate(contributions, key, c)

        # An event time from the future (a producer's clock or units gone wrong) counts in its
        # window but moves the watermark only as far as the driver's clock allows: otherwise one
        # such record would make every later event late, for good (the watermark is persisted).
        max_event_ms = facts.max_event_ms
        if max_event_ms is not None:
            max_event_ms = min(max_event_ms, self.clock_ms() + MAX_CLOCK_SKEW_MS)

        state = {
            "job": self.job,
            "generation": self.generation,
            "batch_id": batch_id,
            "records": facts.records,
            "coverage": [[t, p, s.first, s.last] for (t, p), s in sorted(facts.coverage.items())],
            "max_event_ms": max_event_ms,
            "watermark_ms": watermark,
            "superseded": [list(r) for r in superseded],
            "contributions": [
                {"kind": k.kind, "window_ms": k.window_ms, "dims": list(k.dims), **c.to_json()}
                for k, c in sorted(contributions.items())
            ],
        }
        atomic_write(self.path(ref), json.dumps(state, separators=(",", ":")).encode())

        self._manifests[ref] = _Manifest(dict(facts.coverage), max_event_ms)
        self._add(contributions)
        if max_event_ms is not None and (self._max_event_ms is None or max_event_ms > self._max_event_ms):
            self._max_event_ms = max_event_ms
        touched |= {k.window_ms for k in contributions}
        values: list[MetricValue] = []
        for window in sorted(touched):
            current = self._derive(window)
            values.extend(current)
            # A metric whose every contribution was withdrawn is published once more as 0, so
            # the newest value of its key is right.
            present = {(v.metric, v.dimensions) for v in current}
            values.extend(
                MetricValue(metric, window, dims, value=Decimal(0), count=0)
                for metric, dims in sorted(before.get(window, set()) - present)
            )
        return Applied(values=values, late=late, superseded=superseded, watermark_ms=watermark)

    # -- totals ------------------------------------------------------------------------------

    def totals(self) -> dict[ComponentKey, Components]:
        """Every component total in force (for tests and tools)."""
        return {k: c for window in self._totals.values() for k, c in window.items()}

    def _derive(self, window: int) -> list[MetricValue]:
        return derive(self.job, window, self._totals.get(window, {}))

    def _add(self, contributions: Mapping[ComponentKey, Components]) -> None:
        for key, c in contributions.items():
            _accumulate(self._totals.setdefault(key.window_ms, {}), key, c)

    def _subtract(self, contributions: Mapping[ComponentKey, Components]) -> None:
        for key, c in contributions.items():
            window = self._totals.get(key.window_ms, {})
            total = window.get(key)
            if total is None:
                continue
            total.subtract(c)
            if total.n <= 0:
                del window[key]

    def _latest_event(self) -> int | None:
        return max(
            (m.max_event_ms for m in self._manifests.values() if not m.superseded and m.max_event_ms is not None),
            default=None,
        )


def _accumulate(into: dict[ComponentKey, Components], key: ComponentKey, c: Components) -> None:
    total = into.get(key)
    if total is None:
        total = into[key] = Components()
    total.add(c)


def _coverage(raw: Iterable[list[Any]]) -> dict[Partition, Span]:
    return {(str(t), int(p)): Span(int(first), int(last)) for t, p, first, last in raw}


def _contributions(raw: Iterable[Mapping[str, Any]]) -> dict[ComponentKey, Components]:
    return {
        ComponentKey(str(r["kind"]), int(r["window_ms"]), tuple(str(d) for d in r["dims"])): Components.from_json(r)
        for r in raw
    }
