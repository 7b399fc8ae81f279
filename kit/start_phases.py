"""Where a process's start goes: the phases of its start, each timed from the end of the one
before, as one line (``<prefix>: python 0.4 s, imports 1.2 s, ..., total 30.1 s``) that the
process prints and a benchmark reads back with `parse_line`.

`STARTED` is stamped when this module is first imported: `streamshop.cli` imports it before the
project's other modules, so the time before it is the interpreter's own start-up, which the
process's start time in ``/proc/self/stat`` measures (``python``; left out without /proc).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

__all__ = ["STARTED", "StartPhases", "format_line", "last_line", "parse_line", "process_age"]

STARTED = time.monotonic()

# A phase's name: words of letters, digits, `_`, `.` and `-` (a job's name among them).
_NAME = re.compile(r"[A-Za-z][\w.-]*(?: [\w.-]+)*")
_ENTRY = re.compile(rf"(?P<name>{_NAME.pattern}) (?P<seconds>\d+(?:\.\d+)?) s")


def process_age(stat: Path = Path("/proc/self/stat")) -> float | None:
    """Seconds since this process started, from its start time in clock ticks after boot; None
    without /proc (or with a start time that makes no sense)."""
    try:
        # The command name (field 2) may hold spaces and parentheses: fields count after its ")".
        fields = stat.read_text().rpartition(")")[2].split()
        ticks = int(fields[19])  # field 22, starttime
        since_boot = time.clock_gettime(time.CLOCK_BOOTTIME)
        age = since_boot - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return age if age >= 0 else None


class StartPhases:
    """The phases of a start, in order: `mark(name)` ends the phase `name` now (or at the
    monotonic time `at`), the time since the previous phase ended; a name marked again adds to
    its phase.  With `process_start` (the default) the first phase is ``python``, from the
    process's start to `started`."""

    def __init__(self, started: float = STARTED, *, process_start: bool = True) -> None:
        self._last = started
        self._phases: dict[str, float] = {}
        self._began = started
        age = process_age() if process_start else None
        if age is not None:
            began = time.monotonic() - age
            if began <= started:
                self._began = began
                self._phases["python"] = started - began

    def mark(self, name: str, at: float | None = None) -> None:
        end = time.monotonic() if at is None else at
        self._phases[name] = self._phases.get(name, 0.0) + max(0.0, end - self._last)
        self._last = max(self._last, end)

    @property
    def phases(self) -> dict[str, float]:
        """Each phase's seconds, in the order they were first marked."""
        return dict(self._phases)

    @property
    def total(self) -> float:
        """Seconds from the start (the process's, when known) to the end of the last phase."""
        return self._last - self._began

    def line(self, prefix: str) -> str:
        return format_line(prefix, {**self._phases, "total": self.total})


def format_line(prefix: str, phases: dict[str, float]) -> str:
    """``<prefix>: name 1.2 s, other 0.3 s``."""
    for name in phases:
        if not _NAME.fullmatch(name):
            raise ValueError(f"phase name {name!r}: words of letters, digits, '_', '.' or '-'")
    return f"{prefix}: " + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in phases.items())


def parse_line(prefix: str, line: str) -> dict[str, float] | None:
    """The phases of a `format_line` line with this prefix, in order; None for any other line."""
    head = f"{prefix}: "
    if not line.startswith(head):
        return None
    phases: dict[str, float] = {}
    for entry in line[len(head) :].rstrip("\n").split(", "):
        match = _ENTRY.fullmatch(entry)
        if match is None:
            return None
        phases[match["name"]] = float(match["seconds"])
    return phases


def last_line(prefix: str, text: str) -> dict[str, float] | None:
    """The phases of the last line of `text` with this prefix (a process started again prints
    one per start); None when there is none."""
    found = None
    for line in text.splitlines():
        found = parse_line(prefix, line) or found
    return found
