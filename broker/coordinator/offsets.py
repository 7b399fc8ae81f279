"""Committed offsets: every group's position per partition and the `o` records that store
them on `__consumer_offsets` (Kafka's OffsetMetadataManager).  Whether a commit may be
made (the member's generation or epoch) is group membership's question
(broker/coordinator/membership.py); the shard asks it first, then stores here.

Memory and the records always agree: each change is made in memory and handed back as
the records (tombstones) the shard appends in the same step; for a commit, `apply` runs
in the step that appends the records `commit_records` built for it.  A group with no
committed offset has no entry at all, so an emptied group is never mistaken for one that
still holds offsets (ListGroups, retention, DeleteGroups all ask `group_id in by_group`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any, NamedTuple

import structlog

from broker.coordinator.records import Rec
from broker.replay import is_int, need

log = structlog.get_logger(__name__)

RECORD_KINDS = frozenset({"o"})
TopicPartition = tuple[str, int]


class CommittedOffset(NamedTuple):
    """Immutable; a tuple, as a commit makes one per partition and a frozen dataclass's
    construction costs several times a tuple's."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_ms: int


def _key(group_id: str, topic: str, partition: int) -> list[object]:
    return ["o", group_id, topic, partition]


def commit_records(group_id: str, offsets: Mapping[TopicPartition, tuple[int, int, str]], now: int) -> list[Rec]:
    """The records of a commit that `CommittedOffsets.apply` makes (pure: may be built off
    the event loop)."""
    return [
        (_key(group_id, topic, partition), {"o": offset, "e": epoch, "m": metadata, "t": now})
        for (topic, partition), (offset, epoch, metadata) in offsets.items()
    ]


class CommittedOffsets:
    """Every group's committed offsets, by group then (topic, partition)."""

    def __init__(self) -> None:
        self.by_group: dict[str, dict[TopicPartition, CommittedOffset]] = {}

    def __contains__(self, group_id: object) -> bool:
        return group_id in self.by_group

    def of(self, group_id: str) -> Mapping[TopicPartition, CommittedOffset]:
        return self.by_group.get(group_id, {})

    # --- commit --------------------------------------------------------------------------

    def apply(self, group_id: str, offsets: Mapping[TopicPartition, tuple[int, int, str]], now: int) -> None:
        """Store (topic, partition) -> (offset, epoch, metadata) in memory; `commit_records`
        are their records, which the shard appends in the same step."""
        stored = self.by_group.setdefault(group_id, {})
        for tp, (offset, epoch, metadata) in offsets.items():
            stored[tp] = CommittedOffset(offset, epoch, metadata, now)
        if not stored:
            del self.by_group[group_id]

    # --- deletion ------------------------------------------------------------------------

    def remove(self, group_id: str, partitions: Iterable[TopicPartition]) -> list[Rec]:
        """Forget those of `partitions` the group has offsets for; returns their tombstones."""
        stored = self.by_group.get(group_id)
        if stored is None:
            return []
        records: list[Rec] = [(_key(group_id, *tp), None) for tp in partitions if stored.pop(tp, None) is not None]
        if not stored:
            del self.by_group[group_id]
        return records

    def remove_group(self, group_id: str) -> list[Rec]:
        return self.remove(group_id, list(self.of(group_id)))

    def remove_topics(self, topics: Collection[str]) -> dict[str, list[Rec]]:
        """Deleted topics' offsets, from every group (Kafka's onPartitionsDeleted): the
        tombstones by group, for the shard to append to each group's partition."""
        out: dict[str, list[Rec]] = {}
        for group_id, stored in list(self.by_group.items()):
            partitions = [tp for tp in stored if tp[0] in topics]
            if partitions:
                out[group_id] = self.remove(group_id, partitions)
        return out

    # --- retention -----------------------------------------------------------------------

    def expired(self, group_id: str, empty_since: int | None, now: int, retention_ms: int) -> list[TopicPartition]:
        """Kafka's rule for a group without members: an offset expires `retention_ms` after
        its commit and after the group emptied (KIP-211; `empty_since` None: the commit alone
        counts, as for a group membership does not know)."""
        return [
            tp
            for tp, committed in self.of(group_id).items()
            if now - (empty_since if empty_since is not None else committed.commit_ms) >= retention_ms
            and now - committed.commit_ms >= retention_ms
        ]

    def expire(self, group_id: str, empty_since: int | None, now: int, retention_ms: int) -> list[Rec]:
        """Forget the group's expired offsets (the caller has checked it has no members);
        returns their tombstones."""
        records = self.remove(group_id, self.expired(group_id, empty_since, now, retention_ms))
        if records:
            log.info("offsets expired", group=group_id, partitions=len(records))
        return records

    # --- replay --------------------------------------------------------------------------

    def replay(self, key: list[Any], value: dict[str, Any] | None) -> None:
        """Apply one `o` record; raises, changing nothing, on a shape never written."""
        need(len(key) == 4 and isinstance(key[2], str) and is_int(key[3]), "offset key is malformed")
        _, group_id, topic, partition = key
        if value is None:
            self.remove(group_id, [(topic, partition)])
            return
        fields: list[Any] = [value.get(k) for k in "oemt"]
        offset, epoch, metadata, commit_ms = fields
        need(
            is_int(offset) and is_int(epoch) and isinstance(metadata, str) and is_int(commit_ms),
            "offset value is malformed",
        )
        self.by_group.setdefault(group_id, {})[(topic, partition)] = CommittedOffset(offset, epoch, metadata, commit_ms)
