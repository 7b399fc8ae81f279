"""OTP rules, free of I/O: code generation, keyed hashing, sealing for the senders, input
schemas and the errors of the API.

The code is 6 decimal digits from `secrets`.  It is never stored or published in clear:

- `code_hash` is ``hmac-sha256:<hex>`` of ``"<request_id>:<code>"`` under the service's hash key;
  binding the request id means equal codes of two requests hash differently.  Verification
  recomputes it and compares in constant time (`hmac.compare_digest`).
- `sealed_code` (when a seal key is configured) is the code encrypted with AES-256-GCM under a key
  shared with the senders, with the request id as associated data (schemas/OtpRequested.avsc), so
  the senders can deliver it and a sealed code cannot be replayed under another request.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any, ClassVar, NewType

from contracts.otp import CODE_DIGITS, E164, SEAL_ALGORITHM, Channel, open_sealed_code, seal_code
from kit.errors import Conflict, NotFound, ServiceError, ValidationError
from kit.validation import Enum, List, Object, Str

__all__ = [
    "CODE_DIGITS",
    "HASH_ALGORITHM",
    "REQUEST_OTP",
    "SEAL_ALGORITHM",
    "VERIFY_OTP",
    "AlreadyVerified",
    "Channel",
    "CodeExpired",
    "NewOtpRequest",
    "RateLimited",
    "RequestId",
    "TooManyAttempts",
    "UnknownRequest",
    "WrongCode",
    "code_hash",
    "code_matches",
    "generate_code",
    "open_sealed_code",
    "seal_code",
]

RequestId = NewType("RequestId", str)

HASH_ALGORITHM = "hmac-sha256"
EMAIL = r"[^@\s]+@[^@\s]+\.[^@\s]+"


# -- errors ------------------------------------------------------------------------------------


class UnknownRequest(NotFound):
    """404: no OTP request with this id."""

    code = "unknown_request"

    def __init__(self, request_id: str) -> None:
        super().__init__(f"no OTP request {request_id}", details={"request_id": request_id})


class WrongCode(ServiceError):
    """422: the code does not match; `details.attempts_remaining` says how many tries are left."""

    status: ClassVar[int] = 422
    code: ClassVar[str] = "wrong_code"

    def __init__(self, attempts_remaining: int) -> None:
        super().__init__(
            f"the code is wrong ({attempts_remaining} attempts remaining)",
            details={"attempts_remaining": attempts_remaining},
        )


class CodeExpired(ServiceError):
    """410: the code is past its expiry; request a new one."""

    status: ClassVar[int] = 410
    code: ClassVar[str] = "expired"
    default_message: ClassVar[str] = "the code has expired; request a new one"


class TooManyAttempts(ServiceError):
    """429: the request is locked after too many wrong codes; request a new one."""

    status: ClassVar[int] = 429
    code: ClassVar[str] = "too_many_attempts"
    default_message: ClassVar[str] = "too many wrong codes; request a new one"


class AlreadyVerified(Conflict):
    """409: a code is good for one verification only."""

    code = "already_verified"
    default_message = "this OTP request was already verified"


class RateLimited(ServiceError):
    """429: too many codes asked for within the window, by this user, for this phone number or
    e-mail address, or from this client address (`details.scope`: user, destination, client)."""

    status: ClassVar[int] = 429
    code: ClassVar[str] = "rate_limited"

    def __init__(self, scope: str, limit: int, window_seconds: float, retry_after_seconds: int) -> None:
        per = _SCOPE_WORDS.get(scope, scope)
        super().__init__(
            f"at most {limit} OTP requests {per} per {window_seconds:g} seconds; retry in {retry_after_seconds} s",
            details={
                "scope": scope,
                "limit": limit,
                "window_seconds": window_seconds,
                "retry_after_seconds": retry_after_seconds,
            },
        )
        self.retry_after_seconds = retry_after_seconds

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(max(1, self.retry_after_seconds))}


_SCOPE_WORDS = {
    "user": "per user",
    "destination": "to one phone number or e-mail address",
    "client": "from one client address",
}


# -- codes -------------------------------------------------------------------------------------


def generate_code() -> str:
    """A uniformly random code of `CODE_DIGITS` decimal digits (leading zeros kept)."""
    return f"{secrets.randbelow(10**CODE_DIGITS):0{CODE_DIGITS}d}"


def code_hash(key: bytes, request_id: str, code: str) -> str:
    """``hmac-sha256:<lowercase hex>`` of ``"<request_id>:<code>"`` under `key`."""
    digest = hmac.new(key, f"{request_id}:{code}".encode(), hashlib.sha256).hexdigest()
    return f"{HASH_ALGORITHM}:{digest}"


def code_matches(key: bytes, request_id: str, code: str, stored_hash: str) -> bool:
    """Whether `code` is the one hashed as `stored_hash`, compared in constant time."""
    return hmac.compare_digest(code_hash(key, request_id, code).encode(), stored_hash.encode())


# -- input -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NewOtpRequest:
    """A validated `POST /otp` body: each channel once, with its destination."""

    user_id: str
    destinations: tuple[tuple[Channel, str], ...]

    @property
    def channels(self) -> tuple[Channel, ...]:
        return tuple(c for c, _ in self.destinations)

    @classmethod
    def from_body(cls, body: Any) -> NewOtpRequest:
        """Validate `body` (422 naming each bad field, including a destination missing for a
        requested channel)."""
        cleaned = REQUEST_OTP.validate(body)
        channels = [Channel(c) for c in cleaned["channels"]]
        address = {Channel.SMS: cleaned["phone"], Channel.EMAIL: cleaned["email"]}
        missing = {
            field: f"is required when channels include {channel}"
            for channel, field in ((Channel.SMS, "phone"), (Channel.EMAIL, "email"))
            if channel in channels and address[channel] is None
        }
        if missing:
            raise ValidationError(missing)
        return cls(cleaned["user_id"], tuple((c, address[c]) for c in channels))


REQUEST_OTP = Object(
    {
        "user_id": Str(min_len=1, max_len=128, strip=True),
        "channels": List(Enum(*(c.value for c in Channel)), min_items=1, max_items=len(Channel), unique=True),
        "phone": Str(
            required=False,
            nullable=True,
            pattern=E164,
            pattern_message="must be an E.164 phone number such as +15550100",
        ),
        "email": Str(
            required=False,
            nullable=True,
            max_len=254,
            strip=True,
            pattern=EMAIL,
            pattern_message="must be an e-mail address such as a@example.com",
        ),
    },
    # NewOtpRequest.from_body: each channel asked for needs its destination.
    rules={
        "allOf": [
            {
                "if": {"properties": {"channels": {"contains": {"const": channel}}}, "required": ["channels"]},
                "then": {"properties": {field: {"type": "string"}}, "required": [field]},
            }
            for channel, field in (("sms", "phone"), ("email", "email"))
        ]
    },
)

VERIFY_OTP = Object(
    {
        "request_id": Str(min_len=1, max_len=64),
        "code": Str(pattern=f"[0-9]{{{CODE_DIGITS}}}", pattern_message=f"must be {CODE_DIGITS} digits"),
    }
)
