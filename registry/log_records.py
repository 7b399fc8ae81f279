"""The records of the `_schemas` topic: keys and values in JSON, as Confluent Schema Registry
writes them, so the topic reads the same to either registry.

=================  ==========================================================  =========================
key                                                                            value
=================  ==========================================================  =========================
schema version     {"keytype":"SCHEMA","subject":S,"version":V,"magic":1}      {"subject","version","id",
                                                                                "schema","deleted"}; null
                                                                                = permanently deleted
subject config     {"keytype":"CONFIG","subject":S|null,"magic":0}             {"compatibilityLevel":L}
subject mode       {"keytype":"MODE","subject":S|null,"magic":0}               {"mode":M}
subject deletion   {"keytype":"DELETE_SUBJECT","subject":S,"magic":0}          {"subject":S,"version":V}
=================  ==========================================================  =========================

A config or mode key with a null value removes the setting. Reading a record back, and what a
record may change, is `registry.state`'s business.
"""

from __future__ import annotations

import json
from typing import Any

from contracts import bounded_json

# A record to produce: key and value (None: a tombstone).
Record = tuple[bytes, bytes | None]


def encode(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def decode(key: bytes | None, value: bytes | None) -> tuple[Any, Any]:
    """The JSON of a record's key and value (None for a missing key or a tombstone); a
    `ValueError` when either is not JSON."""
    return (
        bounded_json.loads(key, max_depth=bounded_json.SCHEMA_DEPTH) if key else None,
        bounded_json.loads(value, max_depth=bounded_json.SCHEMA_DEPTH) if value is not None else None,
    )


# -- keys ----------------------------------------------------------------------------------------


def schema_key(subject: str, version: int) -> bytes:
    return encode({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1})


def config_key(subject: str | None) -> bytes:
    return encode({"keytype": "CONFIG", "subject": subject, "magic": 0})


def mode_key(subject: str | None) -> bytes:
    return encode({"keytype": "MODE", "subject": subject, "magic": 0})


def delete_subject_key(subject: str) -> bytes:
    return encode({"keytype": "DELETE_SUBJECT", "subject": subject, "magic": 0})


# -- values --------------------------------------------------------------------------------------


def schema_value(subject: str, version: int, schema_id: int, schema: str, deleted: bool) -> bytes:
    return encode({"subject": subject, "version": version, "id": schema_id, "schema": schema, "deleted": deleted})


def config_value(level: str) -> bytes:
    return encode({"compatibilityLevel": level})


def mode_value(mode: str) -> bytes:
    return encode({"mode": mode})


def delete_subject_value(subject: str, version: int) -> bytes:
    """Soft-deletes every version of `subject` up to `version`."""
    return encode({"subject": subject, "version": version})
