"""`streamshop demo`: realistic traffic against a running stack (`streamshop up`).

Orders: a random customer buys 1-4 products in one of six currencies (``Idempotency-Key`` set,
the total checked), reads the order back, and walks it through its lifecycle: most are paid,
shipped and delivered, some cancelled before payment or after it; a few customers then try to
cancel a delivered order, which the state machine refuses (409).  Every few orders the
customer's order list is read too.

OTPs: a code is requested for a fresh user (channels sms and email), the SMS sink of the
catcher is polled until the code arrives (``GET /sms?to=PHONE``), some users first type a wrong
code (422), the right one verifies (200), some replay it (409), and the e-mail with the same
code must reach the SMTP catcher (``GET /messages?to=EMAIL``).

A progress bar runs on stderr; the summary (outcomes, failures, p50/p99 latency per request
type and of the SMS and e-mail deliveries) goes to stdout.  Exit status 1 on any unexpected
response, a code that never arrived, or an unreachable service.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import math
import os
import random
import re
import secrets
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, NoReturn, TextIO

import aiohttp

from services.common.config import DEFAULT_PORTS
from streamshop.clients import CommandError, table
from streamshop.stack.state import running_stack

__all__ = ["Progress", "Report", "Targets", "demo", "percentile", "run_traffic"]

DEFAULT_STACK_DIR = Path("data/stack")
_CODE = re.compile(r"(?<!\d)(\d{6})(?!\d)")

# SKU -> price in EUR; other currencies convert at a fixed rate (places: 0 for JPY).
PRODUCTS: Mapping[str, Decimal] = {
    "MUG-CLASSIC": Decimal("12.50"),
    "TEE-LOGO-M": Decimal("19.90"),
    "HOODIE-GREY-L": Decimal("49.00"),
    "STICKER-PACK": Decimal("4.99"),
    "NOTEBOOK-A5": Decimal("8.75"),
    "BOTTLE-STEEL": Decimal("24.00"),
    "CAP-NAVY": Decimal("17.50"),
    "SOCKS-3PK": Decimal("11.00"),
    "POSTER-A2": Decimal("14.90"),
    "KEYCHAIN": Decimal("3.50"),
}
CURRENCIES: Mapping[str, tuple[Decimal, int]] = {
    "EUR": (Decimal(1), 2),
    "USD": (Decimal("1.08"), 2),
    "GBP": (Decimal("0.85"), 2),
    "CHF": (Decimal("0.95"), 2),
    "SEK": (Decimal("11.40"), 2),
    "JPY": (Decimal(162), 0),
}
CANCEL_REASONS = ("customer changed their mind", "payment declined", "item out of stock", "duplicate order")


def api_key_headers() -> dict[str, str]:
    """``Authorization: Bearer`` with the key in STREAMSHOP_API_KEY, for services that admit
    callers by API key (`up --secure`); nothing when unset."""
    key = os.environ.get("STREAMSHOP_API_KEY", "").strip()
    return {"Authorization": f"Bearer {key}"} if key else {}


# -- targets --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Targets:
    orders: str
    otp: str
    catcher: str | None

    @classmethod
    def defaults(cls) -> Targets:
        def url(name: str) -> str:
            return f"http://127.0.0.1:{DEFAULT_PORTS[name]}"

        return cls(url("orders"), url("otp"), url("catcher"))

    @classmethod
    def from_endpoints(cls, endpoints: Mapping[str, Mapping[str, str]]) -> Targets:
        """From the announced URLs of a stack's children (child -> role -> url)."""
        missing = [name for name in ("orders", "otp") if "http" not in endpoints.get(name, {})]
        if missing:
            raise CommandError(f"the stack has no {' and no '.join(missing)}")
        catcher = endpoints.get("catcher", {}).get("http")
        return cls(endpoints["orders"]["http"], endpoints["otp"]["http"], catcher)

    @classmethod
    def from_stack(cls, document: Mapping[str, Any]) -> Targets:
        if document.get("state") != "running":
            raise CommandError(f"the stack in {document.get('data_dir')} is {document.get('state')}, not running")
        children = document.get("children", {})
        return cls.from_endpoints({name: child.get("urls", {}) for name, child in children.items()})


