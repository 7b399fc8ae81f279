"""Login throttling for password checks, by user and by source address, in bounded memory.

Used by the broker's SASL (PLAIN, and SCRAM at the client's proof), the registry's basic auth
and the dashboard's sign-in.  A caller asks before it checks a password and reports the outcome:

    wait = throttle.blocked_for(user, address)   # > 0: refuse without checking the password
    ...check...
    throttle.failed(user, address) if wrong else throttle.succeeded(user, address)

The check and the report must not be separated by another attempt's check for the same user
(the broker checks a SCRAM proof synchronously; PLAIN and the HTTP logins ask again once they
hold a hashing slot, `HashingGate`), so parallel attempts opened in advance gain nothing.

`FailureThrottle` is one map of windows: the first `free` failures of a key cost nothing (a
mistyped password); each one after closes the key for twice as long as the last, from `base_s`
up to `max_s`; an attempt while a key is closed is refused unchecked and does not extend it.

`LoginThrottle` keys an attempt for `user` from `address` by:

- (user, address): every attempt.  A guesser on one address gets about one checked guess per
  window for that user, as before.
- address: every attempt not from a known device (below), free 10 failures for any names:
  spraying many names from one address.
- user, split in two.  Addresses with failures on record for that user ("dirty") share the
  user's dirty window, opened only by their failures; addresses without ("fresh") share the
  user's fresh window, opened only by failures from fresh addresses.  A guesser on one address
  makes one fresh failure and is dirty from then on, so it never closes the owner's fresh
  window: the owner, typing the right password on another address, gets in at once.  A guesser
  spreading one guess over each of many addresses meets the fresh window after three, and gets
  about one checked guess per window, not one per address.
- known devices: an address that has signed in as the user before is exempt from the user's
  and the address's windows (OWASP's "known device"); only its (user, address) window applies.

The trade-offs: while a distributed guesser keeps the fresh window closed, the owner's first
login from a new address (neither known nor dirty) waits for it too, at most `max_s`; an
address the owner shares with a guesser (a NAT, a stack's services on 127.0.0.1) is the
guesser's address as far as the (user, address) window goes, and as far as the address's
window goes unless the owner has signed in from there before; and an owner who mistyped from an
address that is not yet a known device shares the dirty window with guessers.  Nobody can be
kept out for longer than `max_s` by someone else, and never from a known device.

Each map keeps at most `max_keys` keys, forgetting the least recently failed first and any key
`forget_after_s` after its last failure, so a flood of names or addresses cannot exhaust
memory.  The price of the bound: a flood large enough to push a user's keys out of their map
(tens of thousands of failed checks, each itself throttled) reopens that user's windows.

`HashingGate` bounds password hashing (PBKDF2) and orders it: known devices first, then
addresses without failures, then the rest; at most `max_waiting` of the last may queue (more
are refused at once), so a flood of guesses from many addresses cannot hold a real login back
behind its queued hashes.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass

__all__ = ["FailureThrottle", "GateFull", "HashingGate", "LoginThrottle"]

KNOWN, FRESH, DIRTY = 0, 1, 2  # hashing priorities, best first (`LoginThrottle.priority`)


@dataclass
class _Key:
    failures: int
    closed_until: float


class FailureThrottle:
    def __init__(
        self,
        *,
        max_s: float,
        base_s: float = 0.5,
        free: int = 3,
        forget_after_s: float = 900.0,
        max_keys: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_s = max_s
        self.base_s = base_s
        self.free = free
        self.forget_after_s = forget_after_s
        self.max_keys = max_keys
        self.clock = clock
        self._keys: OrderedDict[str, _Key] = OrderedDict()  # least recently failed first
        self.refused = 0  # attempts refused while their key was closed

    @property
    def enabled(self) -> bool:
        return self.max_s > 0

    def closed_for(self, keys: Iterable[str]) -> float:
        """Seconds until every one of `keys` is open (0: open now); counts nothing."""
        if not self.enabled:
            return 0.0
        now = self.clock()
        return max((k.closed_until - now for key in keys if (k := self._keys.get(key)) is not None), default=0.0)

    def blocked_for(self, keys: Iterable[str]) -> float:
        """Seconds until an attempt for `keys` may be checked; 0 when it may be now.  A refused
        attempt is counted (`refused`) but does not extend the window: it tested no password."""
        wait = self.closed_for(keys)
        if wait > 0:
            self.refused += 1
            return wait
        return 0.0

    def failed(self, keys: Iterable[str]) -> float:
        """Record a failed attempt for each of `keys`; the longest window it opened (seconds)."""
        if not self.enabled:
            return 0.0
        now = self.clock()
        self._forget(now)
        longest = 0.0
        for key in keys:
            entry = self._keys.pop(key, None) or _Key(0, now)
            entry.failures += 1
            over = entry.failures - self.free
            window = min(self.max_s, self.base_s * 2 ** (over - 1)) if over > 0 else 0.0
            entry.closed_until = now + window
            self._keys[key] = entry  # most recently failed last
            longest = max(longest, window)
        while len(self._keys) > self.max_keys:
            self._keys.popitem(last=False)
        return longest

    def succeeded(self, keys: Iterable[str]) -> None:
        for key in keys:
            self._keys.pop(key, None)

    def failures(self, key: str) -> int:
        entry = self._keys.get(key)
        return entry.failures if entry is not None else 0

    def __len__(self) -> int:
        return len(self._keys)

    def _forget(self, now: float) -> None:
        while self._keys:
            key, entry = next(iter(self._keys.items()))
            if now - entry.closed_until < self.forget_after_s:
                break
            del self._keys[key]


class LoginThrottle:
    """Windows per (user, address), per address and per user (fresh and dirty addresses apart),
    with known devices exempt from the shared ones: see the module's docstring."""

    def __init__(
        self,
        *,
        max_s: float,
        base_s: float = 0.5,
        free: int = 3,
        address_free: int = 10,
        forget_after_s: float = 900.0,
        known_for_s: float = 30 * 86400.0,
        max_keys: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        def windows(free_failures: int) -> FailureThrottle:
            return FailureThrottle(
                max_s=max_s,
                base_s=base_s,
                free=free_failures,
                forget_after_s=forget_after_s,
                max_keys=max_keys,
                clock=clock,
            )

        self.pairs = windows(free)
        self.addresses = windows(address_free)
        self.users = windows(free)
        self.known_for_s = known_for_s
        self.max_keys = max_keys
        self.clock = clock
        self._known: OrderedDict[str, float] = OrderedDict()  # pair -> last success, oldest first
        self.refused = 0  # attempts refused unchecked
        self.checked = 0  # failures recorded: wrong passwords checked

    @property
    def max_s(self) -> float:
        return self.pairs.max_s

    @property
    def enabled(self) -> bool:
        return self.pairs.enabled

    def _windows(self, user: str, address: str) -> list[tuple[FailureThrottle, str]]:
        pair = _pair(user, address)
        out = [(self.pairs, pair)]
        if self.known(user, address):
            return out
        kind = "dirty" if self.pairs.failures(pair) else "fresh"
        return [*out, (self.addresses, address), (self.users, f"{kind}:{user}")]

    def known(self, user: str, address: str) -> bool:
        """Whether `address` has signed in as `user` within `known_for_s`."""
        last = self._known.get(_pair(user, address))
        return last is not None and self.clock() - last < self.known_for_s

    def blocked_for(self, user: str, address: str) -> float:
        """Seconds until a password for `user` from `address` may be checked (0: now).  A refused
        attempt is counted (`refused`) but extends no window: it tested no password."""
        wait = max((windows.closed_for((key,)) for windows, key in self._windows(user, address)), default=0.0)
        if wait > 0:
            self.refused += 1
        return wait

    def failed(self, user: str, address: str) -> float:
        """Record a wrong password; the longest window this opened or kept (seconds)."""
        if not self.enabled:
            return 0.0
        self.checked += 1
        windows = self._windows(user, address)
        if len(windows) == 1:  # a known device's failure still counts for its address
            windows.append((self.addresses, address))
        return max(throttle.failed((key,)) for throttle, key in windows)

    def succeeded(self, user: str, address: str) -> None:
        """The right password: the (user, address) failures go and the address becomes a known
        device.  The user's and the address's windows stay, or a guesser holding one valid
        account of its own could reopen them."""
        pair = _pair(user, address)
        self.pairs.succeeded((pair,))
        if not self.enabled:
            return
        self._known.pop(pair, None)
        self._known[pair] = self.clock()
        while len(self._known) > self.max_keys:
            self._known.popitem(last=False)

    def priority(self, user: str, address: str) -> int:
        """Where a password check waits for hashing (`HashingGate`): known devices first, then
        addresses without failures for any name, then the rest."""
        if self.known(user, address):
            return KNOWN
        return DIRTY if self.addresses.failures(address) else FRESH


def _pair(user: str, address: str) -> str:
    return f"{len(user)}:{user}@{address}"


class GateFull(Exception):
    """Too many password checks from addresses with failures are waiting: refused unqueued."""


class HashingGate:
    """At most `slots` password hashes at once; waiters are admitted by priority (lower first),
    in arrival order within one, and at most `max_waiting` wait at `DIRTY` priority."""

    def __init__(self, slots: int, max_waiting: int = 32) -> None:
        self._free = slots
        self.max_waiting = max_waiting
        self._waiting: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self.refused = 0

    def waiting(self, priority: int | None = None) -> int:
        return sum(1 for p, _, _ in self._waiting if priority is None or p == priority)

    @contextlib.asynccontextmanager
    async def slot(self, priority: int) -> AsyncIterator[None]:
        if self._free > 0 and not self._waiting:
            self._free -= 1
        else:
            if priority >= DIRTY and self.waiting(DIRTY) >= self.max_waiting:
                self.refused += 1
                raise GateFull
            entry = (priority, next(self._order), asyncio.get_running_loop().create_future())
            heapq.heappush(self._waiting, entry)
            try:
                await entry[2]
            except asyncio.CancelledError:
                if entry[2].done() and not entry[2].cancelled():
                    self._release()  # admitted just as it was cancelled: pass the slot on
                else:
                    self._waiting.remove(entry)
                    heapq.heapify(self._waiting)
                raise
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        while self._waiting:
            _, _, admitted = heapq.heappop(self._waiting)
            if not admitted.done():
                admitted.set_result(None)
                return
        self._free += 1
