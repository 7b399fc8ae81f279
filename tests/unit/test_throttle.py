"""`FailureThrottle`: free attempts, then windows that double up to the cap, per key, refused
attempts that do not extend them, and memory bounded by age and by count."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from kit.throttle import FailureThrottle
from kit.users import LoginThrottled, Users, hash_password


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_windows_double_after_the_free_failures_up_to_the_cap() -> None:
    clock = Clock()
    throttle = FailureThrottle(max_s=4.0, base_s=0.5, free=3, clock=clock)
    keys = ("address:10.0.0.1", "user:admin")
    windows = [throttle.failed(keys) for _ in range(8)]
    assert windows == [0.0, 0.0, 0.0, 0.5, 1.0, 2.0, 4.0, 4.0]
    assert throttle.blocked_for(keys) == pytest.approx(4.0)
    assert throttle.blocked_for(("user:admin",)) == pytest.approx(4.0)  # either key closes it
    assert throttle.blocked_for(("address:10.0.0.2", "user:other")) == 0.0
    clock.now += 1.0
    assert throttle.blocked_for(keys) == pytest.approx(3.0)  # a refused attempt does not extend it
    assert throttle.refused == 3
    clock.now += 3.0
    assert throttle.blocked_for(keys) == 0.0
    throttle.succeeded(keys)
    assert throttle.failures("user:admin") == 0


def test_keys_are_forgotten_with_age_and_bounded_in_number() -> None:
    clock = Clock()
    throttle = FailureThrottle(max_s=1.0, forget_after_s=60, max_keys=100, clock=clock)
    for n in range(1000):
        throttle.failed((f"address:{n}",))
    assert len(throttle) == 100  # the least recently failed went first
    assert throttle.failures("address:999") == 1
    assert throttle.failures("address:0") == 0
    clock.now += 61
    throttle.failed(("address:new",))
    assert len(throttle) == 1


def test_a_cap_of_zero_turns_it_off() -> None:
    throttle = FailureThrottle(max_s=0)
    for _ in range(10):
        assert throttle.failed(("user:admin",)) == 0.0
    assert throttle.blocked_for(("user:admin",)) == 0.0
    assert len(throttle) == 0


async def test_a_guessed_name_is_refused_unchecked_and_other_names_are_not() -> None:
    users = Users.parse(
        f"admin: {hash_password('right', iterations=1000)},admin\nops: {hash_password('ops', iterations=1000)},read\n",
        FailureThrottle(max_s=30),
    )
    for _ in range(4):
        assert await users.authenticate("admin", "wrong", source="10.0.0.9") is None
    with pytest.raises(LoginThrottled) as refused:
        await users.authenticate("admin", "right", source="10.0.0.1")  # from anywhere, for the window
    assert 0 < refused.value.retry_after_s <= 0.5
    assert await users.authenticate("ops", "ops", source="10.0.0.9") == "read"  # the guesser's host too


async def test_a_flood_from_one_address_does_not_queue_ahead_of_a_login_from_another() -> None:
    """64 concurrent wrong logins from one address take one hashing slot at a time (and after
    three failures are refused unchecked); a new login from elsewhere is not kept waiting."""
    users = Users.parse(
        f"admin: {hash_password('right', iterations=200_000)},admin\n"
        f"ops: {hash_password('ops-pw', iterations=200_000)},read\n",
        FailureThrottle(max_s=30),
    )
    began = time.perf_counter()
    assert await users.authenticate("ops", "ops-pw", source="10.0.0.1") == "read"
    one_hash = time.perf_counter() - began
    users = Users.parse(
        f"admin: {hash_password('right', iterations=200_000)},admin\n"
        f"ops: {hash_password('ops-pw', iterations=200_000)},read\n",
        FailureThrottle(max_s=30),
    )

    async def guess(n: int) -> None:
        with contextlib.suppress(LoginThrottled):
            await users.authenticate("admin", f"guess-{n}", source="10.6.6.6")

    flood = [asyncio.create_task(guess(n)) for n in range(64)]
    await asyncio.sleep(0)  # the flood is queued first
    began = time.perf_counter()
    assert await users.authenticate("ops", "ops-pw", source="10.0.0.1") == "read"
    waited = time.perf_counter() - began
    await asyncio.gather(*flood)
    assert waited < 6 * one_hash, (waited, one_hash)  # first come first served: 32 hashes
    assert users.throttle.refused >= 60  # the flood's later guesses were never hashed