def resolve_targets(args: argparse.Namespace) -> Targets:
    """--stack DIR, else the URL options (defaults for the ones not given), else the stack of
    ./data/stack when one runs there, else the default ports."""
    given = {"orders": args.orders_url, "otp": args.otp_url, "catcher": args.catcher_url}
    if args.stack:
        if any(given.values()):
            raise CommandError("--stack and the --*-url options exclude each other")
        document = running_stack(Path(args.stack))
        if document is None:
            raise CommandError(
                f"no stack runs from {args.stack}; start one with `streamshop up --data-dir {args.stack}`"
            )
        return Targets.from_stack(document)
    defaults = Targets.defaults()
    if any(given.values()):
        return Targets(
            given["orders"] or defaults.orders, given["otp"] or defaults.otp, given["catcher"] or defaults.catcher
        )
    document = running_stack(DEFAULT_STACK_DIR)
    return Targets.from_stack(document) if document is not None else defaults


# -- measurements ---------------------------------------------------------------------------------


def percentile(values: Collection[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1) of a non-empty collection."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]


class FlowFailed(Exception):
    """Ends one order or OTP flow; the reason is already recorded."""


@dataclass
class Stats:
    latency: defaultdict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    failed: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)

    def fail(self, kind: str, problem: str) -> NoReturn:
        self.failed[kind] += 1
        self.problems.append(f"{kind}: {problem}")
        raise FlowFailed(problem)


