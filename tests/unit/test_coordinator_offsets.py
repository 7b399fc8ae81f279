"""The committed offsets manager alone (broker/coordinator/offsets.py), without group
membership or the shard: commits and overwrites, tombstones, retention by a ManualClock,
a deleted topic's offsets, and replay of its records from a real `__consumer_offsets` log.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.clock import ManualClock
from broker.config import BrokerConfig
from broker.coordinator.coordinator import COORDINATOR_TOPIC_CONFIG, OFFSETS_TOPIC
from broker.coordinator.offsets import RECORD_KINDS, CommittedOffsets, commit_records
from broker.coordinator.records import Rec, decode, encode_batch
from broker.log.partition_log import PartitionLog
from broker.metadata import MetadataStore
from broker.replay import Malformed

RETENTION_MS = 60_000


class OffsetsLog:
    """One partition of a real `__consumer_offsets` in `tmp_path`, written and read as the
    shard does (broker/coordinator/records.py)."""

    def __init__(self, data_dir: Path, clock: ManualClock) -> None:
        self.clock = clock
        self.store = MetadataStore(BrokerConfig(data_dir=data_dir), clock, recover=False)
        self.store.create_topic(OFFSETS_TOPIC, 1, COORDINATOR_TOPIC_CONFIG, internal=True)
        plog = self.store.partition_log(OFFSETS_TOPIC, 0)
        assert plog is not None
        self.plog: PartitionLog = plog

    def append(self, records: list[Rec]) -> None:
        self.plog.append_internal(encode_batch(records, self.clock.now_ms()))

    def replay_into(self, offsets: CommittedOffsets) -> None:
        for record in self.plog.records():
            key, value = decode(record)
            assert key[0] in RECORD_KINDS
            offsets.replay(key, value)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def offsets_log(tmp_path: Path, clock: ManualClock) -> Iterator[OffsetsLog]:
    opened = OffsetsLog(tmp_path, clock)
    yield opened
    opened.store.close(clean=True)


def commit(
    offsets: CommittedOffsets, group_id: str, stored: dict[tuple[str, int], tuple[int, int, str]], now: int
) -> list[Rec]:
    """A commit as the shard makes it: the records, and memory in the same step."""
    records = commit_records(group_id, stored, now)
    offsets.apply(group_id, stored, now)
    return records


def positions(offsets: CommittedOffsets, group_id: str) -> dict[tuple[str, int], tuple[int, int, str]]:
    return {tp: (o.offset, o.leader_epoch, o.metadata) for tp, o in offsets.of(group_id).items()}


def test_a_commit_is_stored_with_its_time_and_its_records_say_the_same(clock: ManualClock) -> None:
    offsets = CommittedOffsets()
    records = commit(offsets, "g", {("t", 0): (5, 3, "meta"), ("t", 1): (9, -1, "")}, clock.now_ms())
    assert positions(offsets, "g") == {("t", 0): (5, 3, "meta"), ("t", 1): (9, -1, "")}
    assert {o.commit_ms for o in offsets.of("g").values()} == {clock.now_ms()}
    assert "g" in offsets
    assert sorted(records, key=str) == [
        (["o", "g", "t", 0], {"o": 5, "e": 3, "m": "meta", "t": clock.now_ms()}),
        (["o", "g", "t", 1], {"o": 9, "e": -1, "m": "", "t": clock.now_ms()}),
    ]
    assert offsets.of("other") == {}
    assert "other" not in offsets


def test_a_later_commit_overwrites_only_the_partitions_it_names(clock: ManualClock) -> None:
    offsets = CommittedOffsets()
    commit(offsets, "g", {("t", 0): (5, -1, "first"), ("t", 1): (6, -1, "first")}, clock.now_ms())
    clock.advance(1_000)
    commit(offsets, "g", {("t", 0): (50, 2, "second")}, clock.now_ms())
    assert positions(offsets, "g") == {("t", 0): (50, 2, "second"), ("t", 1): (6, -1, "first")}
    assert offsets.of("g")[("t", 0)].commit_ms == clock.now_ms()
    assert offsets.of("g")[("t", 1)].commit_ms == clock.now_ms() - 1_000


def test_removal_returns_tombstones_of_what_was_there_and_the_last_one_removes_the_group(
    clock: ManualClock,
) -> None:
    offsets = CommittedOffsets()
    commit(offsets, "g", {("t", 0): (1, -1, ""), ("t", 1): (2, -1, "")}, clock.now_ms())
    # A partition never committed has nothing to remove: no tombstone for it.
    assert offsets.remove("g", [("t", 0), ("t", 7)]) == [(["o", "g", "t", 0], None)]
    assert positions(offsets, "g") == {("t", 1): (2, -1, "")}
    assert offsets.remove("nobody", [("t", 1)]) == []
    assert offsets.remove_group("g") == [(["o", "g", "t", 1], None)]
    assert "g" not in offsets
    assert offsets.by_group == {}


def test_a_deleted_topics_offsets_go_from_every_group_and_no_other_offset_does(clock: ManualClock) -> None:
    offsets = CommittedOffsets()
    commit(offsets, "a", {("t", 0): (5, -1, ""), ("u", 0): (7, -1, "")}, clock.now_ms())
    commit(offsets, "b", {("t", 1): (9, -1, ""), ("t", 2): (3, -1, "")}, clock.now_ms())
    commit(offsets, "c", {("u", 1): (4, -1, "")}, clock.now_ms())

    removed = offsets.remove_topics({"t"})
    assert {g: sorted(r, key=str) for g, r in removed.items()} == {
        "a": [(["o", "a", "t", 0], None)],
        "b": [(["o", "b", "t", 1], None), (["o", "b", "t", 2], None)],
    }
    assert positions(offsets, "a") == {("u", 0): (7, -1, "")}
    assert "b" not in offsets
    assert positions(offsets, "c") == {("u", 1): (4, -1, "")}
    assert offsets.remove_topics({"t"}) == {}  # nothing left of it


def test_offsets_expire_by_retention_counted_from_the_commit_and_from_when_the_group_emptied(
    clock: ManualClock,
) -> None:
    offsets = CommittedOffsets()
    commit(offsets, "g", {("t", 0): (1, -1, "")}, clock.now_ms())
    clock.advance(10_000)
    commit(offsets, "g", {("t", 1): (2, -1, "")}, clock.now_ms())
    emptied = clock.now_ms() + 20_000  # the group lost its last member after both commits

    clock.advance(RETENTION_MS - 10_000)  # the first commit reached its retention...
    assert offsets.expire("g", emptied, clock.now_ms(), RETENTION_MS) == []  # ...but not the emptying
    assert offsets.expire("g", None, clock.now_ms(), RETENTION_MS) == [(["o", "g", "t", 0], None)]
    assert set(offsets.of("g")) == {("t", 1)}

    clock.advance(10_000 - 1)
    assert offsets.expire("g", None, clock.now_ms(), RETENTION_MS) == []
    clock.advance(1)
    assert offsets.expire("g", emptied, clock.now_ms(), RETENTION_MS) == []  # emptied 20 s later
    clock.advance(20_000)
    assert offsets.expire("g", emptied, clock.now_ms(), RETENTION_MS) == [(["o", "g", "t", 1], None)]
    assert "g" not in offsets


def test_replay_of_the_records_from_the_log_rebuilds_the_offsets_tombstones_included(
    clock: ManualClock, offsets_log: OffsetsLog
) -> None:
    offsets = CommittedOffsets()
    offsets_log.append(commit(offsets, "g", {("t", 0): (1, 0, "a"), ("t", 1): (2, 0, "b")}, clock.now_ms()))
    clock.advance(500)
    offsets_log.append(commit(offsets, "g", {("t", 0): (10, 1, "later")}, clock.now_ms()))
    offsets_log.append(commit(offsets, "h", {("u", 0): (3, -1, "")}, clock.now_ms()))
    offsets_log.append(offsets.remove("g", [("t", 1)]))
    offsets_log.append(offsets.remove_group("h"))
    offsets_log.append(commit(offsets, "k", {("x", 0): (4, -1, "")}, clock.now_ms()))
    offsets_log.append(offsets.remove_topics({"x"})["k"])
    assert offsets.by_group == {"g": {("t", 0): offsets.of("g")[("t", 0)]}}

    replayed = CommittedOffsets()
    offsets_log.replay_into(replayed)
    assert replayed.by_group == offsets.by_group
    assert replayed.of("g")[("t", 0)].commit_ms == clock.now_ms()
    assert "h" not in replayed
    assert "k" not in replayed


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (["o", "g", "t"], {"o": 1, "e": -1, "m": "", "t": 0}),  # no partition
        (["o", "g", 3, 0], {"o": 1, "e": -1, "m": "", "t": 0}),  # a topic that is no name
        (["o", "g", "t", 0], {"o": "1", "e": -1, "m": "", "t": 0}),
        (["o", "g", "t", 0], {"o": 1, "e": -1, "m": None, "t": 0}),
        (["o", "g", "t", 0], {"o": 1, "e": -1, "m": ""}),  # no commit time
    ],
)
def test_a_record_of_a_shape_never_written_is_refused_and_changes_nothing(
    key: list[object], value: dict[str, object]
) -> None:
    offsets = CommittedOffsets()
    offsets.apply("g", {("t", 0): (7, -1, "kept")}, 0)
    with pytest.raises(Malformed):
        offsets.replay(key, value)
    assert positions(offsets, "g") == {("t", 0): (7, -1, "kept")}
