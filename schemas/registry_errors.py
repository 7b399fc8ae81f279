"""What a schema registry answers, apart from the HTTP client that asks it (schemas.client):
the serde and the console tools need these without loading aiohttp."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ERROR_SCHEMA_NOT_FOUND",
    "ERROR_SUBJECT_NOT_FOUND",
    "ERROR_VERSION_NOT_FOUND",
    "RegisteredSchema",
    "RegistryError",
    "RegistryUnavailableError",
]

# Confluent error codes the callers of the client branch on.
ERROR_SUBJECT_NOT_FOUND = 40401
ERROR_VERSION_NOT_FOUND = 40402
ERROR_SCHEMA_NOT_FOUND = 40403


class RegistryError(Exception):
    """The registry refused a request, answered something unreadable, or could not be reached.

    `status` is the HTTP status (None when no answer came back); `error_code` is Confluent's error
    code from the body (None when the body carried none); `message` says what went wrong.
    """

    def __init__(self, status: int | None, error_code: int | None, message: str) -> None:
        super().__init__(status, error_code, message)
        self.status = status
        self.error_code = error_code
        self.message = message

    def __str__(self) -> str:
        where = "no HTTP response" if self.status is None else f"HTTP {self.status}"
        code = "" if self.error_code is None else f", error_code {self.error_code}"
        return f"schema registry error ({where}{code}): {self.message}"

    @property
    def not_found(self) -> bool:
        """True for a 404: unknown subject, version or schema id."""
        return self.status == 404


class RegistryUnavailableError(RegistryError):
    """No HTTP answer: connection refused or reset, DNS failure, timeout.  Retry later."""

    def __init__(self, message: str) -> None:
        super().__init__(None, None, message)


@dataclass(frozen=True, slots=True)
class RegisteredSchema:
    """A schema as registered under a subject."""

    subject: str
    version: int
    schema_id: int
    schema: str
