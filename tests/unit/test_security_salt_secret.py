"""The broker's secret for made-up SCRAM salts: random, made once, kept private and durable in
the data directory, and the same after a restart."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

from broker.security.salt_secret import FILE_NAME, SECRET_BYTES, load_or_create


def test_the_secret_is_made_once_private_and_kept(tmp_path: Path) -> None:
    data_dir = tmp_path / "broker"
    secret = load_or_create(data_dir)
    path = data_dir / FILE_NAME
    assert len(secret) == SECRET_BYTES
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create(data_dir) == secret  # a restart keeps it
    assert not path.with_name(FILE_NAME + ".tmp").exists()


def test_a_new_data_directory_at_the_same_path_gets_another_secret(tmp_path: Path) -> None:
    """Nothing of it comes from the path: a container's volume at the usual path tells nothing."""
    data_dir = tmp_path / "broker"
    first = load_or_create(data_dir)
    shutil.rmtree(data_dir)
    assert load_or_create(data_dir) != first


def test_a_secret_readable_by_others_is_made_private(tmp_path: Path) -> None:
    secret = load_or_create(tmp_path)
    (tmp_path / FILE_NAME).chmod(0o644)
    assert load_or_create(tmp_path) == secret
    assert stat.S_IMODE((tmp_path / FILE_NAME).stat().st_mode) == 0o600


def test_a_malformed_secret_or_a_leftover_temporary_file_is_replaced(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_bytes(b"short")
    (tmp_path / (FILE_NAME + ".tmp")).write_bytes(b"left by a crash")
    secret = load_or_create(tmp_path)
    assert len(secret) == SECRET_BYTES
    assert (tmp_path / FILE_NAME).read_bytes() == secret
