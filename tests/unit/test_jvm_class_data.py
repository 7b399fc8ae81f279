"""Class-data archives (kit.jvm): an archive is chosen by what it depends on, put in place only
after the JVM that wrote it exited cleanly, written by one process at a time, and never used
stale. The JVM side (a Kafka tool writing and then using one) is in
tests/integration/test_kafka_tools.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kit.jvm import CACHE_ENV, being_written, cache_directory, class_data


@pytest.fixture
def jars(tmp_path: Path) -> Path:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "a.jar").write_bytes(b"a" * 10)
    (lib / "b.jar").write_bytes(b"b" * 20)
    return lib


def _write_archive(part: Path | None) -> None:
    """What the JVM does as it exits."""
    assert part is not None
    part.write_bytes(b"archive")


def test_the_first_start_writes_the_archive_and_the_next_maps_it(tmp_path: Path, jars: Path) -> None:
    cache = tmp_path / "cache"
    first = class_data("tools", sys.executable, [jars], cache)
    assert first.writing is not None
    assert first.archive is not None
    assert f"-XX:ArchiveClassesAtExit={first.writing}" in first.options
    assert "-Xlog:cds*=off" in first.options  # Java's archive messages never reach a tool's stdout
    _write_archive(first.writing)
    first.settle(0)
    assert first.archive.read_bytes() == b"archive"
    assert sorted(p.name for p in cache.iterdir()) == [first.archive.name]  # no part, no claim left

    second = class_data("tools", sys.executable, [jars], cache)
    assert second.writing is None
    assert f"-XX:SharedArchiveFile={first.archive}" in second.options
    second.settle(0)  # a start that only mapped the archive changes nothing
    assert first.archive.exists()


@pytest.mark.parametrize("status", [1, 137, None])
def test_a_jvm_that_failed_or_was_killed_leaves_no_archive(tmp_path: Path, jars: Path, status: int | None) -> None:
    """A truncated archive is a SIGBUS in every later JVM: only a clean exit puts one in place."""
    cache = tmp_path / "cache"
    start = class_data("tools", sys.executable, [jars], cache)
    _write_archive(start.writing)
    start.settle(status)
    assert list(cache.iterdir()) == []
    assert class_data("tools", sys.executable, [jars], cache).writing is not None  # the next one tries again


def test_a_clean_exit_without_a_written_archive_keeps_nothing(tmp_path: Path, jars: Path) -> None:
    cache = tmp_path / "cache"
    start = class_data("tools", sys.executable, [jars], cache)
    start.settle(0)
    assert list(cache.iterdir()) == []


def test_other_jars_or_another_java_select_another_archive_and_the_old_one_goes(tmp_path: Path, jars: Path) -> None:
    cache = tmp_path / "cache"
    old = class_data("tools", sys.executable, [jars], cache)
    _write_archive(old.writing)
    old.settle(0)
    assert old.archive is not None

    (jars / "b.jar").write_bytes(b"b" * 21)  # an upgraded jar
    new = class_data("tools", sys.executable, [jars], cache)
    assert new.archive != old.archive
    assert new.writing is not None
    assert not any(str(old.archive) in option for option in new.options)
    _write_archive(new.writing)
    new.settle(0)
    assert not old.archive.exists()
    assert new.archive is not None
    assert new.archive.exists()

    java = tmp_path / "java"
    java.write_text("another build")
    assert class_data("tools", str(java), [jars], cache).archive != new.archive
    # Another family is another archive, left alone by this one's upgrades, even when its
    # name starts with this one's.
    other = class_data("tools-extra", sys.executable, [jars], cache)
    _write_archive(other.writing)
    other.settle(0)
    (jars / "a.jar").write_bytes(b"a" * 11)
    newer = class_data("tools", sys.executable, [jars], cache)
    _write_archive(newer.writing)
    newer.settle(0)
    assert other.archive is not None
    assert other.archive.exists()
    assert not new.archive.exists()


def test_while_one_process_writes_the_archive_the_others_start_without(tmp_path: Path, jars: Path) -> None:
    cache = tmp_path / "cache"
    writer = class_data("tools", sys.executable, [jars], cache)
    assert writer.writing is not None
    other = class_data("tools", sys.executable, [jars], cache)
    assert other.options == ()
    assert other.writing is None
    writer.settle(None)
    assert class_data("tools", sys.executable, [jars], cache).writing is not None


def test_a_claim_left_by_a_process_that_died_is_taken_over(tmp_path: Path, jars: Path) -> None:
    cache = tmp_path / "cache"
    writer = class_data("tools", sys.executable, [jars], cache)
    assert writer.archive is not None
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    claim = writer.archive.with_name(writer.archive.name + ".claim")
    claim.write_text(dead.stdout)  # as if that process had claimed it and then died
    taken = class_data("tools", sys.executable, [jars], cache)
    assert taken.writing is not None
    assert claim.read_text().strip() == str(os.getpid())


def test_an_empty_setting_turns_archives_off(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, jars: Path) -> None:
    monkeypatch.setenv(CACHE_ENV, "")
    assert cache_directory() is None
    assert class_data("tools", sys.executable, [jars]).options == ()
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "elsewhere"))
    assert cache_directory() == tmp_path / "elsewhere"
    monkeypatch.delenv(CACHE_ENV)
    assert cache_directory() == Path.home() / ".cache" / "streamshop" / "jvm"


def test_a_start_that_does_not_write_maps_the_archive_or_starts_without(tmp_path: Path, jars: Path) -> None:
    """How the Spark driver asks (a job's driver may run for days; its archive is written by a
    short run of its own): no claim is taken, and whether one is held can be asked."""
    cache = tmp_path / "cache"
    asked = class_data("spark", sys.executable, [jars], cache, write=False)
    assert asked.options == ()
    assert asked.writing is None
    assert asked.archive is not None
    assert not being_written(asked.archive)
    writer = class_data("spark", sys.executable, [jars], cache)
    assert writer.archive == asked.archive
    assert being_written(asked.archive)
    _write_archive(writer.writing)
    writer.settle(0)
    assert not being_written(asked.archive)
    mapped = class_data("spark", sys.executable, [jars], cache, write=False)
    assert f"-XX:SharedArchiveFile={asked.archive}" in mapped.options
