"""Run the test tiers one after the other, every one even when an earlier one failed, and end
with one summary of all of them: what each ran, what it found, and how long it took.

    python -m tests.tiers "lint=make lint" "suite=python -m pytest ..." "compose=make test-compose"

Each tier's output streams through as it runs.  The exit status is 1 when any tier failed.
The last line counts every pytest result of the run, in the form CI reads."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

# pytest's closing line: "12 passed, 1 failed, 2 skipped in 3.45s (0:00:03)"
_RESULT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)")
_CLOSING = re.compile(r"\b(passed|failed|errors?|no tests ran)\b.* in [\d.]+s")


@dataclass
class Tier:
    name: str
    command: str
    status: int = -1
    seconds: float = 0.0
    counts: Counter[str] = field(default_factory=Counter)

    @property
    def passed(self) -> bool:
        return self.status == 0

    def run(self) -> None:
        print(f"\n=== tier {self.name}: {self.command}", flush=True)
        started = time.monotonic()
        closing = ""
        with subprocess.Popen(
            self.command, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        ) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                sys.stdout.write(line)
                if _CLOSING.search(line):
                    closing = line
            self.status = proc.wait()
        self.seconds = time.monotonic() - started
        for number, kind in _RESULT.findall(closing):
            self.counts["errors" if kind.startswith("error") else kind] += int(number)

    def describe(self) -> str:
        found = ", ".join(f"{n} {kind}" for kind, n in sorted(self.counts.items())) or "-"
        verdict = "passed" if self.passed else f"FAILED (exit {self.status})"
        return f"{self.name:<10} {verdict:<16} {found:<44} {self.seconds / 60:6.1f} min"


def main(argv: list[str]) -> int:
    tiers = []
    for spec in argv:
        name, sep, command = spec.partition("=")
        if not sep or not name or not command:
            print(f"usage: python -m tests.tiers NAME=COMMAND ...  (got {spec!r})", file=sys.stderr)
            return 2
        tiers.append(Tier(name, command))
    for tier in tiers:
        tier.run()
    total: Counter[str] = Counter()
    print("\n=== summary of the tiers")
    for tier in tiers:
        print(tier.describe())
        total.update(tier.counts)
    print(f"{'all':<10} {'':<16} {'':<44} {sum(t.seconds for t in tiers) / 60:6.1f} min")
    failed = total["failed"] + total["errors"]
    print(f"{total['passed']} passed, {failed} failed")
    return 0 if all(t.passed for t in tiers) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