class Progress:
    """A progress bar: redrawn in place on a terminal `stream`, otherwise a plain line through
    `write_line` every `interval` seconds (and at the end)."""

    WIDTH = 30

    def __init__(
        self,
        total: int,
        *,
        stream: TextIO | None = None,
        write_line: Callable[[str], None] | None = None,
        interval: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.stream = stream
        self.write_line = write_line
        self.interval = interval
        self.clock = clock
        self.done = 0
        self.failed = 0
        self.started = clock()
        self._last = -math.inf

    def render(self) -> str:
        share = self.done / self.total if self.total else 1.0
        filled = round(share * self.WIDTH)
        rate = self.done / max(self.clock() - self.started, 1e-9)
        return (
            f"[{'#' * filled}{'.' * (self.WIDTH - filled)}] {self.done}/{self.total} flows {share:4.0%}"
            f"  {self.failed} failed  {rate:.1f}/s"
        )

    def advance(self, *, failed: bool = False) -> None:
        self.done += 1
        self.failed += failed
        now = self.clock()
        # a terminal redraws 10 times a second at most; plain lines every `interval`
        if now - self._last >= (0.1 if self.stream is not None else self.interval):
            self._last = now
            self._show()

    def _show(self) -> None:
        if self.stream is not None:
            self.stream.write("\r" + self.render())
            self.stream.flush()
        elif self.write_line is not None:
            self.write_line(self.render())

    def finish(self) -> None:
        self._show()
        if self.stream is not None:
            self.stream.write("\n")
            self.stream.flush()


@dataclass
class Report:
    targets: Targets
    orders: int
    otps: int
    elapsed: float
    stats: Stats

    @property
    def ok(self) -> bool:
        return not self.stats.problems

    def lines(self) -> list[str]:
        s, out = self.stats, self.stats.outcomes
        lines = [
            f"{self.orders} orders and {self.otps} OTPs in {self.elapsed:.1f} s against orders {self.targets.orders}, "
            f"otp {self.targets.otp}" + (f", catcher {self.targets.catcher}" if self.targets.catcher else "")
        ]
        if self.orders:
            lines.append(
                f"  orders   {out['order created']} created: {out['order delivered']} delivered, "
                f"{out['order cancelled']} cancelled; {out['late cancel refused']} cancellations of delivered orders "
                "refused (409)"
            )
        if self.otps:
            lines.append(
                f"  otp      {out['otp requested']} requested, {out['otp verified']} verified; "
                f"{out['wrong code refused']} wrong codes refused (422), {out['replay refused']} replays refused "
                f"(409); {out['email with code']} e-mails with the code"
            )
        rows = [
            (kind, len(values), s.failed[kind], f"{percentile(values, 0.5):.1f}", f"{percentile(values, 0.99):.1f}")
            for kind, values in sorted(s.latency.items())
        ]
        rows += [(kind, 0, n, "-", "-") for kind, n in sorted(s.failed.items()) if kind not in s.latency]
        lines += ["  " + line for line in table(("REQUEST", "COUNT", "FAILED", "P50 MS", "P99 MS"), rows).splitlines()]
        if self.ok:
            lines.append("result: OK")
        else:
            lines.append(f"result: {len(s.problems)} failures")
            lines += [f"  - {p}" for p in s.problems[:10]]
            if len(s.problems) > 10:
                lines.append(f"  ... and {len(s.problems) - 10} more")
        return lines


# -- the traffic ----------------------------------------------------------------------------------


class Traffic:
    def __init__(
        self, session: aiohttp.ClientSession, targets: Targets, rng: random.Random, otp_timeout: float
    ) -> None:
        self.session = session
        self.targets = targets
        self.rng = rng
        self.otp_timeout = otp_timeout
        self.stats = Stats()
        self.run_id = secrets.token_hex(3)  # OTP users are new every run: the per-user rate limit
        self._phones: set[str] = set()

    async def call(
        self,
        kind: str,
        method: str,
        url: str,
        expect: Collection[int],
        *,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
        timed: bool = True,
    ) -> Any:
        """One request; its JSON body when the status is one of `expect`, else the flow fails."""
        started = time.perf_counter()
        try:
            async with self.session.request(method, url, json=body, headers=headers, params=params) as response:
                text = await response.text()
        except (aiohttp.ClientError, TimeoutError) as e:
            self.stats.fail(kind, f"{method} {url}: {type(e).__name__}: {e}")
        if timed:
            self.stats.latency[kind].append((time.perf_counter() - started) * 1000)
        if response.status not in expect:
            wanted = "/".join(str(s) for s in sorted(expect))
            self.stats.fail(kind, f"{method} {url}: HTTP {response.status} (expected {wanted}): {text[:300]}")
        try:
            return json.loads(text) if text else None
        except ValueError:
            self.stats.fail(kind, f"{method} {url}: the body is not JSON: {text[:300]}")

    # orders

    def basket(self) -> tuple[str, list[dict[str, Any]], Decimal]:
        currency = self.rng.choice(list(CURRENCIES))
        rate, places = CURRENCIES[currency]
        quantum = Decimal(1).scaleb(-places)
        items, total = [], Decimal(0)
        for sku in self.rng.sample(list(PRODUCTS), self.rng.randint(1, 4)):
            price = (PRODUCTS[sku] * rate).quantize(quantum)
            quantity = self.rng.choices((1, 2, 3, 5), weights=(70, 20, 8, 2))[0]
            items.append({"sku": sku, "quantity": quantity, "unit_price": str(price)})
            total += price * quantity
        return currency, items, total

    async def order_flow(self, i: int) -> None:
        base = self.targets.orders.rstrip("/")
        customer = f"cust-{self.rng.randrange(1, 40):04d}"
        currency, items, total = self.basket()
        created = await self.call(
            "orders.create",
            "POST",
            f"{base}/orders",
            {201},
            body={"customer_id": customer, "currency": currency, "items": items},
            headers={"Idempotency-Key": str(uuid.uuid4())},
        )
        order_id = created["order_id"]
        self.stats.outcomes["order created"] += 1
        if Decimal(created["total"]) != total:
            self.stats.fail("orders.create", f"order {order_id}: total {created['total']}, expected {total}")
        read = await self.call("orders.get", "GET", f"{base}/orders/{order_id}", {200})
        if read["status"] != "created":
            self.stats.fail("orders.get", f"order {order_id} is {read['status']}, expected created")

        roll = self.rng.random()
        if roll < 0.1:
            path = ["cancelled"]
        elif roll < 0.2:
            path = ["paid", "cancelled"]
        else:
            path = ["paid", "shipped", "delivered"]
        for status in path:
            reason = self.rng.choice(CANCEL_REASONS) if status == "cancelled" else None
            changed = await self.call(
                "orders.status",
                "POST",
                f"{base}/orders/{order_id}/status",
                {200},
                body={"status": status, "reason": reason},
            )
            if changed["status"] != status:
                self.stats.fail("orders.status", f"order {order_id} is {changed['status']}, expected {status}")
        self.stats.outcomes[f"order {path[-1]}"] += 1
        if path[-1] == "delivered" and self.rng.random() < 0.1:
            await self.call(
                "orders.status", "POST", f"{base}/orders/{order_id}/status", {409}, body={"status": "cancelled"}
            )
            self.stats.outcomes["late cancel refused"] += 1
        if i % 5 == 0:
            listed = await self.call(
                "orders.list", "GET", f"{base}/orders", {200}, params={"customer_id": customer, "limit": "50"}
            )
            if order_id not in {o["order_id"] for o in listed["items"]}:
                self.stats.fail("orders.list", f"order {order_id} missing from {customer}'s orders")

    # OTPs

    def phone(self) -> str:
        while True:
            number = f"+1555{self.rng.randrange(10**7):07d}"
            if number not in self._phones:
                self._phones.add(number)
                return number

    async def otp_flow(self, i: int) -> None:
        base = self.targets.otp.rstrip("/")
        user = f"demo-{self.run_id}-{i:04d}"
        phone, email = self.phone(), f"{user}@example.com"
        requested = await self.call(
            "otp.request",
            "POST",
            f"{base}/otp",
            {202},
            body={"user_id": user, "channels": ["sms", "email"], "phone": phone, "email": email},
        )
        request_id = requested["request_id"]
        self.stats.outcomes["otp requested"] += 1
        asked = time.perf_counter()
        code = await self.sms_code(phone, request_id)
        self.stats.latency["sms delivery"].append((time.perf_counter() - asked) * 1000)

        verify = f"{base}/otp/verify"
        if i % 3 == 0:
            wrong = f"{(int(code) + self.rng.randrange(1, 10**6)) % 10**6:06d}"
            await self.call("otp.verify", "POST", verify, {422}, body={"request_id": request_id, "code": wrong})
            self.stats.outcomes["wrong code refused"] += 1
        result = await self.call("otp.verify", "POST", verify, {200}, body={"request_id": request_id, "code": code})
        if result.get("verified") is not True:
            self.stats.fail("otp.verify", f"request {request_id}: {result}")
        self.stats.outcomes["otp verified"] += 1
        if i % 4 == 1:
            await self.call("otp.verify", "POST", verify, {409}, body={"request_id": request_id, "code": code})
            self.stats.outcomes["replay refused"] += 1
        await self.email_with(email, code, asked)
        self.stats.outcomes["email with code"] += 1

    async def _poll(self, kind: str, path: str, to: str, find: Callable[[list[dict[str, Any]]], Any]) -> Any:
        """Poll the catcher until `find` returns something for the messages to `to`."""
        assert self.targets.catcher is not None
        url = self.targets.catcher.rstrip("/") + path
        deadline = time.monotonic() + self.otp_timeout
        pause = 0.05
        while True:
            listed = await self.call(kind, "GET", url, {200}, params={"to": to, "limit": "20"}, timed=False)
            found = find(listed.get("items", []))
            if found is not None:
                return found
            if time.monotonic() > deadline:
                self.stats.fail(kind, f"nothing for {to} within {self.otp_timeout:g} s")
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.5)

    async def sms_code(self, phone: str, request_id: str) -> str:
        def find(items: list[dict[str, Any]]) -> str | None:
            for item in items:
                match = _CODE.search(str(item.get("body", "")))
                if match and item.get("request_id") in (request_id, None):
                    return match.group(1)
            return None

        code: str = await self._poll("catcher.sms", "/sms", phone, find)
        return code

    async def email_with(self, email: str, code: str, asked: float) -> None:
        def find(items: list[dict[str, Any]]) -> bool | None:
            return any(code in f"{m.get('subject', '')}\n{m.get('text', '')}" for m in items) or None

        await self._poll("catcher.mail", "/messages", email, find)
        self.stats.latency["email delivery"].append((time.perf_counter() - asked) * 1000)


