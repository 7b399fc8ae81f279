"""Settings from a file: ``STREAMSHOP_ENV_FILE`` names a file of ``NAME=VALUE`` lines that every
`streamshop` process (and Locust) applies over its environment before it reads its settings.

The compose file gives every process one, under the volume the ``secure`` profile's set-up
writes: the plain stack has no such file and runs on its environment as written; the secured
stack's file adds the process's logins, certificates and keys, and replaces what security
changes (the registry's URL becomes https).  A file that exists but cannot be used stops the
process with the reason, rather than letting it run unsecured.
"""

from __future__ import annotations

import os
import re
from collections.abc import MutableMapping
from pathlib import Path

from kit.files import read_small_text

__all__ = ["ENV_FILE", "EnvFileError", "apply_env_file", "format_env_file", "read_env_file"]

ENV_FILE = "STREAMSHOP_ENV_FILE"
MAX_BYTES = 64 * 1024
_NAME = re.compile(r"[A-Z_][A-Z0-9_]*\Z")


class EnvFileError(ValueError):
    pass


def read_env_file(path: Path) -> dict[str, str]:
    """The settings of `path`: ``NAME=VALUE`` per line, blank lines and ``#`` comments ignored,
    values taken verbatim (no quotes, no expansion)."""
    try:
        text = read_small_text(path, MAX_BYTES)
    except ValueError as e:
        raise EnvFileError(str(e)) from None
    values: dict[str, str] = {}
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw.removesuffix("\r")  # CRLF as LF
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if not sep or not _NAME.match(name):
            # The line is not echoed: it may hold a password.
            raise EnvFileError(f"{path}:{number}: expected NAME=VALUE with NAME in A-Z, 0-9 and _")
        if name in values:
            raise EnvFileError(f"{path}:{number}: {name} is set twice")
        if "\x00" in value or "\r" in value:
            raise EnvFileError(f"{path}:{number}: {name} holds a NUL byte or a carriage return")
        values[name] = value
    return values


def format_env_file(values: dict[str, str]) -> str:
    """The text `read_env_file` reads back into `values`."""
    for name, value in values.items():
        if not _NAME.match(name) or "\n" in value or "\r" in value or "\x00" in value:
            raise EnvFileError(f"{name}: cannot be written as one NAME=VALUE line")
    return "".join(f"{name}={value}\n" for name, value in values.items())


def apply_env_file(environ: MutableMapping[str, str] | None = None) -> Path | None:
    """Apply the file ``STREAMSHOP_ENV_FILE`` names, when it is set and the file exists; the
    path applied, or None.  EnvFileError when the file exists and cannot be used."""
    env = os.environ if environ is None else environ
    name = env.get(ENV_FILE, "").strip()
    if not name:
        return None
    path = Path(name)
    if not path.exists():
        return None
    env.update(read_env_file(path))
    return path
