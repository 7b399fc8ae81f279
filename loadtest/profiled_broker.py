"""The bundled broker with cProfile switched on and off by signals, so that a profile holds
only the requests of a measured window, not the broker's start or stop.

    python -m loadtest.profiled_broker OUT -- <arguments of `streamshop`>

SIGUSR1 starts profiling the event loop's thread, SIGUSR2 stops it and writes the profile to
OUT (pstats format).  loadtest/profile_commits.py drives it.
"""

from __future__ import annotations

import cProfile
import signal
import sys
from types import FrameType


def main(argv: list[str]) -> int:
    out, sep, *rest = argv
    if sep != "--":
        raise SystemExit("usage: python -m loadtest.profiled_broker OUT -- <streamshop arguments>")
    profile = cProfile.Profile()

    def start(_signum: int, _frame: FrameType | None) -> None:
        profile.enable()

    def stop(_signum: int, _frame: FrameType | None) -> None:
        profile.disable()
        profile.dump_stats(out)

    # Python runs signal handlers in the main thread, the broker's event loop's.
    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    from streamshop.cli import main as streamshop

    return streamshop(rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
