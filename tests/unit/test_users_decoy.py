"""An unknown name is checked against a credential shaped like most accounts' (iterations, salt
length, or a plain password), so a wrong login takes as long whether or not the name exists."""

from __future__ import annotations

import base64
import statistics
import time

from kit.users import Users, hash_password


def test_the_decoy_has_the_iterations_and_salt_of_most_accounts() -> None:
    users = Users.parse(
        f"a: {hash_password('pa', iterations=50_000)},read\n"
        f"b: {hash_password('pb', iterations=50_000)},write\n"
        f"c: {hash_password('pc', iterations=600_000, salt=bytes(24))},admin\n"
    )
    _, _, iterations, salt, _ = users.decoy.split(":")
    assert iterations == "50000"
    assert len(base64.b64decode(salt)) == 16
    plain = Users.parse("a: secret-a,read\nb: secret-b,read\n")
    assert not plain.decoy.startswith("PBKDF2")


async def test_a_wrong_password_takes_as_long_for_an_unknown_name() -> None:
    users = Users.parse(f"known: {hash_password('right', iterations=100_000)},read\n")

    async def took(name: str) -> float:
        began = time.perf_counter()
        assert await users.authenticate(name, "wrong") is None
        return time.perf_counter() - began

    known, unknown = [], []
    for _ in range(3):  # interleaved: a busy moment weighs on both
        known.append(await took("known"))
        unknown.append(await took("nobody"))
    ratio = statistics.median(unknown) / statistics.median(known)
    assert 0.4 < ratio < 2.5, (known, unknown)  # a 600,000-iteration decoy made it 6
