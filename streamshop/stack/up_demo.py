"""`streamshop up --demo`: once the stack is ready, a round of demo traffic (`streamshop.stack.demo`)
with its report, then a steady trickle of it, written among the children's lines."""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any

from streamshop.clients import CommandError
from streamshop.stack.console import Console

if TYPE_CHECKING:
    from streamshop.stack.demo import Targets

__all__ = ["Endpoints", "demo_after_ready"]

Endpoints = Mapping[str, Mapping[str, str]]  # child name -> its announced urls


def demo_after_ready(args: argparse.Namespace, console: Console) -> Callable[[Endpoints], Coroutine[Any, Any, None]]:
    """`up --demo`: one round of demo traffic with its report, then a steady trickle (about
    `--demo-rate` orders a second and an OTP every few seconds) so that the dashboard's charts
    keep moving; its lines are prefixed ``demo``."""

    async def run(endpoints: Endpoints) -> None:
        from streamshop.stack.demo import Progress, Targets, run_traffic

        targets = Targets.from_endpoints(endpoints)

        def say(text: str) -> None:
            console.line("demo", text)

        try:
            report = await run_traffic(
                targets,
                orders=args.demo_orders,
                otps=args.demo_otp,
                concurrency=8,
                progress=Progress(args.demo_orders + args.demo_otp, write_line=say),
            )
        except CommandError as e:
            say(f"no demo traffic: {e}")
            return
        for line in report.lines():
            say(line)
        if args.demo_rate <= 0:
            return
        say(f"keeps sending about {args.demo_rate:g} orders/s and an OTP every {_TRICKLE_ROUND:g} s; Ctrl-C stops")
        await _trickle(targets, args.demo_rate, say)

    return run


_TRICKLE_ROUND = 5.0  # seconds per round of trickle traffic
_TRICKLE_QUIET = 60.0  # at most one line per this many seconds about failing rounds


async def _trickle(targets: Targets, rate: float, say: Callable[[str], None]) -> None:
    """Rounds of `rate` x `_TRICKLE_ROUND` orders and one OTP, one round per `_TRICKLE_ROUND`
    seconds, until cancelled.  A failing round (a service restarting) is reported, then retried."""
    from streamshop.stack.demo import Progress, run_traffic

    orders = max(1, round(rate * _TRICKLE_ROUND))
    last_said = -_TRICKLE_QUIET
    while True:
        began = time.monotonic()
        try:
            report = await run_traffic(
                targets, orders=orders, otps=1, concurrency=4, progress=Progress(orders + 1, write_line=lambda _: None)
            )
            problems = report.stats.problems
        except CommandError as e:
            problems = [str(e)]
        if problems and began - last_said >= _TRICKLE_QUIET:
            last_said = began
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            say(f"trickle round failed: {problems[0]}{more}")
        await asyncio.sleep(max(0.0, _TRICKLE_ROUND - (time.monotonic() - began)))
