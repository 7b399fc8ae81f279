"""Helpers of the Avro schema compatibility tests: builders of schemas as JSON-like values
(records, fields, enums, fixed, decimals), the checker's verdict and its one reason, and the
primitive types with the promotions the Avro specification allows.
"""

from __future__ import annotations

from typing import Any

from registry.compatibility import can_read


def record(name: str, *fields: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def fld(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


def enum(name: str, *symbols: str, **extra: Any) -> dict[str, Any]:
    return {"type": "enum", "name": name, "symbols": list(symbols), **extra}


def fixed(name: str, size: int, **extra: Any) -> dict[str, Any]:
    return {"type": "fixed", "name": name, "size": size, **extra}


def decimal(precision: int, scale: int, base: str = "bytes", **extra: Any) -> dict[str, Any]:
    return {"type": base, "logicalType": "decimal", "precision": precision, "scale": scale, **extra}


def compatible(reader: Any, writer: Any) -> bool:
    return can_read(reader, writer) == []


def only_reason(reader: Any, writer: Any) -> str:
    reasons = can_read(reader, writer)
    assert len(reasons) == 1, reasons
    return reasons[0]


PRIMITIVES = ["null", "boolean", "int", "long", "float", "double", "bytes", "string"]
# (reader, writer) pairs the specification allows besides identity, written out by hand
PROMOTIONS = {
    ("long", "int"),
    ("float", "int"),
    ("float", "long"),
    ("double", "int"),
    ("double", "long"),
    ("double", "float"),
    ("bytes", "string"),
    ("string", "bytes"),
}
