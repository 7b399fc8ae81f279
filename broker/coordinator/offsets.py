"""Committed offsets: every group's position per partition, and the `o` records that store
them on `__consumer_offsets` (Kafka keeps this apart from group membership too, in its
OffsetMetadataManager).

The state here and the records always agree: each change is made in memory and handed back
as the records (tombstones) the coordinator appends, or, for a commit, made in memory in the
step that appends the records `commit_records` built for it.  A group with no
committed offset has no entry at all, so an emptied group is never mistaken for one that
still holds offsets (ListGroups, retention, DeleteGroups all ask `group_id in by_group`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from broker.replay import is_int, need

Rec = tuple[list[object], dict[str, object] | None]
TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class CommittedOffset:
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
    def __init__(self) -> None:
        self.by_group: dict[str, dict[TopicPartition, CommittedOffset]] = {}

    def of(self, group_id: str) -> Mapping[TopicPartition, CommittedOffset]:
        return self.by_group.get(group_id, {})

    def apply(self, group_id: str, offsets: Mapping[TopicPartition, tuple[int, int, str]], now: int) -> None:
        """Store (topic, partition) -> (offset, epoch, metadata) in memory; `commit_records`
        are their records, which the coordinator appends in the same step."""
        stored = self.by_group.setdefault(group_id, {})
        for tp, (offset, epoch, metadata) in offsets.items():
            stored[tp] = CommittedOffset(offset, epoch, metadata, now)
        if not stored:
            del self.by_group[group_id]

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

    def of_topics(self, topics: Collection[str]) -> dict[str, list[TopicPartition]]:
        """The groups with offsets in any of `topics`, and which partitions (one pass)."""
        out: dict[str, list[TopicPartition]] = {}
        for group_id, stored in self.by_group.items():
            partitions = [tp for tp in stored if tp[0] in topics]
            if partitions:
                out[group_id] = partitions
        return out

    def expired(self, group_id: str, empty_since: int | None, now: int, retention_ms: int) -> list[TopicPartition]:
        """Kafka's rule for a group without members: an offset expires `retention_ms` after
        its commit and after the group emptied (KIP-211)."""
        return [
            tp
            for tp, committed in self.of(group_id).items()
            if now - (empty_since if empty_since is not None else committed.commit_ms) >= retention_ms
            and now - committed.commit_ms >= retention_ms
        ]

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
