"""JSON from untrusted sources (HTTP bodies, records read back from a topic), with bounds.

`json.loads` alone turns hostile input into server errors: an integer of 5,000 digits raises a
ValueError that is not a JSONDecodeError (CPython's int_max_str_digits), 20,000 nested arrays
raise RecursionError, a lone surrogate (`"\\ud800"`) parses but fails when the string is later
encoded, and a document 900 levels deep parses but breaks any recursive code that walks it.
`loads` refuses all of these with `JSONLimitError` (a ValueError, so existing `except
ValueError` paths turn it into a client error).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_DEPTH = 64
SCHEMA_DEPTH = 256  # Avro schemas nest records in records: more room, still bounded
MAX_NUMBER_CHARS = 64  # longer than any int64 or double needs
_SURROGATE = re.compile("[\ud800-\udfff]")


class JSONLimitError(ValueError):
    pass


def _number(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise JSONLimitError(f"a number of {len(text)} characters is longer than {MAX_NUMBER_CHARS}")
    return int(text)


def _float(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise JSONLimitError(f"a number of {len(text)} characters is longer than {MAX_NUMBER_CHARS}")
    value = float(text)
    if not math.isfinite(value):
        raise JSONLimitError(f"the number {text} is out of range")
    return value


def _constant(name: str) -> Any:
    raise JSONLimitError(f"{name} is not JSON")


def loads(raw: str | bytes | bytearray, *, max_depth: int = MAX_DEPTH) -> Any:
    """Parse like `json.loads`; raises `json.JSONDecodeError` for bad syntax, `JSONLimitError`
    for input beyond the bounds, `UnicodeDecodeError` for bytes that are not UTF-8."""
    try:
        value = json.loads(raw, parse_int=_number, parse_float=_float, parse_constant=_constant)
    except RecursionError:
        raise JSONLimitError(f"nested deeper than {max_depth} levels") from None
    _check(value, max_depth)
    return value


def _check(value: Any, max_depth: int) -> None:
    """Depth and lone surrogates, without recursion."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                raise JSONLimitError("a string holds a lone UTF-16 surrogate")
        elif isinstance(item, dict | list):
            if depth >= max_depth:
                raise JSONLimitError(f"nested deeper than {max_depth} levels")
            if isinstance(item, dict):
                for key, child in item.items():
                    if _SURROGATE.search(key):
                        raise JSONLimitError("a key holds a lone UTF-16 surrogate")
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in item)
