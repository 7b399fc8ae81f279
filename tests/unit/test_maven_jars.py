"""streamshop.maven_jars: a fetch is taken for complete only when Maven succeeded and copied
what was asked, for the pom as it is now; a failed fetch leaves nothing behind.  Maven here is
a stand-in script on PATH that copies or fails as each test needs."""

from __future__ import annotations

from pathlib import Path

import pytest

from analytics.spark import DRIVER_ARCHIVE, driver_family
from streamshop.clients import CommandError
from streamshop.maven_jars import complete, copy_dependencies

MVN = """#!/bin/sh
for a in "$@"; do case "$a" in -DoutputDirectory=*) out="${a#-DoutputDirectory=}";; esac; done
echo run >> "$(dirname "$0")/runs"
[ -n "$FAIL" ] && { echo "resolution failed" >&2; exit 1; }
touch "$out/$JAR"
"""


@pytest.fixture
def mvn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "mvn"
    script.write_text(MVN)
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("JAR", "connector-1.0.jar")
    monkeypatch.delenv("FAIL", raising=False)
    return bin_dir / "runs"


def test_the_first_fetch_copies_and_later_ones_reuse_until_the_pom_changes(tmp_path: Path, mvn: Path) -> None:
    pom = tmp_path / "pom.xml"
    pom.write_text("<project>1</project>")
    lib = tmp_path / "cache" / "lib"

    assert copy_dependencies(pom, lib, expect="connector-*.jar", what="jars") == lib
    assert (lib / "connector-1.0.jar").exists()
    assert complete(pom, lib)
    copy_dependencies(pom, lib, expect="connector-*.jar", what="jars")
    assert mvn.read_text().count("run") == 1

    pom.write_text("<project>2</project>")
    assert not complete(pom, lib)
    copy_dependencies(pom, lib, expect="connector-*.jar", what="jars")
    assert mvn.read_text().count("run") == 2
    assert sorted(p.name for p in lib.parent.iterdir()) == ["lib"]  # no scratch directory left


def test_a_failed_or_empty_fetch_is_an_error_and_leaves_nothing(
    tmp_path: Path, mvn: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pom = tmp_path / "pom.xml"
    pom.write_text("<project/>")
    lib = tmp_path / "cache" / "lib"
    monkeypatch.setenv("FAIL", "1")
    with pytest.raises(CommandError, match=r"(?s)could not resolve jars:.*resolution failed"):
        copy_dependencies(pom, lib, expect="connector-*.jar", what="jars")
    monkeypatch.delenv("FAIL")
    monkeypatch.setenv("JAR", "other-1.0.jar")
    with pytest.raises(CommandError, match="copied no connector-"):
        copy_dependencies(pom, lib, expect="connector-*.jar", what="jars")
    assert list(lib.parent.iterdir()) == []
    assert not complete(pom, lib)


def test_a_driver_with_extra_jars_has_an_archive_family_of_its_own() -> None:
    wheel = Path("/site-packages/pyspark/jars")
    assert driver_family([wheel]) == DRIVER_ARCHIVE
    one = driver_family([wheel, Path("/a/spark-avro.jar"), Path("/a/kafka.jar")])
    assert one != DRIVER_ARCHIVE
    assert one == driver_family([wheel, Path("/b/kafka.jar"), Path("/b/spark-avro.jar")])  # names, in any order
    assert "-" not in one.removeprefix(DRIVER_ARCHIVE)  # the archive's name ends in -<digest>
