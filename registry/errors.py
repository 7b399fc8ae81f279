"""The registry's errors: Confluent Schema Registry's HTTP statuses, error codes and messages.

Every failure a client can see is a `RegistryError`; the app's middleware turns it into
Confluent's body `{"error_code": CODE, "message": TEXT}` with the HTTP status. Codes of the
form XXXYY are the HTTP status XXX refined by YY, exactly as Confluent numbers them, so clients
that branch on `error_code` (confluent-kafka's `SchemaRegistryError.error_code`) work unchanged.

One departure: a request refused for a state the registry leaves by itself (the broker
unreachable or slow, no primary elected yet, the primary unreachable or just deposed, its
producer being replaced) is answered 503 with `Retry-After`, as the rest of the project answers
an outage, while its code stays Confluent's (50001 to 50004): the status tells a client to send
it again, the code what happened.
"""

from __future__ import annotations

from collections.abc import Sequence

# 404
SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403
SUBJECT_SOFT_DELETED = 40404
SUBJECT_NOT_SOFT_DELETED = 40405
VERSION_SOFT_DELETED = 40406
VERSION_NOT_SOFT_DELETED = 40407
SUBJECT_COMPATIBILITY_NOT_CONFIGURED = 40408
SUBJECT_MODE_NOT_CONFIGURED = 40409
# 401, 403
UNAUTHORIZED = 401
USER_DENIED = 40301
TOO_MANY_FAILED_LOGINS = 42901  # streamshop's: Confluent's registry has no login throttle
# 409: Confluent's incompatible-schema error carries the bare status as its code.
INCOMPATIBLE_SCHEMA = 409
# 422
INVALID_SCHEMA = 42201
INVALID_VERSION = 42202
INVALID_COMPATIBILITY_LEVEL = 42203
INVALID_MODE = 42204
OPERATION_NOT_PERMITTED = 42205
ID_DOES_NOT_MATCH = 42207
# 500
STORE_ERROR = 50001
OPERATION_TIMEOUT = 50002
FORWARDING_ERROR = 50003
UNKNOWN_PRIMARY = 50004

MAX_VERSION = 2**31 - 1
RETRY_AFTER_SECONDS = 1


class RegistryError(Exception):
    """A failure reported to the client as `{"error_code": code, "message": message}`."""

    def __init__(self, status: int, code: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}

    def body(self) -> dict[str, object]:
        return {"error_code": self.code, "message": self.message}


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")


def version_not_found(version: int | str) -> RegistryError:
    return RegistryError(404, VERSION_NOT_FOUND, f"Version {version} not found.")


def schema_not_found(schema_id: int | None = None) -> RegistryError:
    message = "Schema not found" if schema_id is None else f"Schema {schema_id} not found"
    return RegistryError(404, SCHEMA_NOT_FOUND, message)


def subject_soft_deleted(subject: str) -> RegistryError:
    return _soft_deleted(SUBJECT_SOFT_DELETED, f"Subject '{subject}'")


def subject_not_soft_deleted(subject: str) -> RegistryError:
    return _not_soft_deleted(SUBJECT_NOT_SOFT_DELETED, f"Subject '{subject}'")


def version_soft_deleted(subject: str, version: int) -> RegistryError:
    return _soft_deleted(VERSION_SOFT_DELETED, f"Subject '{subject}' Version {version}")


def version_not_soft_deleted(subject: str, version: int) -> RegistryError:
    return _not_soft_deleted(VERSION_NOT_SOFT_DELETED, f"Subject '{subject}' Version {version}")


# Confluent words the subject and version errors of a two-step (soft, then permanent) delete alike.
def _soft_deleted(code: int, what: str) -> RegistryError:
    return RegistryError(404, code, f"{what} was soft deleted. Set permanent=true to delete permanently")


def _not_soft_deleted(code: int, what: str) -> RegistryError:
    return RegistryError(404, code, f"{what} was not deleted first before being permanently deleted")


def subject_compatibility_not_configured(subject: str) -> RegistryError:
    return _not_configured(SUBJECT_COMPATIBILITY_NOT_CONFIGURED, subject, "compatibility")


def subject_mode_not_configured(subject: str) -> RegistryError:
    return _not_configured(SUBJECT_MODE_NOT_CONFIGURED, subject, "mode")


def _not_configured(code: int, subject: str, setting: str) -> RegistryError:
    return RegistryError(404, code, f"Subject '{subject}' does not have subject-level {setting} configured")


def incompatible_schema(subject: str, reasons: Sequence[str]) -> RegistryError:
    details = "; ".join(reasons)
    return RegistryError(
        409,
        INCOMPATIBLE_SCHEMA,
        f'Schema being registered is incompatible with an earlier schema for subject "{subject}", details: [{details}]',
    )


def invalid_schema(detail: str) -> RegistryError:
    return RegistryError(422, INVALID_SCHEMA, f"Invalid schema: {detail}")


def invalid_version(version: str) -> RegistryError:
    return RegistryError(
        422,
        INVALID_VERSION,
        f"The specified version '{version}' is not a valid version id. "
        f'Allowed values are between [1, {MAX_VERSION}] and the string "latest"',
    )


def invalid_compatibility_level(level: object) -> RegistryError:
    return RegistryError(
        422,
        INVALID_COMPATIBILITY_LEVEL,
        f"Invalid compatibility level {level!r}. Valid values are none, backward, forward, full, "
        "backward_transitive, forward_transitive, and full_transitive",
    )


def invalid_mode(mode: object) -> RegistryError:
    return RegistryError(422, INVALID_MODE, f"Invalid mode {mode!r}. Valid values are READWRITE, READONLY and IMPORT")


def operation_not_permitted(message: str) -> RegistryError:
    return RegistryError(422, OPERATION_NOT_PERMITTED, message)


def read_only(subject: str | None) -> RegistryError:
    where = f"Subject {subject}" if subject else "The schema registry"
    return operation_not_permitted(f"{where} is in read-only mode")


def id_does_not_match(message: str) -> RegistryError:
    return RegistryError(422, ID_DOES_NOT_MATCH, message)


def store_error(message: str) -> RegistryError:
    return RegistryError(500, STORE_ERROR, message)


def operation_timeout(message: str) -> RegistryError:
    """The broker or the log did not answer in time (Confluent's 50002): 503, send it again."""
    return RegistryError(503, OPERATION_TIMEOUT, message, {"Retry-After": str(RETRY_AFTER_SECONDS)})


def _unavailable(code: int, message: str) -> RegistryError:
    return RegistryError(503, code, message, {"Retry-After": str(RETRY_AFTER_SECONDS)})


def store_unavailable(message: str) -> RegistryError:
    """The store cannot serve this now but will again by itself (the broker unreachable, a
    transaction aborted, the producer being replaced): 503, Confluent's store error code."""
    return _unavailable(STORE_ERROR, message)


def forwarding_error(message: str) -> RegistryError:
    """A secondary could not pass a write to the primary, or the primary was deposed under it
    (Confluent's 50003): 503, send it again."""
    return _unavailable(FORWARDING_ERROR, message)


def unknown_primary(message: str) -> RegistryError:
    """No primary is elected (Confluent's 50004, "unknown leader"): 503, send it again."""
    return _unavailable(UNKNOWN_PRIMARY, message)


def http_error(status: int, reason: str) -> RegistryError:
    """What Confluent's REST layer answers for plain HTTP failures (unknown path, method,
    media type, unparsable body): the status as the code, e.g. `HTTP 404 Not Found`."""
    return RegistryError(status, status, f"HTTP {status} {reason}")
