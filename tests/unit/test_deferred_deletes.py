"""file.delete.delay.ms at the log: deleted segments wait as `*.deleted` files in due order,
and a compacted segment's replacement deleted in turn within the delay keeps its own files
for its own delay (the earlier segment, whose names it takes, goes at once)."""

from __future__ import annotations

from broker.log.cleaner import clean
from broker.protocol.records import Record, build_batch
from tests.support.logs import START_MS, environment


def test_a_compacted_segments_replacement_deleted_within_the_delay_keeps_its_files_for_its_own_delay() -> None:
    settings = {"cleanup.policy": "compact", "segment.bytes": "600", "file.delete.delay.ms": "60000"}
    with environment(settings) as env:
        log = env.open()
        for i in range(12):
            log.append(build_batch([Record(0, START_MS - 100 + i, b"k%d" % (i % 3), b"v" * 100)]))
        assert len(log.segments) > 3
        replaced = log.segments[0]
        assert clean(log) is not None
        replacement = log.segments[0]
        assert replacement is not replaced
        assert replacement.base_offset == replaced.base_offset == 0
        deleted = env.directory / f"{0:020d}.log.deleted"
        assert deleted.exists()  # the segments compaction replaced, due at START_MS + 60 s
        by_compaction = len(log.deletions)

        env.clock.advance(1000)
        log.delete_records(log.segments[1].base_offset)  # the replacement goes too, due 1 s later
        assert replaced.deleted  # removed at once: its names are the replacement's now
        assert not replacement.deleted
        assert deleted.exists()
        assert log.deletions.reap(START_MS + 60_000) == by_compaction  # nothing of the replacement
        assert deleted.exists()
        assert log.deletions.reap(START_MS + 61_000) == 1
        assert not deleted.exists()
        assert list(env.directory.glob("*.deleted")) == []
        log.close(clean=True)


def test_deleted_segments_are_reaped_in_due_order_and_left_ones_removed_when_the_log_opens() -> None:
    with environment({"segment.bytes": "600", "file.delete.delay.ms": "5000"}) as env:
        log = env.open()
        for i in range(12):
            log.append(build_batch([Record(0, START_MS + i, None, b"v" * 100)]))
        log.delete_records(log.segments[1].base_offset)
        env.clock.advance(1000)
        log.delete_records(log.segments[1].base_offset)
        assert len(log.deletions) == 2
        assert log.deletions.reap(START_MS + 4_999) == 0
        assert log.deletions.reap(START_MS + 5_000) == 1
        assert len(log.deletions) == 1
        log.close(clean=True)
        assert list(env.directory.glob("*.log.deleted"))  # the second's delay was not over
        reopened = env.open()
        assert list(env.directory.glob("*.deleted")) == []
        assert reopened.log_start_offset == reopened.segments[0].base_offset > 0
        reopened.close(clean=True)
