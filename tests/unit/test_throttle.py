"""`FailureThrottle`: free attempts, then windows that double up to the cap, per key, refused
attempts that do not extend them, and memory bounded by age and by count.  `LoginThrottle`:
per (user, address), per address and per user with fresh and dirty addresses apart, known
devices exempt.  `HashingGate`: known devices and clean addresses hashed first."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from kit.throttle import DIRTY, FRESH, KNOWN, FailureThrottle, GateFull, HashingGate, LoginThrottle
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
        LoginThrottle(max_s=30),
    )
    for _ in range(4):
        assert await users.authenticate("admin", "wrong", source="10.0.0.9") is None
    with pytest.raises(LoginThrottled) as refused:
        await users.authenticate("admin", "right", source="10.0.0.9")  # from the guesser's address
    assert 0 < refused.value.retry_after_s <= 0.5
    assert await users.authenticate("admin", "right", source="10.0.0.1") == "admin"  # the owner's, elsewhere
    assert await users.authenticate("ops", "ops", source="10.0.0.9") == "read"  # the guesser's host too


async def test_a_flood_from_one_address_does_not_queue_ahead_of_a_login_from_another() -> None:
    """64 concurrent wrong logins from one address take one hashing slot at a time (and after
    three failures are refused unchecked); a new login from elsewhere is not kept waiting."""
    users = Users.parse(
        f"admin: {hash_password('right', iterations=200_000)},admin\n"
        f"ops: {hash_password('ops-pw', iterations=200_000)},read\n",
        LoginThrottle(max_s=30),
    )
    began = time.perf_counter()
    assert await users.authenticate("ops", "ops-pw", source="10.0.0.1") == "read"
    one_hash = time.perf_counter() - began
    users = Users.parse(
        f"admin: {hash_password('right', iterations=200_000)},admin\n"
        f"ops: {hash_password('ops-pw', iterations=200_000)},read\n",
        LoginThrottle(max_s=30),
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


def test_a_guesser_on_one_address_never_closes_the_owners_fresh_address() -> None:
    clock = Clock()
    throttle = LoginThrottle(max_s=30, clock=clock)
    windows = [throttle.failed("admin", "10.6.6.6") for _ in range(8)]
    assert windows == [0.0, 0.0, 0.0, 0.5, 1.0, 2.0, 4.0, 8.0]
    assert throttle.blocked_for("admin", "10.6.6.6") == pytest.approx(8.0)
    assert throttle.blocked_for("admin", "10.0.0.1") == 0.0  # fresh: the guesser made one fresh failure
    throttle.failed("admin", "10.0.0.1")  # the owner mistypes once from there
    assert throttle.blocked_for("admin", "10.0.0.1") == pytest.approx(4.0)  # dirty: the dirty window
    assert throttle.blocked_for("admin", "10.0.0.2") == 0.0
    throttle.succeeded("admin", "10.0.0.2")  # signs in: a known device from now on


def test_a_guesser_spread_over_many_addresses_gets_one_guess_per_window_not_per_address() -> None:
    clock = Clock()
    throttle = LoginThrottle(max_s=30, clock=clock)
    throttle.succeeded("admin", "10.0.0.1")  # the owner's known device
    checked = 0
    for n in range(100):  # one guess from each of 100 addresses, 10 ms apart
        if throttle.blocked_for("admin", f"10.9.0.{n}") == 0:
            throttle.failed("admin", f"10.9.0.{n}")
            checked += 1
        clock.now += 0.01
    assert checked == 5  # three free, then windows of 0.5 s and 1 s, and 1 s has passed in all
    assert throttle.refused == 95
    assert throttle.blocked_for("admin", "10.0.0.200") > 0  # a new address waits for the window
    assert throttle.blocked_for("admin", "10.0.0.1") == 0.0  # the known device does not


def test_spraying_names_from_one_address_closes_the_address() -> None:
    clock = Clock()
    throttle = LoginThrottle(max_s=30, clock=clock)
    for n in range(10):
        assert throttle.failed(f"name-{n}", "10.6.6.6") == 0.0
    assert throttle.failed("name-10", "10.6.6.6") == 0.5
    assert throttle.blocked_for("other", "10.6.6.6") == pytest.approx(0.5)
    assert throttle.blocked_for("other", "10.0.0.1") == 0.0
    assert throttle.priority("other", "10.6.6.6") == DIRTY
    assert throttle.priority("other", "10.0.0.1") == FRESH


def test_known_devices_are_forgotten_with_age_and_bounded_in_number() -> None:
    clock = Clock()
    throttle = LoginThrottle(max_s=30, known_for_s=100, max_keys=10, clock=clock)
    for n in range(20):
        throttle.succeeded("admin", f"10.0.0.{n}")
    assert not throttle.known("admin", "10.0.0.0")
    assert throttle.known("admin", "10.0.0.19")
    assert throttle.priority("admin", "10.0.0.19") == KNOWN
    for n in range(50):
        throttle.failed(f"name-{n}", f"10.1.0.{n}")
    assert len(throttle.pairs) == len(throttle.addresses) == len(throttle.users) == 10
    clock.now += 101
    assert not throttle.known("admin", "10.0.0.19")


def test_a_cap_of_zero_turns_the_login_throttle_off() -> None:
    throttle = LoginThrottle(max_s=0)
    for _ in range(10):
        assert throttle.failed("admin", "10.6.6.6") == 0.0
    throttle.succeeded("admin", "10.0.0.1")
    assert throttle.blocked_for("admin", "10.6.6.6") == 0.0
    assert len(throttle.pairs) == 0
    assert not throttle.known("admin", "10.0.0.1")


async def test_the_gate_admits_known_devices_then_clean_addresses_and_bounds_the_rest() -> None:
    gate = HashingGate(1, max_waiting=2)
    order: list[str] = []
    release = asyncio.Event()

    async def hash_as(name: str, priority: int) -> None:
        async with gate.slot(priority):
            order.append(name)
            await release.wait()

    first = asyncio.create_task(hash_as("first", DIRTY))
    await asyncio.sleep(0)
    waiting = [asyncio.create_task(hash_as(name, p)) for name, p in (("d1", DIRTY), ("d2", DIRTY), ("f", FRESH))]
    waiting.append(asyncio.create_task(hash_as("k", KNOWN)))
    await asyncio.sleep(0)
    with pytest.raises(GateFull):
        await hash_as("d3", DIRTY)  # two dirty ones wait already
    release.set()
    await asyncio.gather(first, *waiting)
    assert order == ["first", "k", "f", "d1", "d2"]
    assert gate.refused == 1
    assert gate.waiting() == 0


async def test_guesses_from_many_addresses_at_once_are_mostly_refused_unchecked() -> None:
    """100 concurrent wrong logins for one name, each from its own address: each is asked again
    when it holds a hashing slot, so after the fourth failure the rest are refused unchecked."""
    users = Users.parse(f"admin: {hash_password('right', iterations=1000)},admin\n", LoginThrottle(max_s=30))

    async def guess(n: int) -> bool:
        try:
            assert await users.authenticate("admin", f"guess-{n}", source=f"10.9.{n // 250}.{n % 250}") is None
        except LoginThrottled:
            return False
        return True

    checked = sum(await asyncio.gather(*(guess(n) for n in range(100))))
    assert checked <= 5, checked  # three free, the fourth opens a window (a fifth if one came late)
    assert users.throttle.checked == checked
