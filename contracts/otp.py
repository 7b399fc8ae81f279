"""The sealed OTP code: how the otp service hands a code to the senders inside an
`OtpRequested` event (schemas/OtpRequested.avsc) without publishing it in clear.

The code is 6 decimal digits.  `seal_code` encrypts it with AES-256-GCM under a key the otp
service shares with the senders, with the request id as associated data, so the senders can
deliver it and a sealed code cannot be replayed under another request; `open_sealed_code` is what
a sender does.
"""

from __future__ import annotations

import enum
import secrets
from collections.abc import Mapping
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = [
    "CODE_DIGITS",
    "E164",
    "SEAL_ALGORITHM",
    "SEAL_KEY_BYTES",
    "Channel",
    "open_sealed_code",
    "seal_code",
]

CODE_DIGITS = 6
SEAL_ALGORITHM = "AES-256-GCM"
SEAL_KEY_BYTES = 32  # AES-256-GCM
NONCE_BYTES = 12
E164 = r"\+[1-9][0-9]{6,14}"  # a phone number, as the SMS channel takes it


class Channel(enum.StrEnum):
    """Delivery channels, spelled as the Avro enum symbols (``unknown`` is never written)."""

    SMS = "sms"
    EMAIL = "email"


def seal_code(key: bytes, key_id: str, request_id: str, code: str) -> dict[str, Any]:
    """The Avro `SealedCode` record of `code`: AES-256-GCM, a fresh random nonce, the request id
    as associated data."""
    nonce = secrets.token_bytes(NONCE_BYTES)
    ciphertext = AESGCM(key).encrypt(nonce, code.encode(), request_id.encode())
    return {"algorithm": SEAL_ALGORITHM, "key_id": key_id, "nonce": nonce, "ciphertext": ciphertext}


def open_sealed_code(key: bytes, request_id: str, sealed: Mapping[str, Any]) -> str:
    """The code inside a `SealedCode` (what a sender does); `cryptography.exceptions.InvalidTag`
    when the key, the request id or the ciphertext do not match."""
    if sealed["algorithm"] != SEAL_ALGORITHM:
        raise ValueError(f"unsupported sealing algorithm {sealed['algorithm']!r}")
    return AESGCM(key).decrypt(sealed["nonce"], sealed["ciphertext"], request_id.encode()).decode()
