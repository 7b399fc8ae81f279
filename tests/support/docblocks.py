"""The shell blocks of the project's Markdown: ```sh, ```bash, ```shell and ```console fences and
4-space indented blocks, as the tests that run or check the documented commands read them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.support.harness import REPO

SHELL_FENCES = {"sh", "bash", "shell", "console"}
_FENCE = re.compile(r"^\s*```(\S*)\s*$")


@dataclass(frozen=True)
class Block:
    """One shell block: its file (relative to the repository), first line's number and text."""

    path: str
    line: int
    text: str

    @property
    def key(self) -> str:
        """What names the block in a test's lists: its file and its first command."""
        return f"{self.path}: {self.commands()[0]}"

    def commands(self) -> list[str]:
        """Its command lines: continuations joined, comments and a console's `$ ` dropped."""
        out: list[str] = []
        pending = ""
        for raw in self.text.splitlines():
            line = raw.strip()
            if line.startswith("$ "):
                line = line[2:]
            if not pending and (not line or line.startswith("#")):
                continue
            line = strip_comment(line)
            if line.endswith("\\"):
                pending += line[:-1].strip() + " "
                continue
            out.append((pending + line).strip())
            pending = ""
        if pending:
            out.append(pending.strip())
        return out


def strip_comment(line: str) -> str:
    """`line` without a trailing `# comment` (one outside quotes, after a blank)."""
    quote: str | None = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line


def shell_blocks(path: Path) -> list[Block]:
    """Every shell block of the Markdown file `path`."""
    lines = path.read_text().splitlines()
    rel = str(path.relative_to(REPO))
    blocks: list[Block] = []
    i = 0
    after_blank = True
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence:
            end = i + 1
            while end < len(lines) and not _FENCE.match(lines[end]):
                end += 1
            if fence.group(1) in SHELL_FENCES:
                blocks.append(Block(rel, i + 1, "\n".join(lines[i + 1 : end])))
            i, after_blank = end + 1, False
            continue
        if after_blank and lines[i].startswith("    ") and lines[i].strip():
            end = i
            while end < len(lines) and (lines[end].startswith("    ") or not lines[end].strip()):
                end += 1
            blocks.append(Block(rel, i + 1, "\n".join(line[4:] for line in lines[i:end])))
            i, after_blank = end, True
            continue
        after_blank = not lines[i].strip()
        i += 1
    return blocks


def documents() -> list[Path]:
    """README.md and every Markdown file under docs/."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
