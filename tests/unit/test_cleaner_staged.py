"""Compaction in stages (`broker/log/cleaner.py`): the heavy part (`build`) writes complete
segments into a staging directory without touching anything the partition serves, so it can
run in a worker thread while the partition keeps serving and appending; `install` swaps
groups in one at a time and refuses a group whose segments changed meanwhile; a staging
directory left by a crash is dropped on start; a batch the cleaner cannot decode is kept as
stored."""

from __future__ import annotations

import struct

from broker.log.cleaner import STAGING, build, clean, discard, finish, install, plan
from broker.protocol.batch import HEADER_SIZE, compute_crc
from broker.protocol.records import Record, build_batch
from tests.support.logs import START_MS, environment
from tests.unit.test_compaction_recovery import COMPACT, _compacted_log, append, read_from

_HEADER = struct.Struct(">qiiBIhiqqqhii")


def test_build_leaves_every_served_file_untouched_and_install_gives_what_clean_gives() -> None:
    """While `build` runs the partition's files are byte-for-byte unchanged and reads see
    every record; appends continue; after installing every group the partition holds what a
    one-shot `clean` of the same data holds, and the staging directory is gone."""
    with environment(COMPACT) as env, environment(COMPACT) as twin_env:
        log, written = _compacted_log(env)
        twin, _ = _compacted_log(twin_env)
        try:
            before = {p.name: p.read_bytes() for p in env.directory.iterdir() if p.is_file()}
            chosen = plan(log)
            assert chosen is not None
            result = build(chosen)
            assert (env.directory / STAGING).is_dir()
            after = {p.name: p.read_bytes() for p in env.directory.iterdir() if p.is_file()}
            assert after == before
            assert read_from(log) == written

            installed = sum(install(log, group, result.staging) for group in result.groups)
            assert installed == len(result.groups) > 0
            stats = finish(log, result, installed)
            expected = clean(twin)
            assert expected is not None
            assert stats.records_removed == expected.records_removed > 0
            assert read_from(log) == read_from(twin)
            assert not (env.directory / STAGING).exists()
            extra = append(log, env.clock, [(b"a", b"after")])
            assert read_from(log)[-1] == extra[0]
        finally:
            log.close(clean=True)
            twin.close(clean=True)
        reopened = env.open(recover=False)
        try:
            assert read_from(reopened)[-1] == extra[0]
        finally:
            reopened.close(clean=True)


def test_a_group_whose_segments_retention_deleted_meanwhile_is_not_installed() -> None:
    """Retention deletes the oldest segments while `build` runs: the groups holding them are
    refused (no resurrected records), the others may go in, and every record retention kept
    is still served."""
    settings = {**COMPACT, "cleanup.policy": "compact,delete", "retention.ms": "4000"}
    with environment(settings) as env:
        log, _written = _compacted_log(env)
        try:
            chosen = plan(log)
            assert chosen is not None
            result = build(chosen)
            env.clock.advance(6000)
            assert log.apply_retention() > 0
            survivors = read_from(log, log.log_start_offset)
            installed = [install(log, group, result.staging) for group in result.groups]
            assert not installed[0]
            finish(log, result, sum(installed))
            served = read_from(log, log.log_start_offset)
            assert all(r in survivors for r in served), "a record retention deleted came back"
            latest = {r.key: r for r in survivors}
            assert all(r in served for r in latest.values()), "the latest record of a key went missing"
        finally:
            log.close(clean=True)


def test_a_staging_directory_left_by_a_crash_is_dropped_on_start_with_no_loss() -> None:
    with environment(COMPACT) as env:
        log, written = _compacted_log(env)
        chosen = plan(log)
        assert chosen is not None
        build(chosen)  # the broker dies before any group is installed
        log.close(clean=False)
        for recover in (True, False):
            reopened = env.open(recover=recover)
            try:
                assert not (env.directory / STAGING).exists()
                assert read_from(reopened) == written
            finally:
                reopened.close(clean=True)


def test_discard_removes_the_staged_segments() -> None:
    with environment(COMPACT) as env:
        log, written = _compacted_log(env)
        try:
            chosen = plan(log)
            assert chosen is not None
            result = build(chosen)
            discard(result)
            assert not (env.directory / STAGING).exists()
            assert read_from(log) == written
        finally:
            log.close(clean=True)


def _unknown_codec_batch(base_offset: int, key: bytes) -> bytes:
    """A CRC-valid batch whose codec bits say 7 (no such codec), as old data might hold."""
    body = build_batch([Record(0, START_MS, key, b"x" * 40)])[HEADER_SIZE:]
    out = bytearray(HEADER_SIZE) + body
    _HEADER.pack_into(out, 0, base_offset, len(out) - 12, 0, 2, 0, 7, 0, START_MS, START_MS, -1, -1, -1, 1)
    struct.pack_into(">I", out, 17, compute_crc(out))
    return bytes(out)


def test_a_batch_the_cleaner_cannot_decode_is_kept_as_stored_and_the_rest_is_compacted() -> None:
    with environment(COMPACT) as env:
        log = env.open()
        append(log, env.clock, [(b"a", b"1" * 40)], advance=1000)
        poison_offset = log.next_offset
        log.close(clean=True)
        poison = _unknown_codec_batch(poison_offset, b"a")
        active = sorted(env.directory.glob("*.log"))[-1]
        with open(active, "ab") as f:
            f.write(poison)
        log = env.open(recover=False)
        try:
            assert log.next_offset == poison_offset + 1
            for round_ in range(10):
                append(log, env.clock, [(b"a", f"{round_}".encode() * 40), (b"b", b"2" * 40)], advance=1000)
            stats = clean(log)
            assert stats is not None
            assert stats.undecodable_batches == 1
            assert stats.records_removed > 0
            stored = b"".join(p.read_bytes() for p in sorted(env.directory.glob("*.log")))
            assert poison in stored
        finally:
            log.close(clean=True)
