"""Domain errors that the error middleware (kit.middleware) turns into JSON.

Every error a handler raises on purpose is a `ServiceError`: it carries its HTTP status and a
stable machine-readable `code`, so clients branch on `error` and humans read `message`.  The
response body is always ``{"error": code, "message": ..., "details": ...}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

__all__ = [
    "BadRequest",
    "Conflict",
    "InvalidJSON",
    "NotFound",
    "PayloadTooLarge",
    "ServiceError",
    "ServiceUnavailable",
    "UnsupportedMediaType",
    "ValidationError",
]


class ServiceError(Exception):
    """Base of the errors a handler raises on purpose (status and code are per subclass)."""

    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal_error"
    default_message: ClassVar[str] = "internal server error"

    def __init__(self, message: str | None = None, *, details: Mapping[str, Any] | None = None) -> None:
        self.message = message or self.default_message
        self.details: dict[str, Any] | None = dict(details) if details is not None else None
        super().__init__(self.message)

    def body(self) -> dict[str, Any]:
        """The JSON body of the response for this error."""
        return {"error": self.code, "message": self.message, "details": self.details}

    def headers(self) -> dict[str, str]:
        """Response headers this error carries (e.g. Retry-After on a 429)."""
        return {}


class BadRequest(ServiceError):
    status = 400
    code = "bad_request"
    default_message = "bad request"


class InvalidJSON(BadRequest):
    code = "invalid_json"
    default_message = "request body is not valid JSON"


class NotFound(ServiceError):
    status = 404
    code = "not_found"
    default_message = "not found"


class Conflict(ServiceError):
    status = 409
    code = "conflict"
    default_message = "conflict with the current state"


class PayloadTooLarge(ServiceError):
    status = 413
    code = "payload_too_large"
    default_message = "request body too large"


class UnsupportedMediaType(ServiceError):
    status = 415
    code = "unsupported_media_type"
    default_message = "request body must be application/json"


class ValidationError(ServiceError):
    """Input that parsed but is wrong; `fields` maps a field path (``items[0].quantity``) to
    what is wrong with it, so a form can show each message next to its field."""

    status = 422
    code = "validation_failed"
    default_message = "request validation failed"

    def __init__(self, fields: Mapping[str, str], message: str | None = None) -> None:
        self.fields = dict(fields)
        super().__init__(message, details={"fields": self.fields})


class ServiceUnavailable(ServiceError):
    status = 503
    code = "unavailable"
    default_message = "service unavailable"
