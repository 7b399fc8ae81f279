"""The topics a commit's checks saw, to tell afterwards which were deleted (or deleted and
created again under their name) while the request was served a step at a time.

A topic's deletion drops the offsets committed, or held by open transactions, for it, so that
a topic created again under the name starts afresh; an offset accepted before the deletion
and stored after it would outlive it.  Such offsets are answered UNKNOWN_TOPIC_OR_PARTITION,
as if the deletion had come first, which is what Kafka answers then.
"""

from __future__ import annotations

from collections.abc import Iterable

from broker.handlers.services import HasStore
from broker.metadata import Topic


class TopicsSeen:
    __slots__ = ("_seen", "_store", "_version")

    def __init__(self, broker: HasStore) -> None:
        self._store = broker.store
        self._version = broker.store.version
        self._seen: dict[str, Topic | None] = {}

    def see(self, name: str) -> None:
        """The checks look at `name` now (its first look is the one compared)."""
        if name not in self._seen:
            self._seen[name] = self._store.get(name)

    def gone(self, partitions: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
        """Those of `partitions` whose topic is no longer the one seen (a dictionary look-up
        per topic, none when no topic changed since)."""
        if self._store.version == self._version:
            return []
        stale = {name for name, topic in self._seen.items() if self._store.get(name) is not topic}
        return [tp for tp in partitions if tp[0] in stale] if stale else []
