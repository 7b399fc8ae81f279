"""Avro schema text as the registry receives, stores and compares it.

A schema is validated by `registry.compatibility.validate` (the one place that decides
what a valid Avro schema is) and kept twice: as the compact text a client registered, which the
registry stores and serves, and as an identity, which decides whether two texts are "the same
schema" (same id, already registered).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from contracts import bounded_json
from registry import errors
from registry.compatibility import InvalidSchemaError, check, validate
from registry.errors import RegistryError
from registry.levels import Level

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_NAMED = frozenset({"record", "error", "enum", "fixed"})


@dataclass(frozen=True)
class ParsedSchema:
    """`text`: the schema as stored and served (compact JSON of what was registered);
    `identity`: a normalised form, equal for schemas that differ only in layout, key order,
    `{"type": "int"}` vs `"int"` or how names are qualified; `obj`: the parsed JSON."""

    text: str
    identity: str
    obj: Any


def parse_avro(text: str) -> ParsedSchema:
    """Validate an Avro schema or raise `RegistryError` 42201."""
    try:
        return _parse_avro(text)
    except RegistryError:
        raise
    except Exception as e:  # e.g. RecursionError from a deeply nested schema: still the client's fault
        raise errors.invalid_schema(str(e) or type(e).__name__) from e


@functools.lru_cache(maxsize=4096)
def _parse_avro(text: str) -> ParsedSchema:
    try:
        obj = bounded_json.loads(text, max_depth=bounded_json.SCHEMA_DEPTH)
    except ValueError as e:
        raise errors.invalid_schema(f"not JSON: {e}") from e
    if not isinstance(obj, dict | list | str):
        raise errors.invalid_schema("an Avro schema is a JSON object, array or string")
    try:
        validate(obj)
    except InvalidSchemaError as e:
        raise errors.invalid_schema(e.reason) from e
    identity = json.dumps(_normalize(obj, ""), sort_keys=True, separators=(",", ":"))
    return ParsedSchema(json.dumps(obj, separators=(",", ":"), ensure_ascii=False), identity, obj)


def _qualify(name: str, namespace: str) -> str:
    if "." in name or not namespace or name in _PRIMITIVES:
        return name
    return f"{namespace}.{name}"


def _normalize(node: Any, namespace: str) -> Any:
    """A form that compares equal for equivalent spellings of one schema (the registry's
    notion of "the same schema"): full names everywhere, no `namespace` attributes, bare
    primitives. Docs, defaults, aliases and order of fields are kept: they are part of the
    schema a client registered."""
    if isinstance(node, str):
        return _qualify(node, namespace)
    if isinstance(node, list):
        return [_normalize(branch, namespace) for branch in node]
    if not isinstance(node, dict):
        return node
    kind = node.get("type")
    if isinstance(kind, str) and kind in _PRIMITIVES and len(node) == 1:
        return kind
    out = {k: v for k, v in node.items() if k != "namespace"}
    if kind in _NAMED:
        name = str(node.get("name", ""))
        explicit = node.get("namespace")
        full = name if "." in name else _qualify(name, explicit if isinstance(explicit, str) else namespace)
        out["name"] = full
        inner = full.rpartition(".")[0]
        if kind in ("record", "error"):
            out["fields"] = [
                {**f, "type": _normalize(f.get("type"), inner)} if isinstance(f, dict) else f
                for f in node.get("fields", [])
            ]
        return out
    if kind == "array":
        out["items"] = _normalize(node.get("items"), namespace)
    elif kind == "map":
        out["values"] = _normalize(node.get("values"), namespace)
    elif isinstance(kind, dict | list) or (isinstance(kind, str) and kind not in _PRIMITIVES):
        inner_type = _normalize(kind, namespace)
        if len(node) == 1:
            return inner_type
        out["type"] = inner_type
    return out


def checked(schema: ParsedSchema, existing: Sequence[ParsedSchema], level: Level) -> list[str]:
    """Why `schema` may not follow `existing` (oldest first) at `level`."""
    try:
        return check(schema.obj, [old.obj for old in existing], level)
    except InvalidSchemaError as e:  # not expected: every ParsedSchema passed `validate`
        raise errors.invalid_schema(e.reason) from e
