"""Reading a small settings file (users, API keys) with a bound on what it may allocate."""

from __future__ import annotations

from pathlib import Path

__all__ = ["read_small_text"]


def read_small_text(path: Path, max_bytes: int) -> str:
    """The UTF-8 text of `path`; ValueError naming the path when it cannot be read, is larger
    than `max_bytes` or is not UTF-8."""
    try:
        with path.open("rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror or e}") from e
    if len(data) > max_bytes:
        raise ValueError(f"{path} is larger than {max_bytes} bytes")
    try:
        return data.decode()
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8") from e