async def _preflight(session: aiohttp.ClientSession, targets: Targets, otps: int) -> None:
    checks = {"orders": targets.orders, "otp": targets.otp}
    if otps:
        if targets.catcher is None:
            raise CommandError("OTPs need the catcher (its SMS sink and SMTP server); none runs in this stack")
        checks["catcher"] = targets.catcher
    for name, url in checks.items():
        try:
            async with session.get(url.rstrip("/") + "/readyz") as response:
                if response.status != 200:
                    detail = (await response.text())[:300]
                    raise CommandError(f"{name} at {url} is not ready ({response.status}): {detail}")
        except (aiohttp.ClientError, TimeoutError) as e:
            raise CommandError(f"cannot reach {name} at {url} ({e}); is `streamshop up` running?") from None


async def run_traffic(
    targets: Targets,
    *,
    orders: int,
    otps: int,
    concurrency: int,
    progress: Progress,
    otp_timeout: float = 30.0,
    seed: int | None = None,
) -> Report:
    """Run `orders` order flows and `otps` OTP flows, `concurrency` at a time, in random order."""
    rng = random.Random(seed)
    started = time.perf_counter()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30), headers=api_key_headers()) as session:
        await _preflight(session, targets, otps)
        traffic = Traffic(session, targets, rng, otp_timeout)
        # Factories, not coroutines: a flow still waiting for the gate when the run is cancelled
        # (`up --demo` stopped) must not leave a never-awaited coroutine behind.
        flows: list[Callable[[], Awaitable[None]]] = [functools.partial(traffic.order_flow, i) for i in range(orders)]
        flows += [functools.partial(traffic.otp_flow, i) for i in range(otps)]
        rng.shuffle(flows)
        gate = asyncio.Semaphore(max(1, concurrency))

        async def one(flow: Callable[[], Awaitable[None]]) -> None:
            async with gate:
                try:
                    await flow()
                except FlowFailed:
                    progress.advance(failed=True)
                else:
                    progress.advance()

        await asyncio.gather(*(one(f) for f in flows))
        progress.finish()
    return Report(targets, orders, otps, time.perf_counter() - started, traffic.stats)


def demo(args: argparse.Namespace) -> int:
    """`streamshop demo`."""
    if args.concurrency < 1:
        raise CommandError("--concurrency must be at least 1")
    targets = resolve_targets(args)
    total = args.orders + args.otp
    if sys.stderr.isatty():
        progress = Progress(total, stream=sys.stderr)
    else:
        progress = Progress(total, write_line=lambda line: print(line, file=sys.stderr, flush=True))
    report = asyncio.run(
        run_traffic(
            targets,
            orders=args.orders,
            otps=args.otp,
            concurrency=args.concurrency,
            progress=progress,
            otp_timeout=args.otp_timeout,
            seed=args.seed,
        )
    )
    for line in report.lines():
        print(line)
    return 0 if report.ok else 1
