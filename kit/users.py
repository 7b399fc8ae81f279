"""Users files and password checks for HTTP basic auth and sign-in pages (the registry's users,
the dashboard's sign-in).

The users file has the format Confluent Schema Registry's basic authentication reads (Jetty's
property file), one user per line::

    # name: credential,role[,role...]
    orders: PBKDF2:sha256:600000:<salt, base64>:<hash, base64>,write
    ops: PBKDF2:sha256:600000:...,admin

The credential is a PBKDF2 hash (`hash_password` makes one; ``streamshop users hash-password``
prints one) or, as Jetty allows, the password itself, which only suits files that never leave the
machine.  Roles are ranked, weakest first; a user holds the strongest role of its line.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import math
import os
import re
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kit.files import read_small_text
from kit.settings import ConfigError
from kit.throttle import GateFull, HashingGate, LoginThrottle

__all__ = ["ROLES", "LoginThrottled", "Users", "UsersFileError", "hash_password", "parse_basic"]

ROLES = ("read", "write", "admin")
_RANK = {role: rank for rank, role in enumerate(ROLES)}
_PBKDF2 = re.compile(r"PBKDF2:sha256:(\d+):([A-Za-z0-9+/=]+):([A-Za-z0-9+/=]+)")
ITERATIONS = 600_000
MAX_FILE_BYTES = 1024 * 1024
MAX_ITERATIONS = 10_000_000
# Verified (user, password) pairs kept so that PBKDF2 runs once per caller, not per request.
_CACHE_LIMIT = 1024


class UsersFileError(ConfigError):
    """The users file cannot be used; the message names the line."""


class LoginThrottled(Exception):
    """Too many failed logins for this name: refused unchecked for now."""

    def __init__(self, retry_after_s: float, reason: str = "too many failed logins") -> None:
        super().__init__(f"{reason}: try again in {math.ceil(retry_after_s)} s")
        self.retry_after_s = retry_after_s


def hash_password(password: str, *, iterations: int = ITERATIONS, salt: bytes | None = None) -> str:
    salt = os.urandom(16) if salt is None else salt
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    return f"PBKDF2:sha256:{iterations}:{base64.b64encode(salt).decode()}:{base64.b64encode(digest).decode()}"


def _decoy(credentials: list[str]) -> str:
    """What a name without an account is checked against (never matches a password: see
    `authenticate`): a credential of the shape most accounts have, PBKDF2 with their iterations
    and salt length or a plain password, so an unknown name costs the same time as a known one."""
    shapes: Counter[tuple[int, int]] = Counter()
    for credential in credentials:
        match = _PBKDF2.fullmatch(credential)
        shapes[(int(match[1]), len(base64.b64decode(match[2]))) if match else (0, 0)] += 1
    iterations, salt_length = shapes.most_common(1)[0][0] if shapes else (ITERATIONS, 16)
    if iterations == 0:
        return "x" * 32
    salt, digest = base64.b64encode(bytes(salt_length)).decode(), base64.b64encode(bytes(32)).decode()
    return f"PBKDF2:sha256:{iterations}:{salt}:{digest}"


@dataclass(frozen=True)
class _User:
    credential: str
    role: str


def _check_credential(credential: str, password: str) -> bool:
    match = _PBKDF2.fullmatch(credential)
    if match is None:  # the password itself
        return hmac.compare_digest(credential.encode(), password.encode())
    iterations, salt, expected = int(match[1]), base64.b64decode(match[2]), base64.b64decode(match[3])
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    return hmac.compare_digest(digest, expected)


class Users:
    """Users and their strongest role, from a users file."""

    def __init__(self, users: Mapping[str, _User], throttle: LoginThrottle | None = None) -> None:
        self._users = dict(users)
        self.decoy = _decoy([user.credential for user in self._users.values()])
        self._verified: dict[bytes, str] = {}
        # Two hashes at once; known devices, then addresses without failures, go first.
        self.hashing = HashingGate(2)
        self.throttle = throttle if throttle is not None else LoginThrottle(max_s=0)
        # One attempt at a time per source: a flood from one address holds at most one of the
        # two hashing slots, and a login from anywhere else gets the other.
        self._sources: dict[str, tuple[asyncio.Lock, int]] = {}

    @classmethod
    def parse(cls, text: str, throttle: LoginThrottle | None = None) -> Users:
        users: dict[str, _User] = {}
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith(("#", "!")):
                continue
            name, sep, rest = line.partition(":")
            name = name.strip()
            parts = [p.strip() for p in rest.split(",")]
            if not sep or not name or len(parts) < 2 or not parts[0]:
                raise UsersFileError(f"line {number}: expected 'name: credential,role[,role...]'")
            unknown = [r for r in parts[1:] if r not in _RANK]
            if unknown:
                raise UsersFileError(f"line {number}: unknown role {unknown[0]!r} (roles: {', '.join(ROLES)})")
            credential = parts[0]
            if credential.startswith("PBKDF2:"):
                match = _PBKDF2.fullmatch(credential)
                try:
                    valid = match is not None and 1 <= int(match[1]) <= MAX_ITERATIONS
                    valid = valid and bool(match and base64.b64decode(match[2], validate=True))
                except binascii.Error:
                    valid = False
                if not valid:
                    raise UsersFileError(f"line {number}: malformed PBKDF2 credential for {name!r}")
            if name in users:
                raise UsersFileError(f"line {number}: user {name!r} appears twice")
            users[name] = _User(credential, max(parts[1:], key=_RANK.__getitem__))
        return cls(users, throttle)

    @classmethod
    def load(cls, path: Path, throttle: LoginThrottle | None = None) -> Users:
        try:
            text = read_small_text(path, MAX_FILE_BYTES)
        except ValueError as e:
            raise UsersFileError(str(e)) from e
        try:
            return cls.parse(text, throttle)
        except UsersFileError as e:
            raise UsersFileError(f"{path}: {e}") from e

    def __len__(self) -> int:
        return len(self._users)

    async def authenticate(self, name: str, password: str, source: str = "") -> str | None:
        """The user's role when the password is right, else None; `LoginThrottled` while the
        throttle's windows for `name` from `source` (the client's address) are closed, or while
        too many checks from addresses with failures wait for hashing.

        A pair verified before answers at once, without hashing or waiting.  Otherwise hashing
        runs in a thread, two at a time and one at a time per source, known devices and
        addresses without failures first, so wrong passwords cost the server bounded CPU, never
        block it, and a flood cannot queue ahead of a real login; an unknown user costs as much
        as a known one, so timing does not tell which names exist."""
        key = hashlib.sha256(f"{len(name)}:{name}:{password}".encode()).digest()
        if key in self._verified:
            self.throttle.succeeded(name, source)
            return self._verified[key]
        wait = self.throttle.blocked_for(name, source)  # refused before queueing for a hash
        if wait > 0:
            raise LoginThrottled(wait)
        lock, waiting = self._sources.get(source) or (asyncio.Lock(), 0)
        self._sources[source] = (lock, waiting + 1)
        try:
            async with lock:
                if key in self._verified:  # verified while this one waited its turn
                    return self._verified[key]
                try:
                    async with self.hashing.slot(self.throttle.priority(name, source)):
                        return await self._check(name, password, key, source)
                except GateFull:
                    raise LoginThrottled(1.0, "too many logins waiting") from None
        finally:
            lock, waiting = self._sources[source]
            if waiting == 1:
                del self._sources[source]
            else:
                self._sources[source] = (lock, waiting - 1)

    async def _check(self, name: str, password: str, key: bytes, source: str) -> str | None:
        # Asked again in the hashing slot: failures counted while this one waited count for it.
        wait = self.throttle.blocked_for(name, source)
        if wait > 0:
            raise LoginThrottled(wait)
        user = self._users.get(name)
        ok = await asyncio.to_thread(_check_credential, user.credential if user else self.decoy, password)
        if user is None or not ok:
            self.throttle.failed(name, source)
            return None
        self.throttle.succeeded(name, source)
        if len(self._verified) >= _CACHE_LIMIT:
            self._verified.clear()
        self._verified[key] = user.role
        return user.role


def allows(role: str, needed: str) -> bool:
    """Whether `role` is at least as strong as `needed`."""
    return _RANK[role] >= _RANK[needed]


def parse_basic(header: str | None) -> tuple[str, str] | None:
    """(user, password) from an ``Authorization: Basic`` header; None when absent or malformed."""
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "basic" or not value or len(value) > 4096:
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = decoded.partition(":")
    return (user, password) if sep else None


def main() -> int:
    """Print the PBKDF2 credential of the password read from the first line of stdin."""
    print(hash_password(sys.stdin.readline().rstrip("\n")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
