"""SASL PLAIN and SCRAM-SHA-256/512 (RFC 5802, as Kafka speaks them), sans-io.

Credentials are stored as Kafka stores them: salt, iterations, StoredKey and ServerKey, never
the password.  The server side of an exchange takes the client's messages as bytes and
returns the bytes to answer, raising `AuthenticationFailed` with a message safe to send.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Callable
from dataclasses import dataclass

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MECHANISM_CODES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}  # AlterUserScramCredentials
CODES_BY_MECHANISM = {name: code for code, name in MECHANISM_CODES.items()}
MIN_ITERATIONS = 4096  # Kafka's bounds for SCRAM iterations
SALT_BYTES = 32
MAX_ITERATIONS = 16384
MAX_MESSAGE = 4096  # a SCRAM or PLAIN message is a few hundred bytes; anything longer is refused
_NONCE_BYTES = 24


class AuthenticationFailed(Exception):
    """The exchange failed; the message goes back to the client in SaslAuthenticate."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


def _hmac(algorithm: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, algorithm).digest()


def made_up_salt(secret: bytes, mechanism: str, user: str, length: int) -> bytes:
    """The same salt for the same unknown user every time (a random one would tell it apart),
    another for each mechanism (as a real user's credentials have), and of any length without
    repeating itself (a real salt of 64+ bytes does not): HMAC blocks in counter mode."""
    message = f"{mechanism}\0{user}\0".encode()
    blocks = (_hmac("sha512", secret, message + n.to_bytes(4, "big")) for n in range(-(-length // 64)))
    return b"".join(blocks)[:length]


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(MECHANISMS[mechanism], password.encode(), salt, iterations)


def credential_from_salted(mechanism: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    algorithm = MECHANISMS[mechanism]
    client_key = _hmac(algorithm, salted, b"Client Key")
    return ScramCredential(
        salt,
        iterations,
        hashlib.new(algorithm, client_key).digest(),
        _hmac(algorithm, salted, b"Server Key"),
    )


def make_credential(
    mechanism: str, password: str, iterations: int = MIN_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    return credential_from_salted(mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations)


def check_password(mechanism: str, credential: ScramCredential, password: str) -> bool:
    """PLAIN verified against a stored SCRAM credential (one store for every mechanism)."""
    derived = make_credential(mechanism, password, credential.iterations, credential.salt)
    return hmac.compare_digest(derived.stored_key, credential.stored_key)


def _decode(message: bytes) -> str:
    if len(message) > MAX_MESSAGE:
        raise AuthenticationFailed(f"SASL message of {len(message)} bytes is longer than {MAX_MESSAGE}")
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        raise AuthenticationFailed("SASL message is not UTF-8") from None


def parse_plain(message: bytes) -> tuple[str, str]:
    """RFC 4616: [authzid] NUL authcid NUL passwd; Kafka requires authzid empty or equal."""
    parts = _decode(message).split("\0")
    if len(parts) != 3:
        raise AuthenticationFailed("invalid PLAIN message: expected authzid NUL user NUL password")
    authzid, user, password = parts
    if not user or not password:
        raise AuthenticationFailed("PLAIN user name and password must not be empty")
    if authzid and authzid != user:
        raise AuthenticationFailed("PLAIN authorization id must be empty or equal the user name")
    return user, password


def _attributes(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in text.split(","):
        if len(part) < 2 or part[1] != "=" or part[0] in out:
            raise AuthenticationFailed(f"invalid SCRAM attribute {part[:20]!r}")
        out[part[0]] = part[2:]
    return out


def _unescape_name(name: str) -> str:
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise AuthenticationFailed("invalid SCRAM user name escape")
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """One SCRAM exchange: `first` answers client-first, `final` answers client-final.

    An unknown user is answered with a made-up salt, of the length and with the iterations most
    real users have (`decoy`), and fails only at the proof, so the exchange does not tell which
    user names exist."""

    def __init__(
        self,
        mechanism: str,
        lookup: Callable[[str], ScramCredential | None],
        secret: bytes,
        nonce: str | None = None,
        decoy: tuple[int, int] = (MIN_ITERATIONS, SALT_BYTES),
    ) -> None:
        self.mechanism = mechanism
        self.algorithm = MECHANISMS[mechanism]
        self.lookup = lookup
        self.secret = secret  # the broker's own (`salt_secret`): keys the made-up salts
        self.decoy = decoy  # (iterations, salt length) of the made-up answer: a real user's
        self.server_nonce = nonce or base64.b64encode(os.urandom(_NONCE_BYTES)).decode()
        self.user: str | None = None
        self.credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._gs2 = ""

    def first(self, message: bytes) -> bytes:
        text = _decode(message)
        if not text.startswith("n,") or text.count(",") < 3:
            raise AuthenticationFailed("invalid SCRAM client-first message (channel binding is not supported)")
        gs2_end = text.index(",", 2) + 1
        self._gs2, bare = text[:gs2_end], text[gs2_end:]
        authzid = text[2 : gs2_end - 1]
        attrs = _attributes(bare)
        if "n" not in attrs or "r" not in attrs or not attrs["r"]:
            raise AuthenticationFailed("SCRAM client-first message lacks a user name or nonce")
        if "m" in attrs:
            raise AuthenticationFailed("SCRAM mandatory extensions are not supported")
        user = _unescape_name(attrs["n"])
        if not user:
            raise AuthenticationFailed("SCRAM user name is empty")
        if authzid and _unescape_name(authzid.removeprefix("a=")) != user:
            raise AuthenticationFailed("SCRAM authorization id must equal the user name")
        self.user = user
        self.credential = self.lookup(user)
        iterations, length = self.decoy
        # Made for every name, so that a real user's answer costs what an unknown one's does.
        salt = made_up_salt(self.secret, self.mechanism, user, length)
        if self.credential is not None:
            salt, iterations = self.credential.salt, self.credential.iterations
        self._client_first_bare = bare
        self._nonce = attrs["r"] + self.server_nonce
        self._server_first = f"r={self._nonce},s={base64.b64encode(salt).decode()},i={iterations}"
        return self._server_first.encode()

    def final(self, message: bytes) -> bytes:
        text = _decode(message)
        attrs = _attributes(text)
        if "c" not in attrs or "r" not in attrs or "p" not in attrs or not text.endswith(",p=" + attrs["p"]):
            raise AuthenticationFailed("invalid SCRAM client-final message")
        if attrs["c"] != base64.b64encode(self._gs2.encode()).decode():
            raise AuthenticationFailed("SCRAM channel binding does not match the client-first message")
        if not hmac.compare_digest(attrs["r"].encode(), self._nonce.encode()):
            raise AuthenticationFailed("SCRAM nonce does not match this exchange")
        try:
            proof = base64.b64decode(attrs["p"], validate=True)
        except ValueError:
            raise AuthenticationFailed("SCRAM proof is not base64") from None
        without_proof = text[: -len(",p=" + attrs["p"])]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        credential = self.credential
        failed = AuthenticationFailed(
            "Authentication failed during authentication due to invalid credentials "
            f"with SASL mechanism {self.mechanism}"
        )
        if credential is None or len(proof) != len(credential.stored_key):
            raise failed
        signature = _hmac(self.algorithm, credential.stored_key, auth_message)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self.algorithm, client_key).digest(), credential.stored_key):
            raise failed
        verifier = base64.b64encode(_hmac(self.algorithm, credential.server_key, auth_message)).decode()
        return f"v={verifier}".encode()


class ScramClient:
    """The client side, for the project's own tools and tests of the server."""

    def __init__(self, mechanism: str, user: str, password: str, nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self.algorithm = MECHANISMS[mechanism]
        self.user = user
        self.password = password
        self.nonce = nonce or base64.b64encode(os.urandom(_NONCE_BYTES)).decode()
        self._bare = f"n={user.replace('=', '=3D').replace(',', '=2C')},r={self.nonce}"
        self._server_key = b""
        self._auth_message = b""

    def first(self) -> bytes:
        return ("n,," + self._bare).encode()

    def final(self, server_first: bytes) -> bytes:
        attrs = _attributes(server_first.decode())
        salt, iterations = base64.b64decode(attrs["s"]), int(attrs["i"])
        salted = salted_password(self.mechanism, self.password, salt, iterations)
        client_key = _hmac(self.algorithm, salted, b"Client Key")
        stored_key = hashlib.new(self.algorithm, client_key).digest()
        without_proof = f"c=biws,r={attrs['r']}"
        self._auth_message = f"{self._bare},{server_first.decode()},{without_proof}".encode()
        signature = _hmac(self.algorithm, stored_key, self._auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_key = _hmac(self.algorithm, salted, b"Server Key")
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> bool:
        expected = base64.b64encode(_hmac(self.algorithm, self._server_key, self._auth_message)).decode()
        return server_final.decode() == f"v={expected}"
