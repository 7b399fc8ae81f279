"""Growing delays after failed logins, per key, in bounded memory.

Used by the broker's SASL, the registry's basic auth and the dashboard's sign-in, keyed by the
user name the login is for:

    keys = (f"user:{name}",)
    wait = throttle.blocked_for(keys)      # > 0: refuse without checking the password
    ...check...
    throttle.failed(keys) if wrong else throttle.succeeded(keys)

The first `free` failures of a key cost nothing (a mistyped password); each one after closes the
key for twice as long as the last, from `base_s` up to `max_s`.  An attempt while a key is
closed is refused without checking the password, so neither guessing in series nor opening more
connections in parallel gets more than about one checked guess per window.  The price is the
usual one: someone guessing a user's password also delays that user's own sign-in, by at most
`max_s`.  The callers do not key by source address: the clients of one host (a stack's services
on 127.0.0.1, everyone behind a NAT) share it, and one of them guessing, or just misconfigured,
would lock every other user of the host out.  A key is forgotten `forget_after_s` after its last
failure, and at most `max_keys` are kept (the least recently failed go first), so a flood of
names cannot exhaust memory.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

__all__ = ["FailureThrottle"]


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

    def blocked_for(self, keys: Iterable[str]) -> float:
        """Seconds until an attempt for `keys` may be checked; 0 when it may be now.  A refused
        attempt is counted (`refused`) but does not extend the window: it tested no password."""
        if not self.enabled:
            return 0.0
        now = self.clock()
        wait = max((k.closed_until - now for key in keys if (k := self._keys.get(key)) is not None), default=0.0)
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
