"""The output of `streamshop up`: every line prefixed with the padded name of the child that
printed it, coloured on a terminal (never when NO_COLOR is set, https://no-color.org)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from typing import TextIO

__all__ = ["SUPERVISOR", "Console", "use_color"]

SUPERVISOR = "up"  # the prefix of the supervisor's own lines
_PALETTE = ("36", "33", "35", "32", "34", "91", "96", "93", "95", "92")  # ANSI foreground colours
_RESET = "\x1b[0m"


def use_color(stream: TextIO, disabled: bool = False, environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return not disabled and not env.get("NO_COLOR") and stream.isatty()


class Console:
    """Writes ``name | text`` lines to `stream`; each name keeps one colour."""

    def __init__(self, names: Iterable[str], stream: TextIO | None = None, *, color: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.color = color
        known = [SUPERVISOR, *names]
        self.width = max(len(n) for n in known)
        self._colors = {name: _PALETTE[i % len(_PALETTE)] for i, name in enumerate(known[1:])}
        self._colors[SUPERVISOR] = "1"  # bold

    def prefix(self, name: str) -> str:
        padded = f"{name:<{self.width}} |"
        if not self.color:
            return padded
        return f"\x1b[{self._colors.get(name, '0')}m{padded}{_RESET}"

    def line(self, name: str, text: str) -> None:
        try:
            self.stream.write(f"{self.prefix(name)} {text}\n")
            self.stream.flush()
        except OSError:
            pass  # `up | head`, or the terminal closed: the log files still get every line

    def say(self, text: str) -> None:
        """A line of the supervisor itself."""
        for part in text.splitlines() or [""]:
            self.line(SUPERVISOR, part)
