"""streamshop.env_file: the settings file every process of the compose file's secure profile
applies over its environment."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.kafka_security import KafkaSecurity
from streamshop.env_file import ENV_FILE, MAX_BYTES, EnvFileError, apply_env_file, format_env_file, read_env_file
from tests.support.examples import examples


def test_values_round_trip_and_replace_the_environment(tmp_path: Path) -> None:
    values = {"ORDERS_REGISTRY_URL": "https://registry:8081", "X_PASSWORD": "a=b c#d", "EMPTY": ""}
    path = tmp_path / "orders.env"
    path.write_text("# made by the set-up\n\n" + format_env_file(values))
    assert read_env_file(path) == values
    env = {ENV_FILE: str(path), "ORDERS_REGISTRY_URL": "http://registry:8081", "OTHER": "kept"}
    assert apply_env_file(env) == path
    assert env == {ENV_FILE: str(path), "OTHER": "kept", **values}


def test_no_variable_or_no_file_leaves_the_environment_as_it_is(tmp_path: Path) -> None:
    env = {"A": "1"}
    assert apply_env_file(env) is None
    env[ENV_FILE] = str(tmp_path / "absent.env")
    assert apply_env_file(env) is None
    assert env == {"A": "1", ENV_FILE: str(tmp_path / "absent.env")}


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("lower=1\n", ":1: expected NAME=VALUE"),
        ("A=1\nno equals sign\n", ":2: expected NAME=VALUE"),
        ("A=1\nA=2\n", ":2: A is set twice"),
        ("A=x\x00y\n", ":1: A holds a NUL byte"),
        ("A=x\ry\n", ":1: A holds a NUL byte or a carriage return"),
        ("=1\n", ":1: expected NAME=VALUE"),
    ],
)
def test_a_file_that_cannot_be_used_is_refused_with_its_line(tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "bad.env"
    path.write_text(text)
    with pytest.raises(EnvFileError, match=error):
        apply_env_file({ENV_FILE: str(path)})


def test_a_file_too_large_or_not_utf8_is_refused(tmp_path: Path) -> None:
    large = tmp_path / "large.env"
    large.write_text("A=" + "x" * MAX_BYTES + "\n")
    with pytest.raises(EnvFileError, match="larger than"):
        read_env_file(large)
    binary = tmp_path / "binary.env"
    binary.write_bytes(b"A=\xff\n")
    with pytest.raises(EnvFileError, match="not UTF-8"):
        read_env_file(binary)


def test_a_value_with_a_line_break_cannot_be_written() -> None:
    with pytest.raises(EnvFileError, match="one NAME=VALUE line"):
        format_env_file({"A": "1\nB=2"})


@settings(max_examples=examples(300), deadline=None)
@given(st.binary(max_size=512))
def test_any_bytes_are_read_or_refused_with_envfileerror(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "any.env"
        path.write_bytes(data)
        try:
            values = read_env_file(path)
        except EnvFileError:
            return
        assert all(re.fullmatch(r"[A-Z_][A-Z0-9_]*", name) for name in values)
        # What was read is what the set-up would have written.
        path.write_text(format_env_file(values))
        assert read_env_file(path) == values


def test_kafka_security_settings_name_every_variable_it_reads() -> None:
    full = KafkaSecurity("SASL_SSL", "SCRAM-SHA-512", "u", "p", Path("ca"), Path("c"), Path("k"), "kp")
    assert set(full.env("X_")) == KafkaSecurity.settings("X_")
