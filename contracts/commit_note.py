"""What a job that only commits says about itself in its offsets' metadata.

The analytics job is a consumer group without members: Spark reads by offset and the job commits
its progress with OffsetCommit alone, so Kafka's tools show the group as "Empty, 0 members"
while it runs.  Each commit therefore carries, in the per-partition metadata string that
OffsetCommit stores and OffsetFetch returns (Kafka keeps up to `offset.metadata.max.bytes`,
4096 by default), a short JSON note: which process committed, when, and how often it commits
at the least (it re-commits unchanged positions at that interval while idle).  Any tool that
reads the group's offsets can then show the job as what it is: the committing client, its last
commit, and whether it is alive (it committed within three of its intervals).

Stdlib only: the dashboard and the console tools read it without Spark.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["MISSED_INTERVALS", "CommitNote", "newest", "note_text", "parse"]

_KIND = "streamshop.committer"
MISSED_INTERVALS = 3  # a committer is taken for dead after this many intervals without a commit


@dataclass(frozen=True, slots=True)
class CommitNote:
    job: str  # e.g. "analytics"
    client: str  # host:pid of the committing process
    committed_at_ms: int
    every_s: float  # it commits at least this often while running
    progress_at_ms: int | None = None  # when its committed positions last moved (its last batch)

    def age_s(self, now_ms: int) -> float:
        return max(0.0, (now_ms - self.committed_at_ms) / 1000)

    def alive(self, now_ms: int) -> bool:
        return self.age_s(now_ms) <= MISSED_INTERVALS * self.every_s

    def batch_age_s(self, now_ms: int) -> float | None:
        return None if self.progress_at_ms is None else max(0.0, (now_ms - self.progress_at_ms) / 1000)

    def to_json(self, now_ms: int) -> dict[str, object]:
        batch_age = self.batch_age_s(now_ms)
        return {
            "job": self.job,
            "client": self.client,
            "last_commit_ms": self.committed_at_ms,
            "age_s": round(self.age_s(now_ms), 1),
            "last_batch_ms": self.progress_at_ms,
            "batch_age_s": None if batch_age is None else round(batch_age, 1),
            "every_s": self.every_s,
            "alive": self.alive(now_ms),
        }


def note_text(job: str, committed_at_ms: int, every_s: float, progress_at_ms: int | None = None) -> str:
    client = f"{socket.gethostname()}:{os.getpid()}"
    body = {"kind": _KIND, "job": job, "client": client, "at": committed_at_ms, "every_s": every_s}
    if progress_at_ms is not None:
        body["progress_at"] = progress_at_ms
    return json.dumps(body, separators=(",", ":"))


def parse(text: str | None) -> CommitNote | None:
    """The note in a committed offset's metadata; None for anything else (most clients leave
    it empty; a hostile one may put anything there)."""
    if not text or len(text) > 4096 or not text.startswith("{"):
        return None
    text = text.rstrip("\x00")  # librdkafka sends the metadata with its C string's terminator
    try:
        body = json.loads(text)
        if not isinstance(body, dict) or body.get("kind") != _KIND:
            return None
        at, every = body["at"], body["every_s"]
        if isinstance(at, bool) or not isinstance(at, int) or not isinstance(every, (int, float)) or every <= 0:
            return None
        progress = body.get("progress_at")
        if isinstance(progress, bool) or not isinstance(progress, int):
            progress = None
        return CommitNote(str(body["job"])[:200], str(body["client"])[:200], at, float(every), progress)
    except (ValueError, KeyError, TypeError, RecursionError):
        return None


def newest(texts: Iterable[str | None]) -> CommitNote | None:
    """The most recent note among a group's committed partitions."""
    notes = [n for n in map(parse, texts) if n is not None]
    return max(notes, key=lambda n: n.committed_at_ms) if notes else None
